//! The f32 and f64 microkernels on AVX2 + FMA (256-bit vectors, 16 registers), for CPUs without
//! AVX-512F (AMD Zen 1–3, Intel client cores): the same arithmetic as [`super::avx512_fma`] and
//! [`super::avx512_f64`], one output element after another in the same order — per pair the odd
//! product fused into the accumulator, then the even one — so their results are bit-identical.
//!
//! A call covers `MR` = 6 rows of `x` and one strip of the panel: two vectors of columns (16 f32
//! or 8 f64), 12 accumulators — enough independent FMA chains to cover two FMA ports × a 4-cycle
//! latency — plus two weight vectors and one broadcast: 15 of the 16 registers. Like the AVX-512
//! f32 kernel, the f32 one serves the bf16 product too, under a flushing MXCSR.

use std::arch::x86_64::*;

use super::NR;

/// Rows per call.
pub const MR: usize = 6;
/// Columns per call (the strip width of the weight planes): two vectors of f32.
pub const F32_STRIP: usize = 16;
/// Columns per call: two vectors of f64.
pub const F64_STRIP: usize = 8;

/// `rows` rows of one reduction block of `a` (block after block of `MR` rows, each holding, for
/// each pair, its `MR` rows' even and odd element; the last block may be partial) times the strip
/// planes `hi`, `lo` (`pairs × F32_STRIP` each), accumulated into the strip of `c` (`rows` rows
/// `NR` apart, `F32_STRIP` columns each): continuing `c`'s sum, or, `FRESH`, summed from zero and
/// then added to `c`. One call sweeps every row block, so that the strip's planes stay in L1 and
/// the loop pays no call per block.
///
/// # Safety
/// The CPU must have avx2 and fma (and, for the bf16 product's numerics, the caller holds a
/// flushing MXCSR).
pub unsafe fn sweep_f32<const FRESH: bool>(
    a: &[f32],
    hi: &[f32],
    lo: &[f32],
    pairs: usize,
    c: &mut [f32],
    rows: usize,
) {
    assert!(a.len() >= rows.div_ceil(MR) * pairs * MR * 2);
    assert!(hi.len() >= pairs * F32_STRIP && lo.len() >= pairs * F32_STRIP);
    assert!(rows == 0 || c.len() >= (rows - 1) * NR + F32_STRIP);
    let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
    let full = rows / MR;
    // SAFETY: bounds asserted above (block `b` reads `a` from `b · pairs · MR · 2` and `c` from
    // row `b · MR`); the features guaranteed by the caller.
    unsafe {
        sweep_f32_full::<FRESH>(a, hi, lo, pairs, c, full);
        let (a, c) = (a.add(full * pairs * MR * 2), c.add(full * MR * NR));
        match rows % MR {
            1 => kernel_f32::<1, FRESH>(a, hi, lo, pairs, c),
            2 => kernel_f32::<2, FRESH>(a, hi, lo, pairs, c),
            3 => kernel_f32::<3, FRESH>(a, hi, lo, pairs, c),
            4 => kernel_f32::<4, FRESH>(a, hi, lo, pairs, c),
            5 => kernel_f32::<5, FRESH>(a, hi, lo, pairs, c),
            _ => {}
        }
    }
}

/// [`sweep_f32`] in f64: strips of `F64_STRIP` columns.
///
/// # Safety
/// The CPU must have avx2 and fma.
pub unsafe fn sweep_f64<const FRESH: bool>(
    a: &[f64],
    hi: &[f64],
    lo: &[f64],
    pairs: usize,
    c: &mut [f64],
    rows: usize,
) {
    assert!(a.len() >= rows.div_ceil(MR) * pairs * MR * 2);
    assert!(hi.len() >= pairs * F64_STRIP && lo.len() >= pairs * F64_STRIP);
    assert!(rows == 0 || c.len() >= (rows - 1) * NR + F64_STRIP);
    let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
    let full = rows / MR;
    // SAFETY: as in `sweep_f32`.
    unsafe {
        sweep_f64_full::<FRESH>(a, hi, lo, pairs, c, full);
        let (a, c) = (a.add(full * pairs * MR * 2), c.add(full * MR * NR));
        match rows % MR {
            1 => kernel_f64::<1, FRESH>(a, hi, lo, pairs, c),
            2 => kernel_f64::<2, FRESH>(a, hi, lo, pairs, c),
            3 => kernel_f64::<3, FRESH>(a, hi, lo, pairs, c),
            4 => kernel_f64::<4, FRESH>(a, hi, lo, pairs, c),
            5 => kernel_f64::<5, FRESH>(a, hi, lo, pairs, c),
            _ => {}
        }
    }
}

/// `blocks` full row blocks of [`sweep_f32`], each fetching the next one's rows of `c` ahead (they
/// are read at its end: in flight meanwhile, not stalling it).
#[target_feature(enable = "avx2,fma")]
unsafe fn sweep_f32_full<const FRESH: bool>(
    a: *const f32,
    hi: *const f32,
    lo: *const f32,
    pairs: usize,
    c: *mut f32,
    blocks: usize,
) {
    for b in 0..blocks {
        // SAFETY: inside the slices `sweep_f32` checked; a prefetch of any address is harmless.
        unsafe {
            let c = c.add(b * MR * NR);
            for r in 0..MR {
                _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add((MR + r) * NR) as *const i8);
            }
            kernel_f32::<MR, FRESH>(a.add(b * pairs * MR * 2), hi, lo, pairs, c);
        }
    }
}

/// [`sweep_f32_full`] in f64 (a strip's row is one 64-byte line).
#[target_feature(enable = "avx2,fma")]
unsafe fn sweep_f64_full<const FRESH: bool>(
    a: *const f64,
    hi: *const f64,
    lo: *const f64,
    pairs: usize,
    c: *mut f64,
    blocks: usize,
) {
    for b in 0..blocks {
        // SAFETY: as in `sweep_f32_full`.
        unsafe {
            let c = c.add(b * MR * NR);
            for r in 0..MR {
                _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add((MR + r) * NR) as *const i8);
            }
            kernel_f64::<MR, FRESH>(a.add(b * pairs * MR * 2), hi, lo, pairs, c);
        }
    }
}

/// One row block of [`sweep_f32`]: `R` rows.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn kernel_f32<const R: usize, const FRESH: bool>(
    a: *const f32,
    hi: *const f32,
    lo: *const f32,
    pairs: usize,
    c: *mut f32,
) {
    // SAFETY: every pointer stays inside the slices whose lengths `sweep_f32` checked.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        // A fresh block sums from zero and adds its sum to `c` at the end; otherwise the block
        // continues `c`'s accumulation.
        for (r, acc) in acc.iter_mut().enumerate().filter(|_| !FRESH) {
            for (j, v) in acc.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(c.add(r * NR + 8 * j));
            }
        }
        for p in 0..pairs {
            // The next row block's operand, read at the same pace as this one's: it comes from
            // L2 or L3, and the hardware prefetcher restarts at every block.
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add((pairs + p) * MR * 2) as *const i8);
            // The odd (high) halves first, then the even ones.
            for (plane, half) in [(hi, 1), (lo, 0)] {
                let wp = plane.add(p * F32_STRIP);
                let w = [_mm256_loadu_ps(wp), _mm256_loadu_ps(wp.add(8))];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*a.add((p * MR + r) * 2 + half));
                    for (v, &w) in acc.iter_mut().zip(&w) {
                        *v = _mm256_fmadd_ps(w, x, *v);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                let at = c.add(r * NR + 8 * j);
                _mm256_storeu_ps(
                    at,
                    if FRESH {
                        _mm256_add_ps(_mm256_loadu_ps(at), *v)
                    } else {
                        *v
                    },
                );
            }
        }
    }
}

/// One row block of [`sweep_f64`]: `R` rows.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn kernel_f64<const R: usize, const FRESH: bool>(
    a: *const f64,
    hi: *const f64,
    lo: *const f64,
    pairs: usize,
    c: *mut f64,
) {
    // SAFETY: every pointer stays inside the slices whose lengths `sweep_f64` checked.
    unsafe {
        let mut acc = [[_mm256_setzero_pd(); 2]; R];
        for (r, acc) in acc.iter_mut().enumerate().filter(|_| !FRESH) {
            for (j, v) in acc.iter_mut().enumerate() {
                *v = _mm256_loadu_pd(c.add(r * NR + 4 * j));
            }
        }
        for p in 0..pairs {
            // As in `kernel_f32`; a pair of f64 rows is 1.5 lines.
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add((pairs + p) * MR * 2) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add((pairs + p) * MR * 2 + 8) as *const i8);
            for (plane, half) in [(hi, 1), (lo, 0)] {
                let wp = plane.add(p * F64_STRIP);
                let w = [_mm256_loadu_pd(wp), _mm256_loadu_pd(wp.add(4))];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_sd(&*a.add((p * MR + r) * 2 + half));
                    for (v, &w) in acc.iter_mut().zip(&w) {
                        *v = _mm256_fmadd_pd(w, x, *v);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                let at = c.add(r * NR + 4 * j);
                _mm256_storeu_pd(
                    at,
                    if FRESH {
                        _mm256_add_pd(_mm256_loadu_pd(at), *v)
                    } else {
                        *v
                    },
                );
            }
        }
    }
}
