//! Depthwise causal conv1d + SiLU.
//!
//! out_t[c] = SiLU(Σ_{j<K} w[c, j] · x_{t−(K−1)+j}[c]), x_{t'<0} = 0, accumulated in the
//! accumulation type and rounded once to the storage type (as the causal-conv1d CUDA kernel
//! does). The per-segment routine [`conv_segment`] is shared with the fused kernel so that the
//! standalone conv and the conv inside `fused_gdn` give bit-identical values.

use rayon::prelude::*;

use crate::backends::fused::cpu::dims::ConvDims;
use crate::backends::fused::cpu::dispatch::{isa, multiversion};
use crate::backends::fused::cpu::element::{Accum, Element, silu};
use crate::backends::fused::cpu::error::{KernelError, check_len, prod};

/// Tokens per work item of the standalone conv (and time-chunk length of the fused kernel's conv).
pub(crate) const CONV_CHUNK: usize = 64;
/// Channels per segment of the standalone conv: keeps the staged inputs ≈ 34 KiB (f32).
const CONV_SEGMENT: usize = 128;

/// Transposes conv weights of channels [c0, c0 + d) from [C, K] into `wt` = [K, d] in the
/// accumulation type, so the inner conv loop runs over contiguous channels.
#[inline(always)]
pub(crate) fn transpose_weights<S: Element>(
    w: &[S],
    k: usize,
    c0: usize,
    d: usize,
    wt: &mut [S::Acc],
) {
    for c in 0..d {
        let row = &w[(c0 + c) * k..(c0 + c + 1) * k];
        for (j, &wj) in row.iter().enumerate() {
            wt[j * d + c] = wj.to_acc();
        }
    }
}

/// Conv + SiLU for tokens [t0, t0 + n) of one batch element and channels [c0, c0 + d).
///
/// - `x_b`: that batch element's input, [T, c_stride].
/// - `wt`: transposed weights [K, d] (see [`transpose_weights`]).
/// - `xbuf`: scratch of at least (n + K − 1)·d, where the needed input rows are staged once in
///   the accumulation type (each input is read K times by the taps).
/// - `out`: n rows of stride `o_stride`; row t receives the d outputs, already rounded to `S` and
///   widened back (so callers downstream read exactly what a kernel storing `S` would have
///   stored).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn conv_segment<S: Element, const FMA: bool>(
    x_b: &[S],
    c_stride: usize,
    c0: usize,
    d: usize,
    t0: usize,
    n: usize,
    k: usize,
    wt: &[S::Acc],
    xbuf: &mut [S::Acc],
    out: &mut [S::Acc],
    o_stride: usize,
) {
    // Stage rows for tokens t0 − (K−1) .. t0 + n; rows before the sequence start are zeros.
    let rows = n + k - 1;
    for r in 0..rows {
        let dst = &mut xbuf[r * d..(r + 1) * d];
        match (t0 + r).checked_sub(k - 1) {
            Some(t) => {
                let src = &x_b[t * c_stride + c0..t * c_stride + c0 + d];
                for (o, &s) in dst.iter_mut().zip(src) {
                    *o = s.to_acc();
                }
            }
            None => dst.fill(S::Acc::ZERO),
        }
    }
    for t in 0..n {
        let o = &mut out[t * o_stride..t * o_stride + d];
        // Tap 0 (oldest token) first, then accumulate the others in order.
        for ((o, &w), &x) in o.iter_mut().zip(&wt[..d]).zip(&xbuf[t * d..(t + 1) * d]) {
            *o = w * x;
        }
        for j in 1..k {
            let w = &wt[j * d..(j + 1) * d];
            let x = &xbuf[(t + j) * d..(t + j + 1) * d];
            for ((o, &w), &x) in o.iter_mut().zip(w).zip(x) {
                *o = S::Acc::mul_add::<FMA>(w, x, *o);
            }
        }
        for o in o.iter_mut() {
            *o = S::from_acc(silu(*o)).to_acc();
        }
    }
}

/// Standalone depthwise causal conv1d + SiLU.
///
/// - `x`: [B, T, C] storage type; `w`: [C, K]; `out`: [B, T, C] (fully overwritten).
///
/// Accumulates in `S::Acc`, SiLU in `S::Acc`, one rounding to `S`. Parallel over
/// (batch, 64-token chunks).
pub fn causal_conv1d_silu<S: Element>(
    x: &[S],
    w: &[S],
    dims: ConvDims,
    out: &mut [S],
) -> Result<(), KernelError> {
    if dims.channels == 0 || dims.kernel == 0 {
        return Err(KernelError::InvalidDims(
            "channels and kernel must be > 0".to_string(),
        ));
    }
    let n = prod(&[dims.batch, dims.seq, dims.channels])?;
    check_len("x", n, x.len())?;
    check_len("out", n, out.len())?;
    check_len("w", prod(&[dims.channels, dims.kernel])?, w.len())?;
    if n == 0 {
        return Ok(());
    }
    conv_all::<S>(isa(), x, w, dims, out);
    Ok(())
}

multiversion! {
    /// Multiversioned driver of [`causal_conv1d_silu`].
    pub(crate) fn conv_all<S: Element>(x: &[S], w: &[S], dims: ConvDims, out: &mut [S]) => conv_all_impl
}

/// Body of the standalone conv (shapes already validated, all dims > 0).
#[inline(always)]
fn conv_all_impl<S: Element, const FMA: bool>(x: &[S], w: &[S], dims: ConvDims, out: &mut [S]) {
    let c = dims.channels;
    let k = dims.kernel;
    let seg = CONV_SEGMENT.min(c);
    let per_batch = dims.seq * c;
    let chunk = CONV_CHUNK * c;
    let work: Vec<(usize, usize, &mut [S])> = out
        .chunks_mut(per_batch)
        .enumerate()
        .flat_map(|(b, ob)| {
            ob.chunks_mut(chunk)
                .enumerate()
                .map(move |(i, o)| (b, i * CONV_CHUNK, o))
        })
        .collect();
    work.into_par_iter().for_each_init(
        || {
            (
                vec![S::Acc::ZERO; k * seg],
                vec![S::Acc::ZERO; (CONV_CHUNK + k - 1) * seg],
                vec![S::Acc::ZERO; CONV_CHUNK * seg],
            )
        },
        |(wt, xbuf, obuf), (b, t0, o)| {
            let x_b = &x[b * per_batch..(b + 1) * per_batch];
            let n = o.len() / c;
            let mut c0 = 0;
            while c0 < c {
                let d = seg.min(c - c0);
                transpose_weights::<S>(w, k, c0, d, wt);
                conv_segment::<S, FMA>(x_b, c, c0, d, t0, n, k, wt, xbuf, obuf, d);
                for t in 0..n {
                    let dst = &mut o[t * c + c0..t * c + c0 + d];
                    for (dst, &v) in dst.iter_mut().zip(&obuf[t * d..(t + 1) * d]) {
                        *dst = S::from_acc(v);
                    }
                }
                c0 += d;
            }
        },
    );
}
