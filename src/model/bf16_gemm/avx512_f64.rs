//! The float64 microkernel of [`super::matmul_wide_many`]: f64 FMAs on AVX-512F, weights widened from
//! bf16 (exact). Per output element, pair by pair, the odd product is fused into the accumulator
//! and then the even one, with gradual underflow; each block of pairs is summed on its own and
//! then added to the running sum. Eight f64 lanes per vector, so a row of one
//! panel (`NR` = 64 columns) is eight accumulators; `MR` rows of them leave room for four weight
//! vectors and the broadcast in the 32 registers.

use std::arch::x86_64::*;

use super::NR;

/// Rows per call: 3 × 8 accumulators + 4 weight vectors + 1 broadcast ≤ 32 registers.
pub const MR: usize = 3;

/// `rows` (≤ `MR`) rows of one block of `a` (for each pair, `MR` rows of its even and odd element)
/// times the planes `hi`, `lo` of `pairs` pairs, accumulated into `c` (`rows × NR`): continuing
/// `c`'s sum, or, `FRESH`, summed from zero and then added to `c`.
///
/// # Safety
/// The CPU must have avx512f.
pub unsafe fn block<const FRESH: bool>(
    a: &[f64],
    hi: &[f64],
    lo: &[f64],
    pairs: usize,
    c: &mut [f64],
    rows: usize,
) {
    assert!(rows <= MR && c.len() >= rows * NR && a.len() >= pairs * MR * 2);
    assert!(hi.len() >= pairs * NR && lo.len() >= pairs * NR);
    // SAFETY: bounds asserted above; the feature guaranteed by the caller.
    unsafe {
        match rows {
            1 => kernel::<1, FRESH>(a, hi, lo, pairs, c),
            2 => kernel::<2, FRESH>(a, hi, lo, pairs, c),
            3 => kernel::<3, FRESH>(a, hi, lo, pairs, c),
            _ => {}
        }
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn kernel<const R: usize, const FRESH: bool>(
    a: &[f64],
    hi: &[f64],
    lo: &[f64],
    pairs: usize,
    c: &mut [f64],
) {
    let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
    // SAFETY: every pointer stays inside the slices whose lengths `block` checked.
    unsafe {
        let mut acc = [[_mm512_setzero_pd(); 8]; R];
        // A fresh block sums from zero and adds its sum to `c` at the end; otherwise the block
        // continues `c`'s accumulation.
        for (r, acc) in acc.iter_mut().enumerate().filter(|_| !FRESH) {
            for (j, v) in acc.iter_mut().enumerate() {
                *v = _mm512_loadu_pd(c.add(r * NR + 8 * j));
            }
        }
        for p in 0..pairs {
            // The odd (high) halves first, then the even ones; each in two halves of the panel.
            for (plane, half) in [(hi, 1), (lo, 0)] {
                for quarter in 0..2 {
                    let wp = plane.add(p * NR + 32 * quarter);
                    let w = [
                        _mm512_loadu_pd(wp),
                        _mm512_loadu_pd(wp.add(8)),
                        _mm512_loadu_pd(wp.add(16)),
                        _mm512_loadu_pd(wp.add(24)),
                    ];
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let x = _mm512_set1_pd(*a.add((p * MR + r) * 2 + half));
                        for (v, &w) in acc[4 * quarter..4 * quarter + 4].iter_mut().zip(&w) {
                            *v = _mm512_fmadd_pd(w, x, *v);
                        }
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                let at = c.add(r * NR + 8 * j);
                _mm512_storeu_pd(
                    at,
                    if FRESH {
                        _mm512_add_pd(_mm512_loadu_pd(at), *v)
                    } else {
                        *v
                    },
                );
            }
        }
    }
}
