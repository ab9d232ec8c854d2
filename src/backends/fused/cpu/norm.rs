//! Gated RMS norm: y = w ⊙ x·rsqrt(mean x² + eps) ⊙ SiLU(z) (norm first, then gate).

use rayon::prelude::*;

use crate::backends::fused::cpu::delta::dot;
use crate::backends::fused::cpu::dims::NormDims;
use crate::backends::fused::cpu::dispatch::{isa, multiversion};
use crate::backends::fused::cpu::element::{Accum, Element, silu};
use crate::backends::fused::cpu::error::{KernelError, check_len, prod};

/// Rows per rayon work item: enough work per item to amortise scheduling.
const ROWS_PER_TASK: usize = 64;

/// Gated RMS norm over the last dimension, all arithmetic in `S::Acc`, one rounding to `S`
/// (the precision of fla's fused `FusedRMSNormGated`).
///
/// - `x`, `z`, `out`: [rows, dim]; `w`: `[dim]`. Parallel over rows.
pub fn gated_rms_norm<S: Element>(
    x: &[S],
    z: &[S],
    w: &[S],
    eps: f64,
    dims: NormDims,
    out: &mut [S],
) -> Result<(), KernelError> {
    if dims.dim == 0 {
        return Err(KernelError::InvalidDims("dim must be > 0".to_string()));
    }
    let n = prod(&[dims.rows, dims.dim])?;
    check_len("x", n, x.len())?;
    check_len("z", n, z.len())?;
    check_len("out", n, out.len())?;
    check_len("w", dims.dim, w.len())?;
    norm_all::<S>(isa(), x, z, w, eps, dims.dim, out);
    Ok(())
}

multiversion! {
    /// Multiversioned body of [`gated_rms_norm`].
    fn norm_all<S: Element>(x: &[S], z: &[S], w: &[S], eps: f64, dim: usize, out: &mut [S]) => norm_impl
}

#[inline(always)]
fn norm_impl<S: Element, const FMA: bool>(
    x: &[S],
    z: &[S],
    w: &[S],
    eps: f64,
    dim: usize,
    out: &mut [S],
) {
    let eps = S::Acc::from_f64(eps);
    let inv_dim = S::Acc::from_f64(1.0 / dim as f64);
    let wa: Vec<S::Acc> = w.iter().map(|&v| v.to_acc()).collect();
    out.par_chunks_mut(dim * ROWS_PER_TASK)
        .enumerate()
        .for_each_init(
            || (vec![S::Acc::ZERO; dim], vec![S::Acc::ZERO; dim]),
            |(xa, ya), (i, o)| {
                let r0 = i * ROWS_PER_TASK;
                for (r, orow) in o.chunks_mut(dim).enumerate() {
                    let off = (r0 + r) * dim;
                    for (a, &s) in xa.iter_mut().zip(&x[off..off + dim]) {
                        *a = s.to_acc();
                    }
                    let ms = dot::<S::Acc, FMA>(xa, xa) * inv_dim;
                    let inv = S::Acc::ONE / (ms + eps).sqrt();
                    for (((y, &xv), &wv), &zv) in ya
                        .iter_mut()
                        .zip(xa.iter())
                        .zip(&wa)
                        .zip(&z[off..off + dim])
                    {
                        *y = wv * (xv * inv) * silu(zv.to_acc());
                    }
                    for (o, &y) in orow.iter_mut().zip(ya.iter()) {
                        *o = S::from_acc(y);
                    }
                }
            },
        );
}
