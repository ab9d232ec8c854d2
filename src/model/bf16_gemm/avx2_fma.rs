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

/// Defines `$sweep` (a strip's sweep over every row block, checked) on `$full` (the full row
/// blocks, prefetching) and `$kernel` (one row block) for one float type.
macro_rules! avx2_sweep {
    (
        $(#[$doc:meta])*
        $sweep:ident, $full:ident, $kernel:ident, $rows:ident: $t:ty, strip $strip:ident {
            $($kernel_args:tt)*
        }
    ) => {
        $(#[$doc])*
        pub unsafe fn $sweep<const FRESH: bool>(
            a: &[$t],
            hi: &[$t],
            lo: &[$t],
            pairs: usize,
            c: &mut [$t],
            rows: usize,
        ) {
            assert!(a.len() >= rows.div_ceil(MR) * pairs * MR * 2);
            assert!(hi.len() >= pairs * $strip && lo.len() >= pairs * $strip);
            assert!(rows == 0 || c.len() >= (rows - 1) * NR + $strip);
            let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
            let full = rows / MR;
            // SAFETY: bounds asserted above (block `b` reads `a` from `b · pairs · MR · 2` and
            // `c` from row `b · MR`); the features guaranteed by the caller.
            unsafe {
                $full::<FRESH>(a, hi, lo, pairs, c, full);
                let (a, c) = (a.add(full * pairs * MR * 2), c.add(full * MR * NR));
                $rows::<FRESH>(rows % MR, a, hi, lo, pairs, c);
            }
        }

        /// `blocks` full row blocks of the sweep, each fetching the next one's rows of `c` ahead
        /// (they are read at its end: in flight meanwhile, not stalling it).
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $full<const FRESH: bool>(
            a: *const $t,
            hi: *const $t,
            lo: *const $t,
            pairs: usize,
            c: *mut $t,
            blocks: usize,
        ) {
            for b in 0..blocks {
                // SAFETY: inside the slices the sweep checked; a prefetch of any address is
                // harmless.
                unsafe {
                    let c = c.add(b * MR * NR);
                    for r in 0..MR {
                        _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add((MR + r) * NR) as *const i8);
                    }
                    $kernel::<MR, FRESH>(a.add(b * pairs * MR * 2), hi, lo, pairs, c);
                }
            }
        }

        fma_kernel! {
            /// One row block of the sweep: `R` rows.
            #[inline]
            fn $kernel, $rows on "avx2,fma" for $t {
                $($kernel_args)*
            }
        }
    };
}

avx2_sweep! {
    /// `rows` rows of one reduction block of `a` (block after block of `MR` rows, each holding,
    /// for each pair, its `MR` rows' even and odd element; the last block may be partial) times
    /// the strip planes `hi`, `lo` (`pairs × F32_STRIP` each), accumulated into the strip of `c`
    /// (`rows` rows `NR` apart, `F32_STRIP` columns each): continuing `c`'s sum, or, `FRESH`,
    /// summed from zero and then added to `c`. One call sweeps every row block, so that the
    /// strip's planes stay in L1 and the loop pays no call per block.
    ///
    /// # Safety
    /// The CPU must have avx2 and fma (and, for the bf16 product's numerics, the caller holds a
    /// flushing MXCSR).
    sweep_f32, sweep_f32_full, kernel_f32, kernel_f32_rows: f32, strip F32_STRIP {
        ops: _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_fmadd_ps;
        splat: |x| _mm256_broadcast_ss(&*x);
        lanes: 8, strip: F32_STRIP, weights: [0, 1], groups: 1;
        prefetch_a: [0], row_counts: [1, 2, 3, 4, 5];
    }
}

avx2_sweep! {
    /// `sweep_f32` in f64: strips of `F64_STRIP` columns.
    ///
    /// # Safety
    /// The CPU must have avx2 and fma.
    sweep_f64, sweep_f64_full, kernel_f64, kernel_f64_rows: f64, strip F64_STRIP {
        ops: _mm256_setzero_pd, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd, _mm256_fmadd_pd;
        splat: |x| _mm256_broadcast_sd(&*x);
        // A pair of f64 rows is 1.5 lines.
        lanes: 4, strip: F64_STRIP, weights: [0, 1], groups: 1;
        prefetch_a: [0, 8], row_counts: [1, 2, 3, 4, 5];
    }
}
