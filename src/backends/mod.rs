//! Linear-attention backends: the three operations that fused kernels replace in real
//! deployments — the causal depthwise conv + SiLU, the gated delta rule (with the in-kernel q/k
//! L2 norm and the dk^-1/2 scale), and the gated RMSNorm. Everything else in a Gated DeltaNet
//! layer (projections, gates, head bookkeeping, out_proj) is shared model code, so two backends
//! can only differ by what they do here.

mod chunked;
pub mod fused;
mod reference;
mod registry;
mod state;

use candle_core::{DType, Tensor};

use crate::error::{Error, Result};

pub use chunked::Chunked;
pub use fused::Fused;
/// The shapes of one linear-attention call: one type for the backends and the CPU kernels (it
/// lives in the self-contained kernel module, which cannot depend on this one).
pub use fused::cpu::GdnDims;
pub use reference::Reference;
pub use registry::{
    BackendInfo, BackendKind, available_backends, backend_by_name, implementation_on,
};
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
    /// The intermediate values, when requested (the model names them: `capture::names::ops`).
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

/// The default [`LinearAttentionBackend::forward_cached`]: the backend's conv (continued from the
/// state), its delta rule or decode step, its gated norm. Backends that override the method for
/// some calls use it for the rest.
pub fn compose_forward_cached<B: LinearAttentionBackend + ?Sized>(
    backend: &B,
    inputs: &GdnInputs,
    state: Option<&GdnState>,
    capture_ops: bool,
) -> Result<(GdnOutputs, GdnState)> {
    let d = inputs.dims;
    let conv = match state {
        Some(s) => backend.conv1d_silu_continue(inputs.mixed_qkv, inputs.conv_weight, &s.conv)?,
        None => backend.conv1d_silu(inputs.mixed_qkv, inputs.conv_weight)?,
    };
    let qkv = split_qkv(&conv, &d)?;
    let x = inputs.delta_inputs(&qkv);
    let (core, recurrent) = match state {
        Some(s) if d.seq == 1 => backend.gated_delta_rule_step(x, &s.recurrent)?,
        _ => backend.gated_delta_rule(x, state.map(|s| &s.recurrent))?,
    };
    let out = backend.gated_rms_norm(&core, inputs.z, inputs.norm_weight, inputs.norm_eps)?;
    let conv_state = next_conv_state(state.map(|s| &s.conv), inputs.mixed_qkv, d.conv_kernel)?;
    let outputs = GdnOutputs::new(
        out,
        recurrent.clone(),
        capture_ops.then_some(conv),
        core,
        &d,
    )?;
    Ok((
        outputs,
        GdnState {
            conv: conv_state,
            recurrent,
        },
    ))
}

/// The default [`LinearAttentionBackend::forward_packed`]: one [`forward`](LinearAttentionBackend::forward)
/// per document, outputs (and op captures) concatenated along the sequence.
pub fn forward_documents<B: LinearAttentionBackend + ?Sized>(
    backend: &B,
    inputs: &GdnInputs,
    starts: &[usize],
    capture_ops: bool,
) -> Result<GdnOutputs> {
    let d = inputs.dims;
    let bounds = document_bounds(backend.name(), starts, d.seq)?;
    let mut outs = Vec::with_capacity(bounds.len());
    let mut recurrent = None;
    let mut ops = Vec::new();
    for (start, len) in bounds {
        let doc = inputs.narrow(start, len)?;
        let o = backend.forward(&doc.view(inputs), capture_ops)?;
        outs.push(o.out);
        recurrent = Some(o.recurrent);
        ops.extend(o.ops);
    }
    let ops = (!ops.is_empty()).then(|| GdnOps::cat(&ops)).transpose()?;
    let recurrent = recurrent
        .ok_or_else(|| Error::backend(backend.name(), "packed call without a document"))?;
    Ok(GdnOutputs {
        out: Tensor::cat(&outs, 1)?,
        recurrent,
        ops,
    })
}

/// `(start, len)` of each packed document; `starts` must begin at 0 and increase within `seq`.
fn document_bounds(backend: &str, starts: &[usize], seq: usize) -> Result<Vec<(usize, usize)>> {
    let ok = starts.first() == Some(&0)
        && starts.windows(2).all(|w| w[0] < w[1])
        && starts.last().is_some_and(|&s| s < seq);
    if !ok {
        return Err(Error::backend(
            backend,
            format!("packed document starts {starts:?} must begin at 0 and increase below {seq}"),
        ));
    }
    Ok(starts
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, starts.get(i + 1).copied().unwrap_or(seq) - s))
        .collect())
}

/// The sequence-dependent inputs of a [`GdnInputs`], narrowed to a range of positions.
struct NarrowedInputs {
    mixed_qkv: Tensor,
    beta: Tensor,
    g: Tensor,
    z: Tensor,
    seq: usize,
}

impl NarrowedInputs {
    fn view<'a>(&'a self, whole: &GdnInputs<'a>) -> GdnInputs<'a> {
        GdnInputs {
            mixed_qkv: &self.mixed_qkv,
            conv_weight: whole.conv_weight,
            beta: &self.beta,
            g: &self.g,
            z: &self.z,
            norm_weight: whole.norm_weight,
            norm_eps: whole.norm_eps,
            dims: GdnDims {
                seq: self.seq,
                ..whole.dims
            },
        }
    }
}

impl GdnInputs<'_> {
    fn narrow(&self, start: usize, len: usize) -> Result<NarrowedInputs> {
        Ok(NarrowedInputs {
            mixed_qkv: self.mixed_qkv.narrow(1, start, len)?.contiguous()?,
            beta: self.beta.narrow(1, start, len)?.contiguous()?,
            g: self.g.narrow(1, start, len)?.contiguous()?,
            z: self.z.narrow(1, start, len)?.contiguous()?,
            seq: len,
        })
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

/// Checks the shapes of a gated-delta-rule call and returns its dims (without the conv kernel).
pub fn check_delta_rule_shapes(
    backend: &str,
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
) -> Result<GdnDims> {
    let DeltaInputs { q, k, v, g, beta } = x;
    let err = |msg: String| Error::backend(backend, msg);
    let (b, t, hk, dk) = q
        .dims4()
        .map_err(|_| err(format!("q must be [B, T, Hk, dk], got {:?}", q.dims())))?;
    let (_, _, hv, dv) = v
        .dims4()
        .map_err(|_| err(format!("v must be [B, T, Hv, dv], got {:?}", v.dims())))?;
    if k.dims() != q.dims() {
        return Err(err(format!(
            "k shape {:?} differs from q shape {:?}",
            k.dims(),
            q.dims()
        )));
    }
    if v.dims()[..2] != [b, t] {
        return Err(err(format!(
            "v shape {:?} does not match q shape {:?}",
            v.dims(),
            q.dims()
        )));
    }
    if hk == 0 || hv % hk != 0 {
        return Err(err(format!(
            "{hv} value heads is not a multiple of {hk} key heads"
        )));
    }
    for (name, x) in [("g", g), ("beta", beta)] {
        if x.dims() != [b, t, hv] {
            return Err(err(format!(
                "{name} must be [{b}, {t}, {hv}], got {:?}",
                x.dims()
            )));
        }
    }
    if let Some(s) = initial_state.filter(|s| s.dims() != [b, hv, dk, dv]) {
        return Err(err(format!(
            "initial state must be [{b}, {hv}, {dk}, {dv}], got {:?}",
            s.dims()
        )));
    }
    // g and the state are handed over at the accumulation precision; casting a rounded g up
    // here would hide that the caller rounded it.
    let acc = accumulation_dtype(q.dtype());
    if g.dtype() != acc {
        return Err(err(format!(
            "g must be {acc:?} for {:?} inputs, got {:?}",
            q.dtype(),
            g.dtype()
        )));
    }
    if let Some(s) = initial_state.filter(|s| s.dtype() != acc) {
        return Err(err(format!(
            "initial state must be {acc:?}, got {:?}",
            s.dtype()
        )));
    }
    for (name, x) in [("k", k), ("v", v), ("beta", beta)] {
        if x.dtype() != q.dtype() {
            return Err(err(format!(
                "{name} dtype {:?} differs from q dtype {:?}",
                x.dtype(),
                q.dtype()
            )));
        }
    }
    Ok(GdnDims {
        batch: b,
        seq: t,
        k_heads: hk,
        v_heads: hv,
        k_dim: dk,
        v_dim: dv,
        conv_kernel: 0,
    })
}

/// Checks a conv call: x `[B, T, C]`, weight `[C, K]`, same dtype.
pub fn check_conv_shapes(
    backend: &str,
    x: &Tensor,
    weight: &Tensor,
) -> Result<(usize, usize, usize, usize)> {
    let err = |msg: String| Error::backend(backend, msg);
    let (b, t, c) = x
        .dims3()
        .map_err(|_| err(format!("conv input must be [B, T, C], got {:?}", x.dims())))?;
    let (wc, k) = weight.dims2().map_err(|_| {
        err(format!(
            "conv weight must be [C, K], got {:?}",
            weight.dims()
        ))
    })?;
    if wc != c || k == 0 {
        return Err(err(format!(
            "conv weight {:?} does not match {c} channels",
            weight.dims()
        )));
    }
    if x.dtype() != weight.dtype() {
        return Err(err(format!(
            "conv input dtype {:?} differs from weight dtype {:?}",
            x.dtype(),
            weight.dtype()
        )));
    }
    Ok((b, t, c, k))
}

/// Checks a gated-norm call: x and z the same shape, weight `[last dim]`.
pub fn check_norm_shapes(backend: &str, x: &Tensor, z: &Tensor, weight: &Tensor) -> Result<usize> {
    let err = |msg: String| Error::backend(backend, msg);
    let dv = *x
        .dims()
        .last()
        .ok_or_else(|| err("gated norm input is a scalar".to_string()))?;
    if z.dims() != x.dims() {
        return Err(err(format!(
            "gate shape {:?} differs from input shape {:?}",
            z.dims(),
            x.dims()
        )));
    }
    if weight.dims() != [dv] {
        return Err(err(format!(
            "gated norm weight must be [{dv}], got {:?}",
            weight.dims()
        )));
    }
    Ok(dv)
}
