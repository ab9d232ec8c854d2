//! `--dtype fp8` (and `fp8-ue8m0`): an FP8 checkpoint run the way vLLM and SGLang serve it — its
//! quantised Linear layers in W8A8 ([`super::w8a8`]), everything else (norms, attention, the
//! linear-attention kernels, the Linear layers kept in bf16, and the activations between layers)
//! as `--dtype bf16` runs it.
//!
//! Everything that carries a run's dtype (sessions, the job plan's floor runs, fingerprints,
//! thresholds) carries a candle `DType`; the served arithmetic is named there by the FP8 type it
//! quantises to: [`SERVED`] (`F8E4M3`: e4m3 activations, f32 scales) and [`SERVED_UE8M0`]
//! (`F8E8M0`: e4m3 activations, power-of-two scales — the UE8M0 scale format of DeepGEMM on
//! Blackwell). No tensor ever has either dtype: [`compute_dtype`] is what the model computes in.

use candle_core::DType;

/// The served W8A8 arithmetic with fp32 activation scales.
pub const SERVED: DType = DType::F8E4M3;
/// The served W8A8 arithmetic with activation scales rounded up to powers of two (UE8M0).
pub const SERVED_UE8M0: DType = DType::F8E8M0;

/// How a served run's per-token-group activation scale is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActScale {
    /// `s = max(max|x|, 1e-10) / 448` in f32 (vLLM's and SGLang's default).
    Fp32,
    /// That `s` rounded up to a power of two (`use_ue8m0`).
    Ue8m0,
}

/// The activation scales of a served run's dtype; `None` for every other dtype.
pub fn act_scale(dtype: DType) -> Option<ActScale> {
    match dtype {
        SERVED => Some(ActScale::Fp32),
        SERVED_UE8M0 => Some(ActScale::Ue8m0),
        _ => None,
    }
}

/// The dtype a run of `dtype` computes in: bf16 for the served FP8 runs, `dtype` otherwise.
pub fn compute_dtype(dtype: DType) -> DType {
    if act_scale(dtype).is_some() {
        DType::BF16
    } else {
        dtype
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_runs_compute_in_bf16_and_others_in_their_own_dtype() {
        assert_eq!(act_scale(SERVED), Some(ActScale::Fp32));
        assert_eq!(act_scale(SERVED_UE8M0), Some(ActScale::Ue8m0));
        assert_eq!(compute_dtype(SERVED), DType::BF16);
        assert_eq!(compute_dtype(SERVED_UE8M0), DType::BF16);
        for d in [DType::F64, DType::F32, DType::BF16, DType::F16] {
            assert_eq!((act_scale(d), compute_dtype(d)), (None, d));
        }
    }
}
