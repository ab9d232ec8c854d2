//! What a serving engine keeps between calls: per layer, the conv window and recurrent state of
//! a Gated DeltaNet layer or the keys and values of a full-attention layer; and where the tokens
//! of one call sit (positions, padding, packed documents).

use candle_core::{DType, Tensor};

use super::rope::Rope;
use crate::backends::GdnState;
use crate::error::Result;

/// One layer's cache entry.
#[derive(Debug, Clone, Default)]
pub enum LayerCache {
    #[default]
    Empty,
    Linear(GdnState),
    /// Keys `[B, Hkv, S, d]` (after the norm and RoPE) and values `[B, Hkv, S, d]`.
    Attention((Tensor, Tensor)),
}

impl LayerCache {
    pub fn linear(&self) -> Option<&GdnState> {
        match self {
            LayerCache::Linear(s) => Some(s),
            _ => None,
        }
    }

    pub fn take_kv(&mut self) -> Option<(Tensor, Tensor)> {
        match std::mem::take(self) {
            LayerCache::Attention(kv) => Some(kv),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// The cache of a whole model, and how many positions it has seen.
#[derive(Debug, Clone)]
pub struct ModelCache {
    pub layers: Vec<LayerCache>,
    pub seen: usize,
}

impl ModelCache {
    pub fn new(num_layers: usize) -> Self {
        ModelCache {
            layers: vec![LayerCache::Empty; num_layers],
            seen: 0,
        }
    }

    /// `(layer, state)` of every linear-attention layer that holds one.
    pub fn linear_states(&self) -> impl Iterator<Item = (usize, &GdnState)> {
        self.layers
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.linear().map(|s| (i, s)))
    }

    /// Rounds every recurrent state to `dtype` and back, as an engine that stores the state in
    /// `dtype` between steps does.
    pub fn store_recurrent_as(&mut self, dtype: DType) -> Result<()> {
        for layer in &mut self.layers {
            if let LayerCache::Linear(s) = layer {
                let acc = s.recurrent.dtype();
                s.recurrent = s.recurrent.to_dtype(dtype)?.to_dtype(acc)?;
            }
        }
        Ok(())
    }
}

/// Where the tokens of one cached call sit, shared by every layer of the call.
pub struct CallContext<'a> {
    /// RoPE at this call's positions.
    pub rope: &'a Rope,
    /// `[B, 1, T, S]` additive attention mask at the accumulation dtype.
    pub mask: &'a Tensor,
    /// Packed documents: their start positions (batch 1, fresh cache).
    pub doc_starts: Option<&'a [usize]>,
    /// Left padding: `[B, T]`, 1 at real tokens (fresh cache).
    pub real: Option<&'a Tensor>,
}
