//! The accumulator types of the f32 / f64 products and their dispatch to the microkernels.

use super::{KC_PAIRS, MR, NR, WideKernel};
#[cfg(target_arch = "x86_64")]
use super::{avx2_fma, avx512_f64, avx512_fma};

/// An accumulator type of [`matmul_wide_many`](super::matmul_wide_many) (f32 or f64) and its microkernels.
pub trait WideFloat: bytemuck::Pod + Default + Send + Sync + 'static {
    /// Reduction pairs per block: the block's two planes (`2 · KC · NR` values) stay in L1.
    const KC: usize;
    /// The weight's bf16 bits as this type (exact).
    fn from_bf16_bits(bits: u16) -> Self;
    /// Rows of `x` per call of `kernel`, and columns per call (the width of the planes' strips:
    /// a divisor of `NR`).
    fn shape(kernel: WideKernel) -> (usize, usize);
    /// `rows` rows of one reduction block of `a` (row block after row block of the kernel's rows
    /// per call, [`Blocked::slivers`](super::input::Blocked::slivers)) times the strip planes `hi`, `lo` of `pairs` pairs,
    /// accumulated into the strip of `c` (`rows` rows `NR` apart, a strip's width each):
    /// continuing `c`'s sum, or, `FRESH`, summed from zero and then added to `c`.
    ///
    /// # Safety
    /// The CPU must run `kernel` ([`WideKernel::runs_here`]).
    unsafe fn sweep<const FRESH: bool>(
        kernel: WideKernel,
        a: &[Self],
        hi: &[Self],
        lo: &[Self],
        pairs: usize,
        c: &mut [Self],
        rows: usize,
    );
}

impl WideFloat for f32 {
    const KC: usize = KC_PAIRS;
    #[inline(always)]
    fn from_bf16_bits(bits: u16) -> Self {
        f32::from_bits(u32::from(bits) << 16)
    }
    fn shape(kernel: WideKernel) -> (usize, usize) {
        match kernel {
            WideKernel::Avx512 => (MR, NR),
            #[cfg(target_arch = "x86_64")]
            WideKernel::Avx2 => (avx2_fma::MR, avx2_fma::F32_STRIP),
            #[cfg(not(target_arch = "x86_64"))]
            WideKernel::Avx2 => (MR, NR),
        }
    }
    unsafe fn sweep<const FRESH: bool>(
        kernel: WideKernel,
        a: &[f32],
        hi: &[f32],
        lo: &[f32],
        pairs: usize,
        c: &mut [f32],
        rows: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel's features guaranteed by the caller; the kernels check the bounds.
        unsafe {
            match kernel {
                WideKernel::Avx512 => each_row_block(a, pairs, MR, c, rows, |a, c, r| {
                    avx512_fma::block::<FRESH>(a, hi, lo, pairs, c, r)
                }),
                WideKernel::Avx2 => avx2_fma::sweep_f32::<FRESH>(a, hi, lo, pairs, c, rows),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("no {kernel:?} here: {a:p} {hi:p} {lo:p} {pairs} {c:p} {rows}")
    }
}

impl WideFloat for f64 {
    const KC: usize = KC_PAIRS / 2;
    #[inline(always)]
    fn from_bf16_bits(bits: u16) -> Self {
        f64::from(f32::from_bits(u32::from(bits) << 16))
    }
    fn shape(kernel: WideKernel) -> (usize, usize) {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            WideKernel::Avx512 => (avx512_f64::MR, NR),
            #[cfg(target_arch = "x86_64")]
            WideKernel::Avx2 => (avx2_fma::MR, avx2_fma::F64_STRIP),
            #[cfg(not(target_arch = "x86_64"))]
            _ => (MR, NR),
        }
    }
    unsafe fn sweep<const FRESH: bool>(
        kernel: WideKernel,
        a: &[f64],
        hi: &[f64],
        lo: &[f64],
        pairs: usize,
        c: &mut [f64],
        rows: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel's features guaranteed by the caller; the kernels check the bounds.
        unsafe {
            match kernel {
                WideKernel::Avx512 => {
                    each_row_block(a, pairs, avx512_f64::MR, c, rows, |a, c, r| {
                        avx512_f64::block::<FRESH>(a, hi, lo, pairs, c, r)
                    })
                }
                WideKernel::Avx2 => avx2_fma::sweep_f64::<FRESH>(a, hi, lo, pairs, c, rows),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("no {kernel:?} here: {a:p} {hi:p} {lo:p} {pairs} {c:p} {rows}")
    }
}

/// `f(a, c, r)` for each block of `mr` rows of a [`WideFloat::sweep`] (`r` rows; the last block may
/// be partial): its part of `a` and of `c`. The AVX-512 kernels take one row block per call.
#[cfg(target_arch = "x86_64")]
fn each_row_block<E>(
    a: &[E],
    pairs: usize,
    mr: usize,
    c: &mut [E],
    rows: usize,
    mut f: impl FnMut(&[E], &mut [E], usize),
) {
    for (b, r0) in (0..rows).step_by(mr).enumerate() {
        f(
            &a[b * pairs * mr * 2..],
            &mut c[r0 * NR..],
            mr.min(rows - r0),
        );
    }
}
