//! `y = x · wᵀ` for bf16 `x` `[M, K]` and bf16 `w` `[N, K]` on the CPU, with the numerics of
//! PyTorch's CPU bf16 matmul (oneDNN on an `avx512_bf16` machine): bf16 operands, products and
//! sums in f32, the f32 result rounded to bf16 (round to nearest even) once at the end.
//!
//! candle 0.11's CPU matmul has no bf16 kernel: it widens both operands to f32 on every call and
//! runs its f32 GEMM, so a bf16 forward costs what an f32 one does. Here the weight is packed
//! once (when the layer is built) and the product runs on the `vdpbf16ps` instruction
//! (`_mm512_dpbf16_ps`: 32 bf16 products per instruction, accumulated into 16 f32 lanes).
//!
//! The accumulation order is fixed and the same on every machine: for each output element, over
//! the pairs `(2p, 2p + 1)` of the reduction index in increasing `p`, the odd product is fused
//! into the f32 accumulator, then the even one, each rounded once (an FMA), with the
//! instruction's denormal handling: denormal inputs read as zero, denormal results flushed to
//! zero. The portable path ([`matmul_portable`]) spells out exactly that, so a machine without
//! `avx512_bf16` gets bit-identical results, only slower (`tests` check the two agree bit for bit
//! on fresh random inputs, and both against an f64 product).

use half::bf16;
use rayon::prelude::*;

/// Output columns per packed panel: four 16-lane f32 vectors.
const NR: usize = 64;
/// Rows of `x` per microkernel call (6 × 4 accumulators + 4 weight vectors + 1 broadcast ≤ 32).
const MR: usize = 6;
/// Reduction pairs per block: one panel block is `KC_PAIRS · NR · 4` bytes = 16 KiB (L1).
const KC_PAIRS: usize = 64;

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

fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x · wᵀ` for `x` `[m, k]` row-major, rounded to bf16: `[m, n]` row-major.
pub fn matmul(x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    #[cfg(target_arch = "x86_64")]
    if has_avx512_bf16() {
        return run(x, m, w, |a, a_stride, b, pairs, c, rows| {
            // SAFETY: the CPU has avx512f and avx512bf16 (checked above); `run` hands in
            // `rows` rows of `a` (stride `a_stride` words) and `pairs` pairs of `b` and `c`.
            unsafe { avx512::block(a, a_stride, b, pairs, c, rows) }
        });
    }
    matmul_portable(x, m, w)
}

/// [`matmul`] in portable Rust, bit-identical to the `vdpbf16ps` kernel.
pub fn matmul_portable(x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    run(x, m, w, portable_block)
}

/// One microkernel call: `rows` (≤ `MR`) rows of `a` (pairs, `a_stride` words apart) times one
/// panel block of `pairs` pairs, accumulated into `c` (`rows × NR`, row-major).
type Block = fn(&[u32], usize, &[u32], usize, &mut [f32], usize);

/// Blocks the product: panels in parallel, reduction blocks in order (so every element's
/// accumulation order is the fixed one), rows of `x` in steps of `MR`.
fn run(x: &[bf16], m: usize, w: &PackedBf16, block: Block) -> Vec<bf16> {
    assert_eq!(x.len(), m * w.k, "input of {m} × {}", w.k);
    let pairs = w.pairs;
    let mut y = vec![bf16::ZERO; m * w.n];
    if m == 0 || w.n == 0 || w.k == 0 {
        return y;
    }
    // `x` as pairs, one row after another (an odd K gets a zero high half per row).
    let a: Vec<u32> = x
        .par_chunks_exact(w.k)
        .flat_map_iter(|row| {
            (0..pairs).map(move |p| {
                let lo = row[2 * p].to_bits();
                let hi = row.get(2 * p + 1).map_or(0, |h| h.to_bits());
                u32::from(lo) | (u32::from(hi) << 16)
            })
        })
        .collect();
    let panels = w.n.div_ceil(NR);
    // c: per panel, m rows of NR f32 accumulators.
    let mut c = vec![0f32; panels * m * NR];
    c.par_chunks_mut(m * NR).enumerate().for_each(|(panel, c)| {
        let b = w.panel(panel);
        for p0 in (0..pairs).step_by(KC_PAIRS) {
            let kc = KC_PAIRS.min(pairs - p0);
            for r0 in (0..m).step_by(MR) {
                let rows = MR.min(m - r0);
                block(
                    &a[r0 * pairs + p0..],
                    pairs,
                    &b[p0 * NR..(p0 + kc) * NR],
                    kc,
                    &mut c[r0 * NR..(r0 + rows) * NR],
                    rows,
                );
            }
        }
    });
    y.par_chunks_mut(w.n).enumerate().for_each(|(row, y)| {
        for (panel, cols) in y.chunks_mut(NR).enumerate() {
            let acc = &c[(panel * m + row) * NR..][..cols.len()];
            for (out, &v) in cols.iter_mut().zip(acc) {
                *out = bf16::from_f32(v);
            }
        }
    });
    y
}

/// What `vdpbf16ps` does to one f32 lane: `acc + a_hi·b_hi` rounded, then `+ a_lo·b_lo` rounded
/// (each an FMA: the products of two bf16 are exact in f32), denormal inputs read as zero and
/// denormal results flushed to zero.
#[inline(always)]
fn dp_pair(acc: f32, a: u32, b: u32) -> f32 {
    let lo = |w: u32| daz(f32::from_bits(w << 16));
    let hi = |w: u32| daz(f32::from_bits(w & 0xffff_0000));
    let t = ftz(hi(a).mul_add(hi(b), daz(acc)));
    ftz(lo(a).mul_add(lo(b), t))
}

#[inline(always)]
fn daz(x: f32) -> f32 {
    ftz(x)
}

/// A denormal becomes a zero of the same sign.
#[inline(always)]
fn ftz(x: f32) -> f32 {
    if x.abs() < f32::MIN_POSITIVE {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

fn portable_block(a: &[u32], a_stride: usize, b: &[u32], pairs: usize, c: &mut [f32], rows: usize) {
    for r in 0..rows {
        let c = &mut c[r * NR..(r + 1) * NR];
        for p in 0..pairs {
            let av = a[r * a_stride + p];
            for (acc, &bv) in c.iter_mut().zip(&b[p * NR..(p + 1) * NR]) {
                *acc = dp_pair(*acc, av, bv);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{MR, NR};

    /// [`super::Block`] on `vdpbf16ps`; `rows` selects a register-blocked body.
    ///
    /// # Safety
    /// The CPU must have avx512f and avx512bf16; `a` holds `rows` rows of at least `pairs` words
    /// `a_stride` apart, `b` `pairs · NR` words and `c` `rows · NR` floats.
    pub unsafe fn block(
        a: &[u32],
        a_stride: usize,
        b: &[u32],
        pairs: usize,
        c: &mut [f32],
        rows: usize,
    ) {
        assert!(rows <= MR && c.len() >= rows * NR && b.len() >= pairs * NR);
        assert!(rows == 0 || a.len() >= (rows - 1) * a_stride + pairs);
        // SAFETY: bounds asserted above; features guaranteed by the caller.
        unsafe {
            match rows {
                1 => kernel::<1>(a, a_stride, b, pairs, c),
                2 => kernel::<2>(a, a_stride, b, pairs, c),
                3 => kernel::<3>(a, a_stride, b, pairs, c),
                4 => kernel::<4>(a, a_stride, b, pairs, c),
                5 => kernel::<5>(a, a_stride, b, pairs, c),
                6 => kernel::<6>(a, a_stride, b, pairs, c),
                _ => {}
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn kernel<const R: usize>(
        a: &[u32],
        a_stride: usize,
        b: &[u32],
        pairs: usize,
        c: &mut [f32],
    ) {
        let (a, b, c) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
        // SAFETY: every pointer stays inside the slices whose lengths `block` checked.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 4]; R];
            for (r, acc) in acc.iter_mut().enumerate() {
                for (j, v) in acc.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(c.add(r * NR + 16 * j));
                }
            }
            for p in 0..pairs {
                let wp = b.add(p * NR);
                let w: [__m512bh; 4] = [
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(wp.cast())),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(wp.add(16).cast())),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(wp.add(32).cast())),
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(wp.add(48).cast())),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                        *a.add(r * a_stride + p) as i32,
                    ));
                    for (v, &w) in acc.iter_mut().zip(&w) {
                        *v = _mm512_dpbf16_ps(*v, w, x);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for (j, v) in acc.iter().enumerate() {
                    _mm512_storeu_ps(c.add(r * NR + 16 * j), *v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_name() -> &'static str {
        if has_avx512_bf16() {
            "avx512_bf16"
        } else {
            "portable"
        }
    }
    use crate::testdata::SplitMix;

    fn random(rng: &mut SplitMix, len: usize, scale: f64) -> Vec<bf16> {
        (0..len)
            .map(|_| bf16::from_f64(rng.normal() * scale))
            .collect()
    }

    /// Shapes with every remainder: rows not a multiple of MR, columns not of NR, odd K, K across
    /// several reduction blocks.
    const SHAPES: [(usize, usize, usize); 5] = [
        (1, 1, 1),
        (7, 65, 129),
        (13, 130, 300),
        (6, 64, 128),
        (20, 200, 1001),
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
    fn the_portable_path_equals_the_machine_kernel_bit_for_bit() {
        let mut rng = SplitMix::new(0x77_b1_f0);
        // The last scale makes products and sums denormal in f32: the flush-to-zero rule matters.
        for scale in [1.0, 1e-37] {
            for (m, n, k) in SHAPES {
                let x = random(&mut rng, m * k, 1.0);
                let w = random(&mut rng, n * k, scale);
                let packed = PackedBf16::pack(&w, n, k);
                let fast = matmul(&x, m, &packed);
                let portable = matmul_portable(&x, m, &packed);
                let bits = |v: &[bf16]| v.iter().map(|b| b.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&fast),
                    bits(&portable),
                    "{m}×{n}×{k} at scale {scale} ({})",
                    kernel_name()
                );
                assert!(fast.iter().all(|v| v.is_finite()));
            }
        }
    }
}
