//! The one judge of a row, wherever hsdiff reports one — a pair's report, a `paths` row against
//! its full prefill, a dataset row against the floor learned on the calibration pairs: the row's
//! statistics, its floors, its depth and the dtype it is judged at go in; its [`Judgement`] (the
//! verdict by [`super::verdict`]'s rules, ×floor, and the figures the verdict read) comes out.

use candle_core::DType;

use super::metrics::DiffStats;
use super::verdict::{
    Judged, Verdict, classify, expected_floor, ratio_to_floor, thresholds, uncalibrated_bounds,
};

/// What a row is judged from.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// A against B.
    pub stats: &'a DiffStats,
    /// Each side's floor: the reference backend at that side's dtype against the f64 truth (the
    /// same number when the sides share a dtype); None when uncalibrated, or where the truth run
    /// lacks the tensor.
    pub floor_a: Option<f64>,
    pub floor_b: Option<f64>,
    /// Each side's rel L2 against the f64 truth; None without a truth, and for a side standing
    /// in with the truth's own value.
    pub a_vs_truth: Option<f64>,
    pub b_vs_truth: Option<f64>,
    /// The sides route apart at MoE layers: each was measured against the truth under its own
    /// routing, and the worse of the two is judged instead of A against B.
    pub each_side: bool,
    /// Decoder layers the tensor has passed through (0: the embedding output).
    pub depth: usize,
    /// The dtype whose bands judge the row, and whose expected floor stands in for a missing
    /// floor.
    pub dtype: DType,
}

impl<'a> Evidence<'a> {
    /// A row judged by one floor, with no distances from a truth of its own (a path against its
    /// full prefill, a dataset row against its learned floor).
    pub fn against_floor(stats: &'a DiffStats, floor: f64, depth: usize, dtype: DType) -> Self {
        Evidence {
            stats,
            floor_a: Some(floor),
            floor_b: Some(floor),
            a_vs_truth: None,
            b_vs_truth: None,
            each_side: false,
            depth,
            dtype,
        }
    }
}

/// What a row's statistics mean: the floors and bands it is judged by, each side's distance
/// from the f64 truth, and the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The reference backend's own rel L2 against the f64 truth at this dtype, this tensor
    /// (the larger of the two sides' floors when their dtypes differ).
    pub floor: Option<f64>,
    /// rel L2 judged / floor judged.
    pub ratio_to_floor: Option<f64>,
    /// Each side's own floor (the reference at that side's dtype vs the truth).
    pub floor_a: Option<f64>,
    pub floor_b: Option<f64>,
    /// Where the sides route apart at MoE layers, the distance the verdict judges instead of A
    /// against B: the worse side's rel L2 against the f64 truth under its own routing, and that
    /// side's floor (under the same routing); None otherwise.
    pub rel_l2_judged: Option<f64>,
    pub floor_judged: Option<f64>,
    /// Decoder layers this tensor has passed through (0: the embedding output).
    pub depth: usize,
    /// Without a floor: the rel L2 above which the row is a mismatch (K × the expected floor,
    /// or the depth-scaled band for a dtype without measurements).
    pub band: Option<f64>,
    /// Without a floor: the floor expected at this depth and dtype from hsdiff's measurements
    /// (data/honest_floors.json).
    pub expected_floor: Option<f64>,
    /// Each side's rel L2 against the f64 truth ("who is right").
    pub a_vs_truth: Option<f64>,
    pub b_vs_truth: Option<f64>,
    pub verdict: Verdict,
}

/// Judges one row (the rules: [`super::verdict`]).
pub fn judge(e: &Evidence) -> Judgement {
    // The larger side's floor judges (two dtypes: the coarser side's rounding dominates).
    let floor = match (e.floor_a, e.floor_b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let th = thresholds(e.dtype);
    let verdict_of = |rel_l2: f64, floor: Option<f64>| {
        classify(
            Judged {
                rel_l2,
                floor,
                non_finite: e.stats.non_finite_disagree + e.stats.non_finite_both > 0,
                depth: e.depth,
                dtype: e.dtype,
            },
            th,
        )
    };
    let per_side = e
        .each_side
        .then(|| {
            worse_side(
                (e.a_vs_truth, e.floor_a),
                (e.b_vs_truth, e.floor_b),
                |rel, floor| verdict_of(rel, Some(floor)),
            )
        })
        .flatten();
    let (rel_judged, floor_judged) = match per_side {
        Some((rel, floor)) => (rel, Some(floor)),
        None => (e.stats.rel_l2, floor),
    };
    let verdict = verdict_of(rel_judged, floor_judged);
    // Rows without a floor (uncalibrated, or a tensor the truth run lacks) are judged by the
    // depth-scaled band.
    let unfloored = floor_judged.is_none();
    Judgement {
        floor: floor_judged,
        ratio_to_floor: ratio_to_floor(rel_judged, floor_judged),
        floor_a: e.floor_a,
        floor_b: e.floor_b,
        rel_l2_judged: per_side.map(|(rel, _)| rel),
        floor_judged: per_side.map(|(_, floor)| floor),
        depth: e.depth,
        band: unfloored.then(|| uncalibrated_bounds(e.dtype, th, e.depth).1),
        expected_floor: unfloored
            .then(|| expected_floor(e.dtype, e.depth))
            .flatten(),
        a_vs_truth: e.a_vs_truth,
        b_vs_truth: e.b_vs_truth,
        verdict,
    }
}

/// The worse of two sides judged each against its own truth: (its distance, its floor), the
/// side with the worse verdict by its own floor, and of two alike the one with the larger ratio
/// to its floor (a NaN distance ranks above any). A side with a zero floor (f64 arithmetic, the
/// truth's own) has no ratio to rank by: it is the worse only by its verdict, so that its
/// storage rounding over a zero floor never stands in for the other side's measured distance.
/// None when either side lacks a distance or a floor.
fn worse_side(
    a: (Option<f64>, Option<f64>),
    b: (Option<f64>, Option<f64>),
    verdict: impl Fn(f64, f64) -> Verdict,
) -> Option<(f64, f64)> {
    let (ra, fa) = (a.0?, a.1?);
    let (rb, fb) = (b.0?, b.1?);
    let rank = |r: f64, f: f64| {
        let ratio = if r.is_nan() {
            f64::INFINITY
        } else {
            ratio_to_floor(r, Some(f)).unwrap_or(0.0)
        };
        (verdict(r, f), ratio)
    };
    let ((va, xa), (vb, xb)) = (rank(ra, fa), rank(rb, fb));
    Some(if vb > va || (vb == va && xb > xa) {
        (rb, fb)
    } else {
        (ra, fa)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::cases::SplitMix;
    use crate::compare::metrics::diff_stats;
    use crate::compare::verdict::{K_DRIFT, K_MISMATCH};
    use candle_core::{Device, Tensor};

    /// The statistics of B plus an error of relative size `rel` (in expectation) against B, over
    /// `[1, 8, 16]` normal values drawn from `seed`.
    fn stats_at(seed: u64, rel: f64) -> DiffStats {
        let mut draw = SplitMix::new(seed);
        let b = draw.normals(128, 1.0);
        let noise = draw.normals(128, rel);
        let a = b.iter().zip(&noise).map(|(x, e)| x + e).collect();
        let t = |v: Vec<f64>| Tensor::from_vec(v, (1, 8, 16), &Device::Cpu).expect("tensor");
        diff_stats("layers.3", &t(a), &t(b)).expect("stats")
    }

    #[test]
    fn a_floor_judges_by_its_multiples() {
        for seed in 1..20 {
            let stats = stats_at(seed, 0.1);
            let rel = stats.rel_l2;
            let at = |floor: f64| judge(&Evidence::against_floor(&stats, floor, 3, DType::BF16));
            // Above the ok band of bf16 (1e-2): the floor's multiples decide.
            assert_eq!(at(rel / (K_MISMATCH * 1.1)).verdict, Verdict::Mismatch);
            assert_eq!(at(rel / (K_DRIFT * 1.1)).verdict, Verdict::Drift);
            let ok = at(rel / (K_DRIFT * 0.9));
            assert_eq!(ok.verdict, Verdict::Ok);
            assert!((ok.ratio_to_floor.expect("×floor") - K_DRIFT * 0.9).abs() < 1e-9);
            assert_eq!((ok.band, ok.expected_floor), (None, None));
        }
    }

    #[test]
    fn without_a_floor_the_depth_judges() {
        let stats = stats_at(7, 0.5);
        let at_depth = |depth| {
            judge(&Evidence {
                floor_a: None,
                floor_b: None,
                ..Evidence::against_floor(&stats, 0.0, depth, DType::BF16)
            })
        };
        // rel L2 ≈ 0.5: more than honest bf16 rounding after one layer, within it after 60.
        let shallow = at_depth(1);
        let deep = at_depth(60);
        assert_eq!(shallow.verdict, Verdict::Mismatch);
        assert_eq!(deep.verdict, Verdict::Ok);
        assert!(shallow.band.expect("band") < deep.band.expect("band"));
        assert_eq!(
            deep.expected_floor,
            expected_floor(DType::BF16, 60),
            "the measured envelope at that depth"
        );
        assert_eq!((deep.floor, deep.ratio_to_floor), (None, None));
    }

    #[test]
    fn nan_is_never_ok() {
        let mut stats = stats_at(3, 1e-6);
        stats.rel_l2 = f64::NAN;
        for floor in [Some(1.0), None] {
            let e = Evidence {
                floor_a: floor,
                floor_b: floor,
                ..Evidence::against_floor(&stats, 0.0, 2, DType::F32)
            };
            assert_eq!(judge(&e).verdict, Verdict::Mismatch, "floor {floor:?}");
        }
        // A side apart whose distance from its truth is NaN is the worse side, whatever the other.
        let stats = stats_at(3, 1e-6);
        let e = Evidence {
            a_vs_truth: Some(1e-7),
            b_vs_truth: Some(f64::NAN),
            each_side: true,
            ..Evidence::against_floor(&stats, 1e-3, 2, DType::F32)
        };
        let j = judge(&e);
        assert_eq!(j.verdict, Verdict::Mismatch);
        assert!(j.rel_l2_judged.expect("judged").is_nan());
    }

    #[test]
    fn sides_apart_are_judged_by_the_worse_against_its_own_floor() {
        let stats = stats_at(11, 0.5);
        let e = Evidence {
            floor_a: Some(1e-2),
            floor_b: Some(4e-2),
            a_vs_truth: Some(3e-2),
            b_vs_truth: Some(5e-2),
            each_side: true,
            ..Evidence::against_floor(&stats, 0.0, 4, DType::BF16)
        };
        let j = judge(&e);
        // A is 3× its floor, B 1.25× its: A decides, however far A is from B.
        assert_eq!((j.rel_l2_judged, j.floor_judged), (Some(3e-2), Some(1e-2)));
        assert_eq!(j.floor, Some(1e-2));
        assert_eq!(j.verdict, Verdict::Drift);
        // Judged A against B instead, the larger floor judges.
        let together = judge(&Evidence {
            each_side: false,
            ..e
        });
        assert_eq!(together.floor, Some(4e-2));
        assert_eq!(together.verdict, Verdict::Mismatch);
    }

    #[test]
    fn a_side_with_a_zero_floor_never_hides_the_other() {
        let mut draw = SplitMix::new(5);
        for _ in 0..50 {
            let stats = stats_at(draw.next_u64(), 0.5);
            // A: a float64 capture, its floor zero and its distance storage rounding.
            let storage = 1e-16 * (1.0 + draw.uniform());
            let floor_b = 1e-2 * (1.0 + draw.uniform());
            let apart = |b_vs_truth: f64| Evidence {
                floor_a: Some(0.0),
                floor_b: Some(floor_b),
                a_vs_truth: Some(storage),
                b_vs_truth: Some(b_vs_truth),
                each_side: true,
                ..Evidence::against_floor(&stats, 0.0, 4, DType::BF16)
            };
            // B's honest rounding: B is judged and measured, not A's 0/0.
            let honest = judge(&apart(floor_b * (0.5 + draw.uniform())));
            assert_eq!(honest.verdict, Verdict::Ok);
            assert_eq!(honest.floor_judged, Some(floor_b));
            assert!(honest.ratio_to_floor.expect("×floor") > 0.4);
            // B with a bug far past its floor: a mismatch.
            let bug = judge(&apart(floor_b * (K_MISMATCH + 1.0 + draw.uniform())));
            assert_eq!(bug.verdict, Verdict::Mismatch);
            // A far from the truth over its zero floor is the worse side, whatever B's ratio.
            let wrong_a = judge(&Evidence {
                a_vs_truth: Some(0.2),
                ..apart(floor_b)
            });
            assert_eq!(wrong_a.verdict, Verdict::Mismatch);
            assert_eq!(wrong_a.rel_l2_judged, Some(0.2));
        }
    }
}
