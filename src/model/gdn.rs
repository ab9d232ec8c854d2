//! The shared shell of a Gated DeltaNet layer: projections, gates, and out_proj. The conv, the
//! gated delta rule and the gated norm are handed to a [`LinearAttentionBackend`].
//!
//! Qwen3-Next packs q/k/v/z and b/a per key-head group (`in_proj_qkvz`, `in_proj_ba`); its rows
//! are permuted once at load into the Qwen3.5 split layout (`in_proj_qkv`, `z`, `b`, `a`), so
//! everything downstream is one code path. A row permutation leaves every dot product as it was.

use candle_core::{DType, Tensor};

use super::Weights;
use super::linear::{Linear, forward_shared};
use crate::backends::{
    GdnDims, GdnInputs, GdnOps, GdnOutputs, GdnState, LinearAttentionBackend, accumulation_dtype,
    next_conv_state,
};
use crate::capture::Op;
use crate::error::Result;
use crate::weights::config::{Family, LinearAttentionConfig, ModelConfig};

pub struct GatedDeltaNet {
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    conv_weight: Tensor,
    /// `-exp(A_log)` and `dt_bias` per value head, at the accumulation precision.
    neg_a: Vec<f64>,
    dt_bias: Vec<f64>,
    /// The same two, at the accumulation precision on the GPU when the layer runs on one: the
    /// gate is then computed there (`gdn_gate_*`), with no host round trip.
    #[cfg(feature = "cuda")]
    gate_on_gpu: Option<(Tensor, Tensor)>,
    norm_weight: Tensor,
    out_proj: Linear,
    geometry: LinearAttentionConfig,
    norm_eps: f64,
}

/// Intermediate values of the shell, captured with `--ops`.
pub struct GdnCaptures {
    pub beta: Tensor,
    pub g: Tensor,
    pub backend_ops: Option<GdnOps>,
    pub out_proj: Tensor,
}

impl GdnCaptures {
    /// The captures with their ops.
    pub fn named(self) -> Vec<(Op, Tensor)> {
        let mut out = vec![(Op::Beta, self.beta), (Op::G, self.g)];
        if let Some(b) = self.backend_ops {
            out.extend([
                (Op::ConvOut, b.conv_out),
                (Op::Q, b.q),
                (Op::K, b.k),
                (Op::V, b.v),
                (Op::CoreOut, b.core_out),
                (Op::GatedNormOut, b.gated_norm_out),
            ]);
        }
        out.push((Op::OutProj, self.out_proj));
        out
    }
}

impl GatedDeltaNet {
    pub fn new(cfg: &ModelConfig, w: &Weights) -> Result<Self> {
        let l = cfg.linear.clone();
        let h = cfg.hidden_size;
        let (hv, dv) = (l.num_value_heads, l.value_head_dim);
        let (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) = match cfg.family {
            Family::Qwen35 | Family::Qwen35Moe => (
                Linear::new(&w.pp("in_proj_qkv"), l.conv_dim(), h, false)?,
                Linear::new(&w.pp("in_proj_z"), l.value_dim(), h, false)?,
                Linear::new(&w.pp("in_proj_b"), hv, h, false)?,
                Linear::new(&w.pp("in_proj_a"), hv, h, false)?,
            ),
            Family::Qwen3Next => unpack_qwen3_next(&l, h, w)?,
        };
        let acc = accumulation_dtype(w.dtype());
        // A_log and dt_bias are rounded to the compute dtype at load, as transformers does.
        let a_log = w.get("A_log", &[hv])?.to_dtype(acc)?;
        let dt_bias = w.get("dt_bias", &[hv])?.to_dtype(acc)?;
        let (neg_a, dt_bias): (Vec<f64>, Vec<f64>) = if acc == DType::F64 {
            let a: Vec<f64> = a_log.to_vec1()?;
            (a.iter().map(|x| -x.exp()).collect(), dt_bias.to_vec1()?)
        } else {
            let a: Vec<f32> = a_log.to_vec1()?;
            let dt: Vec<f32> = dt_bias.to_vec1()?;
            (
                a.iter().map(|x| f64::from(-x.exp())).collect(),
                dt.iter().map(|&x| f64::from(x)).collect(),
            )
        };
        #[cfg(feature = "cuda")]
        let gate_on_gpu = if w.device().is_cuda() {
            let upload = |v: &[f64]| -> Result<Tensor> {
                // Exact: the values were computed in `acc` (see above).
                let t = Tensor::from_vec(v.to_vec(), v.len(), &candle_core::Device::Cpu)?;
                Ok(t.to_dtype(acc)?.to_device(w.device())?)
            };
            Some((upload(&neg_a)?, upload(&dt_bias)?))
        } else {
            None
        };
        Ok(GatedDeltaNet {
            #[cfg(feature = "cuda")]
            gate_on_gpu,
            in_proj_qkv,
            in_proj_z,
            in_proj_b,
            in_proj_a,
            conv_weight: w
                .get("conv1d.weight", &[l.conv_dim(), 1, l.conv_kernel])?
                .reshape((l.conv_dim(), l.conv_kernel))?,
            neg_a,
            dt_bias,
            norm_weight: w.get("norm.weight", &[dv])?,
            out_proj: Linear::new(&w.pp("out_proj"), h, l.value_dim(), false)?,
            geometry: l,
            norm_eps: cfg.rms_norm_eps,
        })
    }

    /// x: `[B, T, hidden]` (after input_layernorm) → `[B, T, hidden]`, plus op captures and the
    /// layer's state after the last token (conv window and recurrent state) when asked. The
    /// state is what the backend's own delta rule returned in this very call.
    pub fn forward(
        &self,
        x: &Tensor,
        backend: &dyn LinearAttentionBackend,
        capture_ops: bool,
        capture_state: bool,
    ) -> Result<(Tensor, Option<GdnCaptures>, Option<GdnState>)> {
        let p = self.prepare(x)?;
        let outputs = backend.forward(&p.inputs(self), capture_ops)?;
        let state = if capture_state {
            // Only the last `conv_kernel` positions reach the window: copy those, not all T.
            let (k, t) = (self.geometry.conv_kernel, p.mixed_qkv.dim(1)?);
            let tail = p.mixed_qkv.narrow(1, t.saturating_sub(k), t.min(k))?;
            Some(GdnState {
                conv: next_conv_state(None, &tail, k)?,
                recurrent: outputs.recurrent.clone(),
            })
        } else {
            None
        };
        let (out, caps) = self.finish(p, outputs, capture_ops)?;
        Ok((out, caps, state))
    }

    /// The cached form ([`GdnStep`] says how the tokens relate to the state); returns the state
    /// after the call for [`GdnStep::Continue`].
    pub fn forward_cached(
        &self,
        x: &Tensor,
        backend: &dyn LinearAttentionBackend,
        step: GdnStep,
        capture_ops: bool,
    ) -> Result<(Tensor, Option<GdnCaptures>, Option<GdnState>)> {
        let x = match step {
            // transformers' apply_mask_to_padding_states: padding enters as zeros.
            GdnStep::Padded(real) => x.broadcast_mul(&real.unsqueeze(2)?.to_dtype(x.dtype())?)?,
            _ => x.clone(),
        };
        let p = self.prepare(&x)?;
        let inputs = p.inputs(self);
        let (outputs, state) = match step {
            GdnStep::Continue(state) => {
                let (o, s) = backend.forward_cached(&inputs, state, capture_ops)?;
                (o, Some(s))
            }
            GdnStep::Packed(starts) => {
                (backend.forward_packed(&inputs, starts, capture_ops)?, None)
            }
            GdnStep::Padded(_) => {
                let (o, s) = backend.forward_cached(&inputs, None, capture_ops)?;
                (o, Some(s))
            }
        };
        let (out, caps) = self.finish(p, outputs, capture_ops)?;
        Ok((out, caps, state))
    }

    /// Projections and gates of `x`, ready for a backend.
    fn prepare(&self, x: &Tensor) -> Result<Prepared> {
        let (b, t, _) = x.dims3()?;
        let l = &self.geometry;
        // One input for the four products: laid out for the kernels once.
        let projections = [
            &self.in_proj_qkv,
            &self.in_proj_z,
            &self.in_proj_b,
            &self.in_proj_a,
        ];
        let [mixed_qkv, z, b_proj, a_proj] = forward_shared(x, projections)?;
        let z = z.reshape((b, t, l.num_value_heads, l.value_head_dim))?;
        let beta = candle_nn::ops::sigmoid(&b_proj)?;
        let g = self.log_decay(&a_proj)?;
        let dims = GdnDims {
            batch: b,
            seq: t,
            k_heads: l.num_key_heads,
            v_heads: l.num_value_heads,
            k_dim: l.key_head_dim,
            v_dim: l.value_head_dim,
            conv_kernel: l.conv_kernel,
        };
        Ok(Prepared {
            mixed_qkv,
            z,
            beta,
            g,
            dims,
        })
    }

    fn finish(
        &self,
        p: Prepared,
        outputs: GdnOutputs,
        capture_ops: bool,
    ) -> Result<(Tensor, Option<GdnCaptures>)> {
        let out = self.out_proj.forward(&outputs.out)?;
        let captures = capture_ops.then(|| GdnCaptures {
            beta: p.beta,
            g: p.g,
            backend_ops: outputs.ops,
            out_proj: out.clone(),
        });
        Ok((out, captures))
    }

    /// g = −exp(A_log) · softplus(a + dt_bias), at the accumulation precision. On the CPU it is
    /// computed here (it needs an accurate log1p that candle lacks); on a GPU by the same
    /// formula in the same dtype in a kernel (`gdn_gate_*` in the fused backend's gdn.cu).
    fn log_decay(&self, a: &Tensor) -> Result<Tensor> {
        let acc = accumulation_dtype(a.dtype());
        #[cfg(feature = "cuda")]
        if let Some((neg_a, dt_bias)) = &self.gate_on_gpu {
            return crate::backends::fused::cuda::log_decay(&a.to_dtype(acc)?, neg_a, dt_bias);
        }
        let hv = self.geometry.num_value_heads;
        let shape = a.dims().to_vec();
        if acc == DType::F64 {
            let a: Vec<f64> = a.flatten_all()?.to_vec1()?;
            let g: Vec<f64> = a
                .iter()
                .enumerate()
                .map(|(i, &x)| self.neg_a[i % hv] * softplus_f64(x + self.dt_bias[i % hv]))
                .collect();
            Ok(Tensor::from_vec(g, shape, self.conv_weight.device())?)
        } else {
            let a: Vec<f32> = a.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            let g: Vec<f32> = a
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    (self.neg_a[i % hv] as f32) * softplus_f32(x + self.dt_bias[i % hv] as f32)
                })
                .collect();
            Ok(Tensor::from_vec(g, shape, self.conv_weight.device())?)
        }
    }
}

/// How the tokens of a cached call relate to the layer's state.
#[derive(Clone, Copy)]
pub enum GdnStep<'a> {
    /// Continue from this state (none: a fresh sequence).
    Continue(Option<&'a GdnState>),
    /// Packed documents (batch 1) starting at these positions; the state restarts at each.
    Packed(&'a [usize]),
    /// A fresh, left-padded batch: `[B, T]`, 1 at real tokens and 0 at padding.
    Padded(&'a Tensor),
}

/// The shell's projections of one call, before the backend.
struct Prepared {
    mixed_qkv: Tensor,
    z: Tensor,
    beta: Tensor,
    g: Tensor,
    dims: GdnDims,
}

impl Prepared {
    fn inputs<'a>(&'a self, gdn: &'a GatedDeltaNet) -> GdnInputs<'a> {
        GdnInputs {
            mixed_qkv: &self.mixed_qkv,
            conv_weight: &gdn.conv_weight,
            beta: &self.beta,
            g: &self.g,
            z: &self.z,
            norm_weight: &gdn.norm_weight,
            norm_eps: gdn.norm_eps,
            dims: self.dims,
        }
    }
}

/// torch's softplus (β = 1, threshold 20): x above the threshold passes through.
fn softplus_f64(x: f64) -> f64 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

fn softplus_f32(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Permutes Qwen3-Next's per-group `in_proj_qkvz` / `in_proj_ba` rows into the split layout.
/// Group g of qkvz holds [q_g (dk), k_g (dk), v_g (r·dv), z_g (r·dv)]; of ba, [b_g (r), a_g (r)].
fn unpack_qwen3_next(
    l: &LinearAttentionConfig,
    hidden: usize,
    w: &Weights,
) -> Result<(Linear, Linear, Linear, Linear)> {
    let (hk, dk, dv, r) = (
        l.num_key_heads,
        l.key_head_dim,
        l.value_head_dim,
        l.heads_per_key_head(),
    );
    let group = 2 * dk + 2 * r * dv;
    let rows = |offset: usize, len: usize, stride: usize| -> Vec<u32> {
        (0..hk)
            .flat_map(|g| (0..len).map(move |i| (g * stride + offset + i) as u32))
            .collect()
    };
    // The packed weight `name` ([n, hidden]) split into the Linears of `parts` (row lists): in
    // a served FP8 run a quantised weight is split with its scales (W8A8 of the packed weight,
    // row for row), otherwise the weight in the compute dtype.
    let split = |name: &str, n: usize, parts: Vec<Vec<u32>>| -> Result<Vec<Linear>> {
        if let Some((q, act)) = w.fp8_weight(name, n, hidden)? {
            return Ok(parts
                .iter()
                .map(|p| {
                    let idx: Vec<usize> = p.iter().map(|&r| r as usize).collect();
                    Linear::from_fp8(q.select_rows(&idx), act)
                })
                .collect());
        }
        let m = w.get(name, &[n, hidden])?;
        parts
            .into_iter()
            .map(|idx| {
                let len = idx.len();
                let idx = Tensor::from_vec(idx, len, m.device())?;
                Linear::from_weight(m.index_select(&idx, 0)?)
            })
            .collect()
    };
    let mut qkv_rows = rows(0, dk, group);
    qkv_rows.extend(rows(dk, dk, group));
    qkv_rows.extend(rows(2 * dk, r * dv, group));
    let z_rows = rows(2 * dk + r * dv, r * dv, group);
    let mut qkvz = split("in_proj_qkvz.weight", hk * group, vec![qkv_rows, z_rows])?;
    let b_rows = rows(0, r, 2 * r);
    let a_rows = rows(r, r, 2 * r);
    let mut ba = split("in_proj_ba.weight", hk * 2 * r, vec![b_rows, a_rows])?;
    let (Some(a), Some(b), Some(z), Some(qkv)) = (ba.pop(), ba.pop(), qkvz.pop(), qkvz.pop())
    else {
        return Err(crate::error::Error::Internal(
            "Qwen3-Next projections: a split lost a part".into(),
        ));
    };
    Ok((qkv, z, b, a))
}
