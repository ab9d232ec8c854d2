//! `reference`: the linear-attention ops composed from plain candle tensor ops, token by token,
//! with the casts of transformers' PyTorch fallback (transformers 5.17+ behaviour):
//! - conv: accumulated at the accumulation precision, rounded to the compute dtype, then SiLU
//!   (rounded again) — `F.conv1d` in the weight dtype followed by the activation;
//! - delta rule: q, k, v, g, β cast to the accumulation dtype, q/k L2 norm there, the
//!   recurrence of `torch_recurrent_gated_delta_rule`, output rounded once;
//! - gated norm: normalise at accumulation precision, round, multiply by the weight in the
//!   compute dtype, multiply by SiLU(z) at accumulation precision, round.
//!
//! In f64 every step is float64, so this backend is exact up to f64 rounding. On CUDA the
//! recurrence itself is one kernel (`gdn_recurrent_*` in the fused backend's gdn.cu) on the
//! inputs prepared here the same way; it is the float64 truth on a GPU.

use candle_core::{D, Device, Tensor};

use super::{
    DeltaInputs, LinearAttentionBackend, accumulation_dtype, check_conv_shapes,
    check_delta_rule_shapes, check_norm_shapes,
};
use crate::error::Result;

const L2_NORM_EPS: f64 = 1e-6;

#[derive(Debug, Default)]
pub struct Reference;

impl LinearAttentionBackend for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn implementation(&self, device: &Device) -> String {
        match device {
            Device::Cpu => "reference/cpu-candle".to_string(),
            Device::Cuda(_) => {
                "reference/cuda-candle (delta rule: the recurrence kernel gdn_recurrent_*)"
                    .to_string()
            }
            _ => "reference/candle".to_string(),
        }
    }

    fn conv1d_silu(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor> {
        let (_, t, _, k) = check_conv_shapes(self.name(), x, weight)?;
        let dtype = x.dtype();
        let acc = accumulation_dtype(dtype);
        let xp = x.to_dtype(acc)?.pad_with_zeros(1, k - 1, 0)?;
        let wp = weight.to_dtype(acc)?;
        let mut sum = xp
            .narrow(1, 0, t)?
            .broadcast_mul(&wp.narrow(1, 0, 1)?.squeeze(1)?)?;
        for j in 1..k {
            let tap = wp.narrow(1, j, 1)?.squeeze(1)?;
            sum = (sum + xp.narrow(1, j, t)?.broadcast_mul(&tap)?)?;
        }
        let conv = sum.to_dtype(dtype)?;
        Ok(candle_nn::ops::silu(&conv.to_dtype(acc)?)?.to_dtype(dtype)?)
    }

    fn gated_delta_rule(&self, x: DeltaInputs, state: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let d = check_delta_rule_shapes(self.name(), x, state)?;
        let DeltaInputs { q, k, v, g, beta } = x;
        let dtype = v.dtype();
        let acc = accumulation_dtype(dtype);
        let r = d.heads_per_key_head();
        let scale = 1.0 / (d.k_dim as f64).sqrt();
        // [B, T, Hk, dk] → L2-normalised, repeated to [B, Hv, T, dk] (value head h ← key head h / r).
        let prep = |x: &Tensor| -> Result<Tensor> {
            let x = l2_normalise(&x.to_dtype(acc)?)?;
            let x = x
                .unsqueeze(3)?
                .broadcast_as((d.batch, d.seq, d.k_heads, r, d.k_dim))?
                .reshape((d.batch, d.seq, d.v_heads, d.k_dim))?;
            Ok(x.transpose(1, 2)?.contiguous()?)
        };
        let q = (prep(q)? * scale)?;
        let k = prep(k)?;
        let v = v.to_dtype(acc)?.transpose(1, 2)?.contiguous()?;
        let decay = g.to_dtype(acc)?.exp()?.transpose(1, 2)?.contiguous()?;
        let beta = beta.to_dtype(acc)?.transpose(1, 2)?.contiguous()?;
        // On a GPU the recurrence is one kernel launch (gdn_recurrent_*: the same steps in the
        // same order, one FMA chain per sum) instead of a dozen small ops per token.
        #[cfg(feature = "cuda")]
        if q.device().is_cuda() {
            let (out, state) =
                super::fused::cuda::recurrent_rule(&q, &k, &v, &decay, &beta, state)?;
            return Ok((out.to_dtype(dtype)?, state));
        }
        let mut state = match state {
            Some(s) => s.to_dtype(acc)?,
            None => Tensor::zeros((d.batch, d.v_heads, d.k_dim, d.v_dim), acc, q.device())?,
        };
        let mut outs = Vec::with_capacity(d.seq);
        for t in 0..d.seq {
            let q_t = q.narrow(2, t, 1)?.squeeze(2)?; // [B, Hv, dk]
            let k_t = k.narrow(2, t, 1)?.squeeze(2)?;
            let v_t = v.narrow(2, t, 1)?.squeeze(2)?; // [B, Hv, dv]
            let decay_t = decay.narrow(2, t, 1)?.unsqueeze(3)?; // [B, Hv, 1, 1]
            let beta_t = beta.narrow(2, t, 1)?; // [B, Hv, 1]
            state = state.broadcast_mul(&decay_t)?;
            let k_col = k_t.unsqueeze(3)?; // [B, Hv, dk, 1]
            let predicted = state.broadcast_mul(&k_col)?.sum(2)?; // [B, Hv, dv]
            let delta = (v_t - predicted)?.broadcast_mul(&beta_t)?;
            state = (state + k_col.broadcast_mul(&delta.unsqueeze(2)?)?)?;
            outs.push(state.broadcast_mul(&q_t.unsqueeze(3)?)?.sum(2)?);
        }
        let out = Tensor::stack(&outs, 1)?.to_dtype(dtype)?; // [B, T, Hv, dv]
        Ok((out, state))
    }

    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        check_norm_shapes(self.name(), x, z, weight)?;
        let dtype = x.dtype();
        let acc = accumulation_dtype(dtype);
        let xp = x.to_dtype(acc)?;
        let inv_rms = (xp.sqr()?.mean_keepdim(D::Minus1)? + eps)?
            .sqrt()?
            .recip()?;
        let normed = xp.broadcast_mul(&inv_rms)?.to_dtype(dtype)?;
        let scaled = normed.broadcast_mul(&weight.to_dtype(dtype)?)?;
        let gate = candle_nn::ops::silu(&z.to_dtype(acc)?)?;
        Ok((scaled.to_dtype(acc)? * gate)?.to_dtype(dtype)?)
    }
}

/// `x · rsqrt(Σx² + 1e-6)` over the last dim (transformers' `l2norm`, eps constant 1e-6).
pub(super) fn l2_normalise(x: &Tensor) -> Result<Tensor> {
    let inv = (x.sqr()?.sum_keepdim(D::Minus1)? + L2_NORM_EPS)?
        .sqrt()?
        .recip()?;
    Ok(x.broadcast_mul(&inv)?)
}
