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

// Eight accumulators a row, loaded against four weight vectors at a time (each half of the
// panel in turn), to leave room in the 32 registers.
fma_kernel! {
    /// `rows` (≤ `MR`) rows of one block of `a` (for each pair, `MR` rows of its even and odd
    /// element) times the planes `hi`, `lo` of `pairs` pairs, accumulated into `c` (`rows × NR`):
    /// continuing `c`'s sum, or, `FRESH`, summed from zero and then added to `c`.
    ///
    /// # Safety
    /// The CPU must have avx512f.
    pub fn block;
    fn kernel, kernel_rows on "avx512f" for f64 {
        ops: _mm512_setzero_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_add_pd, _mm512_fmadd_pd;
        splat: |x| _mm512_set1_pd(*x);
        lanes: 8, strip: NR, weights: [0, 1, 2, 3], groups: 2;
        prefetch_a: [], row_counts: [1, 2, 3];
    }
}
