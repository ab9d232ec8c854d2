//! The bf16 GEMM's microkernel on `vdpbf16ps` (AVX-512 BF16): 32 bf16 products per instruction,
//! accumulated into 16 f32 lanes in the order [`super::portable`] spells out. The fastest kernel
//! where the instruction is (AMD Zen 4: ≈ 2.5× an f32 FMA per cycle); on Intel cores it issues at
//! half the FMA rate, and [`super::avx512_fma`] wins there.

use std::arch::x86_64::*;

use super::{MR, NR};

/// `rows` (≤ `MR`) rows of `a` (bf16 pairs, `a_stride` words apart) times one panel block of
/// `pairs` pairs, accumulated into `c` (`rows × NR`); `rows` selects a register-blocked body.
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
