//! The input `x` of a product laid out for the microkernels: bf16 pairs, or widened and blocked.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Mutex;

use bytemuck::Pod;

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
///
/// The buffer is the one the last product left ([`SPARE`]) when it is large enough.
pub(super) struct Blocked<E: Pod> {
    /// The values as words, so that one spare buffer serves f32 and f64 inputs.
    words: Vec<u64>,
    len: usize,
    pub(super) mr: usize,
    pub(super) kc: usize,
    pub(super) pairs: usize,
    blocks: usize,
    _values: PhantomData<E>,
}

/// The buffer of the last blocked input, kept for the next product. A forward pass blocks one
/// input per product (up to 71 MB: f64 at the 27B MLP's width), and a fresh buffer of that size
/// is fresh pages that the kernel faults in and clears on every call; one buffer at a time, as a
/// forward pass runs one product at a time (a second one running meanwhile allocates its own).
static SPARE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

impl<E: Pod + Default + Send> Blocked<E> {
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
        let len = blocks * mr * 2 * pairs;
        let need = (len * size_of::<E>()).div_ceil(size_of::<u64>());
        let mut words = match SPARE.try_lock() {
            Ok(mut spare) if spare.len() >= need => std::mem::take(&mut *spare),
            _ => Vec::new(),
        };
        if words.len() < need {
            words = vec![0; need];
        }
        let data: &mut [E] = &mut bytemuck::cast_slice_mut(&mut words[..need])[..len];
        data.par_chunks_mut((blocks * mr * 2 * kc).max(1))
            .enumerate()
            .for_each(|(q, slab)| {
                let (p0, width) = (q * kc, kc.min(pairs - q * kc));
                for (b, block) in slab.chunks_exact_mut(width * mr * 2).enumerate() {
                    let rows = mr.min(m - b * mr);
                    // Written in order (the block's rows read side by side); every element,
                    // padding included, since the buffer may hold an earlier product's input.
                    for (p, out) in block.chunks_exact_mut(mr * 2).enumerate() {
                        let l = 2 * (p0 + p);
                        let (values, padding) = out.split_at_mut(2 * rows);
                        for (r, out) in values.chunks_exact_mut(2).enumerate() {
                            let row = &x[(b * mr + r) * k..][..k];
                            out[0] = widen(&row[l]);
                            out[1] = if l + 1 < k {
                                widen(&row[l + 1])
                            } else {
                                E::default()
                            };
                        }
                        padding.fill(E::default());
                    }
                }
            });
        Blocked {
            words,
            len,
            mr,
            kc,
            pairs,
            blocks,
            _values: PhantomData,
        }
    }

    /// Row blocks `first..first + count`'s part of the reduction block that starts at pair `p0`.
    pub(super) fn slivers(&self, p0: usize, first: usize, count: usize) -> &[E] {
        let sliver = self.kc.min(self.pairs - p0) * self.mr * 2;
        let slab = p0 * self.mr * 2 * self.blocks;
        let need = (self.len * size_of::<E>()).div_ceil(size_of::<u64>());
        let data: &[E] = &bytemuck::cast_slice(&self.words[..need])[..self.len];
        &data[slab + first * sliver..][..count * sliver]
    }
}

impl<E: Pod> Drop for Blocked<E> {
    fn drop(&mut self) {
        if let Ok(mut spare) = SPARE.try_lock()
            && spare.len() < self.words.len()
        {
            *spare = std::mem::take(&mut self.words);
        }
    }
}
