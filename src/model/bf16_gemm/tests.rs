use std::borrow::Cow;

use super::*;

use crate::backends::cases::SplitMix;

/// One bf16 product on the chosen kernel.
fn matmul(x: &[bf16], m: usize, w: &PackedBf16) -> Vec<bf16> {
    matmul_with(Kernel::chosen(), x, m, w)
}

/// One wide product on the chosen kernel (`None` where there is none).
fn matmul_wide<E: WideFloat>(x: &[E], m: usize, w: &PackedBf16) -> Option<Vec<E>> {
    matmul_wide_with(WideKernel::chosen()?, x, m, w)
}

/// One wide product on `kernel`.
fn matmul_wide_with<E: WideFloat>(
    kernel: WideKernel,
    x: &[E],
    m: usize,
    w: &PackedBf16,
) -> Option<Vec<E>> {
    matmul_wide_many_with(kernel, x, m, &[w]).map(one)
}

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
fn every_packed_word_holds_its_columns_pair_low_half_first() {
    let mut rng = SplitMix::new(0x9a_c3);
    // Columns past one panel and short of the next, an odd k over several packing blocks.
    for (n, k) in [(70, 261), (64, 256), (3, 1)] {
        let w = random(&mut rng, n * k, 0.05);
        let packed = PackedBf16::pack(&w, n, k);
        let bits = |r: usize, c: usize| if c < k { w[r * k + c].to_bits() } else { 0 };
        for panel in 0..n.div_ceil(NR) {
            let words = packed.panel(panel);
            for p in 0..k.div_ceil(2) {
                for col in 0..NR {
                    let row = panel * NR + col;
                    let want = if row < n {
                        u32::from(bits(row, 2 * p)) | (u32::from(bits(row, 2 * p + 1)) << 16)
                    } else {
                        0
                    };
                    assert_eq!(words[p * NR + col], want, "{n}×{k}: row {row}, pair {p}");
                }
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
                let bound = depth * (f64::from(f32::EPSILON) * abs + f64::from(f32::from_bits(1)));
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

#[test]
fn products_sharing_an_input_equal_each_product_alone_bit_for_bit() {
    let mut rng = SplitMix::new(0x51_a4_ed);
    // Widths as a GDN layer's q/k/v/z/b/a have them (one wide, one panel and less, remainders),
    // and none at all; rows across several chunks, K across several reduction blocks.
    let widths = [130, 48, 1, 0, 65, 200];
    for (m, k) in [(MC + 37, 300), (7, 129), (1, 64)] {
        let ws: Vec<PackedBf16> = widths
            .iter()
            .map(|&n| PackedBf16::pack(&random(&mut rng, n * k, 0.05), n, k))
            .collect();
        let ws: Vec<&PackedBf16> = ws.iter().collect();
        let x = random(&mut rng, m * k, 1.0);
        let bits = |v: &[bf16]| v.iter().map(|b| b.to_bits()).collect::<Vec<_>>();
        for kernel in Kernel::available() {
            let many = matmul_many_with(kernel, &x, m, &ws);
            assert_eq!(many.len(), ws.len());
            for (y, w) in many.iter().zip(&ws) {
                let alone = matmul_with(kernel, &x, m, w);
                assert_eq!(
                    bits(y),
                    bits(&alone),
                    "bf16 {m}×{}×{k} ({})",
                    w.n,
                    kernel.name()
                );
            }
        }
        let x64: Vec<f64> = (0..m * k).map(|_| rng.normal()).collect();
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        for kernel in WideKernel::available() {
            let many32 = matmul_wide_many_with(kernel, &x32, m, &ws).expect("runs here");
            let many64 = matmul_wide_many_with(kernel, &x64, m, &ws).expect("runs here");
            for ((y32, y64), w) in many32.iter().zip(&many64).zip(&ws) {
                let at = format!("{m}×{}×{k} ({})", w.n, kernel.name());
                let alone32 = matmul_wide_with(kernel, &x32, m, w).expect("runs here");
                let alone64 = matmul_wide_with(kernel, &x64, m, w).expect("runs here");
                let b32 = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let b64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(b32(y32), b32(&alone32), "f32 {at}");
                assert_eq!(b64(y64), b64(&alone64), "f64 {at}");
                assert_eq!(y64.len(), m * w.n, "{at}");
                assert!(y64.iter().all(|v| v.is_finite()), "{at}");
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

/// The prefetch levels are `_mm_prefetch`'s own hints.
#[cfg(target_arch = "x86_64")]
#[test]
fn prefetch_levels_are_the_intrinsics_hints() {
    use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1};
    assert_eq!(
        (super::tasks::L1, super::tasks::L2),
        (_MM_HINT_T0, _MM_HINT_T1)
    );
}
