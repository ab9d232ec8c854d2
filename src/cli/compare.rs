//! `hsdiff compare A B`: compare two files of captured hidden states — hsdiff dumps, safetensors
//! written by PyTorch, `torch.save` files, numpy arrays — with the same table, verdicts and JSON
//! as a live run, plus the layer alignment and the environment differences. With the model at
//! hand (`--model`, or named by a fingerprint) the f64 truth and each side's floor are computed
//! on the files' token ids by the same run planner as live runs; without one the report is
//! "uncalibrated" and only the depth-scaled band can flag a row.

use std::path::PathBuf;

use candle_core::{DType, Device};
use clap::Args;

use super::common::command_line;
use super::report_args::ReportArgs;
use crate::capture::names;
use crate::compare::{TensorSource, one_sided_states};
use crate::compare_tokens;
use crate::device::parse_dtype;
use crate::disjoint;
use crate::error::Result;
use crate::formats::{FileSource, coarseness, value_dtype_notes};
use crate::pairing;
use crate::planner;
use crate::plausibility;
use crate::report::emit::emit;
use crate::report::{ComparedInput, Comparison, build_report};
use crate::session::Session;
use crate::verdict::thresholds;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Side A: an hsdiff dump, safetensors, torch.save (.pt/.pth), .npy or .npz file.
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// Side B.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Compare A's tensor A_NAME with B's tensor B_NAME (names as in the files, or hsdiff's
    /// names); repeatable.
    #[arg(long = "map", value_name = "A_NAME=B_NAME")]
    pub map: Vec<String>,

    /// Compare B's layer i with A's layer i+K (embed counts as layer −1), e.g. when one side
    /// counts the embedding output as a layer.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(-1024..=1024)
    )]
    pub shift: i64,

    /// Checkpoint folder of the model both files were captured from: hsdiff computes the f64
    /// truth and each side's rounding floor on the files' token ids and judges every row
    /// against them. Default: the model a fingerprint names (the built-in model by its weights
    /// digest, or a folder that exists here); without one the report is uncalibrated.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Skip the f64 truth and floor runs even when a model is at hand: verdicts then use the
    /// depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    /// Compute dtype of files that record none (f64, f32, bf16, f16): sets the thresholds, and
    /// lets 16-bit integer numpy arrays be read as bf16 bit patterns. Without it, a file stored
    /// as f32/f64 whose every value is bf16-exact (f16-exact) is read as a bf16 (f16) run.
    #[arg(long, value_name = "DTYPE")]
    pub dtype_hint: Option<String>,

    /// Token ids the files were captured on, when they carry none (comma-separated, or @FILE):
    /// with a model they make the truth and the floor computable. Checked against the files'
    /// sequence length and against any ids they do carry.
    #[arg(long, value_name = "IDS|@FILE", conflicts_with = "prompt")]
    pub tokens: Option<String>,

    /// The prompt the files were captured on (text, @FILE or a built-in prompt name),
    /// tokenised with --model's tokenizer; as --tokens otherwise.
    #[arg(long, value_name = "TEXT|@FILE|NAME")]
    pub prompt: Option<String>,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &CompareArgs) -> Result<i32> {
    let inputs = [Some(args.a.as_path()), Some(&args.b), args.model.as_deref()];
    args.report
        .options()
        .check_targets(&inputs.into_iter().flatten().collect::<Vec<_>>())?;
    let hint = args.dtype_hint.as_deref().map(parse_dtype).transpose()?;
    let mut a = FileSource::open(&args.a, hint)?;
    let mut b = FileSource::open(&args.b, hint)?;
    let (label_a, label_b) = pairing::labels(&args.a, &args.b);
    let extra_rows = pairing::apply_maps(&mut a, &mut b, &args.map)?;
    // Two entries read as one name, unresolved by --map: refused before anything is said.
    a.check_unambiguous()?;
    b.check_unambiguous()?;
    for (side, src) in [("A", &a), ("B", &b)] {
        for c in &src.conventions {
            eprintln!("hsdiff: {side} ({}): {c}", src.path().display());
        }
        pairing::require_names(src)?;
    }
    // A bf16 run saved as f32/f64 is judged as the bf16 run it is.
    let value_notes = value_dtype_notes([("A", &mut a), ("B", &mut b)])?;
    for note in &value_notes {
        eprintln!("hsdiff: {note}");
    }

    // Token ids first: different inputs make every other number meaningless.
    let (file_ids, token_ids) = pairing::token_ids(&a, &b)?;
    let given = compare_tokens::given_ids(
        args.tokens.as_deref(),
        args.prompt.as_deref(),
        args.model.as_deref(),
    )?;
    let (input_ids, ids_note) = compare_tokens::reconcile(file_ids, given, &a, &b)?;

    let (a_dtype, b_dtype) = (
        a.compute_dtype().unwrap_or(DType::F32),
        b.compute_dtype().unwrap_or(DType::F32),
    );
    let dtype = [a_dtype, b_dtype]
        .into_iter()
        .max_by_key(|d| coarseness(*d))
        .unwrap_or(DType::F32);

    let mut notes: Vec<String> = [("A", &a), ("B", &b)]
        .iter()
        .flat_map(|(side, src)| src.conventions.iter().map(move |c| format!("{side}: {c}")))
        .collect();
    notes.extend(value_notes);
    notes.extend(ids_note);
    let model = if args.no_floor {
        Err("no floor measured (--no-floor)".to_string())
    } else {
        pairing::calibration_model(args.model.as_deref(), &a, &b, &input_ids)?
    };
    let mut uncalibrated_why = None;
    let mut calibrated_with = String::new();
    let session = match model {
        Ok((model, how)) => {
            eprintln!("hsdiff: calibrating with {how}");
            model.check_tokens(&input_ids)?;
            pairing::check_sequence_len(&model, [&a, &b], !args.map.is_empty())?;
            notes.push(format!("floor and truth measured with {how}"));
            calibrated_with = how;
            Some(Session {
                model,
                ids: input_ids.clone(),
                prompt_label: None,
                dtype,
                device: Device::Cpu,
            })
        }
        Err(why) => {
            // The headline says so; a stderr line here would precede any later input error.
            notes.push(format!("uncalibrated: {why}"));
            // Only the missing ids need other words than the headline's "pass --model DIR".
            if input_ids.is_empty() && !args.no_floor {
                uncalibrated_why = Some(why);
            }
            None
        }
    };
    let layers = args.report.layers()?;
    // With --layers the truth and floor runs stop after the last layer that can be paired (the
    // layers asked for, plus the ±2 of shift detection and any --shift): a deep model's
    // calibration costs only the layers reported.
    let num_layers = session.as_ref().map(|s| s.model.config.num_hidden_layers);
    let last_layer = match (&layers, num_layers) {
        (Some(list), Some(n)) => list
            .iter()
            .max()
            .map(|&l| l + 2 + args.shift.unsigned_abs() as usize)
            .filter(|&l| l + 1 < n),
        _ => None,
    };
    let calibration = match &session {
        Some(session) => {
            let capture_ops = a
                .names()
                .iter()
                .chain(&b.names())
                .any(|n| names::parse_op(n).is_some());
            Some(planner::calibrate_files(
                session,
                (a_dtype, b_dtype),
                capture_ops,
                last_layer,
            )?)
        }
        None => None,
    };

    let truth = calibration.as_ref().and_then(|c| c.truth_run());
    for note in pairing::read_layer_indices(&mut a, &mut b, truth)? {
        eprintln!("hsdiff: {note}");
        notes.push(note);
    }
    // Files of another model would read as "equally close to the truth": check them first.
    if let (Some(cal), Some(session)) = (&calibration, &session) {
        let calibrated = cal.calibrated(
            &a,
            &b,
            (a_dtype, b_dtype),
            &session.model.source.to_string(),
        );
        if let Some(note) =
            plausibility::check(&calibrated, &a, &b, (a_dtype, b_dtype), &calibrated_with)?
        {
            eprintln!("hsdiff: {note}");
            notes.push(note);
        }
    }
    let alignment = pairing::align(&a, &mut b, thresholds(dtype).ok, args.shift)?;
    let layer_types = session
        .as_ref()
        .map(|s| s.model.config.layer_types.as_slice());
    if let Some(note) = one_sided_states(&a.names(), &b.names()) {
        eprintln!("hsdiff: {note}");
        notes.push(note);
    }
    // Files that hold different layers (hooks on layers[i] against hidden_states[i]): with
    // the truth at hand, every layer of either side is judged against it.
    let truth = calibration.as_ref().and_then(|c| c.truth_run());
    let split = truth.and_then(|t| disjoint::disjoint_layers(&a, &b).map(|l| (t, l)));
    let (rows, filled, one_sided) = match split {
        Some((t, layers_ab)) => {
            let (rows, fa, fb, one_sided, note) =
                disjoint::judged_against(&a, &b, t, layers_ab, layer_types);
            eprintln!("hsdiff: {note}");
            notes.push(note);
            (rows, Some((fa, fb)), Some(one_sided))
        }
        None => (
            pairing::paired_rows(
                &a,
                &b,
                layers.as_deref(),
                layer_types,
                extra_rows,
                last_layer.is_some(),
            )?,
            None,
            None,
        ),
    };
    let (src_a, src_b): (&dyn TensorSource, &dyn TensorSource) = match &filled {
        Some((fa, fb)) => (fa, fb),
        None => (&a, &b),
    };
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

    // Files of different layers have no diagonal to shift.
    let alignment = alignment.filter(|_| one_sided.is_none());
    let comparison = Comparison {
        a: src_a,
        b: src_b,
        a_side: pairing::side(&a, label_a, dtype)?,
        b_side: pairing::side(&b, label_b, dtype)?,
        calibration: match (&calibration, &session) {
            (Some(cal), Some(session)) => Some(cal.calibrated(
                src_a,
                src_b,
                (a_dtype, b_dtype),
                &session.model.source.to_string(),
            )),
            _ => None,
        },
        floor_skipped: args.no_floor,
        uncalibrated_why,
        rows,
        dtype,
        mode: "files".to_string(),
        input: ComparedInput {
            input_ids,
            token_ids,
            tokens,
            num_layers,
        },
        command: Some(command_line()),
        alignment,
        notes,
        one_sided,
    };
    let report = build_report(&comparison)?;
    emit(&report, &args.report.options())
}
