//! Building a [`Report`] from two capture sources and, when a model was at hand, the f64 truth
//! and each side's floor (planned by [`crate::job`]).

use candle_core::DType;
use sha2::{Digest, Sha256};

use super::first_values::{self, FirstNonFinite, FirstOverflow};
use super::judged_rows::judged_rows;
use super::router_data::router_difference;
use super::router_rows::router_rows;
use super::routing::{Routing, routing};
use super::routing_words;
use super::summary::{self, Subject, Summary};
use super::{
    Alignment, EnvDiff, Inputs, Report, ReportMode, RouterRow, SCHEMA, Side, TensorRow,
    ThresholdInfo, TokenIds,
};
use crate::capture::Key;
use crate::capture::envdiff;
use crate::compare::metrics::logits::{LogitStats, logit_stats};
use crate::compare::softmax_equal::{self, Offset};
use crate::compare::verdict::{K_DRIFT, K_MISMATCH, Verdict, amplification, thresholds};
use crate::compare::{Kind, PlannedRow, TensorSource, conv_window_note};
use crate::error::{Error, Result};
use crate::util::device::dtype_label;
use crate::util::precision::LabelledDType;

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
    pub mode: ReportMode,
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
    /// Sides that record no router choices whose routing was recovered from their states.
    pub routing_recovered: Vec<String>,
    /// Files that hold different layers, each row judged against the truth (None: the usual
    /// comparison of the rows both hold).
    pub disjoint: Option<DisjointLayers>,
    /// The sides' logits differ by a per-position constant: every source's logits are seen as
    /// their log-softmax ([`crate::compare::softmax_equal`]), and the headline says so.
    pub logits_offset: Option<Offset>,
}

/// Two files with no layer in common (`compare` with the truth at hand): the rows each side
/// lacks are the truth's, so those rows measure the other side against the truth.
#[derive(Debug, Clone)]
pub struct DisjointLayers {
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

/// The report of `c`, complete: every row judged, the headline and the notes written.
pub fn build_report(c: &Comparison) -> Result<Report> {
    if c.input.tokens == 0 {
        return Err(Error::Compare(
            "nothing to compare: the inputs hold 0 tokens".to_string(),
        ));
    }
    let routing = side_routing(c)?;
    let (tensors, tie_margin) = judged_rows(c)?;
    let logits = logits_line(c, tie_margin)?;
    let routers = router_rows(c)?;
    let routing_finding = routing_words::routing_finding(&routing);
    let router_difference = router_difference(c.a, c.b)?;
    let overall = overall(&tensors, routing_finding.is_some());
    let env_diff = envdiff::env_diff(&c.a_side.fingerprint, &c.b_side.fingerprint);
    let (first_non_finite, first_overflow) =
        first_values::first_values(&tensors, c.dtype, dtype_label(c.dtype));
    let mut summary = headline(
        c,
        &Findings {
            tensors: &tensors,
            logits: logits.as_ref(),
            routing: &routing,
            routing_finding: routing_finding.as_deref(),
            routers: &routers,
            router_difference: router_difference.as_deref(),
            overall,
            env_diff: &env_diff,
            first_non_finite: &first_non_finite,
            first_overflow: first_overflow.as_ref(),
        },
    );
    let mut notes = notes(c, &tensors);
    notes.extend(c.closing_notes.iter().cloned());
    let overall = summary.lead_with_findings(overall, &c.leading_findings);
    Ok(Report {
        schema: SCHEMA.to_string(),
        verdict: overall,
        summary,
        mode: c.mode,
        a: c.a_side.clone(),
        b: c.b_side.clone(),
        inputs: inputs(&c.input),
        thresholds: threshold_info(c),
        first_divergent: tensors
            .iter()
            .find(|t| t.judgement.verdict != Verdict::Ok)
            .map(|t| t.name.clone()),
        amplification: amplification(&layer_rels(&tensors)),
        tensors,
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

/// The worst row's verdict; a mismatch whatever the rows say when a routing flip is one that
/// rounding cannot explain.
fn overall(tensors: &[TensorRow], routing_finding: bool) -> Verdict {
    tensors
        .iter()
        .map(|t| t.judgement.verdict)
        .chain(routing_finding.then_some(Verdict::Mismatch))
        .max()
        .unwrap_or(Verdict::Ok)
}

/// Whether the sides route apart, each judged against the truth under its own routing.
pub(super) fn each_side(c: &Comparison) -> bool {
    c.calibration
        .as_ref()
        .is_some_and(|cal| cal.truth_b.is_some())
}

/// How each side routed at MoE layers, against the exact router on its own path.
fn side_routing(c: &Comparison) -> Result<Routing> {
    let Some(cal) = &c.calibration else {
        return Ok(Routing::none());
    };
    routing(
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
    )
}

/// The logits line, with the top-2 orders within `tie_margin` counted as near-ties; it belongs
/// to the logits row, so None when that row was left out.
fn logits_line(c: &Comparison, tie_margin: Option<f64>) -> Result<Option<LogitStats>> {
    let Some(margin) = tie_margin else {
        return Ok(None);
    };
    match (c.a.tensor(Key::Logits)?, c.b.tensor(Key::Logits)?) {
        (Some(a), Some(b)) => Ok(Some(logit_stats(&a, &b, margin)?)),
        _ => Ok(None),
    }
}

/// Each layer's rel L2 in layer order, for [`amplification`].
fn layer_rels(tensors: &[TensorRow]) -> Vec<(usize, f64)> {
    tensors
        .iter()
        .filter(|t| {
            matches!(
                t.kind,
                Kind::LinearAttention | Kind::FullAttention | Kind::Layer
            )
        })
        .filter_map(|t| t.layer.map(|l| (l, t.stats.rel_l2)))
        .collect()
}

/// What the headline says besides the comparison's own facts.
struct Findings<'a> {
    tensors: &'a [TensorRow],
    logits: Option<&'a LogitStats>,
    routing: &'a Routing,
    routing_finding: Option<&'a str>,
    routers: &'a [RouterRow],
    router_difference: Option<&'a str>,
    overall: Verdict,
    env_diff: &'a [EnvDiff],
    first_non_finite: &'a FirstNonFinite,
    first_overflow: Option<&'a FirstOverflow>,
}

/// The headline: the verdict and what explains it, then the shift, the environment, a
/// softmax-equal offset and the first non-finite or overflowing values.
fn headline(c: &Comparison, f: &Findings) -> Summary {
    let disjoint_words = c.disjoint.as_ref().map(|o| {
        let list = |l: &[usize]| {
            l.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        (list(&o.a_layers), list(&o.b_layers))
    });
    let routing_words =
        routing_words::routing_clause(f.routing, each_side(c), f.routers, &c.routing_recovered);
    let mut summary = summary::summary(
        &Subject {
            a: &c.a_side.label,
            b: &c.b_side.label,
            dtype: dtype_label(c.dtype),
            overall: f.overall,
            calibrated: c.calibration.is_some(),
            floor_skipped: c.floor_skipped,
            uncalibrated_why: c.uncalibrated_why.as_deref(),
            routing: routing_words.as_deref(),
            routing_finding: f.routing_finding,
            router_difference: f.router_difference,
            one_sided: disjoint_words
                .as_ref()
                .map(|(x, y)| (x.as_str(), y.as_str())),
        },
        f.tensors,
        f.logits,
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
    // Live runs differ by design in their backend; elsewhere a mattering difference leads.
    if !c.mode.is_live() {
        summary.clauses.extend(envdiff::summary_clause(f.env_diff));
    }
    summary.clauses.extend(envdiff::same_implementations(
        f.env_diff,
        &c.a_side.fingerprint,
        &c.b_side.fingerprint,
    ));
    summary
        .clauses
        .extend(c.logits_offset.as_ref().map(softmax_equal::clause));
    summary
        .clauses
        .extend(first_values::clauses(f.first_non_finite, f.first_overflow));
    summary
}

/// The comparison's notes, then what the rows show of the inputs: a conv window's convention,
/// FP8 serving and dropped scales.
fn notes(c: &Comparison, tensors: &[TensorRow]) -> Vec<String> {
    let mut notes = c.notes.clone();
    notes.extend(conv_window_note(&c.a.keys(), &c.b.keys()));
    if let Some(cal) = &c.calibration {
        let b_dtype = cal.floor_b.as_ref().map_or(cal.floor_a.dtype, |f| f.dtype);
        notes.extend(super::fp8_notes::serving_note(
            (&c.a_side.label, cal.floor_a.dtype),
            (&c.b_side.label, b_dtype),
            tensors,
        ));
    }
    notes.extend(super::fp8_notes::dropped_scale_note(
        &c.a_side.label,
        &c.b_side.label,
        tensors,
    ));
    notes
}

fn inputs(input: &ComparedInput) -> Inputs {
    let mut sha = Sha256::new();
    for id in &input.input_ids {
        sha.update(id.to_le_bytes());
    }
    Inputs {
        tokens: input.tokens,
        token_ids_sha256: format!("{:x}", sha.finalize()),
        token_ids_match: input.token_ids == TokenIds::Match,
        token_ids: input.token_ids,
    }
}

fn threshold_info(c: &Comparison) -> ThresholdInfo {
    ThresholdInfo {
        dtype: LabelledDType(c.dtype),
        bands: thresholds(c.dtype),
        k_drift: K_DRIFT,
        k_mismatch: K_MISMATCH,
        floor_source: c.calibration.as_ref().map(|cal| cal.source.clone()),
        rule: if c.calibration.is_some() {
            "floor"
        } else {
            "expected floor"
        }
        .to_string(),
    }
}
