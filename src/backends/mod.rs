//! Linear-attention backends: the three operations that fused kernels replace in real
//! deployments — the causal depthwise conv + SiLU, the gated delta rule (with the in-kernel q/k
//! L2 norm and the dk^-1/2 scale), and the gated RMSNorm. Everything else in a Gated DeltaNet
//! layer (projections, gates, head bookkeeping, out_proj) is shared model code, so two backends
//! can only differ by what they do here.

pub mod cases;
mod chunked;
mod compose;
pub mod fused;
mod reference;
mod registry;
mod shapes;
mod state;

use candle_core::{DType, Tensor};

use crate::error::Result;

pub use chunked::Chunked;
pub use compose::{compose_forward_cached, forward_documents};
pub use fused::Fused;
/// The shapes of one linear-attention call: one type for the backends and the CPU kernels (it
/// lives in the self-contained kernel module, which cannot depend on this one).
pub use fused::cpu::GdnDims;
pub use reference::Reference;
pub use registry::{
    BackendInfo, BackendKind, available_backends, backend_by_name, implementation_on,
};
pub use shapes::{check_conv_shapes, check_delta_rule_shapes, check_norm_shapes};
pub use state::{GdnState, check_conv_state, next_conv_state};

/// Everything a backend needs for one Gated DeltaNet layer, as the shared layer code prepared it.
pub struct GdnInputs<'a> {
    /// `[B, T, conv_dim]` output of the q/k/v projection, before the conv; compute dtype.
    pub mixed_qkv: &'a Tensor,
    /// `[conv_dim, K]` depthwise conv weight; compute dtype.
    pub conv_weight: &'a Tensor,
    /// `[B, T, Hv]` β = σ(b); compute dtype.
    pub beta: &'a Tensor,
    /// `[B, T, Hv]` log decay g ≤ 0; accumulation dtype (f32, or f64 in f64 mode).
    pub g: &'a Tensor,
    /// `[B, T, Hv, dv]` output gate; compute dtype.
    pub z: &'a Tensor,
    /// `[dv]` gated-norm weight (plain scale); compute dtype.
    pub norm_weight: &'a Tensor,
    pub norm_eps: f64,
    pub dims: GdnDims,
}

/// The tensors of one gated-delta-rule call. Value head h reads key head h / (Hv/Hk).
#[derive(Clone, Copy)]
pub struct DeltaInputs<'a> {
    /// Queries and keys, `[B, T, Hk, dk]`, before the in-rule L2 norm.
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    /// Values, `[B, T, Hv, dv]`.
    pub v: &'a Tensor,
    /// `[B, T, Hv]` log decay, at the accumulation dtype.
    pub g: &'a Tensor,
    /// `[B, T, Hv]` write strength β, in q's dtype.
    pub beta: &'a Tensor,
}

/// The tensors of a call in the order of its fields: q, k, v, g, β.
impl<'a> From<&'a [Tensor; 5]> for DeltaInputs<'a> {
    fn from([q, k, v, g, beta]: &'a [Tensor; 5]) -> DeltaInputs<'a> {
        DeltaInputs { q, k, v, g, beta }
    }
}

impl<'a> GdnInputs<'a> {
    /// The delta rule's inputs: q, k, v split out of the conv output ([`split_qkv`]), g and beta
    /// from the layer.
    fn delta_inputs<'t>(&'t self, (q, k, v): &'t (Tensor, Tensor, Tensor)) -> DeltaInputs<'t> {
        DeltaInputs {
            q,
            k,
            v,
            g: self.g,
            beta: self.beta,
        }
    }
}

/// What a backend hands back: the gated-norm output, the final recurrent state and, when asked,
/// intermediate values.
pub struct GdnOutputs {
    /// `[B, T, Hv·dv]` in the compute dtype, ready for out_proj.
    pub out: Tensor,
    /// `[B, Hv, dk, dv]` state after the last token (accumulation dtype), as the delta rule
    /// returned it; for packed documents, the last document's.
    pub recurrent: Tensor,
    /// The intermediate values, when requested (the model names them: `capture::Op`).
    pub ops: Option<GdnOps>,
}

/// A backend's intermediate values, captured with `--ops`.
pub struct GdnOps {
    /// The causal conv's output `[B, T, conv_dim]` and the q, k, v split from it.
    pub conv_out: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    /// The gated delta rule's output.
    pub core_out: Tensor,
    /// The gated-norm output, as `out`.
    pub gated_norm_out: Tensor,
}

impl GdnOps {
    /// The values of consecutive documents, joined along the sequence.
    fn cat(parts: &[GdnOps]) -> Result<Self> {
        let cat = |field: fn(&GdnOps) -> &Tensor| -> Result<Tensor> {
            let ts: Vec<&Tensor> = parts.iter().map(field).collect();
            Ok(Tensor::cat(&ts, 1)?)
        };
        Ok(GdnOps {
            conv_out: cat(|o| &o.conv_out)?,
            q: cat(|o| &o.q)?,
            k: cat(|o| &o.k)?,
            v: cat(|o| &o.v)?,
            core_out: cat(|o| &o.core_out)?,
            gated_norm_out: cat(|o| &o.gated_norm_out)?,
        })
    }
}

impl GdnOutputs {
    /// Packs a backend's results: the gated-norm output `[B, T, Hv, dv]` reshaped for out_proj,
    /// the delta rule's final state and, when the conv output was captured, the per-op captures
    /// in forward order.
    pub fn new(
        norm_out: Tensor,
        recurrent: Tensor,
        conv: Option<Tensor>,
        core: Tensor,
        d: &GdnDims,
    ) -> Result<Self> {
        let out = norm_out.reshape((d.batch, d.seq, d.v_heads * d.v_dim))?;
        let ops = match conv {
            Some(conv) => {
                let (q, k, v) = split_qkv(&conv, d)?;
                Some(GdnOps {
                    conv_out: conv,
                    q,
                    k,
                    v,
                    core_out: core,
                    gated_norm_out: out.clone(),
                })
            }
            None => None,
        };
        Ok(GdnOutputs {
            out,
            recurrent,
            ops,
        })
    }
}

/// A linear-attention implementation. Implementations must not fall back silently: an input
/// they cannot handle (device, dtype, shape) is an error.
pub trait LinearAttentionBackend: Send + Sync {
    /// Registry name (`reference`, `chunked`, `fused`, …).
    fn name(&self) -> &'static str;

    /// What actually runs for tensors on `device`, e.g. `reference/cpu-candle` or
    /// `fused/cpu-rayon-2t-avx2`. The default names a backend composed from candle tensor ops:
    /// `{name}/cpu-candle`, `{name}/cuda-candle`, else `{name}/candle`.
    fn implementation(&self, device: &candle_core::Device) -> String {
        let on = match device {
            candle_core::Device::Cpu => "cpu-",
            candle_core::Device::Cuda(_) => "cuda-",
            _ => "",
        };
        format!("{}/{on}candle", self.name())
    }

    /// Whether this backend can run on `device`; the error says why not. Never substituted.
    fn check_device(&self, device: &candle_core::Device) -> Result<()> {
        let _ = device;
        Ok(())
    }

    /// Causal depthwise conv over the sequence + SiLU: `[B, T, C]`, `[C, K]` → `[B, T, C]`.
    fn conv1d_silu(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor>;

    /// The gated delta rule with q/k L2-normalised inside and q scaled by dk^-1/2, from the
    /// initial `state` `[B, Hv, dk, dv]` (accumulation dtype; none: zeros). Returns the output
    /// `[B, T, Hv, dv]` (v's dtype) and the final state `[B, Hv, dk, dv]` (accumulation dtype).
    fn gated_delta_rule(&self, x: DeltaInputs, state: Option<&Tensor>) -> Result<(Tensor, Tensor)>;

    /// Gated RMSNorm over the last dim: `w ⊙ norm(x) ⊙ SiLU(z)`.
    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor>;

    /// The whole backend part of a layer. Backends that fuse steps override this; the default
    /// composes the three operations above.
    fn forward(&self, inputs: &GdnInputs, capture_ops: bool) -> Result<GdnOutputs> {
        let d = inputs.dims;
        let conv = self.conv1d_silu(inputs.mixed_qkv, inputs.conv_weight)?;
        let qkv = split_qkv(&conv, &d)?;
        let (core, state) = self.gated_delta_rule(inputs.delta_inputs(&qkv), None)?;
        let out = self.gated_rms_norm(&core, inputs.z, inputs.norm_weight, inputs.norm_eps)?;
        GdnOutputs::new(out, state, capture_ops.then_some(conv), core, &d)
    }

    /// Conv + SiLU continuing a sequence whose last K inputs are `state` `[B, C, K]`; with
    /// T = 1 this is `causal_conv1d_update`. The default prepends the state's last K − 1 inputs
    /// and drops their outputs, so each output sees exactly the K inputs it would see in one
    /// long sequence, computed by this backend's own conv.
    fn conv1d_silu_continue(&self, x: &Tensor, weight: &Tensor, state: &Tensor) -> Result<Tensor> {
        let (_, t, _, k) = check_conv_shapes(self.name(), x, weight)?;
        check_conv_state(self.name(), x, k, state)?;
        let prefix = state.narrow(2, 1, k - 1)?.transpose(1, 2)?;
        let full = Tensor::cat(&[&prefix.to_dtype(x.dtype())?, x], 1)?;
        Ok(self.conv1d_silu(&full, weight)?.narrow(1, k - 1, t)?)
    }

    /// One decode step (T = 1) of the gated delta rule from `state`: the recurrent token step
    /// serving engines run. Backends whose `gated_delta_rule` is not the recurrence override it.
    fn gated_delta_rule_step(&self, x: DeltaInputs, state: &Tensor) -> Result<(Tensor, Tensor)> {
        self.gated_delta_rule(x, Some(state))
    }

    /// [`forward`](Self::forward) from a cached state (none: a fresh sequence), returning the
    /// state after the call. A prefill (T > 1) runs the backend's gated delta rule from the
    /// state, a single token the decode step — transformers' split between its chunked and
    /// recurrent rules.
    fn forward_cached(
        &self,
        inputs: &GdnInputs,
        state: Option<&GdnState>,
        capture_ops: bool,
    ) -> Result<(GdnOutputs, GdnState)> {
        compose_forward_cached(self, inputs, state, capture_ops)
    }

    /// Packed documents in one sequence (batch 1) starting at `starts` (the first is 0): conv
    /// window and recurrent state restart at each start, as with `cu_seqlens`. The default runs
    /// [`forward`](Self::forward) once per document and concatenates the outputs.
    fn forward_packed(
        &self,
        inputs: &GdnInputs,
        starts: &[usize],
        capture_ops: bool,
    ) -> Result<GdnOutputs> {
        forward_documents(self, inputs, starts, capture_ops)
    }
}

/// Splits the conv output `[B, T, conv_dim]` into q, k `[B, T, Hk, dk]` and v `[B, T, Hv, dv]`.
pub fn split_qkv(conv: &Tensor, d: &GdnDims) -> Result<(Tensor, Tensor, Tensor)> {
    let key_dim = d.k_heads * d.k_dim;
    let value_dim = d.v_heads * d.v_dim;
    let q = conv
        .narrow(2, 0, key_dim)?
        .reshape((d.batch, d.seq, d.k_heads, d.k_dim))?;
    let k = conv
        .narrow(2, key_dim, key_dim)?
        .reshape((d.batch, d.seq, d.k_heads, d.k_dim))?;
    let v = conv
        .narrow(2, 2 * key_dim, value_dim)?
        .reshape((d.batch, d.seq, d.v_heads, d.v_dim))?;
    Ok((q, k, v))
}

/// The dtype transformers computes "in float32" at: f32 for f32/bf16/f16 models, and f64 when
/// hsdiff runs a true float64 pass.
pub fn accumulation_dtype(compute: DType) -> DType {
    if compute == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}
