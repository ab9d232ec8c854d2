//! A panel block of the weight converted to the planes the FMA microkernels read.

use super::{NR, WideFloat, WideKernel};

/// One panel block of the weight split into two planes of `E`, `pairs × NR` each: the high (odd)
/// halves and the low (even) halves of its pairs, each plane strip after strip (`strip` columns
/// of every pair, then the next `strip` columns), so that a microkernel call reads one contiguous
/// strip. Reused from block to block; 64-byte aligned, so that no vector load of a strip straddles
/// two cache lines.
#[derive(Default)]
pub(super) struct Planes<E> {
    buf: Vec<E>,
    at: usize,
    pairs: usize,
}

impl<E: WideFloat> Planes<E> {
    pub(super) fn split(&mut self, kernel: WideKernel, b: &[u32], strip: usize) {
        let pairs = b.len() / NR;
        let (len, pad) = (2 * pairs * NR, 64 / size_of::<E>());
        if self.buf.len() < len + pad {
            self.buf.resize(len + pad, E::default());
        }
        self.at = self.buf.as_ptr().align_offset(64).min(pad);
        self.pairs = pairs;
        let (hi, lo) = self.buf[self.at..][..len].split_at_mut(pairs * NR);
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU runs the AVX2 kernel, so it has avx2.
            WideKernel::Avx2 => unsafe { split_avx2(b, strip, hi, lo) },
            _ => split(b, strip, hi, lo),
        }
    }

    /// The planes of the last [`Planes::split`]: (high halves, low halves).
    pub(super) fn planes(&self) -> (&[E], &[E]) {
        self.buf[self.at..][..2 * self.pairs * NR].split_at(self.pairs * NR)
    }
}

/// [`Planes::split`]'s conversion: plain indexed loops, which the compiler vectorises (an
/// iterator chain here cost as much as a third of the microkernel's time).
#[inline(always)]
fn split<E: WideFloat>(b: &[u32], strip: usize, hi: &mut [E], lo: &mut [E]) {
    let pairs = b.len() / NR;
    for s in 0..NR / strip {
        let hi = hi[s * pairs * strip..][..pairs * strip].chunks_exact_mut(strip);
        let lo = lo[s * pairs * strip..][..pairs * strip].chunks_exact_mut(strip);
        for ((pair, hi), lo) in b.chunks_exact(NR).zip(hi).zip(lo) {
            for ((&w, h), l) in pair[s * strip..][..strip].iter().zip(hi).zip(lo) {
                *h = E::from_bf16_bits((w >> 16) as u16);
                *l = E::from_bf16_bits(w as u16);
            }
        }
    }
}

/// [`split`] vectorised with AVX2 (the same exact conversions).
///
/// # Safety
/// The CPU must have avx2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn split_avx2<E: WideFloat>(b: &[u32], strip: usize, hi: &mut [E], lo: &mut [E]) {
    split(b, strip, hi, lo)
}
