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
//! The f32 and f64 products on bf16 weights ([`matmul_wide_many`]) run on the same FMA kernels with
//! gradual underflow, on AVX-512F or AVX2 + FMA ([`WideKernel`]), again with the same bits on
//! either.
//!
//! Not AMX: Intel's `tdpbf16ps` sums its products in an order and precision of its own (on a
//! Xeon with AMX it matched none of the sequential FMA orders bit for bit), so it cannot give
//! these bits.

//! The module's parts: [`packed`] (the weight packed once), [`input`] (the input laid out for the
//! kernels), [`planes`] (a weight block converted for the FMA kernels), the microkernels per ISA
//! ([`portable`], [`avx512_bf16`], [`avx512_fma`], [`avx512_f64`], [`avx2_fma`]; the FMA ones
//! from one body, [`fma_kernel`]) and their
//! selection ([`kernels`]) and dispatch per float type ([`wide_float`]), one task of a product
//! ([`tasks`]) and the threading over tasks ([`tiled`]); the blocking and the entry points here.

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod fma_kernel;
#[cfg(target_arch = "x86_64")]
mod avx2_fma;
#[cfg(target_arch = "x86_64")]
mod avx512_bf16;
#[cfg(target_arch = "x86_64")]
mod avx512_f64;
#[cfg(target_arch = "x86_64")]
mod avx512_fma;
mod input;
mod kernels;
#[cfg(target_arch = "x86_64")]
mod mxcsr;
mod packed;
mod planes;
mod portable;
mod tasks;
mod tiled;
mod wide_float;

use half::bf16;

use input::{Blocked, as_pairs};
pub use kernels::{Kernel, WideKernel};
pub use packed::PackedBf16;
use planes::Planes;
use tasks::{pairs_task, wide_task};
use tiled::tiled;
pub use wide_float::WideFloat;

/// Output columns per packed panel: four 16-lane f32 vectors.
const NR: usize = 64;
/// Rows of `x` per microkernel call (6 × 4 accumulators + 4 weight vectors + 1 broadcast ≤ 32).
const MR: usize = 6;
/// Reduction pairs per block: one panel block is `KC_PAIRS · NR · 4` bytes = 16 KiB (L1).
const KC_PAIRS: usize = 64;
/// Rows of `x` per task, a multiple of every kernel's rows per call (6 and 3): a task's
/// accumulators (`MC × NR`, 129 KiB in f32) stay in L2.
const MC: usize = 86 * MR;

/// `x · wᵀ` for `x` `[m, k]` row-major and each weight `w` of `ws` (all of `k` columns), rounded
/// to bf16: `[m, n]` row-major each. `x` is laid out for the kernels once, and the products'
/// tasks share one pass of the workers; each output element is computed as if its product ran
/// alone.
pub fn matmul_many(x: &[bf16], m: usize, ws: &[&PackedBf16]) -> Vec<Vec<bf16>> {
    matmul_many_with(Kernel::chosen(), x, m, ws)
}

/// The one product `x · wᵀ` of [`matmul_many`] on `kernel`, which must run here
/// ([`Kernel::runs_here`]; else the portable one runs).
pub fn matmul_with(kernel: Kernel, x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    one(matmul_many_with(kernel, x, m, &[w]))
}

/// [`matmul_many`] on `kernel`, which must run here (else the portable one runs).
pub fn matmul_many_with(
    kernel: Kernel,
    x: &[bf16],
    m: usize,
    ws: &[&PackedBf16],
) -> Vec<Vec<bf16>> {
    let k = same_k(x, m, ws);
    let kernel = if kernel.runs_here() {
        kernel
    } else {
        Kernel::Portable
    };
    match kernel.fma() {
        Some(wide) => {
            let mr = f32::shape(wide).0;
            let a = Blocked::new(x, k, mr, f32::KC, |v| v.to_f32());
            let task = |planes: &mut Planes<f32>,
                        w: &PackedBf16,
                        panel,
                        first_row,
                        rows,
                        c: &mut [f32]| {
                #[cfg(target_arch = "x86_64")]
                let _flushing = mxcsr::FlushDenormals::new();
                wide_task::<f32, false>(wide, &a, w.panel(panel), first_row, rows, planes, c);
            };
            tiled(
                m,
                rows_per_task::<f32>(),
                ws,
                Planes::default,
                task,
                bf16::from_f32,
            )
        }
        None => {
            let a = as_pairs(x, k);
            let task = |_: &mut (), w: &PackedBf16, panel, first_row, rows, c: &mut [f32]| {
                pairs_task(kernel, &a, w.panel(panel), w.pairs, first_row, rows, c)
            };
            tiled(m, MC, ws, || (), task, bf16::from_f32)
        }
    }
}

/// The reduction length `k` that `x` (`m` rows) and every weight of `ws` share.
fn same_k<T>(x: &[T], m: usize, ws: &[&PackedBf16]) -> usize {
    let k = ws.first().map_or(x.len() / m.max(1), |w| w.k);
    for w in ws {
        assert_eq!(x.len(), m * w.k, "input of {m} × {}", w.k);
    }
    k
}

/// The one product of a list of one.
fn one<T>(products: Vec<Vec<T>>) -> Vec<T> {
    products.into_iter().next().unwrap_or_default()
}

/// Rows of `x` per task of a product on the FMA kernels with `E` accumulators: few enough that
/// one reduction block of them, the next block (prefetched meanwhile, [`wide_task`]) and their
/// accumulators stay in L2 (each strip's sweep reads the block and the accumulators again: 306
/// rows in f32, 252 in f64); a multiple of every kernel's rows per call (6 and 3).
fn rows_per_task<E: WideFloat>() -> usize {
    let bytes_per_row = (2 * 2 * E::KC + NR) * size_of::<E>();
    ((384 << 10) / bytes_per_row / MR * MR).min(MC)
}

/// Whether this CPU runs [`matmul_wide_many`]: it has AVX-512F or AVX2 + FMA.
pub fn has_wide() -> bool {
    WideKernel::chosen().is_some()
}

/// `x · wᵀ` for f32 or f64 `x` `[m, k]` row-major and each bf16 weight `w` of `ws` (its values
/// exact in either type; all of `k` columns), in `x`'s type, with gradual underflow (no
/// flushing): per output element, the reduction in blocks of `E::KC` pairs in order; within a
/// block, from zero, for each pair the odd product fused into the block's sum, then the even one
/// (one FMA each); each block's sum then added to the running sum (one rounding). The two-level
/// sum keeps the rounding error of long reductions (k = 17408 in a 27B MLP) at about that of a
/// blocked GEMM such as candle's, where one running sum had 2.5× the f32 error. `x` is blocked
/// once for all of `ws` and their tasks share one pass of the workers (q/k/v/z/b/a, gate/up);
/// each output element is computed as if its product ran alone. Only where [`has_wide`] (else
/// `None`): the portable alternative is candle's matmul.
pub fn matmul_wide_many<E: WideFloat>(
    x: &[E],
    m: usize,
    ws: &[&PackedBf16],
) -> Option<Vec<Vec<E>>> {
    matmul_wide_many_with(WideKernel::chosen()?, x, m, ws)
}

/// [`matmul_wide_many`] on `kernel`; `None` where this CPU cannot run it.
pub fn matmul_wide_many_with<E: WideFloat>(
    kernel: WideKernel,
    x: &[E],
    m: usize,
    ws: &[&PackedBf16],
) -> Option<Vec<Vec<E>>> {
    let k = same_k(x, m, ws);
    if !kernel.runs_here() {
        return None;
    }
    let a = Blocked::new(x, k, E::shape(kernel).0, E::KC, |&v| v);
    Some(tiled(
        m,
        rows_per_task::<E>(),
        ws,
        Planes::default,
        |planes, w, panel, first_row, rows, c| {
            wide_task::<E, true>(kernel, &a, w.panel(panel), first_row, rows, planes, c)
        },
        |v| v,
    ))
}

#[cfg(test)]
mod tests;
