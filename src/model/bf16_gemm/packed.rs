//! The weight of a bf16 GEMM packed once: panels of `NR` output columns of bf16 pairs.

use half::bf16;
use rayon::prelude::*;

use super::NR;

/// A `[N, K]` bf16 weight packed for [`matmul_many`](super::matmul_many): panels of `NR` output columns; within a panel,
/// for each reduction pair `p`, `NR` words holding `(w[n, 2p], w[n, 2p + 1])` (low, high half).
/// Columns past `N` and the odd `K`'s last high half are zero.
pub struct PackedBf16 {
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) pairs: usize,
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

    pub(super) fn panel(&self, i: usize) -> &[u32] {
        &self.data[i * self.pairs * NR..][..self.pairs * NR]
    }
}
