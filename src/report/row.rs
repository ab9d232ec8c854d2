//! One compared tensor of a report: its statistics ([`DiffStats`], as `metrics` computed them)
//! and their judgement (floors, bands, the truth's distances, the verdict), kept apart so that a
//! new statistic is added in one place. The JSON row of `hsdiff.report/v1` interleaves the two
//! and leaves some statistics out; [`RowV1`] writes that row from the two parts.

use serde::{Serialize, Serializer};

use crate::compare::Kind;
use crate::compare::judge::Judgement;
use crate::compare::metrics::{DiffStats, Location};
use crate::compare::verdict::Verdict;

#[derive(Debug, Clone, PartialEq)]
pub struct TensorRow {
    pub name: String,
    pub kind: Kind,
    pub layer: Option<usize>,
    /// A against B. A state has no token axis (its rows are value heads): its `per_token_rel`
    /// is empty.
    pub stats: DiffStats,
    pub judgement: Judgement,
}

impl TensorRow {
    /// NaN/Inf elements on side A and on side B.
    pub fn non_finite(&self) -> (usize, usize) {
        let s = &self.stats;
        (s.nan_a + s.inf_a, s.nan_b + s.inf_b)
    }
}

/// A tensor row as `hsdiff.report/v1` writes it (docs/report-schema.md): these keys in this
/// order, borrowed from the row's two parts. `DiffStats::elements` and `norm_b` are not part of
/// v1.
#[derive(Serialize)]
struct RowV1<'a> {
    name: &'a str,
    kind: Kind,
    layer: Option<usize>,
    mean_abs: f64,
    max_abs: f64,
    max_abs_at: Location,
    rel_l2: f64,
    cosine: f64,
    cosine_min: f64,
    cosine_min_token: usize,
    floor: Option<f64>,
    ratio_to_floor: Option<f64>,
    floor_a: Option<f64>,
    floor_b: Option<f64>,
    set_aside_tokens: &'a [usize],
    rel_l2_judged: Option<f64>,
    floor_judged: Option<f64>,
    depth: usize,
    band: Option<f64>,
    expected_floor: Option<f64>,
    a_vs_truth: Option<f64>,
    b_vs_truth: Option<f64>,
    nan_a: usize,
    inf_a: usize,
    nan_b: usize,
    inf_b: usize,
    non_finite_disagree: usize,
    non_finite_disagree_at: Option<Location>,
    non_finite_both: usize,
    non_finite_both_at: Option<Location>,
    verdict: Verdict,
    per_token_rel: &'a [f64],
}

impl<'a> From<&'a TensorRow> for RowV1<'a> {
    fn from(r: &'a TensorRow) -> Self {
        let (s, j) = (&r.stats, &r.judgement);
        RowV1 {
            name: &r.name,
            kind: r.kind,
            layer: r.layer,
            mean_abs: s.mean_abs,
            max_abs: s.max_abs,
            max_abs_at: s.max_abs_at,
            rel_l2: s.rel_l2,
            cosine: s.cosine,
            cosine_min: s.cosine_min,
            cosine_min_token: s.cosine_min_token,
            floor: j.floor,
            ratio_to_floor: j.ratio_to_floor,
            floor_a: j.floor_a,
            floor_b: j.floor_b,
            // Schema v1 keeps the key: no token is set aside any more (routing flips are judged
            // by truths under each side's routing instead).
            set_aside_tokens: &[],
            rel_l2_judged: j.rel_l2_judged,
            floor_judged: j.floor_judged,
            depth: j.depth,
            band: j.band,
            expected_floor: j.expected_floor,
            a_vs_truth: j.a_vs_truth,
            b_vs_truth: j.b_vs_truth,
            nan_a: s.nan_a,
            inf_a: s.inf_a,
            nan_b: s.nan_b,
            inf_b: s.inf_b,
            non_finite_disagree: s.non_finite_disagree,
            non_finite_disagree_at: s.non_finite_disagree_at,
            non_finite_both: s.non_finite_both,
            non_finite_both_at: s.non_finite_both_at,
            verdict: j.verdict,
            per_token_rel: &s.per_token_rel,
        }
    }
}

impl Serialize for TensorRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RowV1::from(self).serialize(s)
    }
}
