//! The pair as a job ([`crate::job`]): its sides the two files, the truth and floor runs when a
//! model is at hand — routed as each side routed, stopped after the last layer `--layers`
//! reports — and what the truth then shows about the files, before any row is judged.

use candle_core::{DType, Device};

use super::context::Pair;
use crate::capture::Key;
use crate::commands::compare::recovered_routes::recover;
use crate::commands::compare::{pair_steps, plausibility, routes};
use crate::compare::TensorSource;
use crate::error::Result;
use crate::formats::{FileSource, pipelines};
use crate::job::prior::Prior;
use crate::job::session::{ModelInput, SideRoutes};
use crate::job::{Calibration, Executed, Job, SideSpec, Spec};
use crate::model::{Model, Routes};

/// Refuses ids and files the model cannot have computed, once it is told which model
/// calibrates.
pub(super) fn check_fits(pair: &mut Pair, (model, how): (&Model, &str), ids: &[u32]) -> Result<()> {
    pair.notes.say(&format!("calibrating with {how}"));
    model.check_tokens(ids)?;
    pair_steps::check_sequence_len(model, [&pair.a, &pair.b], !pair.opts.maps.is_empty())?;
    pair.notes
        .record(format!("floor and truth measured with {how}"));
    Ok(())
}

/// With `--layers` the truth and floor runs stop after the last layer that can be paired (the
/// layers asked for, plus the ±2 of shift detection and any `--shift`): a deep model's
/// calibration costs only the layers reported.
pub(super) fn last_layer(pair: &Pair, model: Option<&Model>) -> Option<usize> {
    let (list, n) = (pair.opts.layers.as_ref()?, model?.config.num_hidden_layers);
    list.iter()
        .max()
        .map(|&l| l + 2 + pair.opts.shift.unsigned_abs() as usize)
        .filter(|&l| l + 1 < n)
}

/// Each side's router choices, for calibration runs that route as the side did.
pub(super) fn recorded_routes(
    pair: &Pair,
    model: Option<&Model>,
    tokens: usize,
    last_layer: Option<usize>,
) -> Result<(Option<Routes>, Option<Routes>)> {
    let Some(model) = model else {
        return Ok((None, None));
    };
    let recorded = |src: &FileSource| routes::recorded(src, &model.config, tokens, last_layer);
    Ok((recorded(&pair.a)?, recorded(&pair.b)?))
}

/// Each side's routes for the calibration runs: recovered from its states where it records no
/// router choice ([`crate::commands::compare::recovered_routes`]), else as recorded.
pub(super) struct Rerouted {
    pub routes: (Option<Routes>, Option<Routes>),
    /// The sides whose routes were recovered.
    pub recovered: Vec<String>,
}

/// The model the truth runs, the ids it runs on and the device: what calibrates a pair.
pub(super) type ModelIds<'i> = (&'i Model, &'i [u32], &'i Device);

/// The routes recovered for each side that records no router choice, the other side's as
/// recorded; None when no side's states show a flip and no side records its choices (the runs
/// already made stand). `prior` holds the runs made so far, the unrouted truth among them;
/// recovery's truths join them.
pub(super) fn recovered_routes(
    pair: &mut Pair,
    input: Option<ModelIds<'_>>,
    recorded: &(Option<Routes>, Option<Routes>),
    prior: &mut Prior,
    last_layer: Option<usize>,
) -> Result<Option<Rerouted>> {
    let Some((model, ids, device)) = input.filter(|(_, ids, _)| !ids.is_empty()) else {
        return Ok(None);
    };
    let input = ModelInput {
        model,
        ids,
        prompt_label: None,
        device,
        routes: SideRoutes::default(),
    };
    let truth_as = (last_layer, wants_ops(pair));
    let mut sides = [recorded.0.clone(), recorded.1.clone()];
    let mut recovered = Vec::new();
    let mut any = false;
    for (side, routes) in ["A", "B"].into_iter().zip(&mut sides) {
        if routes.is_some() {
            continue;
        }
        let Some(found) = recover(&input, (pair.side(side), prior), truth_as)? else {
            continue;
        };
        if !found.flips.is_empty() {
            any = true;
            pair.notes.note(format!(
                "{side} records no router choices; its states show {} routing flip(s) against \
                 the f64 truth ({}): its truth and floor are run under that routing",
                found.flips.len(),
                found.describe()
            ));
        } else if recorded.0.is_some() || recorded.1.is_some() {
            // The other side's recorded choices are forced on its truth all the same.
            any = true;
            pair.notes.note(format!(
                "{side} records no router choices and its states show no routing flip against \
                 the f64 truth: its truth routes as the exact router does"
            ));
        }
        *routes = Some(found.routes);
        recovered.push(side.to_string());
    }
    let [a, b] = sides;
    Ok(any.then_some(Rerouted {
        routes: (a, b),
        recovered,
    }))
}

/// Whether the job's runs capture the values inside linear-attention layers: when a file
/// holds some.
fn wants_ops(pair: &Pair) -> bool {
    (pair.a.keys().into_iter())
        .chain(pair.b.keys())
        .any(|k| matches!(k, Key::Op(..)))
}

/// The files as a job's sides, calibrated when `input` is at hand, and the job run, taking
/// from `prior`'s runs what it shares with them.
pub(super) fn run<'i>(
    pair: &Pair,
    dtypes: (DType, DType),
    routes: &'i (Option<Routes>, Option<Routes>),
    (input, prior): (Option<ModelIds<'i>>, Prior),
    last_layer: Option<usize>,
) -> Result<Executed<'i>> {
    let spec = Spec {
        a: SideSpec::File { dtype: dtypes.0 },
        b: SideSpec::File { dtype: dtypes.1 },
        routing: routes::routing(routes.0.as_ref(), routes.1.as_ref()),
        calibration: match (&input, pair.opts.no_floor) {
            (Some(_), _) => Calibration::Measure,
            (None, true) => Calibration::NoFloor,
            (None, false) => Calibration::Unavailable,
        },
        // The truth's op captures, when a file holds some.
        ops: wants_ops(pair),
        through: last_layer,
    };
    let input = input.map(|(model, ids, device)| ModelInput {
        model,
        ids,
        prompt_label: None,
        device,
        routes: SideRoutes {
            a: routes.0.as_ref(),
            b: routes.1.as_ref(),
        },
    });
    Job::plan(spec).execute_after(input, prior)
}

/// What the truth shows about the files: how bare layer indices and a pipeline's layer ids
/// read, a pipeline's last state, whether the files are of this model at all, and that their
/// layers exist in it. Returns the layer-id slips found, which lead the headline.
pub(super) fn check_against_truth(
    pair: &mut Pair,
    done: &Executed,
    model: Option<(&Model, &str)>,
) -> Result<Vec<String>> {
    let truth = done.truth();
    let num_layers = model.map(|(m, _)| m.config.num_hidden_layers);
    let calibrated = truth.zip(num_layers);
    let (index_notes, slips) =
        pair_steps::read_layer_indices(&mut pair.a, &mut pair.b, calibrated)?;
    for note in index_notes {
        pair.notes.note(note);
    }
    if let (Some(truth), Some(n)) = (truth, num_layers) {
        for side in ["A", "B"] {
            if let Some(note) = pipelines::check_last_state(pair.side_mut(side), truth, n)? {
                pair.notes.note(format!("{side}: {note}"));
            }
        }
    }
    // Files of another model would read as "equally close to the truth": check them first.
    let dtypes = (done.spec().a.dtype(), done.spec().b.dtype());
    if let (Some(calibrated), Some((_, how))) = (done.calibrated(), model)
        && let Some(note) = plausibility::check(&calibrated, &pair.a, &pair.b, dtypes, how)?
    {
        pair.notes.note(note);
    }
    // After plausibility: a file of another model is named as such first.
    if let Some(n) = num_layers.filter(|_| truth.is_some()) {
        pair_steps::check_layers_exist([&pair.a, &pair.b], n)?;
    }
    Ok(slips)
}
