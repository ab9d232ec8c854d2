//! The weight of a bf16 GEMM packed once: panels of `NR` output columns of bf16 pairs.

use half::bf16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::NR;

/// Reduction pairs per block of the packing: a block of a panel is `PACK_PAIRS · NR · 4` bytes =
/// 16 KiB (L1).
const PACK_PAIRS: usize = 64;

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
        let bits: &[u16] = w.reinterpret_cast();
        if cfg!(target_endian = "little") {
            // The values' bytes in memory are their little-endian bytes.
            Self::pack_le_bytes(bytemuck::cast_slice(bits), n, k)
        } else {
            let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
            Self::pack_le_bytes(&bytes, n, k)
        }
    }

    /// Packs the little-endian bf16 bytes `w` (`n` rows of `k`, row-major; any alignment).
    ///
    /// Block by block of [`PACK_PAIRS`] pairs, every column of the panel writes its words into the
    /// block, which stays in L1 meanwhile; a pair's 4 bytes are its word. Written column after
    /// column over the whole panel instead (a panel is 640 KiB at k = 5120, more than an L2), each
    /// output line was fetched again for each of its 16 columns, and the packing took 1.1–1.8× as
    /// long (docs/performance.md, "Issue 24, session 5").
    pub fn pack_le_bytes(w: &[u8], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), 2 * n * k, "weight of {n} × {k}");
        let pairs = k.div_ceil(2);
        let panels = n.div_ceil(NR);
        let mut data = vec![0u32; panels * pairs * NR];
        data.par_chunks_mut(pairs * NR)
            .enumerate()
            .for_each(|(panel, out)| {
                for (block, out) in out.chunks_mut(PACK_PAIRS * NR).enumerate() {
                    let (first, block_pairs) = (PACK_PAIRS * block, out.len() / NR);
                    // The block's pairs with both halves; an odd k's last pair has only its low
                    // half (the high one stays zero).
                    let whole = (k / 2).saturating_sub(first).min(block_pairs);
                    for col in 0..NR.min(n - panel * NR) {
                        let row = &w[2 * ((panel * NR + col) * k + 2 * first)..];
                        for (p, b) in row[..4 * whole].chunks_exact(4).enumerate() {
                            out[p * NR + col] = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        }
                        if whole < block_pairs {
                            let b = &row[4 * whole..];
                            out[whole * NR + col] = u32::from(u16::from_le_bytes([b[0], b[1]]));
                        }
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
