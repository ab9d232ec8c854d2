//! One task of a product: a panel of the weight times a chunk of rows of the input, reduction
//! block by reduction block, with the prefetches that keep the operands ahead of the kernels.

#[cfg(target_arch = "x86_64")]
use super::avx512_bf16;
use super::input::Blocked;
use super::planes::Planes;
use super::{KC_PAIRS, Kernel, MR, NR, WideFloat, WideKernel, portable};

/// Asks the CPU to bring `data` into its caches ahead of its use: a hint, with no effect on any
/// value. `HINT` is `_mm_prefetch`'s level: [`L1`] (and the outer levels) or [`L2`].
#[inline]
fn prefetch_into<const HINT: i32, T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks((64 / size_of::<T>()).max(1)) {
        // SAFETY: a prefetch reads nothing architecturally; the address is inside `data`.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line.as_ptr().cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// `_MM_HINT_T0`: into L1 and every outer level.
pub(super) const L1: i32 = 3;
/// `_MM_HINT_T1`: into L2 and the outer levels.
pub(super) const L2: i32 = 2;

/// Into L1 (and the outer levels) ahead of its use.
#[inline]
fn prefetch<T>(data: &[T]) {
    prefetch_into::<L1, T>(data)
}

/// Asks the CPU to bring `data` into L2 (and the outer levels) ahead of its use.
#[inline]
fn prefetch_l2<T>(data: &[T]) {
    prefetch_into::<L2, T>(data)
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
pub(super) fn wide_task<E: WideFloat, const FRESH: bool>(
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
pub(super) fn pairs_task(
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
