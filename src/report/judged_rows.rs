//! The rows of a report: each planned tensor's statistics of A against B, each side's distance
//! from the f64 truth and its floor, and the row's judgement ([`crate::compare::judge`]).

use candle_core::{DType, Tensor};

use super::TensorRow;
use super::build::{Comparison, DisjointLayers, each_side};
use crate::capture::Key;
use crate::compare::judge::{Evidence, judge};
use crate::compare::metrics::{DiffStats, diff_stats};
use crate::compare::verdict::thresholds;
use crate::compare::{Kind, PlannedRow, TensorSource};
use crate::error::{Error, Result};

/// Every planned row, judged, in plan order; and the logit gap under which a top-2 order is
/// within the noise (None: no logits row).
pub(super) fn judged_rows(c: &Comparison) -> Result<(Vec<TensorRow>, Option<f64>)> {
    let num_layers = c.input.num_layers.unwrap_or_else(|| {
        c.rows
            .iter()
            .filter_map(|r| r.layer)
            .max()
            .map_or(0, |l| l + 1)
    });
    let each_side = each_side(c);
    let mut tensors = Vec::with_capacity(c.rows.len());
    let mut tie_margin = None;
    for row in &c.rows {
        let mut stats = pair_stats(c, row.key)?;
        let truth = from_truth(c, row.key)?;
        if row.kind == Kind::Logits {
            tie_margin = Some(truth.tie_margin(&stats, c.dtype));
        }
        let judgement = judge(&Evidence {
            stats: &stats,
            floor_a: truth.floor_a.as_ref().map(|s| s.rel_l2),
            floor_b: truth.floor_b.as_ref().map(|s| s.rel_l2),
            a_vs_truth: truth.a,
            b_vs_truth: truth.b,
            each_side,
            depth: depth(row, num_layers),
            dtype: c.dtype,
        });
        // A state has no token axis (its rows are value heads): no per-token profile.
        if row.kind == Kind::State {
            stats.per_token_rel.clear();
        }
        tensors.push(TensorRow {
            name: row.key.to_string(),
            kind: row.kind,
            layer: row.layer,
            stats,
            judgement,
        });
    }
    Ok((tensors, tie_margin))
}

/// A row's distances from the f64 truth (all None when uncalibrated): each side's floor run's
/// statistics, and each side's rel L2.
#[derive(Default)]
struct FromTruth {
    floor_a: Option<DiffStats>,
    floor_b: Option<DiffStats>,
    a: Option<f64>,
    b: Option<f64>,
}

impl FromTruth {
    /// Twice the RMS logit error of the worse floor run, or, without a floor, the static ok
    /// band times the logits' RMS.
    fn tie_margin(&self, stats: &DiffStats, dtype: DType) -> f64 {
        let worst_floor = [&self.floor_a, &self.floor_b]
            .into_iter()
            .flatten()
            .map(DiffStats::rms_abs)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        match worst_floor {
            Some(f) => 2.0 * f,
            None => thresholds(dtype).ok * stats.rms_b(),
        }
    }
}

fn from_truth(c: &Comparison, key: Key) -> Result<FromTruth> {
    let Some(cal) = &c.calibration else {
        return Ok(FromTruth::default());
    };
    let truth_b = cal.truth_b.unwrap_or(cal.truth);
    let floor_a = stats_vs((cal.floor_a.src, "A's floor run"), cal.truth, key)?;
    let floor_b = match &cal.floor_b {
        Some(f) => stats_vs((f.src, "B's floor run"), truth_b, key)?,
        None => floor_a.clone(),
    };
    // A side standing in with the truth's value has no distance of its own.
    let name = key.to_string();
    let stand_in = |side: fn(&DisjointLayers) -> &Vec<String>| {
        c.disjoint.as_ref().is_some_and(|o| side(o).contains(&name))
    };
    let a = if stand_in(|o| &o.truth_for_a) {
        None
    } else {
        stats_vs((c.a, "side A"), cal.truth, key)?.map(|s| s.rel_l2)
    };
    let b = if stand_in(|o| &o.truth_for_b) {
        None
    } else {
        stats_vs((c.b, "side B"), truth_b, key)?.map(|s| s.rel_l2)
    };
    Ok(FromTruth {
        floor_a,
        floor_b,
        a,
        b,
    })
}

fn fetch(src: &dyn TensorSource, side: &str, key: Key) -> Result<Tensor> {
    src.tensor(key)?
        .ok_or_else(|| Error::Compare(format!("side {side} has no tensor `{key}`")))
}

/// The statistics of A against B at `key`: summed where both files store the rows when they
/// can be lent (no copy of a layer into a tensor: most of a dataset compare's time), else from
/// the tensors. The two ways give the same bits.
fn pair_stats(c: &Comparison, key: Key) -> Result<DiffStats> {
    if let (Some(a), Some(b)) = (c.a.stored_rows(key)?, c.b.stored_rows(key)?)
        && let Some(stats) = crate::compare::metrics::diff_stats_stored(&a, &b)
    {
        // Pages of a file truncated meanwhile read as zeros: never trust sums made from them.
        crate::util::mapped::check()?;
        return Ok(stats);
    }
    let a = fetch(c.a, "A", key)?;
    let b = fetch(c.b, "B", key)?;
    let stats = diff_stats(&key.to_string(), &a, &b)?;
    if stats.elements == 0 {
        return Err(Error::Compare(format!(
            "nothing to compare: `{key}` has shape {:?}, no elements",
            a.dims()
        )));
    }
    Ok(stats)
}

/// The statistics of `src` (named `what` in an error) against the truth at `key`.
fn stats_vs(
    (src, what): (&dyn TensorSource, &str),
    truth: &dyn TensorSource,
    key: Key,
) -> Result<Option<DiffStats>> {
    match (src.tensor(key)?, truth.tensor(key)?) {
        (Some(x), Some(y)) if x.dims() != y.dims() => Err(Error::Compare(format!(
            "`{key}` has shape {:?} in {what} but {:?} in the model's f64 truth",
            x.dims(),
            y.dims()
        ))),
        (Some(x), Some(y)) => Ok(Some(diff_stats(&key.to_string(), &x, &y)?)),
        _ => Ok(None),
    }
}

/// Decoder layers a row's tensor has passed.
fn depth(row: &PlannedRow, num_layers: usize) -> usize {
    match (row.kind, row.layer) {
        (Kind::Embed, _) => 0,
        (Kind::Op, Some(l)) => l,
        (_, Some(l)) => l + 1,
        _ => num_layers,
    }
}
