//! Storage types ([`Element`]) and accumulation types ([`Accum`]).
//!
//! Storage `f64` accumulates in `f64`; `f32`, `bf16` and `f16` accumulate in `f32`. All the
//! arithmetic the kernels need goes through [`Accum`] so that one generic kernel body serves both
//! accumulation types and is monomorphised (and auto-vectorised) per type.

use half::{bf16, f16};
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Sub};

/// Accumulation type: `f32` or `f64`.
pub trait Accum:
    Copy
    + Send
    + Sync
    + Debug
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// Smallest scale c the delta-rule state may carry before it is folded back in (the state is
    /// kept as c·Ŝ so that the per-token decay is a scalar update; see `delta.rs`). Ŝ grows like
    /// 1/c, so this keeps Ŝ and u/c far from overflow: 1e-15 leaves 1e23 of headroom in f32.
    const RENORM_MIN: f64;

    /// Nearest value of this type.
    fn from_f64(x: f64) -> Self;
    /// Widen to `f64`.
    fn to_f64(self) -> f64;
    /// `a * b + c`. With `FMA = true` this is a fused multiply-add (one rounding, one instruction
    /// when the caller is compiled with the `fma` target feature); with `FMA = false` it is a
    /// separate multiply and add, because the software `fma` fallback is very slow.
    fn mul_add<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// Accurate `exp` (the standard library's); used for per-token decays.
    fn exp(self) -> Self;
    /// `exp` that the compiler can vectorise, used by SiLU in the hot loops. For `f32` a
    /// Cody–Waite range reduction plus a degree-7 polynomial (≈ 1–2 ulp); for `f64` the standard
    /// library's, because the `f64` path must stay within 1e-12 of the truth and is not the
    /// performance target.
    fn exp_vec(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
}

impl Accum for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const RENORM_MIN: f64 = 1e-100;
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn mul_add<const FMA: bool>(a: Self, b: Self, c: Self) -> Self {
        if FMA { a.mul_add(b, c) } else { a * b + c }
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn exp_vec(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

impl Accum for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const RENORM_MIN: f64 = 1e-15;
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn mul_add<const FMA: bool>(a: Self, b: Self, c: Self) -> Self {
        if FMA { a.mul_add(b, c) } else { a * b + c }
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f32::exp(self)
    }
    #[inline(always)]
    fn exp_vec(self) -> Self {
        exp_f32_vec(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
}

/// Branch-free `exp` for `f32` that LLVM vectorises (no libm call).
///
/// exp(x) = 2ⁿ · exp(r), n = round(x / ln 2), r = x − n·ln 2 split in two parts (Cody–Waite) so
/// that r is exact to f32 precision; exp(r) on |r| ≤ ln2/2 by its Taylor series to degree 7
/// (truncation error < 3e-9 relative, below f32's 6e-8 unit roundoff); 2ⁿ built from the exponent
/// bits. The input is clamped to [−87.3, 88.3] so that n stays in the normal-exponent range: the
/// result saturates at ≈ 2e38 instead of overflowing and at ≈ 1e-38 instead of underflowing, which
/// is harmless for SiLU (x / (1 + e^{−x}) differs from the exact value by < 1e-37 absolute).
/// NaN propagates (`clamp` keeps NaN, the polynomial of NaN is NaN).
#[inline(always)]
fn exp_f32_vec(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO with LN2_HI exactly representable with few mantissa bits, so n·LN2_HI
    // is exact for |n| ≤ 128.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Taylor coefficients 1/k!, Horner form.
    let p = 1.0 / 5040.0;
    let p = p * r + 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    // Low mantissa bits of t hold n (two's complement); (n + 127) << 23 is 2ⁿ. Higher bits of t
    // are shifted out.
    let scale = f32::from_bits(t.to_bits().wrapping_add(127).wrapping_shl(23));
    p * scale
}

/// Storage element type of activations and outputs.
pub trait Element: Copy + Send + Sync + Debug + 'static {
    /// Accumulation type used for arithmetic on this storage type.
    type Acc: Accum;
    /// Short name for messages and benchmarks.
    const NAME: &'static str;
    /// Exact widening to the accumulation type.
    fn to_acc(self) -> Self::Acc;
    /// Round-to-nearest-even narrowing from the accumulation type (identity for f32/f64).
    fn from_acc(a: Self::Acc) -> Self;
}

impl Element for f64 {
    type Acc = f64;
    const NAME: &'static str = "f64";
    #[inline(always)]
    fn to_acc(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_acc(a: f64) -> Self {
        a
    }
}

impl Element for f32 {
    type Acc = f32;
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_acc(a: f32) -> Self {
        a
    }
}

impl Element for bf16 {
    type Acc = f32;
    const NAME: &'static str = "bf16";
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(a: f32) -> Self {
        bf16::from_f32(a)
    }
}

impl Element for f16 {
    type Acc = f32;
    const NAME: &'static str = "f16";
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(a: f32) -> Self {
        f16::from_f32(a)
    }
}

/// SiLU(x) = x · σ(x) = x / (1 + e^{−x}) in the accumulation type.
#[inline(always)]
pub(crate) fn silu<A: Accum>(x: A) -> A {
    x / (A::ONE + (A::ZERO - x).exp_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_vec_f32_accuracy() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp_f32_vec(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        // Two f32 ulps (2 · 2⁻²³ ≈ 2.4e-7) bound the polynomial + reduction + final rounding.
        assert!(worst < 2.5e-7, "worst rel err {worst}");
        assert!(exp_f32_vec(f32::NAN).is_nan());
        assert!(exp_f32_vec(1e4).is_finite());
        assert!(silu(-1e4f32).abs() < 1e-30);
    }
}
