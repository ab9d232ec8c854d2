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

use crate::backends::{LinearAttentionBackend, Reference};
use crate::capture::{Captures, Key};
use crate::compare::metrics::{DiffStats, diff_stats};
use crate::compare::verdict::{Judged, K_DRIFT, Verdict, classify, ratio_to_floor, thresholds};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::util::device::dtype_label;

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

/// The coarser of two dtypes: a path whose state is stored coarser than it computes is judged
/// at the state's dtype.
fn coarser(a: DType, b: DType) -> DType {
    let rank = |d: DType| match d {
        DType::F64 => 0,
        DType::F32 => 1,
        DType::F16 => 2,
        _ => 3,
    };
    if rank(b) > rank(a) { b } else { a }
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
    let reference = Reference;
    // The full-prefill runs are shared by paths over the same tokens (decode and state-dtype).
    let mut memo: HashMap<(String, &'static str, DType), Observed> = HashMap::new();
    let mut alone =
        |plan: &PathPlan, b: &dyn LinearAttentionBackend, d: DType| -> Result<Observed> {
            let key = (format!("{:?}", alone_key(&plan.cut)), b.name(), d);
            if let Some(o) = memo.get(&key) {
                return Ok(o.clone());
            }
            let o = runner.alone(
                plan,
                Pass {
                    backend: b,
                    dtype: d,
                },
            )?;
            memo.insert(key, o.clone());
            Ok(o)
        };
    let mut results = Vec::with_capacity(plans.len());
    for plan in plans {
        let floor_dtype = match plan.cut {
            Cut::Decode {
                state_dtype: Some(s),
                ..
            } => coarser(dtype, s),
            _ => dtype,
        };
        let got = runner.path(plan, Pass { backend, dtype })?;
        let want = alone(plan, backend, dtype)?;
        let truth = alone(plan, &reference, DType::F64)?;
        let floor = alone(plan, &reference, floor_dtype)?;
        results.push(judge(plan, &got, &want, &truth, &floor, floor_dtype)?);
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

fn compare_rows(
    got: &Captures,
    want: &Captures,
    truth: &Captures,
    floor: &Captures,
    th: crate::compare::verdict::Thresholds,
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
        let verdict = classify(
            Judged {
                rel_l2: stats.rel_l2,
                floor: Some(floor_rel),
                non_finite: stats.non_finite_disagree + stats.non_finite_both > 0,
                // With a floor, depth and the expected floor play no part in the verdict.
                depth: 0,
                dtype: a.dtype(),
            },
            th,
        );
        rows.push(PathRow {
            name,
            floor: Some(floor_rel),
            ratio_to_floor: ratio_to_floor(stats.rel_l2, Some(floor_rel)),
            verdict,
            stats,
        });
    }
    Ok(rows)
}

fn judge(
    plan: &PathPlan,
    got: &Observed,
    want: &Observed,
    truth: &Observed,
    floor: &Observed,
    floor_dtype: DType,
) -> Result<PathResult> {
    let th = thresholds(floor_dtype);
    let rows = compare_rows(&got.hidden, &want.hidden, &truth.hidden, &floor.hidden, th)?;
    let state_rows = match (&got.states, &want.states, &truth.states, &floor.states) {
        (Some(g), Some(w), Some(t), Some(f)) => compare_rows(g, w, t, f, th)?,
        _ => Vec::new(),
    };
    // A position departs when some tensor's error there passes what that tensor may have: the
    // static band and the drift multiple of its floor.
    let departs_at = (0..got.positions.len())
        .find(|&j| {
            rows.iter().any(|r| {
                let bound = th.ok.max(K_DRIFT * r.floor.unwrap_or(0.0));
                r.stats
                    .per_token_rel
                    .get(j)
                    .is_some_and(|&e| e.is_nan() || e > bound)
            })
        })
        .map(|j| got.positions[j]);
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
        "{}: {} of {} paths of {backend} at {} depart from the full prefill; first `{}`{at}{sig}",
        first.verdict.as_str(),
        flagged.len(),
        results.len(),
        dtype_label(dtype),
        first.name
    )
}
