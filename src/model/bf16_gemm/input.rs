//! The input `x` of a product laid out for the microkernels: bf16 pairs, or widened and blocked.

use std::borrow::Cow;

use half::bf16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// `x` (`[m, k]` row-major) as words of bf16 pairs, one row after another: the bf16 slice itself
/// when `k` is even and the slice is 4-byte aligned (the common case: no copy), else a copy in
/// which an odd `k` gets a zero high half at the end of each row.
pub(super) fn as_pairs(x: &[bf16], k: usize) -> Cow<'_, [u32]> {
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
pub(super) struct Blocked<E> {
    data: Vec<E>,
    pub(super) mr: usize,
    pub(super) kc: usize,
    pub(super) pairs: usize,
    blocks: usize,
}

impl<E: Copy + Default + Send> Blocked<E> {
    pub(super) fn new<T: Sync>(
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
    pub(super) fn slivers(&self, p0: usize, first: usize, count: usize) -> &[E] {
        let sliver = self.kc.min(self.pairs - p0) * self.mr * 2;
        let slab = p0 * self.mr * 2 * self.blocks;
        &self.data[slab + first * sliver..][..count * sliver]
    }
}
