//! Deciding what is "bad": per-tensor verdicts from static per-dtype thresholds AND a measured
//! rounding floor, the first divergent tensor, amplification, and the one-sentence summary.
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
//! Without a floor (comparing two files with no truth), the static bands decide alone.

use candle_core::DType;
use serde::{Deserialize, Serialize};

use crate::metrics::DiffStats;

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
        _ => Thresholds {
            ok: 1e-2,
            fail: 5e-2,
        },
    }
}

/// The verdict of one tensor; `floor` is the reference's own rel L2 against the truth.
pub fn classify(stats: &DiffStats, floor: Option<f64>, th: Thresholds) -> Verdict {
    if stats.one_sided_non_finite() {
        return Verdict::Mismatch;
    }
    let rel = stats.rel_l2;
    if rel.is_nan() {
        return Verdict::Mismatch;
    }
    match floor {
        Some(floor) => {
            if rel > th.ok && rel > K_MISMATCH * floor {
                Verdict::Mismatch
            } else if rel > th.ok && rel > K_DRIFT * floor {
                Verdict::Drift
            } else {
                Verdict::Ok
            }
        }
        None => {
            if rel > th.fail {
                Verdict::Mismatch
            } else if rel > th.ok {
                Verdict::Drift
            } else {
                Verdict::Ok
            }
        }
    }
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

/// The one sentence that leads every report.
pub fn summary(
    a: &str,
    b: &str,
    dtype: &str,
    rows: &[crate::report::TensorRow],
    logits: Option<&crate::metrics::logits::LogitStats>,
) -> String {
    let worst = rows.iter().max_by(|x, y| {
        x.verdict
            .cmp(&y.verdict)
            .then(x.rel_l2.total_cmp(&y.rel_l2))
    });
    let Some(worst) = worst else {
        return format!("nothing to compare between {a} and {b}");
    };
    let flips = logits
        .filter(|l| l.top1_flips > 0)
        .map(|l| {
            format!(
                "; the top-1 token differs at {} of {} positions ({} of them near-ties)",
                l.top1_flips,
                l.tokens,
                l.top1_flips - l.top1_flips_decided
            )
        })
        .unwrap_or_default();
    let first = rows.iter().find(|r| r.verdict != Verdict::Ok);
    match first {
        None => {
            let max_ratio = rows
                .iter()
                .filter_map(|r| r.ratio_to_floor)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
            match max_ratio {
                Some(r) => format!(
                    "benign: {a} and {b} differ by at most {r:.1}× the {dtype} rounding floor (max rel L2 {:.2e} at {}){flips}",
                    worst.rel_l2, worst.name
                ),
                None => format!(
                    "benign: {a} and {b} agree within the {dtype} tolerance (max rel L2 {:.2e} at {}){flips}",
                    worst.rel_l2, worst.name
                ),
            }
        }
        Some(first) => {
            let how = match first.ratio_to_floor {
                Some(r) => format!("rel L2 {:.2e} = {r:.0}× the {dtype} floor", first.rel_l2),
                None => format!("rel L2 {:.2e}", first.rel_l2),
            };
            let non_finite = if first.nan_a + first.inf_a + first.nan_b + first.inf_b > 0 {
                format!(
                    ", NaN/Inf: {} on A, {} on B",
                    first.nan_a + first.inf_a,
                    first.nan_b + first.inf_b
                )
            } else {
                String::new()
            };
            let path = match first.kind {
                crate::compare::Kind::Op => format!(
                    " (in the {} of layer {})",
                    op_path(&first.name),
                    first.layer.unwrap_or(0)
                ),
                _ => String::new(),
            };
            format!(
                "{}: {a} and {b} part at {}{path}, {how}{non_finite}{flips}",
                first.verdict.as_str(),
                first.name
            )
        }
    }
}

/// A human name for an op capture (`layers.3.conv_out` → "conv path").
fn op_path(name: &str) -> &'static str {
    match crate::capture::names::parse_op(name).map(|(_, op)| op) {
        Some("conv_out" | "q" | "k" | "v") => "conv path",
        Some("beta" | "g") => "gates",
        Some("core_out") => "gated delta rule",
        Some("gated_norm_out") => "gated norm",
        Some("out_proj") => "output projection",
        _ => "layer",
    }
}
