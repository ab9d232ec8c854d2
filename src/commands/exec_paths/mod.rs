//! `hsdiff paths`: one backend, one dtype, several execution paths over the same tokens —
//! decode, prefill in pieces, packed documents, a left-padded batch, a low-precision stored
//! state — each compared with the full prefill of the same tokens by the same backend, with the
//! usual metrics, rounding floor and verdicts, the position where it departs, the error of its
//! final recurrent and conv states, and, when the evidence fits, the known bug it looks like.

pub mod plan;
pub mod render;
pub mod run;
pub mod signature;

use std::collections::HashMap;

use candle_core::{DType, Device};
use serde::Serialize;

use crate::backends::LinearAttentionBackend;
use crate::capture::{Captures, Key};
use crate::compare::judge::{Evidence, judge};
use crate::compare::metrics::{DiffStats, diff_stats};
use crate::compare::verdict::{K_DRIFT, Verdict, thresholds};
use crate::error::{Error, Result};
use crate::job::{Calibration, Job, Routing, Run, SideSpec, Spec};
use crate::model::Model;
use crate::util::device::dtype_label;
use crate::util::precision::coarser;

pub use plan::{Cut, PathKind, PathPlan, Skipped, plan_paths};
pub use run::{Observed, Pass, Runner};
pub use signature::{RULES, Signature};

/// One compared tensor of a path: its statistics against the full prefill and their verdict.
#[derive(Debug, Clone)]
pub struct PathRow {
    pub name: String,
    /// Per compared position (hidden states) or per head (states) in `per_token_rel`.
    pub stats: DiffStats,
    /// The reference backend's own error against the f64 truth at the floor dtype, same tensor.
    pub floor: Option<f64>,
    pub ratio_to_floor: Option<f64>,
    pub verdict: Verdict,
}

/// A path row as `hsdiff paths --format json` writes it: these keys in this order.
#[derive(Serialize)]
struct PathRowJson<'a> {
    name: &'a str,
    rel_l2: f64,
    cosine: f64,
    mean_abs: f64,
    max_abs: f64,
    floor: Option<f64>,
    ratio_to_floor: Option<f64>,
    verdict: Verdict,
    per_token_rel: &'a [f64],
}

impl Serialize for PathRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        PathRowJson {
            name: &self.name,
            rel_l2: self.stats.rel_l2,
            cosine: self.stats.cosine,
            mean_abs: self.stats.mean_abs,
            max_abs: self.stats.max_abs,
            floor: self.floor,
            ratio_to_floor: self.ratio_to_floor,
            verdict: self.verdict,
            per_token_rel: &self.stats.per_token_rel,
        }
        .serialize(s)
    }
}

/// One path's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub name: String,
    pub kind: &'static str,
    #[serde(skip)]
    pub cut: Cut,
    /// The hidden states' verdict (what the known-bug signatures read).
    pub verdict: Verdict,
    /// The final states' verdict, apart: a state can be wrong while every output so far is
    /// right (a prefill whose padding polluted only the state it hands on).
    pub state_verdict: Verdict,
    /// The dtype whose floor and bands judge this path (the state dtype when it is coarser).
    pub floor_dtype: String,
    /// Absolute position of the first compared token that exceeds its tensor's bound.
    pub departs_at: Option<usize>,
    /// The absolute position of each compared token (padded: batch row 0's real tokens, then
    /// row 1's).
    pub positions: Vec<usize>,
    /// Worst hidden-state row (largest rel L2).
    pub worst: Option<String>,
    pub worst_rel_l2: f64,
    pub worst_ratio_to_floor: Option<f64>,
    pub logits_rel_l2: Option<f64>,
    /// Largest rel L2 of the final recurrent states / conv windows against the full prefill's.
    pub state_recurrent_rel_l2: Option<f64>,
    pub state_conv_rel_l2: Option<f64>,
    pub signature: Option<Signature>,
    pub rows: Vec<PathRow>,
    pub state_rows: Vec<PathRow>,
}

/// Everything `hsdiff paths` reports.
#[derive(Debug, Clone, Serialize)]
pub struct PathsReport {
    pub backend: String,
    pub implementation: String,
    pub dtype: String,
    pub tokens: usize,
    pub verdict: Verdict,
    pub summary: String,
    pub paths: Vec<PathResult>,
    pub skipped: Vec<Skipped>,
}

/// Runs `plans` with `backend` at `dtype` and judges each against the full prefill.
pub fn run_paths(
    model: &Model,
    ids: &[u32],
    backend: &dyn LinearAttentionBackend,
    dtype: DType,
    device: &Device,
    plans: &[PathPlan],
    skipped: Vec<Skipped>,
) -> Result<PathsReport> {
    model.check_tokens(ids)?;
    let runner = Runner {
        model,
        ids,
        device: device.clone(),
    };
    let mut alone = FullPrefills {
        runner: &runner,
        made: HashMap::new(),
    };
    let mut results = Vec::with_capacity(plans.len());
    for plan in plans {
        // A path whose state is stored coarser than it computes is judged at the state's dtype.
        let floor_dtype = match plan.cut {
            Cut::Decode {
                state_dtype: Some(s),
                ..
            } => coarser(dtype, s),
            _ => dtype,
        };
        let got = runner.path(plan, Pass { backend, dtype })?;
        let want = alone.of(plan, backend, dtype)?;
        let (truth_run, floor_run) = calibration_runs(floor_dtype)?;
        let truth = alone.of(plan, &*truth_run.backend.open(device)?, truth_run.dtype)?;
        let floor = alone.of(plan, &*floor_run.backend.open(device)?, floor_run.dtype)?;
        results.push(judge_path(plan, &got, &want, &truth, &floor, floor_dtype)?);
    }
    signature::attach(&mut results);
    let verdict = results
        .iter()
        .map(|r| r.verdict.max(r.state_verdict))
        .max()
        .unwrap_or(Verdict::Ok);
    let summary = summary(backend.name(), dtype, &results);
    Ok(PathsReport {
        backend: backend.name().to_string(),
        implementation: backend.implementation(device),
        dtype: dtype_label(dtype).to_string(),
        tokens: ids.len(),
        verdict,
        summary,
        paths: results,
        skipped,
    })
}

/// The truth and floor runs of a path judged at `dtype`, as the job plans them for a comparison
/// of two sides of that dtype made outside it (a path and its full prefill): one way, for every
/// command, of choosing the backend and dtype that make the truth and a floor.
fn calibration_runs(dtype: DType) -> Result<(Run, Run)> {
    let side = SideSpec::File { dtype };
    let job = Job::plan(Spec {
        a: side,
        b: side,
        calibration: Calibration::Measure,
        ops: false,
        through: None,
        routing: Routing::Own,
    });
    let c = job
        .plan
        .calibration
        .ok_or_else(|| Error::Internal("a measured calibration was not planned".to_string()))?;
    Ok((job.plan.runs[c.truth], job.plan.runs[c.floor_a]))
}

/// The full-prefill runs, each made once: paths over the same tokens (decode and state-dtype)
/// share theirs.
struct FullPrefills<'r, 'a> {
    runner: &'r Runner<'a>,
    /// By the cut's [`alone_key`], backend and dtype.
    made: HashMap<(String, &'static str, DType), Observed>,
}

impl FullPrefills<'_, '_> {
    /// What `plan` should equal when `backend` runs it at `dtype`.
    fn of(
        &mut self,
        plan: &PathPlan,
        backend: &dyn LinearAttentionBackend,
        dtype: DType,
    ) -> Result<Observed> {
        let key = (format!("{:?}", alone_key(&plan.cut)), backend.name(), dtype);
        if let Some(o) = self.made.get(&key) {
            return Ok(o.clone());
        }
        let o = self.runner.alone(plan, Pass { backend, dtype })?;
        self.made.insert(key, o.clone());
        Ok(o)
    }
}

/// Paths whose full-prefill counterpart is the same run.
fn alone_key(cut: &Cut) -> Cut {
    match *cut {
        Cut::Decode { from, steps, .. } => Cut::Decode {
            from,
            steps,
            state_dtype: None,
        },
        other => other,
    }
}

/// Each tensor of `got` against `want`, judged at `dtype` by its floor: the `floor` run's
/// distance from the `truth` run at that tensor.
fn compare_rows(
    got: &Captures,
    want: &Captures,
    truth: &Captures,
    floor: &Captures,
    dtype: DType,
) -> Result<Vec<PathRow>> {
    let mut rows = Vec::new();
    for (key, a) in got.iter() {
        let name = key.to_string();
        let get = |c: &Captures| {
            c.get(key)
                .cloned()
                .ok_or_else(|| Error::Compare(format!("the full prefill has no `{name}`")))
        };
        let stats = diff_stats(&name, a, &get(want)?)?;
        let floor_rel = diff_stats(&name, &get(floor)?, &get(truth)?)?.rel_l2;
        // With a floor, the depth plays no part in the verdict.
        let judgement = judge(&Evidence::against_floor(&stats, floor_rel, 0, dtype));
        rows.push(PathRow {
            name,
            floor: judgement.floor,
            ratio_to_floor: judgement.ratio_to_floor,
            verdict: judgement.verdict,
            stats,
        });
    }
    Ok(rows)
}

/// The first of `positions` where some tensor's error passes what that tensor may have: the
/// static band of `dtype` and the drift multiple of its floor.
fn departs_at(rows: &[PathRow], positions: &[usize], dtype: DType) -> Option<usize> {
    let ok = thresholds(dtype).ok;
    (0..positions.len())
        .find(|&j| {
            rows.iter().any(|r| {
                let bound = ok.max(K_DRIFT * r.floor.unwrap_or(0.0));
                r.stats
                    .per_token_rel
                    .get(j)
                    .is_some_and(|&e| e.is_nan() || e > bound)
            })
        })
        .map(|j| positions[j])
}

/// A path's rows and states judged against its full prefill, and where it departs.
fn judge_path(
    plan: &PathPlan,
    got: &Observed,
    want: &Observed,
    truth: &Observed,
    floor: &Observed,
    floor_dtype: DType,
) -> Result<PathResult> {
    let rows = compare_rows(
        &got.hidden,
        &want.hidden,
        &truth.hidden,
        &floor.hidden,
        floor_dtype,
    )?;
    let state_rows = match (&got.states, &want.states, &truth.states, &floor.states) {
        (Some(g), Some(w), Some(t), Some(f)) => compare_rows(g, w, t, f, floor_dtype)?,
        _ => Vec::new(),
    };
    let departs_at = departs_at(&rows, &got.positions, floor_dtype);
    let worst_of = |rows: &[PathRow]| rows.iter().map(|r| r.verdict).max().unwrap_or(Verdict::Ok);
    let verdict = worst_of(&rows);
    let state_verdict = worst_of(&state_rows);
    let worst = rows
        .iter()
        .max_by(|a, b| a.stats.rel_l2.total_cmp(&b.stats.rel_l2));
    let max_of = |suffix: &str| {
        state_rows
            .iter()
            .filter(|r| r.name.ends_with(suffix))
            .map(|r| r.stats.rel_l2)
            .reduce(f64::max)
    };
    Ok(PathResult {
        name: plan.name.clone(),
        kind: plan.kind.as_str(),
        cut: plan.cut,
        verdict,
        state_verdict,
        floor_dtype: dtype_label(floor_dtype).to_string(),
        departs_at: departs_at.filter(|_| verdict != Verdict::Ok),
        positions: got.positions.clone(),
        worst: worst.map(|r| r.name.clone()),
        worst_rel_l2: worst.map_or(0.0, |r| r.stats.rel_l2),
        worst_ratio_to_floor: worst.and_then(|r| r.ratio_to_floor),
        logits_rel_l2: rows
            .iter()
            .find(|r| Key::of(&r.name) == Some(Key::Logits))
            .map(|r| r.stats.rel_l2),
        state_recurrent_rel_l2: max_of(".recurrent"),
        state_conv_rel_l2: max_of(".conv"),
        signature: None,
        rows,
        state_rows,
    })
}

fn summary(backend: &str, dtype: DType, results: &[PathResult]) -> String {
    let flagged: Vec<&PathResult> = results
        .iter()
        .filter(|r| r.verdict != Verdict::Ok)
        .collect();
    let states: Vec<&str> = results
        .iter()
        .filter(|r| r.verdict == Verdict::Ok && r.state_verdict != Verdict::Ok)
        .map(|r| r.name.as_str())
        .collect();
    if flagged.is_empty() && !states.is_empty() {
        return format!(
            "{}: the outputs of every path of {backend} at {} equal the full prefill, but the final state differs in {}",
            results
                .iter()
                .map(|r| r.state_verdict)
                .max()
                .unwrap_or(Verdict::Ok)
                .as_str(),
            dtype_label(dtype),
            states.join(", ")
        );
    }
    if flagged.is_empty() {
        return format!(
            "benign: every path of {backend} at {} equals its full prefill within the rounding floor ({} paths)",
            dtype_label(dtype),
            results.len()
        );
    }
    let first = flagged[0];
    let at = first
        .departs_at
        .map(|p| format!(" from position {p}"))
        .unwrap_or_default();
    let sig = first
        .signature
        .as_ref()
        .map(|s| format!(" — looks like: {}", s.name))
        .unwrap_or_default();
    format!(
        "{}: {} of {} paths of {backend} at {} depart from the full prefill; first `{}`{at}{sig}{}",
        first.verdict.as_str(),
        flagged.len(),
        results.len(),
        dtype_label(dtype),
        first.name,
        non_finite(first)
    )
}

/// "; NaN/Inf from `layers.0` (…)" when a flagged path's rows hold NaN or Inf: then the numbers
/// are broken (weights or a kernel), not a path departing by more than rounding.
fn non_finite(path: &PathResult) -> String {
    let bad = |r: &&PathRow| r.stats.nan_a + r.stats.inf_a + r.stats.nan_b + r.stats.inf_b > 0;
    match path.rows.iter().find(bad) {
        Some(r) => format!(
            "; NaN/Inf from `{}` ({} element(s) on the path, {} in the full prefill): the run \
             computes non-finite values (the checkpoint's weights or a kernel), not a path that \
             departs by more than rounding",
            r.name,
            r.stats.nan_a + r.stats.inf_a,
            r.stats.nan_b + r.stats.inf_b
        ),
        None => String::new(),
    }
}
