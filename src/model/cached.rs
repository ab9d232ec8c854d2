//! The cached forward pass: tokens continue a [`ModelCache`] (decode, prefill in pieces), or a
//! fresh call lays them out as packed documents or a left-padded batch. [`Model::run`] is the
//! cache-less prefill; both share the layers, so a path differs from it only where the cache,
//! the packing or the padding make it differ.

use candle_core::{DType, Device, Tensor};

use super::cache::{CallContext, ModelCache};
use super::{Model, RunOptions, rope};
use crate::backends::accumulation_dtype;
use crate::capture::{Captures, Key};
use crate::error::{Error, Result};
use crate::util::progress::Progress;

/// How the tokens of one cached call are laid out.
#[derive(Debug, Clone, Default)]
pub struct TokenLayout {
    /// Per sequence, whether each position is a real token (false: left padding). Fresh cache
    /// only. None: all real.
    pub real: Option<Vec<Vec<bool>>>,
    /// Packed documents in one sequence (batch 1, fresh cache): where each starts (the first
    /// at 0). State and attention restart at each start, and so do positions.
    pub doc_starts: Option<Vec<usize>>,
}

impl Model {
    /// Runs `ids` (`B` rows of equal length) as the continuation of `cache`, capturing
    /// `layers.{i}`, `final_norm` and `logits` (`[B, T, …]`) of this call's positions.
    pub fn run_cached(
        &self,
        ids: &[Vec<u32>],
        layout: &TokenLayout,
        opts: &RunOptions,
        cache: &mut ModelCache,
        progress: &Progress,
    ) -> Result<Captures> {
        let cfg = &self.config;
        let device = &opts.device;
        let (b, t) = check_call(self, ids, layout, cache)?;
        self.check_dtype(opts.dtype)?;
        let w = self.view(opts.dtype, device);
        let dtype = w.dtype();
        progress.begin(b * t);
        let flat: Vec<u32> = ids.concat();
        let mut caps = Captures::new(flat.clone());

        let mut x = self.embed(&w, &flat, b)?;

        let positions = positions(cache.seen, t, layout.doc_starts.as_deref());
        let table_len = positions.iter().max().map_or(1, |&p| p as usize + 1);
        let rope = rope::Rope::new(cfg.rope_theta, cfg.rotary_dim(), table_len, dtype, device)?
            .at_positions(&positions)?;
        let mask = attention_mask(cache.seen, t, layout, accumulation_dtype(dtype), device)?;
        let real = layout
            .real
            .as_ref()
            .map(|rows| real_tensor(rows, dtype, device))
            .transpose()?;
        let call = CallContext {
            rope: &rope,
            mask: &mask,
            doc_starts: layout.doc_starts.as_deref(),
            real: real.as_ref(),
        };
        for i in 0..cfg.num_hidden_layers {
            let layer = super::DecoderLayer::new(cfg, i, &w.pp("layers").pp(i))?;
            let (out, _) =
                layer.forward_cached(&x, &call, opts.backend, &mut cache.layers[i], false)?;
            caps.insert(Key::Layer(i), out.clone());
            x = out;
            progress.layer_done(i as u64 + 1);
        }
        let (normed, logits) = self.head(&w, &x)?;
        caps.insert(Key::FinalNorm, normed);
        caps.insert(Key::Logits, logits);
        cache.seen += t;
        progress.finish();
        Ok(caps)
    }
}

/// Checks one cached call and returns `(B, T)`.
fn check_call(
    model: &Model,
    ids: &[Vec<u32>],
    layout: &TokenLayout,
    cache: &ModelCache,
) -> Result<(usize, usize)> {
    let input = |msg: String| Err(Error::prompt(msg));
    let Some(first) = ids.first() else {
        return input("a cached call needs at least one sequence".into());
    };
    let t = first.len();
    if ids.iter().any(|r| r.len() != t) {
        return input("the sequences of one cached call must have equal lengths".into());
    }
    for row in ids {
        model.check_tokens(row)?;
    }
    if cache.layers.len() != model.config.num_hidden_layers {
        return input(format!(
            "the cache has {} layers, the model {}",
            cache.layers.len(),
            model.config.num_hidden_layers
        ));
    }
    let fresh = cache.seen == 0;
    if let Some(real) = &layout.real
        && (!fresh || real.len() != ids.len() || real.iter().any(|r| r.len() != t))
    {
        return input("a padding mask needs a fresh cache and one flag per token".into());
    }
    if layout.doc_starts.is_some() && (!fresh || ids.len() != 1 || layout.real.is_some()) {
        return input("packed documents need one unpadded sequence and a fresh cache".into());
    }
    Ok((ids.len(), t))
}

/// RoPE positions of this call: after the cached ones, or restarting at each packed document.
fn positions(seen: usize, t: usize, doc_starts: Option<&[usize]>) -> Vec<u32> {
    (0..t)
        .map(|i| match doc_starts {
            Some(st) => (i - st.iter().rev().find(|&&s| s <= i).copied().unwrap_or(0)) as u32,
            None => (seen + i) as u32,
        })
        .collect()
}

/// `[B, 1, T, seen + T]`: 0 where query i may see key j (causal, same packed document, key not
/// padding), else the most negative finite value of `acc`. A finite value (transformers uses
/// `finfo.min` too) keeps the all-padding query rows of a left-padded batch finite.
fn attention_mask(
    seen: usize,
    t: usize,
    layout: &TokenLayout,
    acc: DType,
    device: &Device,
) -> Result<Tensor> {
    let blocked = if acc == DType::F64 {
        f64::MIN
    } else {
        f64::from(f32::MIN)
    };
    let b = layout.real.as_ref().map_or(1, Vec::len);
    let s = seen + t;
    let doc_of = |j: usize| -> usize {
        layout
            .doc_starts
            .as_deref()
            .map_or(0, |st| st.iter().filter(|&&x| x <= j).count())
    };
    let mut m = Vec::with_capacity(b * t * s);
    for bi in 0..b {
        for i in 0..t {
            for j in 0..s {
                let causal = j <= seen + i;
                let same_doc = j < seen || doc_of(j - seen) == doc_of(i);
                let real = layout
                    .real
                    .as_ref()
                    .is_none_or(|r| j < seen || r[bi][j - seen]);
                m.push(if causal && same_doc && real {
                    0.0
                } else {
                    blocked
                });
            }
        }
    }
    Ok(Tensor::from_vec(m, (b, 1, t, s), device)?.to_dtype(acc)?)
}

fn real_tensor(rows: &[Vec<bool>], dtype: DType, device: &Device) -> Result<Tensor> {
    let t = rows.first().map_or(0, Vec::len);
    let flat: Vec<f64> = rows
        .iter()
        .flatten()
        .map(|&r| if r { 1.0 } else { 0.0 })
        .collect();
    Ok(Tensor::from_vec(flat, (rows.len(), t), device)?.to_dtype(dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_positions_restart_at_each_document() {
        assert_eq!(positions(0, 5, Some(&[0, 3])), vec![0, 1, 2, 0, 1]);
        assert_eq!(positions(7, 2, None), vec![7, 8]);
    }

    #[test]
    fn mask_blocks_other_documents_and_padding() -> Result<()> {
        let layout = TokenLayout {
            real: None,
            doc_starts: Some(vec![0, 2]),
        };
        let m = attention_mask(0, 3, &layout, DType::F64, &Device::Cpu)?;
        let v: Vec<f64> = m.flatten_all()?.to_vec1()?;
        let open: Vec<bool> = v.iter().map(|&x| x == 0.0).collect();
        // query 2 (document 1) sees only key 2; query 1 sees keys 0 and 1.
        assert_eq!(open[6..9], [false, false, true]);
        assert_eq!(open[3..6], [true, true, false]);
        let padded = TokenLayout {
            real: Some(vec![vec![false, true]]),
            doc_starts: None,
        };
        let v: Vec<f64> = attention_mask(0, 2, &padded, DType::F64, &Device::Cpu)?
            .flatten_all()?
            .to_vec1()?;
        assert_eq!(v[3], 0.0);
        assert_eq!(v[2], f64::MIN);
        Ok(())
    }
}
