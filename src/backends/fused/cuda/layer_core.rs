//! The fused core of a layer: conv + SiLU, then the delta rule on q | k | v read strided out
//! of the conv output.

use candle_core::{DType, Tensor};

use super::launch::Input;
use super::rule::{RuleArgs, empty_seq, gate_inputs, rule_tensors, run_rule};
use super::{Kernel, RuleKernel, conv1d_silu, err};
use crate::backends::{GdnDims, accumulation_dtype};
use crate::error::Result;

/// The fused core of a layer on the GPU: conv + SiLU of `mixed_qkv` `[B, T, C]` (one kernel),
/// then the delta rule reading q | k | v straight out of the conv output (strided, no split
/// copies). Returns (core `[B, T, Hv, dv]`, final state, conv output `[B, T, C]`).
pub fn fused_core(
    mixed_qkv: &Tensor,
    conv_weight: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: &GdnDims,
    poison: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let conv = conv1d_silu(mixed_qkv, conv_weight, poison)?;
    if conv.dims() != [d.batch, d.seq, d.conv_dim()] {
        return Err(err(format!(
            "conv output {:?} does not match {d:?}",
            conv.dims()
        )));
    }
    let (core, state) = dispatch_dtype!(
        conv.dtype(),
        "CUDA kernels",
        core_typed(&conv, g, beta, initial_state, d, poison)
    )?;
    Ok((core, state, conv))
}

fn core_typed<T: Kernel>(
    conv: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: &GdnDims,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    let acc = accumulation_dtype(T::DTYPE);
    let (rows, hv) = (d.batch * d.seq, d.v_heads);
    for (name, x) in [("g", g), ("beta", beta)] {
        if x.dims() != [d.batch, d.seq, hv] {
            return Err(err(format!(
                "{name} must be [{}, {}, {hv}], got {:?}",
                d.batch,
                d.seq,
                x.dims()
            )));
        }
    }
    if beta.dtype() != T::DTYPE {
        return Err(err(format!(
            "beta dtype {:?} differs from the activations' {:?}",
            beta.dtype(),
            T::DTYPE
        )));
    }
    let g = g.to_dtype(acc)?.contiguous()?;
    let beta = beta.contiguous()?;
    let init = initial_state
        .map(|s| s.to_dtype(acc).and_then(|s| s.contiguous()))
        .transpose()?;
    if let Some(s) = &init
        && s.dims() != [d.batch, hv, d.k_dim, d.v_dim]
    {
        return Err(err(format!("initial state shape {:?}", s.dims())));
    }
    if rows == 0 {
        return empty_seq::<T>(d, conv.device(), init);
    }
    let ci = Input::new(conv, "conv output")?;
    let (gi, bi, ii) = gate_inputs(&g, &beta, init.as_ref())?;
    let dev = ci.device()?;
    let cv = ci.view::<T>()?;
    let key_dim = d.k_heads * d.k_dim;
    let iv = ii.as_ref().map(|i| i.view::<T::Acc>()).transpose()?;
    let (out, state) = run_rule::<T>(
        &dev,
        RuleArgs {
            q: cv.slice(0..),
            k: cv.slice(key_dim..),
            v: cv.slice(2 * key_dim..),
            g: gi.view()?,
            beta: bi.view()?,
            init: iv,
            qk_stride: d.conv_dim(),
            v_stride: d.conv_dim(),
        },
        d,
        poison,
        RuleKernel::Default,
    )?;
    Ok(rule_tensors(out, state, dev, d))
}
