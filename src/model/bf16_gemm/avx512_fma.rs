//! The f32 microkernel on plain AVX-512F FMAs: bf16 operands widened to f32 (exact), then per
//! output element, pair by pair, the odd product fused into the accumulator and then the even
//! one — the order `vdpbf16ps` and [`super::portable`] use.
//!
//! It serves twice. For a bf16 product it runs with the MXCSR's denormals-are-zero and
//! flush-to-zero bits set ([`super::mxcsr::FlushDenormals`]), and its results are then bit-identical to
//! `vdpbf16ps`'s: two FMAs do the work of one `vdpbf16ps`, but on Intel cores (two 512-bit FMA
//! ports, `vdpbf16ps` at half that rate) this is the faster kernel. For an f32 product
//! ([`super::matmul_wide_many`]) it runs with gradual underflow, as any f32 GEMM.

use std::arch::x86_64::*;

use super::{MR, NR};

/// `rows` (≤ `MR`) rows of one block of `a` (f32: for each pair, `MR` rows of its even and odd
/// element) times the planes `hi`, `lo` of one panel block, accumulated into `c` (`rows × NR`):
/// continuing `c`'s sum (the bf16 product's order), or, `FRESH`, summed from zero and then added
/// to `c` (the f32 product's two-level sum).
///
/// # Safety
/// The CPU must have avx512f, and for the bf16 product a [`super::mxcsr::FlushDenormals`] must be
/// held on this thread; `a` holds
/// `pairs · MR · 2` floats, `hi` and `lo` `pairs · NR` floats and `c` `rows · NR` floats.
pub unsafe fn block<const FRESH: bool>(
    a: &[f32],
    hi: &[f32],
    lo: &[f32],
    pairs: usize,
    c: &mut [f32],
    rows: usize,
) {
    assert!(rows <= MR && c.len() >= rows * NR);
    assert!(hi.len() >= pairs * NR && lo.len() >= pairs * NR);
    assert!(a.len() >= pairs * MR * 2);
    // SAFETY: bounds asserted above; the feature and the MXCSR guaranteed by the caller.
    unsafe {
        match rows {
            1 => kernel::<1, FRESH>(a, hi, lo, pairs, c),
            2 => kernel::<2, FRESH>(a, hi, lo, pairs, c),
            3 => kernel::<3, FRESH>(a, hi, lo, pairs, c),
            4 => kernel::<4, FRESH>(a, hi, lo, pairs, c),
            5 => kernel::<5, FRESH>(a, hi, lo, pairs, c),
            6 => kernel::<6, FRESH>(a, hi, lo, pairs, c),
            _ => {}
        }
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn kernel<const R: usize, const FRESH: bool>(
    a: &[f32],
    hi: &[f32],
    lo: &[f32],
    pairs: usize,
    c: &mut [f32],
) {
    let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
    // SAFETY: every pointer stays inside the slices whose lengths `block` checked.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        // A fresh block sums from zero and adds its sum to `c` at the end; otherwise the block
        // continues `c`'s accumulation.
        for (r, acc) in acc.iter_mut().enumerate().filter(|_| !FRESH) {
            for (j, v) in acc.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(c.add(r * NR + 16 * j));
            }
        }
        for p in 0..pairs {
            // The odd (high) halves first, then the even ones: vdpbf16ps's order.
            for (plane, half) in [(hi, 1), (lo, 0)] {
                let wp = plane.add(p * NR);
                let w = [
                    _mm512_loadu_ps(wp),
                    _mm512_loadu_ps(wp.add(16)),
                    _mm512_loadu_ps(wp.add(32)),
                    _mm512_loadu_ps(wp.add(48)),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*a.add((p * MR + r) * 2 + half));
                    for (v, &w) in acc.iter_mut().zip(&w) {
                        *v = _mm512_fmadd_ps(w, x, *v);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                let at = c.add(r * NR + 16 * j);
                _mm512_storeu_ps(
                    at,
                    if FRESH {
                        _mm512_add_ps(_mm512_loadu_ps(at), *v)
                    } else {
                        *v
                    },
                );
            }
        }
    }
}
