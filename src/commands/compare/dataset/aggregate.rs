//! From per-pair reports to the dataset report's rows: one [`SampleRow`] per pair, the
//! per-layer distribution across samples ([`LayerRow`]), the dataset verdict and headline
//! (`headline`).
//! `hsdiff merge` calls [`finish`] on the merged samples, so a merge equals the whole run.

use crate::capture::Key;
use crate::commands::compare::pair::PairOutcome;
use crate::compare::verdict::Verdict;
use crate::report::dataset::{
    DatasetReport, LayerRow, LeftOut, RowFigures, SampleRow, TrainedFigures,
};
use crate::report::{Report, TensorRow};

/// The worst ×floor and rel L2 of a report, and the row of the worst.
fn worst(report: &Report) -> (Option<f64>, Option<String>, f64) {
    let mut x: Option<(f64, &str)> = None;
    let mut rel = 0f64;
    // A row holding NaN/Inf values has its distance summed over the finite elements alone (0
    // where every element is NaN on both sides): the first such row is the worst, its figures
    // NaN, so that no sample's worst figure reads as agreement.
    let mut non_finite: Option<&TensorRow> = None;
    for t in &report.tensors {
        if t.non_finite() != (0, 0) {
            non_finite = non_finite.or(Some(t));
            continue;
        }
        // NaN is the worst there is.
        let r = if t.stats.rel_l2.is_nan() {
            f64::INFINITY
        } else {
            t.stats.rel_l2
        };
        rel = rel.max(r);
        if let Some(v) = t.judgement.ratio_to_floor {
            let v = if v.is_nan() { f64::INFINITY } else { v };
            if x.is_none_or(|(w, _)| v > w) {
                x = Some((v, &t.name));
            }
        }
    }
    if let Some(t) = non_finite {
        let x = (t.judgement.ratio_to_floor.is_some() || x.is_some()).then_some(f64::NAN);
        return (x, Some(t.name.clone()), f64::NAN);
    }
    let worst_name = x.map(|(_, n)| n.to_string()).or_else(|| {
        report
            .tensors
            .iter()
            .max_by(|p, q| p.stats.rel_l2.total_cmp(&q.stats.rel_l2))
            .map(|t| t.name.clone())
    });
    (x.map(|(v, _)| v), worst_name, rel)
}

/// A row's figures for the dataset. A row holding NaN/Inf values has its distance summed over
/// the finite elements alone (0 where every element is NaN on both sides): its figures are NaN,
/// so that no cell of the dataset's tables reads as agreement.
fn row_figures(t: &TensorRow) -> RowFigures {
    let finite = t.non_finite() == (0, 0);
    let or_nan = |x: f64| if finite { x } else { f64::NAN };
    RowFigures {
        rel_l2: or_nan(t.stats.rel_l2),
        x_floor: t.judgement.ratio_to_floor.map(or_nan),
        verdict: t.judgement.verdict,
    }
}

/// The dataset's row for one compared pair.
pub fn sample_row(
    pair: usize,
    (id, id_b): (String, Option<String>),
    by_id: bool,
    files: (String, String),
    outcome: &PairOutcome,
) -> SampleRow {
    let r = &outcome.report;
    let (worst_x_floor, worst_tensor, worst_rel_l2) = worst(r);
    let rows = r
        .tensors
        .iter()
        .map(|t| (t.name.clone(), row_figures(t)))
        .collect();
    let trained = outcome.trained.as_ref().map(|t| {
        let (x, _, rel) = worst(&t.report);
        TrainedFigures {
            positions: t.positions,
            of: t.of,
            verdict: t.report.verdict,
            first_divergent: t.report.first_divergent.clone(),
            worst_x_floor: x,
            worst_rel_l2: rel,
        }
    });
    SampleRow {
        pair,
        id,
        id_b,
        paired_by: if by_id { "id" } else { "token ids" }.to_string(),
        verdict: r.verdict,
        first_divergent: r.first_divergent.clone(),
        worst_x_floor,
        worst_tensor,
        worst_rel_l2,
        positions: r.inputs.tokens,
        trained,
        untrained: outcome.untrained,
        file_a: files.0,
        file_b: files.1,
        rows,
        order: r.tensors.iter().map(|t| t.name.clone()).collect(),
        zero_padding: outcome.zero_padding.as_ref().map(|p| LeftOut {
            left_out: p.left_out,
            of: p.of,
        }),
        only_a: held_by_one(
            &outcome.held_by_one.tensors_a,
            &outcome.held_by_one.states_a,
        ),
        only_b: held_by_one(
            &outcome.held_by_one.tensors_b,
            &outcome.held_by_one.states_b,
        ),
        unnamed_a: outcome.unnamed.0.clone(),
        unnamed_b: outcome.unnamed.1.clone(),
        layer_id_slips: outcome.layer_id_slips.clone(),
    }
}

/// One side's one-sided tensors: the rows first, then the final states.
fn held_by_one(tensors: &[Key], states: &[Key]) -> Vec<String> {
    tensors.iter().chain(states).map(Key::to_string).collect()
}

/// Nearest-rank quantile of sorted `xs` (`q` in (0, 1]).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of sorted `xs` by rank (mean of the two middle values for an even count): a NaN
/// sorted last counts as the largest value, so the median is NaN only when one is in the middle.
fn ranked_median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

/// Every row name in forward order: the first sample's order, then names only later samples
/// hold, each after the name it followed there.
fn row_order(samples: &[SampleRow]) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for s in samples {
        let mut at = 0;
        for n in &s.order {
            match order.iter().position(|o| o == n) {
                Some(p) => at = p + 1,
                None => {
                    order.insert(at, n.clone());
                    at += 1;
                }
            }
        }
    }
    order
}

/// Per-layer aggregates of `metric` (`x_floor` or `rel_l2`).
pub fn layers(samples: &[SampleRow], metric: &str) -> Vec<LayerRow> {
    let mut out = Vec::new();
    for name in row_order(samples) {
        let mut values: Vec<(f64, &str)> = Vec::new();
        let mut flagged = 0;
        for s in samples {
            let Some(f) = s.rows.get(&name) else {
                continue;
            };
            // A row with no ×floor (a floor of 0: the embedding lookup is exact in every
            // dtype) is 0× when equal; unequal, it is off any scale and sorts as the worst
            // finite row.
            let v = match (metric, f.x_floor) {
                _ if f.rel_l2.is_nan() => f64::NAN,
                ("x_floor", Some(x)) => x,
                ("x_floor", None) if f.rel_l2 == 0.0 => 0.0,
                ("x_floor", None) => f64::INFINITY,
                _ => f.rel_l2,
            };
            // NaN (non-finite evidence) sorts last, after any figure, and is the worst sample:
            // the quantiles it reaches are NaN.
            values.push((if v.is_nan() { f64::NAN } else { v }, &s.id));
            flagged += usize::from(f.verdict != Verdict::Ok);
        }
        let mut sorted: Vec<f64> = values.iter().map(|v| v.0).collect();
        sorted.sort_by(f64::total_cmp);
        // The first of equal values: the sample order decides ties.
        let worst = values
            .iter()
            .fold(None::<&(f64, &str)>, |w, v| match w {
                Some(w) if w.0.total_cmp(&v.0).is_ge() => Some(w),
                _ => Some(v),
            })
            .map(|v| v.1.to_string())
            .unwrap_or_default();
        out.push(LayerRow {
            samples: values.len(),
            median: ranked_median(&sorted),
            p95: quantile(&sorted, 0.95),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            worst_sample: worst,
            flagged,
            name,
        });
    }
    out
}

/// Fills in what follows from the samples: the metric, the per-layer rows, the verdict and the
/// headline. `report.samples` is sorted into pairing order first.
pub fn finish(report: &mut DatasetReport) {
    report.samples.sort_by_key(|s| s.pair);
    report
        .failed
        .sort_by(|x, y| (&x.file_a, &x.file_b).cmp(&(&y.file_a, &y.file_b)));
    let calibrated = !report.samples.is_empty()
        && report
            .samples
            .iter()
            .all(|s| s.rows.values().any(|r| r.x_floor.is_some()));
    report.metric = if calibrated { "x_floor" } else { "rel_l2" }.to_string();
    report.layers = layers(&report.samples, &report.metric);
    report.verdict = report
        .samples
        .iter()
        .map(|s| s.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    report.sample_notes = sample_notes(&report.samples);
    report.summary = super::headline::headline(report);
}

/// What the samples' rows say beyond their figures: the zero padding left out, the samples whose
/// `loss_mask` trains on nothing, the tensors one side alone held and those no name rule read
/// (grouped: a dataset's samples usually share one layout).
fn sample_notes(samples: &[SampleRow]) -> Vec<String> {
    let mut notes = Vec::new();
    let padded: Vec<String> = samples
        .iter()
        .filter_map(|s| {
            s.zero_padding
                .map(|p| format!("{} {} of {}", s.id, p.left_out, p.of))
        })
        .collect();
    if !padded.is_empty() {
        notes.push(format!(
            "zero padding left out in {} sample(s) (positions zero in every hidden state of both \
             sides, no attention_mask: no forward writes an all-zero hidden state): {}",
            padded.len(),
            padded.join(", ")
        ));
    }
    let untrained: Vec<&str> = samples
        .iter()
        .filter(|s| s.untrained)
        .map(|s| s.id.as_str())
        .collect();
    if !untrained.is_empty() {
        notes.push(format!(
            "loss_mask is 0 at every position in {} sample(s): no position is trained on, so \
             nothing is compared at trained positions there (their verdicts are of all \
             positions): {}",
            untrained.len(),
            untrained.join(", ")
        ));
    }
    notes.extend(grouped(
        samples,
        |s| (&s.only_a, &s.only_b),
        |a, b| crate::compare::one_sided_note("tensor", a, b),
    ));
    notes.extend(grouped(
        samples,
        |s| (&s.unnamed_a, &s.unnamed_b),
        crate::compare::unnamed_note,
    ));
    notes
}

/// A sample's two lists of one kind of tensor: A's and B's.
type Sides<'s> = (&'s [String], &'s [String]);

/// "in N of M samples (a, b, c and K more): NOTE" for each distinct pair of lists `sides` gives
/// a sample (A's, B's) that `note` has a note for, in the order of the samples that first hold it.
fn grouped<'s>(
    samples: &'s [SampleRow],
    sides: impl Fn(&'s SampleRow) -> Sides<'s>,
    note: impl Fn(&[String], &[String]) -> Option<String>,
) -> Vec<String> {
    let mut groups: Vec<(Sides, Vec<&str>)> = Vec::new();
    for s in samples {
        let lists = sides(s);
        match groups.iter_mut().find(|(l, _)| *l == lists) {
            Some((_, ids)) => ids.push(&s.id),
            None => groups.push((lists, vec![&s.id])),
        }
    }
    groups
        .into_iter()
        .filter_map(|((a, b), ids)| {
            let what = note(a, b)?;
            let shown: Vec<&str> = ids.iter().take(3).copied().collect();
            let more = match ids.len() - shown.len() {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            Some(format!(
                "in {} of {} samples ({}{more}): {what}",
                ids.len(),
                samples.len(),
                shown.join(", ")
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.95), 19.0);
        assert_eq!(quantile(&v, 1.0), 20.0);
        assert_eq!(quantile(&[3.0], 0.95), 3.0);
    }

    #[test]
    fn a_nan_ranks_last_and_reaches_the_median_only_from_the_middle() {
        assert_eq!(ranked_median(&[1.0, 2.0, f64::NAN]), 2.0);
        assert!(ranked_median(&[1.0, f64::NAN]).is_nan());
        assert_eq!(ranked_median(&[1.0, 3.0]), 2.0);
        assert!(ranked_median(&[]).is_nan());
    }
}
