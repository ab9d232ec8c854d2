//! The bf16 GEMM's accumulation rule spelled out in portable Rust: the definition the machine
//! kernels are tested against bit for bit, and the kernel of a CPU without AVX-512.

use super::NR;

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

/// `rows` rows of `a` (pairs, `a_stride` words apart) times one panel block of `pairs` pairs,
/// accumulated into `c` (`rows × NR`, row-major).
pub fn block(a: &[u32], a_stride: usize, b: &[u32], pairs: usize, c: &mut [f32], rows: usize) {
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
