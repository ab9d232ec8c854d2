//! One pair of capture files compared, from two opened files to a report, as a pipeline of
//! steps on one [`context::Pair`] (the files, and the notes told on stderr and kept for the
//! report): the files made comparable ([`prepare`]), the model that measures the truth and
//! floor found ([`truth`]), the job run and what its truth shows about the files ([`job`]), the
//! rows planned ([`rows`]) and the report built ([`report`]). `hsdiff compare A B` runs it once;
//! a dataset ([`crate::commands::compare::dataset`]) once per pair of samples, with the model
//! loaded once for all of them.

mod context;
mod job;
mod prepare;
mod report;
mod rows;
mod truth;

use candle_core::Device;

use crate::commands::compare::pair_steps;
use crate::commands::compare::tokens::ResolvedIds;
use crate::compare::alignment::Alignment;
use crate::compare::verdict::thresholds;
use crate::compare::{HeldByOneSide, token_shift};
use crate::error::Result;
use crate::formats::FileSource;
use crate::formats::pipelines::ZeroPadding;
use crate::job::prior::Prior;
use crate::report::Report;
use context::Pair;
use prepare::Prepared;
use report::Described;
use rows::Planning;
use truth::Calibrator;
pub use truth::TruthModel;

/// How one pair is compared (the command's options, less the files).
#[derive(Debug, Clone, Default)]
pub struct PairOptions {
    /// `--map A_NAME=B_NAME`.
    pub maps: Vec<TensorMap>,
    /// `--shift K`.
    pub shift: i64,
    /// `--layers`.
    pub layers: Option<Vec<usize>>,
    /// The command line that reproduces the report.
    pub command: Option<String>,
    /// `--no-floor`: no truth or floor runs even with a model at hand.
    pub no_floor: bool,
    /// Say on stderr how the files were read and calibrated (off for a dataset's samples).
    pub verbose: bool,
    /// `--tokens` / `--prompt`: the ids files without any were captured on.
    pub given_ids: Option<ResolvedIds>,
}

/// A's tensor `a` compared with B's tensor `b` (`--map A_NAME=B_NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMap {
    pub a: String,
    pub b: String,
}

/// `A_NAME=B_NAME`, as a shard's part records it.
impl std::fmt::Display for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.a, self.b)
    }
}

/// What one pair gave.
pub struct PairOutcome {
    pub report: Report,
    /// The positions `loss_mask` trains on compared on their own, when they are not all of
    /// the compared positions.
    pub trained: Option<Trained>,
    /// Whether the `loss_mask` trains on no position (all zero): nothing compared there.
    pub untrained: bool,
    /// Positions both sides held as all-zero padding, left out.
    pub zero_padding: Option<ZeroPadding>,
    /// What only one side held, so it got no row.
    pub held_by_one: HeldByOneSide,
    /// Each side's tensors that no name rule read and no `--map` named, so they got no row.
    pub unnamed: (Vec<String>, Vec<String>),
    /// The headline's clause for each side whose pipeline layer ids name other layers than
    /// its states are, and for states shifted by one token (a dataset's headline names them
    /// too).
    pub layer_id_slips: Vec<String>,
}

pub struct Trained {
    pub positions: usize,
    pub of: usize,
    pub report: Report,
}

/// Compares `a` with `b`, the sides labelled `labels`, the truth and floor measured with the
/// model `truth` names.
pub fn compare_pair(
    a: FileSource,
    b: FileSource,
    labels: (String, String),
    opts: &PairOptions,
    truth: TruthModel,
) -> Result<PairOutcome> {
    let mut pair = Pair::new(a, b, opts);
    let ready = prepare::prepare(&mut pair)?;
    let calibrator = Calibrator::find(truth, &mut pair, &ready)?;
    let outcome = compare_ready(&mut pair, labels, ready, &calibrator);
    calibrator.give_back();
    outcome
}

/// The prepared pair compared with the calibrator's model, if any.
fn compare_ready(
    pair: &mut Pair,
    labels: (String, String),
    ready: Prepared,
    calibrator: &Calibrator,
) -> Result<PairOutcome> {
    let model = calibrator.model();
    let (ids, cpu) = (ready.input_ids.as_slice(), Device::Cpu);
    if let Some(found) = model {
        job::check_fits(pair, found, ids)?;
    }
    let last_layer = job::last_layer(pair, model.map(|(m, _)| m));
    let routes = job::recorded_routes(pair, model.map(|(m, _)| m), ids.len(), last_layer)?;
    let input = model.map(|(m, _)| (m, ids, &cpu));
    let mut done = job::run(
        pair,
        ready.dtypes,
        &routes,
        (input, Prior::default()),
        last_layer,
    )?;
    let slips = job::check_against_truth(pair, &done, model)?;
    // Sides without router choices: their states say where they routed otherwise than the truth.
    let mut prior = done.take_prior();
    let calibrated = input.filter(|_| done.truth().is_some());
    let recovered = job::recovered_routes(pair, calibrated, &routes, &mut prior, last_layer)?;
    let done = match &recovered {
        Some(r) => job::run(pair, ready.dtypes, &r.routes, (input, prior), last_layer)?,
        None => done,
    };
    let dtype = done.spec().dtype();
    let alignment = pair_steps::align(&pair.a, &mut pair.b, thresholds(dtype).ok, pair.opts.shift)?;
    let token_shift = token_shift(pair, alignment.as_ref(), thresholds(dtype).ok)?;
    let layer_id_slips = (slips.iter().cloned()).chain(token_shift.clone()).collect();
    let planning = Planning {
        truth: done.truth(),
        layer_types: model.map(|(m, _)| m.config.layer_types.as_slice()),
        extra_rows: ready.extra_rows,
        last_layer,
        alignment,
    };
    let planned = rows::plan((&pair.a, &pair.b), &mut pair.notes, pair.opts, planning)?;
    let described = Described {
        labels,
        input_ids: ready.input_ids.clone(),
        token_ids: ready.token_ids,
        num_layers: model.map(|(m, _)| m.config.num_hidden_layers),
        command: pair.opts.command.clone(),
        notes: pair.notes.take(),
        uncalibrated_why: calibrator.uncalibrated_why.clone(),
        slips,
        token_shift,
        routing_recovered: recovered
            .as_ref()
            .map(|r| r.recovered.clone())
            .unwrap_or_default(),
    };
    let (report, trained, untrained) =
        report::report(&done, (&pair.a, &pair.b), &planned, described)?;
    Ok(PairOutcome {
        report,
        trained,
        untrained,
        zero_padding: ready.zero_padding,
        held_by_one: planned.held_by_one,
        unnamed: planned.unnamed,
        layer_id_slips,
    })
}

/// The one-token shift the states show, when no layer shift explains the pair's difference: its
/// evidence noted, the finding returned to lead the headline.
fn token_shift(pair: &mut Pair, alignment: Option<&Alignment>, ok: f64) -> Result<Option<String>> {
    if alignment.is_some_and(|al| al.offset != 0) {
        return Ok(None);
    }
    let Some(found) = token_shift::detect(&pair.a, &pair.b, ok)? else {
        return Ok(None);
    };
    pair.notes.note(found.evidence());
    Ok(Some(found.finding()))
}
