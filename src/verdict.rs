//! Deciding what is "bad": per-tensor verdicts from static per-dtype thresholds AND a measured
//! rounding floor, the first divergent tensor and amplification (the
//! sentences that say so are `report::summary`'s).
//!
//! A difference is flagged only when it exceeds both the static threshold of the compute dtype
//! and a multiple of the floor — the error the trusted `reference` backend itself has at that
//! dtype against the float64 truth, measured on the same input in the same run. Two correct
//! implementations rounding independently differ by about √2 × floor, so:
//! - `mismatch`: rel L2 > `ok` threshold and > [`K_MISMATCH`] × floor, or NaN/Inf on one side only;
//! - `drift`: otherwise, rel L2 > `ok` threshold and > [`K_DRIFT`] × floor;
//! - `ok`: everything else — including differences above the static bands that the floor
//!   explains (a deep bf16 model drifts far from the truth, and so does the reference).
//!
//! Without a floor (no model to measure it), nothing is called drift: only a difference beyond
//! what honest rounding can produce at that depth ([`honest_bound`]) is a mismatch.
//!
//! NaN/Inf are judged per element: an element finite on one side only, NaN against Inf, or
//! ±Inf of different sign, and elements non-finite on both sides, make the tensor a mismatch.

use candle_core::DType;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Drift,
    Mismatch,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Drift => "drift",
            Verdict::Mismatch => "mismatch",
        }
    }
}

/// A flagged difference must exceed this many floors to be a mismatch.
pub const K_MISMATCH: f64 = 4.0;
/// … and this many to be drift.
pub const K_DRIFT: f64 = 2.0;

/// Static per-layer rel-L2 bands of a compute dtype: `ok` up to the first, `fail` above the
/// second (docs/reading-a-report.md#verdicts gives the sources: fla's test tolerances, torch.testing, measured
/// floors of transformers' own fallbacks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub ok: f64,
    pub fail: f64,
}

pub fn thresholds(dtype: DType) -> Thresholds {
    match dtype {
        DType::F64 => Thresholds {
            ok: 1e-10,
            fail: 1e-8,
        },
        DType::F32 => Thresholds {
            ok: 1e-5,
            fail: 1e-3,
        },
        DType::F16 => Thresholds {
            ok: 2e-3,
            fail: 1e-2,
        },
        // Served FP8 (W8A8, bf16 between layers): bf16's bands × 5 (docs/reading-a-report.md,
        // "The static bands").
        crate::fp8::serving::SERVED | crate::fp8::serving::SERVED_UE8M0 => Thresholds {
            ok: 5e-2,
            fail: 2.5e-1,
        },
        _ => Thresholds {
            ok: 1e-2,
            fail: 5e-2,
        },
    }
}

/// What a tensor's verdict is decided from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    /// rel L2 of A against B over the tokens judged (routing flips set aside).
    pub rel_l2: f64,
    /// The larger side's floor over the same tokens; None when uncalibrated.
    pub floor: Option<f64>,
    /// Elements where the sides disagree about being finite, or are non-finite on both sides.
    pub non_finite: bool,
    /// Decoder layers the tensor has passed through (0 for the embedding output).
    pub depth: usize,
}

/// The verdict of one tensor.
pub fn classify(j: Judged, th: Thresholds) -> Verdict {
    if j.non_finite || j.rel_l2.is_nan() {
        return Verdict::Mismatch;
    }
    let rel = j.rel_l2;
    match j.floor {
        Some(floor) => {
            if rel > th.ok && rel > K_MISMATCH * floor {
                Verdict::Mismatch
            } else if rel > th.ok && rel > K_DRIFT * floor {
                Verdict::Drift
            } else {
                Verdict::Ok
            }
        }
        None if rel > honest_bound(th, j.depth) => Verdict::Mismatch,
        None => Verdict::Ok,
    }
}

/// Without a floor: the largest rel L2 that honest rounding can produce after `depth` decoder
/// layers. Each layer's rounding adds an independent error of at most the dtype's `fail` band
/// (the worst per-layer error of correct kernels, docs/reading-a-report.md#without-a-model);
/// independent errors add like a random walk, so the bound grows with √(depth + 1).
pub fn honest_bound(th: Thresholds, depth: usize) -> f64 {
    th.fail * ((depth + 1) as f64).sqrt()
}

/// rel L2 / floor, when the floor is known and non-zero.
pub fn ratio_to_floor(rel: f64, floor: Option<f64>) -> Option<f64> {
    floor.filter(|f| *f > 0.0).map(|f| rel / f)
}

/// Runs of layers whose error grows by more than 2× per layer for 3 consecutive layers:
/// returns the first layer index of each run. `rels` are per-layer rel L2 in layer order.
pub fn amplification(rels: &[(usize, f64)]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut run = 0;
    for w in rels.windows(2) {
        let ((_, prev), (_, next)) = (w[0], w[1]);
        if prev > 0.0 && next > 2.0 * prev {
            run += 1;
            if run == 3 {
                // w[1] is the third growing step; the run began three layers before it.
                let idx = rels.iter().position(|(l, _)| *l == w[1].0).unwrap_or(0);
                starts.push(rels[idx.saturating_sub(3)].0);
            }
        } else {
            run = 0;
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(rel_l2: f64, floor: Option<f64>, depth: usize) -> Judged {
        Judged {
            rel_l2,
            floor,
            non_finite: false,
            depth,
        }
    }

    #[test]
    fn with_a_floor_the_multiples_decide() {
        let th = thresholds(DType::BF16);
        assert_eq!(classify(judged(3e-2, Some(2e-2), 4), th), Verdict::Ok);
        assert_eq!(classify(judged(5e-2, Some(2e-2), 4), th), Verdict::Drift);
        assert_eq!(classify(judged(9e-2, Some(2e-2), 4), th), Verdict::Mismatch);
        // Below the ok band nothing is flagged, whatever the floor.
        assert_eq!(classify(judged(9e-3, Some(1e-4), 4), th), Verdict::Ok);
    }

    #[test]
    fn without_a_floor_only_the_depth_scaled_band_flags() {
        let th = thresholds(DType::BF16);
        // 6.4e-2 after 6 layers is honest bf16 rounding (golden MoE model vs its f64 truth).
        assert_eq!(classify(judged(6.4e-2, None, 6), th), Verdict::Ok);
        assert_eq!(classify(judged(6.4e-2, None, 0), th), Verdict::Mismatch);
        assert!((honest_bound(th, 3) - 0.1).abs() < 1e-12);
        for depth in 0..64 {
            for rel in [1e-3, 2e-2, 0.1, 0.5] {
                assert_ne!(classify(judged(rel, None, depth), th), Verdict::Drift);
            }
        }
    }

    #[test]
    fn non_finite_is_always_a_mismatch() {
        let th = thresholds(DType::F32);
        let mut j = judged(0.0, Some(1e-6), 2);
        j.non_finite = true;
        assert_eq!(classify(j, th), Verdict::Mismatch);
        assert_eq!(classify(judged(f64::NAN, None, 2), th), Verdict::Mismatch);
    }
}
