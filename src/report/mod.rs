//! The report value: everything a comparison found, as plain data (serde), built once and handed
//! to the printers (`crate::printer`), which format it and compute nothing.

mod build;
mod closer_to_truth;
pub mod dataset;
pub mod dataset_part;
mod environment;
pub mod first_values;
mod fp8_notes;
mod judged_rows;
pub mod logits_words;
mod router_data;
mod router_rows;
mod routing;
pub(crate) use routing::NEAR_TIE_SIGMAS;
mod routing_words;
mod row;
pub mod summary;

use serde::{Deserialize, Serialize};

pub use crate::capture::envdiff::EnvDiff;
use crate::capture::fingerprint::Fingerprint;
pub use crate::compare::alignment::Alignment;
use crate::compare::metrics::logits::LogitStats;
use crate::compare::verdict::{Thresholds, Verdict};
use crate::util::precision::LabelledDType;

pub use crate::compare::judge::Judgement;
pub use build::{Calibrated, ComparedInput, Comparison, DisjointLayers, Floor, build_report};
pub use row::TensorRow;
pub use summary::{Lead, Summary};

pub const SCHEMA: &str = "hsdiff.report/v1";

impl crate::util::json_doc::JsonDocument for Report {
    const WHAT: &'static str = "the report";
}

/// Written as JSON (`hsdiff.report/v1`), never read back: nothing in hsdiff reads a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub schema: String,
    pub verdict: Verdict,
    pub summary: Summary,
    pub mode: ReportMode,
    pub a: Side,
    pub b: Side,
    pub inputs: Inputs,
    pub thresholds: ThresholdInfo,
    pub tensors: Vec<TensorRow>,
    pub first_divergent: Option<String>,
    /// Layers where the error grew > 2× per layer for 3 consecutive layers.
    pub amplification: Vec<usize>,
    pub logits: Option<LogitStats>,
    pub routers: Vec<RouterRow>,
    /// The command line that reproduces this report.
    pub command: Option<String>,
    /// How B's layers line up with A's, when a shift was detected or applied (`compare`).
    pub alignment: Option<Alignment>,
    /// Keys whose values differ between the two sides' fingerprints.
    pub env_diff: Vec<EnvDiff>,
    /// MoE tokens whose experts on some side are not the exact router's choice on that side's
    /// path (docs/reading-a-report.md#routing-flips-moe).
    pub routing_flips: Vec<RoutingFlip>,
    /// Each side's first non-finite element in forward order (docs/reading-a-report.md#nan-and-inf).
    pub first_non_finite: first_values::FirstNonFinite,
    /// In an f16 or bf16 comparison, each side's first element past that type's range.
    pub first_overflow: Option<first_values::FirstOverflow>,
    /// How the inputs were read and calibrated (file conventions, the model that measured the
    /// floor, the layer reading chosen).
    pub notes: Vec<String>,
}

/// How the two sides of a report came to be; written as its lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportMode {
    /// Two live runs on the same input.
    Propagate,
    /// Two live runs, B fed A's input to each layer (the error a layer adds on its own).
    Isolate,
    /// A golden file against a run here (`check`).
    Check,
    /// Captures read from files (`compare`).
    Files,
}

impl ReportMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportMode::Propagate => "propagate",
            ReportMode::Isolate => "isolate",
            ReportMode::Check => "check",
            ReportMode::Files => "files",
        }
    }

    /// Live runs: the sides differ by design in their backend.
    pub fn is_live(self) -> bool {
        matches!(self, ReportMode::Propagate | ReportMode::Isolate)
    }
}

impl std::fmt::Display for ReportMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One token whose experts in one MoE layer, on some side, are not the ones the exact router
/// would choose on that side's own path (the f64 truth under that side's routing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutingFlip {
    pub layer: usize,
    pub token: usize,
    /// The sides whose choice this is: `A`, `B`.
    pub on: Vec<String>,
    /// The logit change, in units of the token's router-logit RMS, that would make the exact
    /// router choose the side's experts (the routed truth's `router.{i}.flip_gap`).
    pub flip_gap: f64,
    /// The most the side's own arithmetic error can move that gap (`report::routing`); the
    /// smaller of the sides' where both flipped.
    pub near_tie_bound: f64,
    /// `flip_gap <= near_tie_bound`: rounding; otherwise a finding.
    pub near_tie: bool,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub label: String,
    pub backend: Option<String>,
    pub implementation: Option<String>,
    pub dtype: Option<String>,
    pub device: Option<String>,
    pub fingerprint: Fingerprint,
}

impl Side {
    /// A side that ran here, described by its fingerprint.
    pub fn from_fingerprint(label: String, fingerprint: Fingerprint) -> Side {
        Side {
            label,
            backend: fingerprint.backend.clone(),
            implementation: fingerprint.implementation.clone(),
            dtype: fingerprint.dtype.clone(),
            device: fingerprint.device.clone(),
            fingerprint,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    pub tokens: usize,
    pub token_ids_sha256: String,
    /// True only when both sides' token ids were compared and are equal.
    pub token_ids_match: bool,
    /// Where the token ids come from: both sides (checked), one side only, or neither.
    #[serde(default)]
    pub token_ids: TokenIds,
}

/// Which sides carry token ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenIds {
    /// Both, and they are equal (live runs: the same input by construction).
    #[default]
    Match,
    OnlyA,
    OnlyB,
    /// Neither side carries ids: whether the inputs were the same is unknown.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThresholdInfo {
    /// The coarsest dtype compared: its bands judge the rows.
    pub dtype: LabelledDType,
    #[serde(flatten)]
    pub bands: Thresholds,
    pub k_drift: f64,
    pub k_mismatch: f64,
    /// How the floor was measured, or null when there is none.
    pub floor_source: Option<String>,
    /// `floor` (calibrated: bands and k × floor) or `expected floor` (no floor: k × the floor
    /// expected from hsdiff's measurements at that dtype and depth).
    pub rule: String,
}

impl ThresholdInfo {
    /// Where a row with this floor becomes a mismatch: above the ok band and above
    /// `k_mismatch` × the floor (`compare::verdict`'s rule), drawn by the plot.
    pub fn mismatch_line(&self, floor: f64) -> f64 {
        (self.k_mismatch * floor).max(self.bands.ok)
    }
}

/// Agreement of the MoE router's top-k expert sets in one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterRow {
    pub layer: usize,
    /// Fraction of tokens whose top-k expert set is the same on both sides.
    pub agree: f64,
    pub flipped_tokens: Vec<usize>,
    /// For each flipped token, side B's router margin (probability gap between the last chosen
    /// expert and the best one left out), when B recorded it: a small margin means the flip is
    /// rounding deciding a near-tie.
    pub flip_margins: Vec<Option<f64>>,
}
