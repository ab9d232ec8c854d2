//! The zero-centred RMSNorm of the decoder (`input_layernorm`, `post_attention_layernorm`, final
//! `norm`, attention `q_norm` / `k_norm`): `x · rsqrt(mean x² + eps) · (1 + w)`, computed at the
//! accumulation precision and rounded once to the compute dtype.

use candle_core::{D, Tensor};

use super::Weights;
use crate::backends::accumulation_dtype;
use crate::error::Result;

pub struct RmsNorm {
    /// `1 + w` at the accumulation precision.
    scale: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn new(size: usize, eps: f64, w: &Weights) -> Result<Self> {
        let acc = accumulation_dtype(w.dtype());
        // The stored weight is rounded to the compute dtype first, as transformers loads it.
        let scale = (w.get("weight", &[size])?.to_dtype(acc)? + 1.0)?;
        Ok(RmsNorm { scale, eps })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let xp = x.to_dtype(self.scale.dtype())?;
        let inv_rms = (xp.sqr()?.mean_keepdim(D::Minus1)? + self.eps)?
            .sqrt()?
            .recip()?;
        Ok(xp
            .broadcast_mul(&inv_rms)?
            .broadcast_mul(&self.scale)?
            .to_dtype(dtype)?)
    }
}
