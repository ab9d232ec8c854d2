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

fma_kernel! {
    /// `rows` (≤ `MR`) rows of one block of `a` (f32: for each pair, `MR` rows of its even and odd
    /// element) times the planes `hi`, `lo` of one panel block, accumulated into `c` (`rows ×
    /// NR`): continuing `c`'s sum (the bf16 product's order), or, `FRESH`, summed from zero and
    /// then added to `c` (the f32 product's two-level sum).
    ///
    /// # Safety
    /// The CPU must have avx512f, and for the bf16 product a [`super::mxcsr::FlushDenormals`]
    /// must be held on this thread; `a` holds `pairs · MR · 2` floats, `hi` and `lo` `pairs · NR`
    /// floats and `c` `rows · NR` floats.
    pub fn block;
    fn kernel, kernel_rows on "avx512f" for f32 {
        ops: _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_add_ps, _mm512_fmadd_ps;
        splat: |x| _mm512_set1_ps(*x);
        lanes: 16, strip: NR, weights: [0, 1, 2, 3], groups: 1;
        prefetch_a: [], row_counts: [1, 2, 3, 4, 5, 6];
    }
}
