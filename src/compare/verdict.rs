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
//! Without a floor (no model to measure it), the floor is *expected* from measurements
//! ([`expected_floor`]: the largest per-layer growth of the floor hsdiff measured at that dtype
//! on real geometries and the golden models, `data/honest_floors.json`), and the same multiples
//! judge: `drift` beyond [`K_DRIFT_UNCALIBRATED`] and `mismatch` beyond [`K_MISMATCH_UNCALIBRATED`]
//! × the expected floor (both above the `ok` band). A dtype without measurements keeps the
//! depth-scaled band ([`honest_bound`]), mismatch only.
//!
//! NaN/Inf are judged per element: an element finite on one side only, NaN against Inf, or
//! ±Inf of different sign, and elements non-finite on both sides, make the tensor a mismatch.

use std::sync::OnceLock;

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

/// What a tensor's verdict is decided from (gathered by [`super::judge`], the one caller).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Judged {
    /// rel L2 of A against B — or, where the sides route apart at MoE layers, the worse side's
    /// against the f64 truth under its own routing.
    pub rel_l2: f64,
    /// The floor that distance is measured against (the larger side's, or that side's); None
    /// when uncalibrated.
    pub floor: Option<f64>,
    /// Elements where the sides disagree about being finite, or are non-finite on both sides.
    pub non_finite: bool,
    /// Decoder layers the tensor has passed through (0 for the embedding output).
    pub depth: usize,
    /// The dtype whose floor is expected when there is none ([`expected_floor`]).
    pub dtype: DType,
}

/// The verdict of one tensor.
pub(super) fn classify(j: Judged, th: Thresholds) -> Verdict {
    if j.non_finite || j.rel_l2.is_nan() {
        return Verdict::Mismatch;
    }
    let rel = j.rel_l2;
    match j.floor {
        // A floor run that went non-finite measured nothing: never a pass.
        Some(floor) if !floor.is_finite() => Verdict::Mismatch,
        Some(floor) => {
            if rel > th.ok && rel > K_MISMATCH * floor {
                Verdict::Mismatch
            } else if rel > th.ok && rel > K_DRIFT * floor {
                Verdict::Drift
            } else {
                Verdict::Ok
            }
        }
        None => match uncalibrated_bounds(j.dtype, th, j.depth) {
            (_, mismatch) if rel > mismatch => Verdict::Mismatch,
            (Some(drift), _) if rel > drift => Verdict::Drift,
            _ => Verdict::Ok,
        },
    }
}

/// Without a floor: the expected floor is not the file's own, so the multiples are wider than
/// with one — the measured envelope is the *largest* per-layer growth seen, and two honest runs
/// differ by up to √2 of it; beyond these nothing measured explains the difference.
pub const K_DRIFT_UNCALIBRATED: f64 = 4.0;
pub const K_MISMATCH_UNCALIBRATED: f64 = 8.0;

/// Without a floor: (drift bound, mismatch bound) of rel L2 at `depth` for `dtype` — the
/// multiples of [`expected_floor`], never below the `ok` band; without measurements for the
/// dtype, no drift and the [`honest_bound`].
pub fn uncalibrated_bounds(dtype: DType, th: Thresholds, depth: usize) -> (Option<f64>, f64) {
    match expected_floor(dtype, depth) {
        Some(e) => (
            Some((K_DRIFT_UNCALIBRATED * e).max(th.ok)),
            (K_MISMATCH_UNCALIBRATED * e).max(th.ok),
        ),
        None => (None, honest_bound(th, depth)),
    }
}

/// The floor expected after `depth` decoder layers at `dtype`, from the measured table: the
/// largest `floor / (depth + 1)` over every measured tensor, times `depth + 1` (the measured
/// floors grow about linearly with depth: docs/reading-a-report.md#the-uncalibrated-rule).
pub fn expected_floor(dtype: DType, depth: usize) -> Option<f64> {
    per_layer_floor(dtype).map(|c| c * (depth + 1) as f64)
}

/// The measurements (`data/honest_floors.json`): per geometry and dtype, the rel L2 of the
/// `fused` backend at that dtype against its f64 run, per captured tensor and depth.
const HONEST_FLOORS: &str = include_str!("../../data/honest_floors.json");

#[derive(Deserialize)]
struct Measured {
    dtype: String,
    depth: Vec<usize>,
    rel_l2: Vec<f64>,
}

#[derive(Deserialize)]
struct FloorTable {
    measured: Vec<Measured>,
}

/// The largest measured `floor / (depth + 1)` for `dtype` (depth ≥ 1: the embedding is exact).
pub fn per_layer_floor(dtype: DType) -> Option<f64> {
    static TABLE: OnceLock<Vec<(String, f64)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        // The file is compiled in and checked by a test: a parse failure is a build defect,
        // and an empty table (every dtype unmeasured) is the safe reading of it.
        let parsed: FloorTable = serde_json::from_str(HONEST_FLOORS).unwrap_or(FloorTable {
            measured: Vec::new(),
        });
        let mut per: Vec<(String, f64)> = Vec::new();
        for m in parsed.measured {
            let c = m
                .depth
                .iter()
                .zip(&m.rel_l2)
                .filter(|(d, r)| **d > 0 && r.is_finite())
                .map(|(d, r)| r / (*d + 1) as f64)
                .fold(0.0_f64, f64::max);
            match per.iter_mut().find(|(d, _)| *d == m.dtype) {
                Some((_, x)) => *x = x.max(c),
                None => per.push((m.dtype, c)),
            }
        }
        per
    });
    let label = crate::util::device::dtype_label(dtype);
    table
        .iter()
        .find(|(d, _)| d == label)
        .map(|(_, c)| *c)
        .filter(|c| *c > 0.0)
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
            dtype: DType::BF16,
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
    fn without_a_floor_the_measured_envelope_judges() {
        let th = thresholds(DType::BF16);
        // 6.4e-2 after 6 layers is honest bf16 rounding (golden MoE model vs its f64 truth).
        assert_eq!(classify(judged(6.4e-2, None, 6), th), Verdict::Ok);
        // q/k L2 norm skipped: 0.75 at layers.1 of the golden MoE model.
        assert_eq!(classify(judged(0.75, None, 2), th), Verdict::Mismatch);
        // Honest bf16 rounding after 64 layers: √2 × the largest floor measured there.
        let deep = std::f64::consts::SQRT_2 * expected_floor(DType::BF16, 64).expect("bf16");
        assert_eq!(classify(judged(deep, None, 64), th), Verdict::Ok);
        // f32: the decay g rounded to bf16 (4.7e-4 at layers.1 of the golden dense model) is
        // far beyond every f32 floor measured at that depth; honest f32 is not.
        let f32_th = thresholds(DType::F32);
        let f32_judged = |rel, depth| Judged {
            dtype: DType::F32,
            ..judged(rel, None, depth)
        };
        assert_ne!(classify(f32_judged(4.7e-4, 2), f32_th), Verdict::Ok);
        let honest = std::f64::consts::SQRT_2 * expected_floor(DType::F32, 64).expect("f32");
        assert_eq!(classify(f32_judged(honest, 64), f32_th), Verdict::Ok);
        // f64 has no measurements: the depth-scaled band, mismatch only.
        assert!(expected_floor(DType::F64, 3).is_none());
        assert!((honest_bound(thresholds(DType::F64), 3) - 2e-8).abs() < 1e-20);
    }

    #[test]
    fn the_measured_table_covers_the_16_and_32_bit_dtypes() {
        for d in [DType::F32, DType::BF16, DType::F16] {
            let c = per_layer_floor(d).expect("measured");
            // Per-layer growth of the floor: a few unit roundoffs, nowhere near the static band.
            assert!(c > 0.0 && c < thresholds(d).fail, "{d:?}: {c}");
        }
    }

    #[test]
    fn non_finite_is_always_a_mismatch() {
        let th = thresholds(DType::F32);
        let mut j = judged(0.0, Some(1e-6), 2);
        j.non_finite = true;
        assert_eq!(classify(j, th), Verdict::Mismatch);
        assert_eq!(classify(judged(f64::NAN, None, 2), th), Verdict::Mismatch);
        // A NaN or infinite floor bounds nothing: even a tiny distance is not judged ok by it.
        assert_eq!(
            classify(judged(1e-9, Some(f64::NAN), 2), th),
            Verdict::Mismatch
        );
        assert_eq!(
            classify(judged(1e-9, Some(f64::INFINITY), 2), th),
            Verdict::Mismatch
        );
    }
}
