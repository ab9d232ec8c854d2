//! Dtypes as hsdiff reasons about them: ranked by rounding error (the one ranking every choice
//! of "the coarser dtype" uses), and held typed in values that show them by their label.

use candle_core::DType;

use super::device::dtype_label;

/// Orders float dtypes by rounding error: f64 < f32 < f16 < bf16 < served FP8 (W8A8: its
/// activations round to e4m3 at every matmul, on top of bf16 between layers). Other dtypes
/// rank with f64: they are never a compute dtype.
pub fn coarseness(d: DType) -> u8 {
    match d {
        DType::F64 => 0,
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        crate::fp8::serving::SERVED | crate::fp8::serving::SERVED_UE8M0 => 4,
        _ => 0,
    }
}

/// The coarser of two dtypes (the one with the larger rounding error; `b` when they are as
/// coarse).
pub fn coarser(a: DType, b: DType) -> DType {
    if coarseness(b) >= coarseness(a) { b } else { a }
}

/// A dtype kept typed in a value that is printed: shown, and serialised, by its label
/// ([`dtype_label`]: `bf16`, `fp8`), so that nothing has to read a label back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelledDType(pub DType);

impl std::fmt::Display for LabelledDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(dtype_label(self.0))
    }
}

impl serde::Serialize for LabelledDType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(dtype_label(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fp8::serving::{SERVED, SERVED_UE8M0};

    #[test]
    fn the_coarser_dtype_rounds_more() {
        let finest_first = [DType::F64, DType::F32, DType::F16, DType::BF16, SERVED];
        for (i, &fine) in finest_first.iter().enumerate() {
            for &coarse in &finest_first[i..] {
                assert_eq!(coarser(fine, coarse), coarse, "{fine:?} vs {coarse:?}");
                assert_eq!(coarser(coarse, fine), coarse, "{coarse:?} vs {fine:?}");
            }
        }
        // The two served FP8 forms round alike: the later one is taken.
        assert_eq!(coarser(SERVED, SERVED_UE8M0), SERVED_UE8M0);
        assert_eq!(coarser(SERVED_UE8M0, SERVED), SERVED);
    }

    #[test]
    fn a_labelled_dtype_prints_and_serialises_as_its_label() {
        let d = LabelledDType(SERVED);
        assert_eq!(format!("[{d:<4}]"), "[fp8 ]");
        assert_eq!(serde_json::to_string(&d).expect("json"), "\"fp8\"");
    }
}
