//! Building a [`Report`] from two capture sources and, when a model was at hand, the f64 truth
//! and each side's floor (planned by [`crate::job`]).

use candle_core::{DType, Tensor};
use sha2::{Digest, Sha256};

use super::first_values;
use super::router_rows::router_rows;
use super::routing::{Routing, routing};
use super::routing_words;
use super::summary::{self, Subject};
use super::{
    Alignment, Inputs, Judgement, Report, SCHEMA, Side, TensorRow, ThresholdInfo, TokenIds,
};
use crate::capture::Key;
use crate::compare::metrics::logits::logit_stats;
use crate::compare::metrics::{DiffStats, diff_stats};
use crate::compare::softmax_equal::{self, Offset};
use crate::compare::verdict::{
    Judged, K_DRIFT, K_MISMATCH, Verdict, amplification, classify, expected_floor, ratio_to_floor,
    thresholds, uncalibrated_bounds,
};
use crate::compare::{Kind, PlannedRow, TensorSource, conv_window_note};
use crate::error::{Error, Result};
use crate::util::device::dtype_label;

/// Everything a report is computed from. The report is complete when [`build_report`] returns.
pub struct Comparison<'a> {
    pub a: &'a dyn TensorSource,
    pub b: &'a dyn TensorSource,
    pub a_side: Side,
    pub b_side: Side,
    /// The truth and the floors (None: uncalibrated).
    pub calibration: Option<Calibrated<'a>>,
    /// Uncalibrated because `--no-floor` asked so (rather than for want of a model).
    pub floor_skipped: bool,
    /// Why there is no calibration otherwise, in words that say what is missing and how to
    /// supply it (None: the generic "no model" reason).
    pub uncalibrated_why: Option<String>,
    pub rows: Vec<PlannedRow>,
    /// The coarsest dtype compared: its bands judge the rows.
    pub dtype: DType,
    pub mode: String,
    pub input: ComparedInput,
    pub command: Option<String>,
    pub alignment: Option<Alignment>,
    pub notes: Vec<String>,
    /// Notes about other views of the same comparison (a pipeline's trained positions), after
    /// the report's own.
    pub closing_notes: Vec<String>,
    /// Findings of how the files were read that lead the headline and make the verdict a
    /// mismatch (a drafter's declared layer ids the truth shows to be off).
    pub leading_findings: Vec<String>,
    /// Files that hold different layers, each row judged against the truth (None: the usual
    /// comparison of the rows both hold).
    pub one_sided: Option<OneSided>,
    /// The sides' logits differ by a per-position constant: every source's logits are seen as
    /// their log-softmax ([`crate::compare::softmax_equal`]), and the headline says so.
    pub logits_offset: Option<Offset>,
}

/// Two files with no layer in common (`compare` with the truth at hand): the rows each side
/// lacks are the truth's, so those rows measure the other side against the truth.
#[derive(Debug, Clone)]
pub struct OneSided {
    pub a_layers: Vec<usize>,
    pub b_layers: Vec<usize>,
    /// Rows whose A value is the truth's (the tensor only B holds), and vice versa.
    pub truth_for_a: Vec<String>,
    pub truth_for_b: Vec<String>,
}

/// What was fed to both sides.
pub struct ComparedInput {
    pub input_ids: Vec<u32>,
    pub token_ids: TokenIds,
    /// Tokens compared (the ids' count, or the captures' length when no side carries ids).
    pub tokens: usize,
    /// Decoder layers of the model, when known (depth of `final_norm`/`logits`).
    pub num_layers: Option<usize>,
}

/// The f64 truth and each side's rounding floor (the reference backend at that side's dtype).
pub struct Calibrated<'a> {
    pub truth: &'a dyn TensorSource,
    /// The truth under B's own router choices, where B routed otherwise than A (`truth` is
    /// then under A's): each side is judged against the truth of its own routing.
    pub truth_b: Option<&'a dyn TensorSource>,
    pub floor_a: Floor<'a>,
    /// None when B's floor is A's (same dtype).
    pub floor_b: Option<Floor<'a>>,
    /// How the floor was measured, for the report.
    pub source: String,
}

pub struct Floor<'a> {
    pub src: &'a dyn TensorSource,
    pub dtype: DType,
}

fn fetch(src: &dyn TensorSource, side: &str, name: &str) -> Result<Tensor> {
    src.tensor(name)?
        .ok_or_else(|| Error::Compare(format!("side {side} has no tensor `{name}`")))
}

/// The statistics of A against B at `name`: summed where both files store the rows when they
/// can be lent (no copy of a layer into a tensor: most of a dataset compare's time), else from
/// the tensors. The two ways give the same bits.
fn pair_stats(c: &Comparison, name: &str) -> Result<DiffStats> {
    if let (Some(a), Some(b)) = (c.a.stored_rows(name)?, c.b.stored_rows(name)?)
        && let Some(stats) = crate::compare::metrics::diff_stats_stored(&a, &b)
    {
        // Pages of a file truncated meanwhile read as zeros: never trust sums made from them.
        crate::util::mapped::check()?;
        return Ok(stats);
    }
    let a = fetch(c.a, "A", name)?;
    let b = fetch(c.b, "B", name)?;
    let stats = diff_stats(name, &a, &b)?;
    if stats.elements == 0 {
        return Err(crate::error::Error::Compare(format!(
            "nothing to compare: `{name}` has shape {:?}, no elements",
            a.dims()
        )));
    }
    Ok(stats)
}

fn stats_vs(
    src: &dyn TensorSource,
    truth: &dyn TensorSource,
    name: &str,
) -> Result<Option<DiffStats>> {
    match (src.tensor(name)?, truth.tensor(name)?) {
        (Some(x), Some(y)) => Ok(Some(diff_stats(name, &x, &y)?)),
        _ => Ok(None),
    }
}

/// The worse of two sides judged each against its own truth: (its distance, its floor), the
/// side with the larger ratio to its floor — or with a NaN distance, which never passes.
/// None when either side lacks a distance or a floor.
fn worse_side(a: (Option<f64>, Option<f64>), b: (Option<f64>, Option<f64>)) -> Option<(f64, f64)> {
    let (ra, fa) = (a.0?, a.1?);
    let (rb, fb) = (b.0?, b.1?);
    let ratio = |r: f64, f: f64| if r.is_nan() { f64::INFINITY } else { r / f };
    Some(if ratio(rb, fb) > ratio(ra, fa) {
        (rb, fb)
    } else {
        (ra, fa)
    })
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

pub fn build_report(c: &Comparison) -> Result<Report> {
    if c.input.tokens == 0 {
        return Err(crate::error::Error::Compare(
            "nothing to compare: the inputs hold 0 tokens".to_string(),
        ));
    }
    let th = thresholds(c.dtype);
    let num_layers = c.input.num_layers.unwrap_or_else(|| {
        c.rows
            .iter()
            .filter_map(|r| r.layer)
            .max()
            .map_or(0, |l| l + 1)
    });
    let routing = match &c.calibration {
        Some(cal) => routing(
            &[
                ("A", c.a, cal.truth, cal.floor_a.src),
                (
                    "B",
                    c.b,
                    cal.truth_b.unwrap_or(cal.truth),
                    cal.floor_b.as_ref().unwrap_or(&cal.floor_a).src,
                ),
            ],
            c.dtype,
        )?,
        None => Routing::none(),
    };
    // Sides that route apart are each judged against the truth under their own routing.
    let each_side = c
        .calibration
        .as_ref()
        .is_some_and(|cal| cal.truth_b.is_some());
    let mut notes = c.notes.clone();
    notes.extend(conv_window_note(&c.a.names(), &c.b.names()));
    let mut tensors = Vec::with_capacity(c.rows.len());
    // Logit gap under which a top-2 order is within the noise: twice the RMS logit error of the
    // floor run, or, without a floor, the static ok band times the logits' RMS.
    let mut tie_margin = None;
    for row in &c.rows {
        let mut stats = pair_stats(c, &row.name)?;
        let depth = depth(row, num_layers);
        let (mut floor_a, mut floor_b, mut a_vs, mut b_vs) = (None, None, None, None);
        if let Some(cal) = &c.calibration {
            let truth_b = cal.truth_b.unwrap_or(cal.truth);
            floor_a = stats_vs(cal.floor_a.src, cal.truth, &row.name)?;
            floor_b = match &cal.floor_b {
                Some(f) => stats_vs(f.src, truth_b, &row.name)?,
                None => floor_a.clone(),
            };
            // A side standing in with the truth's value has no distance of its own.
            let stand_in = |side: fn(&OneSided) -> &Vec<String>| {
                c.one_sided
                    .as_ref()
                    .is_some_and(|o| side(o).contains(&row.name))
            };
            if !stand_in(|o| &o.truth_for_a) {
                a_vs = stats_vs(c.a, cal.truth, &row.name)?.map(|s| s.rel_l2);
            }
            if !stand_in(|o| &o.truth_for_b) {
                b_vs = stats_vs(c.b, truth_b, &row.name)?.map(|s| s.rel_l2);
            }
        }
        // The larger side's floor judges (two dtypes: the coarser side's rounding dominates).
        let floor = match (&floor_a, &floor_b) {
            (Some(x), Some(y)) => Some(x.rel_l2.max(y.rel_l2)),
            (x, y) => x.as_ref().or(y.as_ref()).map(|s| s.rel_l2),
        };
        let per_side = each_side
            .then(|| {
                worse_side(
                    (a_vs, floor_a.as_ref().map(|s| s.rel_l2)),
                    (b_vs, floor_b.as_ref().map(|s| s.rel_l2)),
                )
            })
            .flatten();
        let (rel_judged, floor_judged) = match per_side {
            Some((rel, floor)) => (rel, Some(floor)),
            None => (stats.rel_l2, floor),
        };
        if row.kind == Kind::Logits {
            let worst_floor = [&floor_a, &floor_b]
                .into_iter()
                .flatten()
                .map(DiffStats::rms_abs)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
            tie_margin = Some(match worst_floor {
                Some(f) => 2.0 * f,
                None => th.ok * stats.rms_b(),
            });
        }
        let verdict = classify(
            Judged {
                rel_l2: rel_judged,
                floor: floor_judged,
                non_finite: stats.non_finite_disagree + stats.non_finite_both > 0,
                depth,
                dtype: c.dtype,
            },
            th,
        );
        // A state has no token axis (its rows are value heads): no per-token profile.
        if row.kind == Kind::State {
            stats.per_token_rel.clear();
        }
        tensors.push(TensorRow {
            name: row.name.clone(),
            kind: row.kind,
            layer: row.layer,
            stats,
            judgement: Judgement {
                floor: floor_judged,
                ratio_to_floor: ratio_to_floor(rel_judged, floor_judged),
                floor_a: floor_a.as_ref().map(|s| s.rel_l2),
                floor_b: floor_b.as_ref().map(|s| s.rel_l2),
                rel_l2_judged: per_side.map(|(rel, _)| rel),
                floor_judged: per_side.map(|(_, floor)| floor),
                depth,
                // Rows without a floor (uncalibrated, or a tensor the truth run lacks) are
                // judged by the depth-scaled band.
                band: floor_judged
                    .is_none()
                    .then(|| uncalibrated_bounds(c.dtype, th, depth).1),
                expected_floor: floor_judged
                    .is_none()
                    .then(|| expected_floor(c.dtype, depth))
                    .flatten(),
                a_vs_truth: a_vs,
                b_vs_truth: b_vs,
                verdict,
            },
        });
    }

    // The logits line belongs to the logits row: not reported when that row was left out.
    let logits = match tie_margin {
        Some(margin) => match (
            c.a.tensor(&Key::Logits.to_string())?,
            c.b.tensor(&Key::Logits.to_string())?,
        ) {
            (Some(a), Some(b)) => Some(logit_stats(&a, &b, margin)?),
            _ => None,
        },
        None => None,
    };
    let routers = router_rows(c)?;
    let layer_rels: Vec<(usize, f64)> = tensors
        .iter()
        .filter(|t| {
            matches!(
                t.kind,
                Kind::LinearAttention | Kind::FullAttention | Kind::Layer
            )
        })
        .filter_map(|t| t.layer.map(|l| (l, t.stats.rel_l2)))
        .collect();
    let amplification = amplification(&layer_rels);
    let first_divergent = tensors
        .iter()
        .find(|t| t.judgement.verdict != Verdict::Ok)
        .map(|t| t.name.clone());
    // A flip rounding cannot explain is a finding, whatever the rows say.
    let routing_finding = routing_words::routing_finding(&routing);
    let overall = tensors
        .iter()
        .map(|t| t.judgement.verdict)
        .chain(routing_finding.as_ref().map(|_| Verdict::Mismatch))
        .max()
        .unwrap_or(Verdict::Ok);
    let one_sided_words = c.one_sided.as_ref().map(|o| {
        let list = |l: &[usize]| {
            l.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        (list(&o.a_layers), list(&o.b_layers))
    });
    let routing_words = routing_words::routing_clause(&routing, each_side, &routers);
    let mut summary = summary::summary(
        &Subject {
            a: &c.a_side.label,
            b: &c.b_side.label,
            dtype: dtype_label(c.dtype),
            overall,
            calibrated: c.calibration.is_some(),
            floor_skipped: c.floor_skipped,
            uncalibrated_why: c.uncalibrated_why.as_deref(),
            routing: routing_words.as_deref(),
            routing_finding: routing_finding.as_deref(),
            one_sided: one_sided_words
                .as_ref()
                .map(|(x, y)| (x.as_str(), y.as_str())),
        },
        &tensors,
        logits.as_ref(),
    );
    if let Some(al) = &c.alignment {
        if al.applied {
            summary.end_with(&format!(" (compared with --shift {})", al.offset));
        } else {
            // A detected shift explains the rows below it: the headline leads with it, right
            // after the verdict word.
            summary.lead_with(crate::compare::alignment::describe(al));
        }
    }

    if let Some(cal) = &c.calibration {
        let b_dtype = cal.floor_b.as_ref().map_or(cal.floor_a.dtype, |f| f.dtype);
        notes.extend(super::fp8_notes::serving_note(
            (&c.a_side.label, cal.floor_a.dtype),
            (&c.b_side.label, b_dtype),
            &tensors,
        ));
    }
    notes.extend(super::fp8_notes::dropped_scale_note(
        &c.a_side.label,
        &c.b_side.label,
        &tensors,
    ));
    let env_diff = crate::capture::envdiff::env_diff(&c.a_side.fingerprint, &c.b_side.fingerprint);
    // Live runs differ by design in their backend; elsewhere a mattering difference leads.
    if !matches!(c.mode.as_str(), "propagate" | "isolate") {
        summary
            .clauses
            .extend(crate::capture::envdiff::summary_clause(&env_diff));
    }
    summary
        .clauses
        .extend(crate::capture::envdiff::same_implementations(
            &env_diff,
            &c.a_side.fingerprint,
            &c.b_side.fingerprint,
        ));

    summary
        .clauses
        .extend(c.logits_offset.as_ref().map(softmax_equal::clause));
    let (first_non_finite, first_overflow) =
        first_values::first_values(&tensors, c.dtype, dtype_label(c.dtype));
    summary.clauses.extend(first_values::clauses(
        &first_non_finite,
        first_overflow.as_ref(),
    ));

    notes.extend(c.closing_notes.iter().cloned());
    let overall = summary.lead_with_findings(overall, &c.leading_findings);

    let mut sha = Sha256::new();
    for id in &c.input.input_ids {
        sha.update(id.to_le_bytes());
    }
    Ok(Report {
        schema: SCHEMA.to_string(),
        verdict: overall,
        summary,
        mode: c.mode.clone(),
        a: c.a_side.clone(),
        b: c.b_side.clone(),
        inputs: Inputs {
            tokens: c.input.tokens,
            token_ids_sha256: format!("{:x}", sha.finalize()),
            token_ids_match: c.input.token_ids == TokenIds::Match,
            token_ids: c.input.token_ids,
        },
        thresholds: ThresholdInfo {
            dtype: dtype_label(c.dtype).to_string(),
            bands: th,
            k_drift: K_DRIFT,
            k_mismatch: K_MISMATCH,
            floor_source: c.calibration.as_ref().map(|cal| cal.source.clone()),
            rule: if c.calibration.is_some() {
                "floor"
            } else {
                "expected floor"
            }
            .to_string(),
        },
        tensors,
        first_divergent,
        amplification,
        logits,
        routers,
        command: c.command.clone(),
        alignment: c.alignment.clone(),
        env_diff,
        routing_flips: routing.flips,
        first_non_finite,
        first_overflow,
        notes,
    })
}
