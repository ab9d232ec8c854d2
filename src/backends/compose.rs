//! The default compositions a backend's trait methods fall back on: a cached forward (conv
//! continued from the state, delta rule or decode step, gated norm) and a packed forward (one
//! call per document, concatenated).

use candle_core::Tensor;

use super::{
    GdnDims, GdnInputs, GdnOps, GdnOutputs, GdnState, LinearAttentionBackend, next_conv_state,
    split_qkv,
};
use crate::error::{Error, Result};

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
