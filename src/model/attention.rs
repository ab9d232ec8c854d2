//! Gated full attention (`Qwen3NextAttention` / `Qwen3_5Attention`), eager formulation:
//! per-head [query | gate] split of q_proj, zero-centred q/k norms, partial RoPE, GQA, causal
//! softmax at the accumulation precision, sigmoid output gate, o_proj.

use candle_core::{D, Tensor};

use super::Weights;
use super::linear::{Linear, forward_shared};
use super::norm::RmsNorm;
use super::rope::Rope;
use crate::backends::accumulation_dtype;
use crate::error::Result;
use crate::weights::config::ModelConfig;

pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    pub fn new(cfg: &ModelConfig, w: &Weights) -> Result<Self> {
        let (h, hq, hkv, d) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let bias = cfg.attention_bias;
        Ok(Attention {
            q_proj: Linear::new(&w.pp("q_proj"), 2 * hq * d, h, bias)?,
            k_proj: Linear::new(&w.pp("k_proj"), hkv * d, h, bias)?,
            v_proj: Linear::new(&w.pp("v_proj"), hkv * d, h, bias)?,
            o_proj: Linear::new(&w.pp("o_proj"), h, hq * d, bias)?,
            q_norm: RmsNorm::new(d, cfg.rms_norm_eps, &w.pp("q_norm"))?,
            k_norm: RmsNorm::new(d, cfg.rms_norm_eps, &w.pp("k_norm"))?,
            num_heads: hq,
            num_kv_heads: hkv,
            head_dim: d,
        })
    }

    /// The cached form: `rope` at this call's positions, `mask` (`[B, 1, T, S]` or `[T, S]`) additive at the
    /// accumulation dtype over the S = cached + T keys, `kv` the keys and values of earlier
    /// calls (`[B, Hkv, ·, d]`, after the norm and RoPE), extended here.
    pub fn forward_cached(
        &self,
        x: &Tensor,
        rope: &Rope,
        mask: &Tensor,
        kv: &mut Option<(Tensor, Tensor)>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (hq, hkv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        // One input for the three products: laid out for the kernels once.
        let [qg, k, v] = forward_shared(x, [&self.q_proj, &self.k_proj, &self.v_proj])?;
        let qg = qg.reshape((b, t, hq, 2 * d))?;
        let q = qg.narrow(3, 0, d)?;
        let gate = qg.narrow(3, d, d)?.reshape((b, t, hq * d))?;
        let q = self
            .q_norm
            .forward(&q.contiguous()?)?
            .transpose(1, 2)?
            .contiguous()?;
        let k = k.reshape((b, t, hkv, d))?;
        let k = self.k_norm.forward(&k)?.transpose(1, 2)?.contiguous()?;
        let v = v.reshape((b, t, hkv, d))?.transpose(1, 2)?.contiguous()?;
        let q = rope.apply(&q)?;
        let k = rope.apply(&k)?;
        let (k, v) = match kv.take() {
            Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 2)?, Tensor::cat(&[&pv, &v], 2)?),
            None => (k, v),
        };
        *kv = Some((k.clone(), v.clone()));
        let k = repeat_kv(&k, hq / hkv)?;
        let v = repeat_kv(&v, hq / hkv)?;
        let dtype = x.dtype();
        let scaling = (d as f64).powf(-0.5);
        let scores = (q.matmul(&k.t()?)? * scaling)?;
        let acc = accumulation_dtype(dtype);
        let scores = scores.to_dtype(acc)?.broadcast_add(mask)?;
        let probs = candle_nn::ops::softmax(&scores, D::Minus1)?.to_dtype(dtype)?;
        let out = probs.matmul(&v.contiguous()?)?;
        let out = out.transpose(1, 2)?.reshape((b, t, hq * d))?;
        let out = (out * candle_nn::ops::sigmoid(&gate)?)?;
        self.o_proj.forward(&out)
    }

    /// x: `[B, T, hidden]` (after input_layernorm) → `[B, T, hidden]`: causal, no cache.
    pub fn forward(&self, x: &Tensor, rope: &Rope) -> Result<Tensor> {
        let t = x.dim(1)?;
        let mask = causal_mask(t, x.device())?.to_dtype(accumulation_dtype(x.dtype()))?;
        self.forward_cached(x, rope, &mask, &mut None)
    }
}

/// `[B, Hkv, T, d]` → `[B, Hkv·n, T, d]`, kv head j serving query heads j·n … j·n+n−1.
fn repeat_kv(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    let (b, h, t, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .broadcast_as((b, h, n, t, d))?
        .reshape((b, h * n, t, d))?)
}

/// `[T, T]` with 0 on and below the diagonal and −∞ above (f32; cast by the caller).
fn causal_mask(t: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Ok(Tensor::from_vec(mask, (t, t), device)?)
}
