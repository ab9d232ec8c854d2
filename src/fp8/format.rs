//! The two FP8 formats of safetensors (`F8_E4M3`, `F8_E5M2`): every code decoded exactly, and
//! f32 rounded to e4m3 the way CUDA's `__nv_cvt_float_to_fp8(…, __NV_SATFINITE, __NV_E4M3)` and
//! torch's `.to(torch.float8_e4m3fn)` do for values in range: to nearest, ties to even.
//!
//! Both are the OCP formats: e4m3 "fn" (no infinities, one NaN pattern per sign, largest 448,
//! subnormals down to 2⁻⁹) and e5m2 (IEEE-like, largest 57344, subnormals down to 2⁻¹⁶). Every
//! value of either is exactly an f16, hence an f32 and an f64.

use float8::{F8E4M3, F8E5M2};
use safetensors::Dtype;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    E4M3,
    E5M2,
}

impl Fp8Format {
    /// The format of a safetensors dtype; `None` for every other dtype.
    pub fn of(dtype: Dtype) -> Option<Self> {
        match dtype {
            Dtype::F8_E4M3 => Some(Fp8Format::E4M3),
            Dtype::F8_E5M2 => Some(Fp8Format::E5M2),
            _ => None,
        }
    }

    /// The safetensors name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "F8_E4M3",
            Fp8Format::E5M2 => "F8_E5M2",
        }
    }

    /// The name `quantization_config.fmt` gives it.
    pub fn config_name(self) -> &'static str {
        match self {
            Fp8Format::E4M3 => "e4m3",
            Fp8Format::E5M2 => "e5m2",
        }
    }

    /// The value of one stored byte, exactly (NaN codes give NaN, e5m2's infinities ±∞).
    pub fn decode(self, code: u8) -> f32 {
        match self {
            Fp8Format::E4M3 => F8E4M3::from_bits(code).to_f32(),
            Fp8Format::E5M2 => F8E5M2::from_bits(code).to_f32(),
        }
    }

    /// All 256 codes decoded, indexed by code: a lookup table for bulk decoding.
    pub fn table(self) -> [f32; 256] {
        std::array::from_fn(|code| self.decode(code as u8))
    }
}

/// The largest finite e4m3 value.
pub const E4M3_MAX: f32 = 448.0;

/// `x` rounded to the nearest e4m3 value, ties to even; beyond ±448 saturated to ±448 (callers
/// clamp first, as the engines do); NaN stays NaN.
pub fn round_e4m3(x: f32) -> f32 {
    F8E4M3::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The e4m3 value of `code` from its fields, written out from the OCP definition.
    fn e4m3_by_definition(code: u8) -> f32 {
        let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
        let (e, m) = (i32::from((code >> 3) & 0xF), f32::from(code & 0x7));
        if code & 0x7F == 0x7F {
            return f32::NAN;
        }
        let mag = if e == 0 {
            m / 8.0 * 2f32.powi(-6)
        } else {
            (1.0 + m / 8.0) * 2f32.powi(e - 7)
        };
        sign * mag
    }

    #[test]
    fn e4m3_codes_decode_to_their_definition() {
        for code in 0..=255u8 {
            let (got, want) = (Fp8Format::E4M3.decode(code), e4m3_by_definition(code));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "code {code:#04x}: {got} vs {want}"
            );
        }
        assert_eq!(Fp8Format::E4M3.decode(0x7E), E4M3_MAX);
        assert_eq!(Fp8Format::E4M3.decode(0x01), 2f32.powi(-9));
    }

    #[test]
    fn rounding_to_e4m3_is_to_nearest_even_and_inverts_decoding() {
        let table = Fp8Format::E4M3.table();
        for code in 0..=255u8 {
            let v = table[code as usize];
            if v.is_finite() {
                assert_eq!(round_e4m3(v).to_bits(), v.to_bits(), "code {code:#04x}");
            }
        }
        // Between 1 (0x38) and 1.125 (0x39) the midpoint goes to the even code, 1.
        assert_eq!(round_e4m3(1.0625), 1.0);
        // Between 1.125 and 1.25 (0x3A) the midpoint goes to 1.25.
        assert_eq!(round_e4m3(1.1875), 1.25);
        assert_eq!(round_e4m3(1.0626), 1.125);
        // The smallest subnormal's half rounds to zero (even), a hair more to 2⁻⁹.
        assert_eq!(round_e4m3(2f32.powi(-10)), 0.0);
        assert_eq!(round_e4m3(2f32.powi(-10) * 1.01), 2f32.powi(-9));
        assert_eq!(round_e4m3(-500.0), -E4M3_MAX);
        assert!(round_e4m3(f32::NAN).is_nan());
    }
}
