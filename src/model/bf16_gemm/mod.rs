//! `y = x · wᵀ` for bf16 `x` `[M, K]` and bf16 `w` `[N, K]` on the CPU, with the numerics of
//! PyTorch's CPU bf16 matmul (oneDNN on an `avx512_bf16` machine): bf16 operands, products and
//! sums in f32, the f32 result rounded to bf16 (round to nearest even) once at the end.
//!
//! candle 0.11's CPU matmul has no bf16 kernel: it widens both operands to f32 on every call and
//! runs its f32 GEMM, so a bf16 forward costs what an f32 one does. Here the weight is packed
//! once (when the layer is built) and the product runs on one of three microkernels.
//!
//! The accumulation order is fixed and the same on every machine and every kernel: for each
//! output element, over the pairs `(2p, 2p + 1)` of the reduction index in increasing `p`, the
//! odd product is fused into the f32 accumulator, then the even one, each rounded once (an FMA),
//! with `vdpbf16ps`'s denormal handling: denormal inputs read as zero, denormal results flushed
//! to zero. [`portable`] spells that out; [`avx512_bf16`] runs it on `vdpbf16ps`, [`avx512_fma`]
//! and [`avx2_fma`] on f32 FMAs under a flushing MXCSR ([`mxcsr`]). All four give the same bits
//! (`tests` check them against each other on fresh random inputs, and against an f64 product), so
//! which one runs — the fastest on this CPU, timed once per process ([`Kernel::chosen`]) —
//! changes only the speed.
//!
//! The f32 and f64 products on bf16 weights ([`matmul_wide`]) run on the same FMA kernels with
//! gradual underflow, on AVX-512F or AVX2 + FMA ([`WideKernel`]), again with the same bits on
//! either.
//!
//! Not AMX: Intel's `tdpbf16ps` sums its products in an order and precision of its own (on a
//! Xeon with AMX it matched none of the sequential FMA orders bit for bit), so it cannot give
//! these bits.

#[cfg(target_arch = "x86_64")]
mod avx2_fma;
#[cfg(target_arch = "x86_64")]
mod avx512_bf16;
#[cfg(target_arch = "x86_64")]
mod avx512_f64;
#[cfg(target_arch = "x86_64")]
mod avx512_fma;
#[cfg(target_arch = "x86_64")]
mod mxcsr;
mod portable;

use std::borrow::Cow;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use half::bf16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Output columns per packed panel: four 16-lane f32 vectors.
const NR: usize = 64;
/// Rows of `x` per microkernel call (6 × 4 accumulators + 4 weight vectors + 1 broadcast ≤ 32).
const MR: usize = 6;
/// Reduction pairs per block: one panel block is `KC_PAIRS · NR · 4` bytes = 16 KiB (L1).
const KC_PAIRS: usize = 64;
/// Rows of `x` per task, a multiple of every kernel's rows per call (6 and 3): a task's
/// accumulators (`MC × NR`, 129 KiB in f32) stay in L2.
const MC: usize = 86 * MR;

/// A `[N, K]` bf16 weight packed for [`matmul`]: panels of `NR` output columns; within a panel,
/// for each reduction pair `p`, `NR` words holding `(w[n, 2p], w[n, 2p + 1])` (low, high half).
/// Columns past `N` and the odd `K`'s last high half are zero.
pub struct PackedBf16 {
    n: usize,
    k: usize,
    pairs: usize,
    data: Vec<u32>,
}

impl PackedBf16 {
    /// Packs `w` (`n` rows of `k`, row-major).
    pub fn pack(w: &[bf16], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "weight of {n} × {k}");
        Self::pack_with(n, k, |i| w[i].to_bits())
    }

    /// Packs the little-endian bf16 bytes `w` (`n` rows of `k`, row-major; any alignment).
    pub fn pack_le_bytes(w: &[u8], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), 2 * n * k, "weight of {n} × {k}");
        Self::pack_with(n, k, |i| u16::from_le_bytes([w[2 * i], w[2 * i + 1]]))
    }

    /// Packs the weight whose element `i` (row-major) has the bf16 bits `bits(i)`.
    fn pack_with(n: usize, k: usize, bits: impl Fn(usize) -> u16 + Sync) -> Self {
        let pairs = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        let mut data = vec![0u32; panels * pairs * NR];
        data.par_chunks_mut(pairs * NR)
            .enumerate()
            .for_each(|(panel, out)| {
                for col in 0..NR.min(n - panel * NR) {
                    let row = (panel * NR + col) * k;
                    for p in 0..pairs {
                        let lo = bits(row + 2 * p);
                        let hi = if 2 * p + 1 < k {
                            bits(row + 2 * p + 1)
                        } else {
                            0
                        };
                        out[p * NR + col] = u32::from(lo) | (u32::from(hi) << 16);
                    }
                }
            });
        PackedBf16 { n, k, pairs, data }
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    fn panel(&self, i: usize) -> &[u32] {
        &self.data[i * self.pairs * NR..][..self.pairs * NR]
    }
}

/// A microkernel of the bf16 GEMM. All of them give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Portable,
    /// `vdpbf16ps` (avx512f + avx512bf16).
    Avx512Bf16,
    /// f32 FMAs on AVX-512F under a flushing MXCSR.
    Avx512Fma,
    /// f32 FMAs on AVX2 + FMA under a flushing MXCSR.
    Avx2Fma,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Avx512Bf16 => "avx512-bf16",
            Kernel::Avx512Fma => "avx512-fma",
            Kernel::Avx2Fma => "avx2-fma",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn runs_here(self) -> bool {
        match self {
            Kernel::Portable => true,
            Kernel::Avx512Fma => WideKernel::Avx512.runs_here(),
            Kernel::Avx2Fma => WideKernel::Avx2.runs_here(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx512f") && has!("avx512bf16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512Bf16 => false,
        }
    }

    /// The wide kernel an FMA kernel runs on.
    fn fma(self) -> Option<WideKernel> {
        match self {
            Kernel::Avx512Fma => Some(WideKernel::Avx512),
            Kernel::Avx2Fma => Some(WideKernel::Avx2),
            Kernel::Portable | Kernel::Avx512Bf16 => None,
        }
    }

    /// The kernels this CPU can run, the portable one first.
    pub fn available() -> Vec<Kernel> {
        [
            Kernel::Portable,
            Kernel::Avx2Fma,
            Kernel::Avx512Fma,
            Kernel::Avx512Bf16,
        ]
        .into_iter()
        .filter(|k| k.runs_here())
        .collect()
    }

    /// The kernel [`matmul`] uses: of the machine kernels this CPU has, the one that ran a
    /// small product fastest (timed once per process, a few milliseconds); the portable one
    /// where there is none.
    pub fn chosen() -> Kernel {
        static CHOSEN: OnceLock<Kernel> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let machine: Vec<Kernel> = Kernel::available()
                .into_iter()
                .filter(|&k| k != Kernel::Portable)
                .collect();
            match machine.as_slice() {
                [] => Kernel::Portable,
                [only] => *only,
                _ => machine
                    .into_iter()
                    .min_by_key(|&k| k.probe_time())
                    .unwrap_or(Kernel::Portable),
            }
        })
    }

    /// The best of five runs of a 192 × 512 × 1024 product (≈ 1 ms): enough rows and panels that,
    /// as in a forward pass, preparing the operands is a small part of the time.
    fn probe_time(self) -> Duration {
        let (m, n, k) = (32 * MR, 8 * NR, 1024);
        let x: Vec<bf16> = (0..m * k)
            .map(|i| bf16::from_f32(((i * 7919) % 257) as f32 / 257.0 - 0.5))
            .collect();
        let w: Vec<bf16> = (0..n * k)
            .map(|i| bf16::from_f32(((i * 104_729) % 263) as f32 / 2630.0 - 0.05))
            .collect();
        let w = PackedBf16::pack(&w, n, k);
        (0..6)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(matmul_with(self, &x, m, &w));
                t.elapsed()
            })
            .skip(1)
            .min()
            .unwrap_or(Duration::MAX)
    }
}

/// `x · wᵀ` for `x` `[m, k]` row-major, rounded to bf16: `[m, n]` row-major.
pub fn matmul(x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    matmul_with(Kernel::chosen(), x, m, w)
}

/// [`matmul`] on `kernel`, which must run here ([`Kernel::runs_here`]; else the portable one
/// runs).
pub fn matmul_with(kernel: Kernel, x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    assert_eq!(x.len(), m * w.k, "input of {m} × {}", w.k);
    let kernel = if kernel.runs_here() {
        kernel
    } else {
        Kernel::Portable
    };
    match kernel.fma() {
        Some(wide) => {
            let mr = f32::shape(wide).0;
            let a = Blocked::new(x, w.k, mr, f32::KC, |v| v.to_f32());
            let task = |planes: &mut Planes<f32>, panel, first_row, rows, c: &mut [f32]| {
                #[cfg(target_arch = "x86_64")]
                let _flushing = mxcsr::FlushDenormals::new();
                wide_task::<f32, false>(wide, &a, w.panel(panel), first_row, rows, planes, c);
            };
            tiled(
                m,
                rows_per_task::<f32>(),
                w,
                Planes::default,
                task,
                bf16::from_f32,
            )
        }
        None => {
            let a = as_pairs(x, w.k);
            let task = |_: &mut (), panel, first_row, rows, c: &mut [f32]| {
                pairs_task(kernel, &a, w.panel(panel), w.pairs, first_row, rows, c)
            };
            tiled(m, MC, w, || (), task, bf16::from_f32)
        }
    }
}

/// Rows of `x` per task of a product on the FMA kernels with `E` accumulators: few enough that
/// one reduction block of them, the next block (prefetched meanwhile, [`wide_task`]) and their
/// accumulators stay in L2 (each strip's sweep reads the block and the accumulators again: 306
/// rows in f32, 252 in f64); a multiple of every kernel's rows per call (6 and 3).
fn rows_per_task<E: WideFloat>() -> usize {
    let bytes_per_row = (2 * 2 * E::KC + NR) * size_of::<E>();
    ((384 << 10) / bytes_per_row / MR * MR).min(MC)
}

/// A machine microkernel of the f32 / f64 products ([`matmul_wide`]) and of the FMA kernels of
/// the bf16 product. Both give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideKernel {
    /// AVX-512F: 512-bit vectors, 32 registers.
    Avx512,
    /// AVX2 + FMA: 256-bit vectors, 16 registers.
    Avx2,
}

impl WideKernel {
    pub fn name(self) -> &'static str {
        match self {
            WideKernel::Avx512 => "avx512",
            WideKernel::Avx2 => "avx2-fma",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                WideKernel::Avx512 => has!("avx512f"),
                WideKernel::Avx2 => has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The kernels this CPU can run, the widest first.
    pub fn available() -> Vec<WideKernel> {
        [WideKernel::Avx512, WideKernel::Avx2]
            .into_iter()
            .filter(|k| k.runs_here())
            .collect()
    }

    /// The kernel [`matmul_wide`] uses: the widest this CPU has, `None` where it has neither.
    pub fn chosen() -> Option<WideKernel> {
        WideKernel::available().first().copied()
    }
}

/// Whether this CPU runs [`matmul_wide`]: it has AVX-512F or AVX2 + FMA.
pub fn has_wide() -> bool {
    WideKernel::chosen().is_some()
}

/// `x · wᵀ` for f32 or f64 `x` `[m, k]` row-major and the bf16 weight `w` (its values exact in
/// either type), in `x`'s type, with gradual underflow (no flushing): per output element, the
/// reduction in blocks of `E::KC` pairs in order; within a block, from zero, for each pair the odd
/// product fused into the block's sum, then the even one (one FMA each); each block's sum then
/// added to the running sum (one rounding). The two-level sum keeps the rounding error of long
/// reductions (k = 17408 in a 27B MLP) at about that of a blocked GEMM such as candle's, where
/// one running sum had 2.5× the f32 error. Only where [`has_wide`] (else `None`): the portable
/// alternative is candle's matmul.
pub fn matmul_wide<E: WideFloat>(x: &[E], m: usize, w: &PackedBf16) -> Option<Vec<E>> {
    matmul_wide_with(WideKernel::chosen()?, x, m, w)
}

/// [`matmul_wide`] on `kernel`; `None` where this CPU cannot run it.
pub fn matmul_wide_with<E: WideFloat>(
    kernel: WideKernel,
    x: &[E],
    m: usize,
    w: &PackedBf16,
) -> Option<Vec<E>> {
    assert_eq!(x.len(), m * w.k, "input of {m} × {}", w.k);
    if !kernel.runs_here() {
        return None;
    }
    let a = Blocked::new(x, w.k, E::shape(kernel).0, E::KC, |&v| v);
    Some(tiled(
        m,
        rows_per_task::<E>(),
        w,
        Planes::default,
        |planes, panel, first_row, rows, c| {
            wide_task::<E, true>(kernel, &a, w.panel(panel), first_row, rows, planes, c)
        },
        |v| v,
    ))
}

/// An accumulator type of [`matmul_wide`] (f32 or f64) and its microkernels.
pub trait WideFloat: Copy + Default + Send + Sync + 'static {
    /// Reduction pairs per block: the block's two planes (`2 · KC · NR` values) stay in L1.
    const KC: usize;
    /// The weight's bf16 bits as this type (exact).
    fn from_bf16_bits(bits: u16) -> Self;
    /// Rows of `x` per call of `kernel`, and columns per call (the width of the planes' strips:
    /// a divisor of `NR`).
    fn shape(kernel: WideKernel) -> (usize, usize);
    /// `rows` rows of one reduction block of `a` (row block after row block of the kernel's rows
    /// per call, [`Blocked::slivers`]) times the strip planes `hi`, `lo` of `pairs` pairs,
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

/// One panel block of the weight split into two planes of `E`, `pairs × NR` each: the high (odd)
/// halves and the low (even) halves of its pairs, each plane strip after strip (`strip` columns
/// of every pair, then the next `strip` columns), so that a microkernel call reads one contiguous
/// strip. Reused from block to block; 64-byte aligned, so that no vector load of a strip straddles
/// two cache lines.
#[derive(Default)]
struct Planes<E> {
    buf: Vec<E>,
    at: usize,
    pairs: usize,
}

impl<E: WideFloat> Planes<E> {
    fn split(&mut self, kernel: WideKernel, b: &[u32], strip: usize) {
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
    fn planes(&self) -> (&[E], &[E]) {
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

/// Asks the CPU to bring `data` into its caches ahead of its use: a hint, with no effect on any
/// value.
#[inline]
fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks((64 / size_of::<T>()).max(1)) {
        // SAFETY: a prefetch reads nothing architecturally; the address is inside `data`.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Asks the CPU to bring `data` into L2 (and the outer levels) ahead of its use.
#[inline]
fn prefetch_l2<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks((64 / size_of::<T>()).max(1)) {
        // SAFETY: as in `prefetch`.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Row blocks per sweep of [`wide_task`]: between two sweeps it prefetches a share of the next
/// reduction block's input, so that the share arrives at the pace the block is computed.
const SWEEP_BLOCKS: usize = 2;

/// One task of a wide (or FMA-kernel bf16) product on `kernel`: rows `first_row..first_row +
/// rows` of `a` (blocked in the kernel's rows per call and `E::KC` pairs) times panel `b`,
/// accumulated into `c` — in one running sum per element (the bf16 product), or, `FRESH`, block
/// by block (`E::KC` pairs) with each block's sum added to the running one (the wide products).
/// Per block, strip by strip (a strip's planes stay in L1), every row block of the task, in sweeps
/// of [`SWEEP_BLOCKS`] row blocks.
///
/// The next block's input (one slab, read once from L3 or memory and then once per strip from
/// L2) is prefetched in equal shares between the sweeps of this block: fetched on demand, the
/// first strip's sweep alone would wait for the whole slab, at several times the average rate.
fn wide_task<E: WideFloat, const FRESH: bool>(
    kernel: WideKernel,
    a: &Blocked<E>,
    b: &[u32],
    first_row: usize,
    rows: usize,
    planes: &mut Planes<E>,
    c: &mut [E],
) {
    let (mr, strip) = E::shape(kernel);
    debug_assert!(a.mr == mr && a.kc == E::KC && first_row.is_multiple_of(mr));
    let (first_block, blocks) = (first_row / mr, rows.div_ceil(mr));
    let sweeps = blocks.div_ceil(SWEEP_BLOCKS);
    for p0 in (0..a.pairs).step_by(E::KC) {
        let kc = E::KC.min(a.pairs - p0);
        planes.split(kernel, &b[p0 * NR..(p0 + kc) * NR], strip);
        let (hi, lo) = planes.planes();
        // The next block's weight words, a share before each strip's sweep: they come from
        // memory (each is read once per task), and the next split would otherwise wait for them.
        let next = &b[(p0 + kc) * NR..b.len().min((p0 + kc + E::KC) * NR)];
        let share = next.len().div_ceil(NR / strip).max(1);
        let mut next = next.chunks(share);
        // The next block's input, a share before each sweep.
        let next_a = if p0 + kc < a.pairs {
            a.slivers(p0 + kc, first_block, blocks)
        } else {
            &[]
        };
        let share_a = next_a.len().div_ceil(NR / strip * sweeps).max(1);
        let mut next_a = next_a.chunks(share_a);
        let a = a.slivers(p0, first_block, blocks);
        let sliver = a.len() / blocks.max(1);
        for s in 0..NR / strip {
            prefetch(next.next().unwrap_or_default());
            let hi = &hi[s * kc * strip..][..kc * strip];
            let lo = &lo[s * kc * strip..][..kc * strip];
            for r0 in (0..rows).step_by(SWEEP_BLOCKS * mr) {
                prefetch_l2(next_a.next().unwrap_or_default());
                let a = &a[r0 / mr * sliver..];
                let c = &mut c[r0 * NR + s * strip..];
                let rows = (SWEEP_BLOCKS * mr).min(rows - r0);
                // SAFETY: every caller checked that the CPU runs `kernel`; the kernels check
                // the bounds.
                unsafe { E::sweep::<FRESH>(kernel, a, hi, lo, kc, c, rows) }
            }
        }
    }
}

/// One task of a bf16 product on bf16 pairs (portable or `vdpbf16ps`): rows
/// `first_row..first_row + rows` of `a` times panel `b`, accumulated into `c`.
fn pairs_task(
    kernel: Kernel,
    a: &[u32],
    b: &[u32],
    pairs: usize,
    first_row: usize,
    rows: usize,
    c: &mut [f32],
) {
    for p0 in (0..pairs).step_by(KC_PAIRS) {
        let kc = KC_PAIRS.min(pairs - p0);
        let b = &b[p0 * NR..(p0 + kc) * NR];
        for r0 in (0..rows).step_by(MR) {
            let r = MR.min(rows - r0);
            let a = &a[(first_row + r0) * pairs + p0..];
            let c = &mut c[r0 * NR..(r0 + r) * NR];
            match kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512Bf16 => {
                    // SAFETY: the CPU has avx512f and avx512bf16 (`matmul_with` checked);
                    // `block` checks the slice bounds.
                    unsafe { avx512_bf16::block(a, pairs, b, kc, c, r) }
                }
                _ => portable::block(a, pairs, b, kc, c, r),
            }
        }
    }
}

/// Splits an `m × n` product into tasks of (up to `mc` rows) × (one panel of `NR` columns) and
/// runs them in parallel: `task(scratch, panel, first_row, rows, c)` accumulates into a zeroed
/// per-thread tile `c` (`rows × NR`), which `finish` turns into output values written straight
/// into the task's part of the output. No `m × n` accumulator buffer is ever allocated.
fn tiled<Acc, Out, S>(
    m: usize,
    mc: usize,
    w: &PackedBf16,
    scratch: impl Fn() -> S + Send + Sync,
    task: impl Fn(&mut S, usize, usize, usize, &mut [Acc]) + Send + Sync,
    finish: impl Fn(Acc) -> Out + Send + Sync,
) -> Vec<Out>
where
    Acc: Copy + Default + Send + Sync,
    Out: Copy + Default + Send + Sync,
{
    let n = w.n;
    let mut y = vec![Out::default(); m * n];
    if m == 0 || n == 0 {
        return y;
    }
    let panels = n.div_ceil(NR);
    // As many chunks as `mc` rows need, of equal size (a multiple of every kernel's rows per
    // call): no short last chunk that pays a whole task's weight conversion for a few rows.
    let mc = m.div_ceil(m.div_ceil(mc)).next_multiple_of(MR);
    let out = Disjoint(y.as_mut_ptr());
    // Task t covers panel t % panels of row chunk t / panels. Each worker takes the next task in
    // order, so that the tasks running at the same time share their rows of `x` (read from L3 or
    // memory once for all of them). rayon's own split of a range would run the chunks side by side,
    // each streamed by one worker: at 27B's down_proj, 2 × 18 MB in f32 or 2 × 24 MB in f64,
    // more than an L3 holds.
    let tasks = panels * m.div_ceil(mc);
    let next = AtomicUsize::new(0);
    let workers = rayon::current_num_threads().min(tasks);
    (0..workers).into_par_iter().for_each(|_| {
        let (mut scratch, mut c) = (scratch(), vec![Acc::default(); mc * NR]);
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                break;
            }
            let (panel, first_row) = (t % panels, t / panels * mc);
            let rows = mc.min(m - first_row);
            let c = &mut c[..rows * NR];
            c.fill(Acc::default());
            task(&mut scratch, panel, first_row, rows, c);
            let cols = NR.min(n - panel * NR);
            for (r, c) in c.chunks_exact(NR).enumerate() {
                // SAFETY: rows `first_row..first_row + rows` × columns `panel · NR ..
                // panel · NR + cols` lie inside `y` (`m × n`), and task t alone writes them.
                let y = unsafe { out.slice((first_row + r) * n + panel * NR, cols) };
                for (y, &v) in y.iter_mut().zip(c) {
                    *y = finish(v);
                }
            }
        }
    });
    y
}

/// The output of [`tiled`], shared by its tasks, each of which writes its own elements only.
struct Disjoint<T>(*mut T);

// SAFETY: the tasks write disjoint elements ([`Disjoint::slice`]'s contract).
unsafe impl<T: Send> Send for Disjoint<T> {}
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    /// `len` elements from `at`.
    ///
    /// # Safety
    /// They lie inside the buffer, and no other live slice covers any of them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}

/// `x` (`[m, k]` row-major) as words of bf16 pairs, one row after another: the bf16 slice itself
/// when `k` is even and the slice is 4-byte aligned (the common case: no copy), else a copy in
/// which an odd `k` gets a zero high half at the end of each row.
fn as_pairs(x: &[bf16], k: usize) -> Cow<'_, [u32]> {
    let bits: &[u16] = x.reinterpret_cast();
    // A word holds (element 2p, element 2p + 1) as (low, high) half only on a little-endian CPU.
    if k.is_multiple_of(2)
        && cfg!(target_endian = "little")
        && let Ok(words) = bytemuck::try_cast_slice::<u16, u32>(bits)
    {
        return Cow::Borrowed(words);
    }
    Cow::Owned(
        bits.par_chunks_exact(k)
            .flat_map_iter(|row| {
                row.chunks(2)
                    .map(|p| u32::from(p[0]) | (u32::from(p.get(1).copied().unwrap_or(0)) << 16))
            })
            .collect(),
    )
}

/// `x` (`[m, k]` row-major) converted by `widen`, laid out in the order the microkernel calls
/// read it: slab after slab of `kc` pairs (one reduction block; the last one shorter), and within
/// a slab, block after block of `mr` rows, each holding, for each of the slab's pairs in turn, the
/// pair's two elements of the block's rows (rows past `m` and an odd `k`'s last high half are
/// zero). A task's reads for one reduction block are then one sequential stream.
struct Blocked<E> {
    data: Vec<E>,
    mr: usize,
    kc: usize,
    pairs: usize,
    blocks: usize,
}

impl<E: Copy + Default + Send> Blocked<E> {
    fn new<T: Sync>(
        x: &[T],
        k: usize,
        mr: usize,
        kc: usize,
        widen: impl Fn(&T) -> E + Sync,
    ) -> Self {
        let pairs = k.div_ceil(2);
        let m = x.len() / k.max(1);
        let blocks = m.div_ceil(mr);
        let mut data = vec![E::default(); blocks * mr * 2 * pairs];
        data.par_chunks_mut((blocks * mr * 2 * kc).max(1))
            .enumerate()
            .for_each(|(q, slab)| {
                let (p0, width) = (q * kc, kc.min(pairs - q * kc));
                for (b, block) in slab.chunks_exact_mut(width * mr * 2).enumerate() {
                    let rows = mr.min(m - b * mr);
                    // Written in order (the block's rows read side by side).
                    for (p, out) in block.chunks_exact_mut(mr * 2).enumerate() {
                        let l = 2 * (p0 + p);
                        for (r, out) in out.chunks_exact_mut(2).take(rows).enumerate() {
                            let row = &x[(b * mr + r) * k..][..k];
                            out[0] = widen(&row[l]);
                            if l + 1 < k {
                                out[1] = widen(&row[l + 1]);
                            }
                        }
                    }
                }
            });
        Blocked {
            data,
            mr,
            kc,
            pairs,
            blocks,
        }
    }

    /// Row blocks `first..first + count`'s part of the reduction block that starts at pair `p0`.
    fn slivers(&self, p0: usize, first: usize, count: usize) -> &[E] {
        let sliver = self.kc.min(self.pairs - p0) * self.mr * 2;
        let slab = p0 * self.mr * 2 * self.blocks;
        &self.data[slab + first * sliver..][..count * sliver]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testdata::SplitMix;

    fn random(rng: &mut SplitMix, len: usize, scale: f64) -> Vec<bf16> {
        (0..len)
            .map(|_| bf16::from_f64(rng.normal() * scale))
            .collect()
    }

    /// Shapes with every remainder: rows not a multiple of MR, columns not of NR, odd K, K across
    /// several reduction blocks.
    const SHAPES: [(usize, usize, usize); 6] = [
        (1, 1, 1),
        (7, 65, 129),
        (13, 130, 300),
        (6, 64, 128),
        (20, 200, 1001),
        // more rows than one task takes (MC)
        (MC + 37, 70, 36),
    ];

    #[test]
    fn the_product_is_within_f32_accumulation_and_one_bf16_rounding_of_f64() {
        let mut rng = SplitMix::new(0x6e_4d_12);
        for (m, n, k) in SHAPES {
            let x = random(&mut rng, m * k, 1.0);
            let w = random(&mut rng, n * k, 0.05);
            let y = matmul(&x, m, &PackedBf16::pack(&w, n, k));
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut abs) = (0.0f64, 0.0f64);
                    for l in 0..k {
                        let p = x[i * k + l].to_f64() * w[j * k + l].to_f64();
                        exact += p;
                        abs += p.abs();
                    }
                    // k f32 roundings of partial sums bounded by Σ|p|, then one bf16 rounding.
                    let acc = k as f64 * f64::from(f32::EPSILON) * abs;
                    let bound = acc * (1.0 + 2f64.powi(-8)) + exact.abs() * 2f64.powi(-8);
                    let got = y[i * n + j].to_f64();
                    assert!(
                        (got - exact).abs() <= bound,
                        "{m}×{n}×{k} [{i},{j}]: {got} vs {exact} (bound {bound})"
                    );
                }
            }
        }
    }

    #[test]
    fn packing_the_stored_bytes_equals_packing_the_values() {
        let mut rng = SplitMix::new(0x5a_01);
        let (n, k) = (70, 131);
        let w = random(&mut rng, n * k, 0.05);
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        // Misaligned on purpose: stored tensors start at any byte offset.
        let shifted = [&[0u8][..], &bytes].concat();
        let x = random(&mut rng, 5 * k, 1.0);
        assert_eq!(
            matmul(&x, 5, &PackedBf16::pack_le_bytes(&shifted[1..], n, k)),
            matmul(&x, 5, &PackedBf16::pack(&w, n, k))
        );
    }

    #[test]
    fn an_input_read_in_place_equals_an_input_copied_into_pairs() {
        let mut rng = SplitMix::new(0x1d_a7);
        let (m, n, k) = (9, 80, 134);
        let w = PackedBf16::pack(&random(&mut rng, n * k, 0.05), n, k);
        // One element in front: whichever of the two slices is 4-byte aligned is read in place,
        // the other one copied.
        let x = random(&mut rng, m * k + 1, 1.0);
        let (first, second) = (&x[..m * k], &x[1..]);
        let (a, b) = (as_pairs(first, k), as_pairs(second, k));
        assert!(matches!(a, Cow::Borrowed(_)) != matches!(b, Cow::Borrowed(_)));
        // A fresh allocation is aligned: read in place.
        let (first_copy, second_copy) = (first.to_vec(), second.to_vec());
        assert_eq!(matmul(second, m, &w), matmul(&second_copy, m, &w));
        assert_eq!(matmul(first, m, &w), matmul(&first_copy, m, &w));
    }

    #[test]
    fn every_kernel_of_this_cpu_equals_the_portable_one_bit_for_bit() {
        let kernels = Kernel::available();
        assert!(kernels.contains(&Kernel::chosen()));
        let mut rng = SplitMix::new(0x77_b1_f0);
        // The last scale makes products and sums denormal in f32: the flush-to-zero rule matters.
        for scale in [1.0, 1e-37] {
            for (m, n, k) in SHAPES {
                let x = random(&mut rng, m * k, 1.0);
                let w = random(&mut rng, n * k, scale);
                let packed = PackedBf16::pack(&w, n, k);
                let portable = matmul_with(Kernel::Portable, &x, m, &packed);
                assert!(portable.iter().all(|v| v.is_finite()));
                let bits = |v: &[bf16]| v.iter().map(|b| b.to_bits()).collect::<Vec<_>>();
                for &kernel in &kernels {
                    assert_eq!(
                        bits(&matmul_with(kernel, &x, m, &packed)),
                        bits(&portable),
                        "{m}×{n}×{k} at scale {scale} ({})",
                        kernel.name()
                    );
                }
            }
        }
    }

    /// The wide products' definition spelled out: per output element, blocks of `E::KC` pairs in
    /// order, each summed from zero — pair by pair, the odd product fused in, then the even one
    /// (`fma(a, b, acc)` = a·b + acc, rounded once) — and added to the running sum.
    fn wide_reference<E: WideFloat + std::ops::Add<Output = E>>(
        x: &[E],
        m: usize,
        w: &[bf16],
        (n, k): (usize, usize),
        widen: fn(bf16) -> E,
        fma: fn(E, E, E) -> E,
    ) -> Vec<E> {
        let pairs = k.div_ceil(2);
        let mut y = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let mut total = E::default();
                for p0 in (0..pairs).step_by(E::KC) {
                    let mut acc = E::default();
                    for p in p0..pairs.min(p0 + E::KC) {
                        if 2 * p + 1 < k {
                            acc = fma(x[i * k + 2 * p + 1], widen(w[j * k + 2 * p + 1]), acc);
                        }
                        acc = fma(x[i * k + 2 * p], widen(w[j * k + 2 * p]), acc);
                    }
                    total = total + acc;
                }
                y.push(total);
            }
        }
        y
    }

    #[test]
    fn the_f32_and_f64_products_follow_their_definition_bit_for_bit() {
        let mut rng = SplitMix::new(0x3e_11_08);
        // The second scale makes f32 products denormal: they must underflow gradually.
        for scale in [1.0, 1e-38] {
            for (m, n, k) in SHAPES {
                let w = random(&mut rng, n * k, 0.05);
                let packed = PackedBf16::pack(&w, n, k);
                let x64: Vec<f64> = (0..m * k).map(|_| rng.normal() * scale).collect();
                let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
                let (got32, got64) = (matmul_wide(&x32, m, &packed), matmul_wide(&x64, m, &packed));
                if !has_wide() {
                    assert!(got32.is_none() && got64.is_none());
                    continue;
                }
                let want32 = wide_reference(&x32, m, &w, (n, k), bf16::to_f32, f32::mul_add);
                let want64 = wide_reference(&x64, m, &w, (n, k), bf16::to_f64, f64::mul_add);
                let bits32 = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                // Every kernel of this CPU, the chosen one among them.
                for kernel in WideKernel::available() {
                    let got32 = matmul_wide_with(kernel, &x32, m, &packed).expect("runs here");
                    let got64 = matmul_wide_with(kernel, &x64, m, &packed).expect("runs here");
                    let at = format!("{m}×{n}×{k} at {scale} ({})", kernel.name());
                    assert_eq!(bits32(&got32), bits32(&want32), "f32 {at}");
                    assert_eq!(bits64(&got64), bits64(&want64), "f64 {at}");
                }
                let (got32, got64) = (got32.expect("wide"), got64.expect("wide"));
                assert_eq!(bits32(&got32), bits32(&want32), "f32 {m}×{n}×{k} chosen");
                assert_eq!(bits64(&got64), bits64(&want64), "f64 {m}×{n}×{k} chosen");
                // The two-level sum's error bound: 2·KC roundings within a block, one per block
                // after it (γ_n · Σ|products|, with products exact inside the FMA).
                let depth =
                    (2 * <f32 as WideFloat>::KC + k.div_ceil(2 * <f32 as WideFloat>::KC)) as f64;
                for (idx, &g) in got32.iter().enumerate() {
                    let (i, j) = (idx / n, idx % n);
                    let (mut exact, mut abs) = (0.0f64, 0.0f64);
                    for l in 0..k {
                        let p = f64::from(x32[i * k + l]) * w[j * k + l].to_f64();
                        exact += p;
                        abs += p.abs();
                    }
                    let bound =
                        depth * (f64::from(f32::EPSILON) * abs + f64::from(f32::from_bits(1)));
                    assert!(
                        (f64::from(g) - exact).abs() <= bound,
                        "f32 {m}×{n}×{k} [{i},{j}]"
                    );
                }
                if scale < 1e-30 && k > 1 {
                    let denormal = got32.iter().filter(|v| v.is_subnormal()).count();
                    assert!(denormal > 0, "{m}×{n}×{k}: no denormal result to check");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_fma_kernel_leaves_the_threads_mxcsr_as_it_found_it() {
        let read = || {
            let mut csr = 0u32;
            // SAFETY: stores the 4-byte MXCSR at a valid address.
            unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack)) };
            csr
        };
        let before = read();
        assert_eq!(before & 0x8040, 0, "the default MXCSR does not flush");
        {
            let _flushing = mxcsr::FlushDenormals::new();
            assert_eq!(read() & 0x8040, 0x8040);
            // Under the flushing MXCSR, a denormal product reads as zero.
            let tiny = std::hint::black_box(1e-20f32);
            assert_eq!(tiny * tiny, 0.0);
        }
        assert_eq!(read(), before);
        let tiny = std::hint::black_box(1e-20f32);
        assert!(tiny * tiny > 0.0, "gradual underflow again");
    }
}
