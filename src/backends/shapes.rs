//! The shape checks every backend makes before it computes: a call with inconsistent shapes is a
//! clear error naming the backend, never a panic inside a kernel.

use candle_core::Tensor;

use super::{DeltaInputs, GdnDims, accumulation_dtype};
use crate::error::{Error, Result};

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
    check_delta_rule_dtypes(backend, x, initial_state)?;
    Ok(GdnDims::new(b, t, (hk, hv), (dk, dv), 0))
}

/// The dtypes of a gated-delta-rule call: k, v and β in q's dtype, g and the initial state in
/// its accumulation dtype.
fn check_delta_rule_dtypes(
    backend: &str,
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
) -> Result<()> {
    let DeltaInputs { q, k, v, g, beta } = x;
    let err = |msg: String| Error::backend(backend, msg);
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
    Ok(())
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
