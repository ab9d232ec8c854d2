//! `--calibrate N`: the floor of each row measured on the first N pairs (the median across
//! them) and applied to the pairs compared without a model: each row judged again by
//! [`crate::compare::judge`] with its learned floor, its ×floor taken from that judgement and its
//! verdict the worse of the two (NaN and what no rounding explains stay flagged).

use std::collections::BTreeMap;

use crate::compare::judge::{Evidence, judge};
use crate::compare::metrics::stats::median;
use crate::compare::verdict::Verdict;
use crate::report::Report;
use crate::report::dataset::SampleRow;

#[derive(Debug, Default)]
pub struct Floors {
    by_row: BTreeMap<String, Vec<f64>>,
}

impl Floors {
    /// Takes the floors of a calibrated pair.
    pub fn learn(&mut self, report: &Report) {
        for t in &report.tensors {
            if let Some(f) = t.judgement.floor.filter(|f| f.is_finite()) {
                self.by_row.entry(t.name.clone()).or_default().push(f);
            }
        }
    }

    fn floor(&self, name: &str) -> Option<f64> {
        self.by_row
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| median(v))
    }

    /// Judges an uncalibrated pair's rows against the learned floors.
    pub fn apply(&self, row: &mut SampleRow, report: &Report) {
        for t in &report.tensors {
            let (Some(floor), Some(fig)) = (self.floor(&t.name), row.rows.get_mut(&t.name)) else {
                continue;
            };
            let by_floor = judge(&Evidence::against_floor(
                &t.stats,
                floor,
                t.judgement.depth,
                report.thresholds.dtype.0,
            ));
            // A row with NaN/Inf values keeps NaN figures ([`super::aggregate`]).
            fig.x_floor = by_floor
                .ratio_to_floor
                .map(|x| if fig.rel_l2.is_nan() { f64::NAN } else { x });
            fig.verdict = fig.verdict.max(by_floor.verdict);
        }
        row.verdict = row
            .rows
            .values()
            .map(|f| f.verdict)
            .max()
            .unwrap_or(Verdict::Ok)
            .max(report.verdict);
        row.first_divergent = row
            .order
            .iter()
            .find(|n| row.rows.get(*n).is_some_and(|f| f.verdict != Verdict::Ok))
            .cloned();
        let worst = row
            .order
            .iter()
            .filter_map(|n| row.rows.get(n).and_then(|f| f.x_floor).map(|x| (x, n)))
            .max_by(|p, q| p.0.total_cmp(&q.0));
        if let Some((x, n)) = worst {
            row.worst_x_floor = Some(x);
            row.worst_tensor = Some(n.clone());
        }
    }
}
