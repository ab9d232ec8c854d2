//! One pair of capture files compared, from two opened files to a report: the steps of
//! [`crate::commands::compare::pair_steps`] in order, and a job ([`crate::job`]) whose sides are the two files — the
//! truth and floor runs when a model is at hand, and the report. `hsdiff compare A B` runs it
//! once; a dataset ([`crate::commands::compare::dataset`]) once per pair of samples, with the model loaded once for
//! all of them.
//!
//! When a drafter pipeline's `loss_mask` marks only some positions as trained, the positions it
//! trains on are compared again on their own (same truth and floor runs, restricted to those
//! positions), so a dataset report can show their figures beside all real positions'.

use std::path::Path;

use candle_core::{DType, Device};

use crate::capture::Key;
use crate::commands::compare::positions::{Positions, trained_positions};
use crate::commands::compare::routes;
use crate::commands::compare::tokens::{self, GivenIds};
use crate::commands::compare::{disjoint, layer_id_slip, pair_steps, plausibility};
use crate::compare::verdict::thresholds;
use crate::compare::{HeldByOneSide, Kind, TensorSource};
use crate::error::Result;
use crate::formats::pipelines::HeldPositions;
use crate::formats::{FileSource, pipelines, value_dtype_notes};
use crate::job::session::{ModelInput, SideRoutes};
use crate::job::{self, Job, Parts, SideSpec, Spec};
use crate::model::Model;
use crate::report::{ComparedInput, Report};
use crate::util::escape::one_line;

/// How one pair is compared (the command's options, less the files).
#[derive(Debug, Clone, Default)]
pub struct PairOptions {
    /// `--map A_NAME=B_NAME`.
    pub maps: Vec<String>,
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
    pub given_ids: Option<GivenIds>,
}

/// Where the truth and floor come from.
pub enum Calibration<'m> {
    /// `--model DIR`, else the model a file's fingerprint names (as `compare` of two files).
    Find(Option<&'m Path>),
    /// A model already loaded (a dataset's), with how it was found; handed back when done.
    Loaded(&'m mut Option<(Model, String)>),
    /// None: the report is uncalibrated, for this reason.
    Skip(String),
}

/// What one pair gave.
pub struct PairOutcome {
    pub report: Report,
    /// The positions `loss_mask` trains on compared on their own, when they are not all of
    /// the compared positions.
    pub trained: Option<Trained>,
    /// Positions both sides held as all-zero padding, left out.
    pub zero_padding: Option<crate::formats::pipelines::ZeroPadding>,
    /// What only one side held, so it got no row.
    pub held_by_one: HeldByOneSide,
    /// Each side's tensors that no name rule read and no `--map` named, so they got no row.
    pub unnamed: (Vec<String>, Vec<String>),
}

pub struct Trained {
    pub positions: usize,
    pub of: usize,
    pub report: Report,
}

/// Compares `a` with `b`.
pub fn compare_pair(
    mut a: FileSource,
    mut b: FileSource,
    labels: (String, String),
    opts: &PairOptions,
    calibration: Calibration,
) -> Result<PairOutcome> {
    let say = |line: &str| {
        if opts.verbose {
            eprintln!("hsdiff: {}", one_line(line));
        }
    };
    let extra_rows = pair_steps::apply_maps(&mut a, &mut b, &opts.maps)?;
    // Two entries read as one name, unresolved by --map: refused before anything is said.
    a.check_unambiguous()?;
    b.check_unambiguous()?;
    for (side, src) in [("A", &a), ("B", &b)] {
        for c in &src.conventions {
            say(&format!("{side} ({}): {c}", src.path().display()));
        }
        pair_steps::require_names(src)?;
    }
    // Positions both sides hold as all-zero (padding with no mask) are left out first.
    let padding_note = crate::formats::pipelines::drop_zero_padding(&mut a, &mut b)?;
    if let Some(p) = &padding_note {
        say(&p.note);
    }
    // Positions one side lacks (an SGLang request after a prefix-cache hit) are left out of both.
    let held = pipelines::align_held_positions(&mut a, &mut b)?;
    if let Some(h) = &held {
        say(&h.note);
    }
    // A bf16 run saved as f32/f64 is judged as the bf16 run it is.
    let value_notes = value_dtype_notes([("A", &mut a), ("B", &mut b)])?;
    for note in &value_notes {
        say(note);
    }

    // Token ids first: different inputs make every other number meaningless.
    let (file_ids, token_ids) = pair_steps::token_ids(&a, &b)?;
    let (input_ids, ids_note) = tokens::reconcile(file_ids, opts.given_ids.clone(), &a, &b)?;

    let sides = (
        SideSpec::File {
            dtype: a.compute_dtype().unwrap_or(DType::F32),
        },
        SideSpec::File {
            dtype: b.compute_dtype().unwrap_or(DType::F32),
        },
    );

    let mut notes: Vec<String> = [("A", &a), ("B", &b)]
        .iter()
        .flat_map(|(side, src)| src.conventions.iter().map(move |c| format!("{side}: {c}")))
        .collect();
    notes.extend(padding_note.iter().map(|p| p.note.clone()));
    notes.extend(held.iter().map(|h| h.note.clone()));
    notes.extend(value_notes);
    notes.extend(ids_note);
    // Rows from position p > 0 on are compared uncalibrated (a dataset's model is kept).
    let unheld_why = held.as_ref().and_then(HeldPositions::uncalibrated_why);
    let calibration = if opts.no_floor {
        Calibration::Skip("no floor measured (--no-floor)".to_string())
    } else {
        calibration
    };
    let (found, slot) = match calibration {
        Calibration::Find(_) if unheld_why.is_some() => {
            (Err(unheld_why.clone().unwrap_or_default()), None)
        }
        Calibration::Find(dir) => (
            pair_steps::calibration_model(dir, &a, &b, &input_ids)?,
            None,
        ),
        Calibration::Loaded(slot) => {
            let found = match slot.take() {
                Some(m) if unheld_why.is_some() => {
                    // Kept for the dataset's other samples.
                    *slot = Some(m);
                    Err(unheld_why.clone().unwrap_or_default())
                }
                _ if input_ids.is_empty() => Err(
                    "neither file carries token ids, so the truth cannot be computed".to_string(),
                ),
                Some(m) => Ok(m),
                None => Err("no model to measure the floor".to_string()),
            };
            (found, Some(slot))
        }
        Calibration::Skip(why) => (Err(why), None),
    };
    let mut uncalibrated_why = None;
    let (model, how) = match found {
        Ok((model, how)) => (Some(model), how),
        Err(why) => {
            // The headline says so; a stderr line here would precede any later input error.
            notes.push(format!("uncalibrated: {why}"));
            // Only the missing ids need other words than the headline's "pass --model DIR".
            if input_ids.is_empty() && !opts.no_floor {
                uncalibrated_why = Some(why);
            }
            (None, String::new())
        }
    };
    let cpu = Device::Cpu;
    let input = model.as_ref().map(|model| ModelInput {
        model,
        ids: &input_ids,
        prompt_label: None,
        device: &cpu,
        routes: SideRoutes::default(),
    });
    let result = compare_on(
        &mut a,
        &mut b,
        labels,
        opts,
        input.map(|i| (i, how.as_str())),
        Inputs {
            input_ids: input_ids.clone(),
            token_ids,
            sides,
            extra_rows,
            notes,
            uncalibrated_why,
        },
    );
    let result = result.map(|o| PairOutcome {
        zero_padding: padding_note,
        ..o
    });
    // A dataset's model goes back to it, whatever became of this pair.
    if let (Some(slot), Some(model)) = (slot, model) {
        *slot = Some((model, how));
    }
    result
}

struct Inputs {
    input_ids: Vec<u32>,
    token_ids: crate::report::TokenIds,
    /// The two files, with the dtypes they were computed in.
    sides: (SideSpec, SideSpec),
    extra_rows: Vec<String>,
    notes: Vec<String>,
    /// Why no truth could be computed, when it is the missing token ids.
    uncalibrated_why: Option<String>,
}

fn compare_on(
    a: &mut FileSource,
    b: &mut FileSource,
    (label_a, label_b): (String, String),
    opts: &PairOptions,
    session: Option<(ModelInput, &str)>,
    inputs: Inputs,
) -> Result<PairOutcome> {
    let say = |line: &str| {
        if opts.verbose {
            eprintln!("hsdiff: {}", one_line(line));
        }
    };
    let Inputs {
        input_ids,
        token_ids,
        sides,
        extra_rows,
        mut notes,
        uncalibrated_why,
    } = inputs;
    if let Some((session, how)) = session {
        say(&format!("calibrating with {how}"));
        session.model.check_tokens(&input_ids)?;
        pair_steps::check_sequence_len(session.model, [a, b], !opts.maps.is_empty())?;
        notes.push(format!("floor and truth measured with {how}"));
    }
    let layers = opts.layers.clone();
    // With --layers the truth and floor runs stop after the last layer that can be paired (the
    // layers asked for, plus the ±2 of shift detection and any --shift): a deep model's
    // calibration costs only the layers reported.
    let num_layers = session.map(|(s, _)| s.model.config.num_hidden_layers);
    let last_layer = match (&layers, num_layers) {
        (Some(list), Some(n)) => list
            .iter()
            .max()
            .map(|&l| l + 2 + opts.shift.unsigned_abs() as usize)
            .filter(|&l| l + 1 < n),
        _ => None,
    };
    // Each side's router choices, for calibration runs that route as the side did.
    let recorded = |src: &FileSource| match &session {
        Some((s, _)) => routes::recorded(src, &s.model.config, input_ids.len(), last_layer),
        None => Ok(None),
    };
    let (routes_a, routes_b) = (recorded(a)?, recorded(b)?);
    let session = session.map(|(input, how)| {
        let routes = SideRoutes {
            a: routes_a.as_ref(),
            b: routes_b.as_ref(),
        };
        (ModelInput { routes, ..input }, how)
    });
    let spec = Spec {
        a: sides.0,
        b: sides.1,
        routing: routes::routing(routes_a.as_ref(), routes_b.as_ref()),
        calibration: match (&session, opts.no_floor) {
            (Some(_), _) => job::Calibration::Measure,
            (None, true) => job::Calibration::NoFloor,
            (None, false) => job::Calibration::Unavailable,
        },
        // The truth's op captures, when a file holds some.
        ops: a
            .names()
            .iter()
            .chain(&b.names())
            .any(|n| matches!(Key::of(n), Some(Key::Op(..)))),
        through: last_layer,
    };
    let (a_dtype, b_dtype, dtype) = (spec.a.dtype(), spec.b.dtype(), spec.dtype());
    let done = Job::plan(spec).execute(session.map(|(input, _)| input))?;

    let truth = done.truth();
    let (index_notes, slips) = pair_steps::read_layer_indices(a, b, truth)?;
    for note in index_notes {
        say(&note);
        notes.push(note);
    }
    if let (Some(truth), Some(n)) = (truth, num_layers) {
        for (side, src) in [("A", &mut *a), ("B", &mut *b)] {
            if let Some(note) = pipelines::check_last_state(src, truth, n)? {
                let note = format!("{side}: {note}");
                say(&note);
                notes.push(note);
            }
            // vLLM's aux ids count from idx + 1: the truth shows whether the file's do.
            if let Some(ids) = pipelines::check_aux_ids(src, truth, n)? {
                let note = format!("{side}: {}", ids.describe());
                say(&note);
                notes.push(note);
            }
        }
    }
    // Files of another model would read as "equally close to the truth": check them first.
    if let (Some(calibrated), Some((_, how))) = (done.calibrated(), session)
        && let Some(note) = plausibility::check(&calibrated, a, b, (a_dtype, b_dtype), how)?
    {
        say(&note);
        notes.push(note);
    }
    // After plausibility: a file of another model is named as such first.
    if let Some(n) = num_layers.filter(|_| truth.is_some()) {
        pair_steps::check_layers_exist([&*a, &*b], n)?;
    }
    let alignment = pair_steps::align(a, b, thresholds(dtype).ok, opts.shift)?;
    let layer_types = session.map(|(s, _)| s.model.config.layer_types.as_slice());
    let mut held_by_one = HeldByOneSide::of(&a.names(), &b.names(), layers.as_deref());
    if let Some(note) = held_by_one.states_note() {
        say(&note);
        notes.push(note);
    }
    // Files that hold different layers (hooks on layers[i] against hidden_states[i]): with
    // the truth at hand, every layer of either side is judged against it.
    let split = truth.and_then(|t| disjoint::disjoint_layers(a, b).map(|l| (t, l)));
    let (rows, filled, one_sided) = match split {
        Some((t, layers_ab)) => {
            let (rows, fa, fb, one_sided, note) =
                disjoint::judged_against(a, b, t, layers_ab, layer_types);
            say(&note);
            notes.push(note);
            (rows, Some((fa, fb)), Some(one_sided))
        }
        None => (
            pair_steps::paired_rows(
                a,
                b,
                layers.as_deref(),
                layer_types,
                extra_rows,
                last_layer.is_some(),
            )?,
            None,
            None,
        ),
    };
    // Files of different layers are judged against the truth layer by layer above; otherwise
    // what one side alone holds gets no row, and the report says so.
    if one_sided.is_some() {
        held_by_one.tensors_a.clear();
        held_by_one.tensors_b.clear();
    } else if let Some(note) = held_by_one.tensors_note() {
        say(&note);
        notes.push(note);
    }
    // Tensors no name rule read (and no --map named) are not compared: said, never dropped.
    let unnamed = (a.unnamed(), b.unnamed());
    if let Some(note) = crate::compare::unnamed_note(&unnamed.0, &unnamed.1) {
        say(&note);
        notes.push(note);
    }
    // Files of different layers have no diagonal to shift.
    let alignment = alignment.filter(|_| one_sided.is_none());
    if let Some(last) = last_layer {
        notes.push(format!(
            "--layers: the truth and floor ran through layer {last} only, so final_norm and \
             logits are not reported"
        ));
    }
    let tokens = if input_ids.is_empty() {
        rows.iter()
            .find_map(|r| a.shape(&r.name))
            .and_then(|s| s.get(1).copied())
            .unwrap_or(0)
    } else {
        input_ids.len()
    };
    for (side, src) in [("A", &*a), ("B", &*b)] {
        if let Some(p) = &src.pipeline
            && p.positions != p.stored_positions
        {
            notes.push(format!(
                "{side}: {} of {} stored positions compared (padding left out)",
                p.positions, p.stored_positions
            ));
        }
    }
    let (src_a, src_b): (&dyn TensorSource, &dyn TensorSource) = match &filled {
        Some((fa, fb)) => (fa, fb),
        None => (&*a, &*b),
    };
    let a_side = pair_steps::side(a, label_a, dtype)?;
    let b_side = pair_steps::side(b, label_b, dtype)?;
    let trained_positions = trained_positions(a, b, tokens)?;
    let mut report = done.report(Parts {
        a: Some(src_a),
        b: Some(src_b),
        a_side: a_side.clone(),
        b_side: b_side.clone(),
        rows: rows.clone(),
        input: ComparedInput {
            input_ids: input_ids.clone(),
            token_ids,
            tokens,
            num_layers,
        },
        command: opts.command.clone(),
        alignment,
        notes,
        one_sided: one_sided.clone(),
        uncalibrated_why: uncalibrated_why.clone(),
    })?;
    layer_id_slip::lead_headline(&mut report, &slips);

    let trained = match trained_positions {
        Some(index) => {
            let kept: Vec<u32> = index
                .iter()
                .map(|&i| input_ids.get(i as usize).copied().unwrap_or(0))
                .collect();
            let sub = Parts {
                a: Some(src_a),
                b: Some(src_b),
                a_side,
                b_side,
                rows: rows
                    .into_iter()
                    .filter(|r| Positions::per_token(&r.name) && r.kind != Kind::State)
                    .collect(),
                input: ComparedInput {
                    input_ids: if input_ids.is_empty() {
                        Vec::new()
                    } else {
                        kept
                    },
                    token_ids,
                    tokens: index.len(),
                    num_layers,
                },
                command: None,
                alignment: None,
                notes: Vec::new(),
                one_sided,
                uncalibrated_why,
            };
            let view = job::view(|s| {
                let seen: Box<dyn TensorSource + '_> = Box::new(Positions::of(s, &index));
                seen
            });
            Some(Trained {
                positions: index.len(),
                of: tokens,
                report: done.report_seen(sub, &view)?,
            })
        }
        None => None,
    };
    Ok(PairOutcome {
        report,
        trained,
        zero_padding: None,
        held_by_one,
        unnamed,
    })
}
