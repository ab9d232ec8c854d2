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
use crate::compare::one_sided_states;
use crate::device::parse_dtype;
use crate::error::Result;
use crate::escape::one_line;
use crate::formats::{FileSource, coarseness};
use crate::pairing;
use crate::planner::{self, SideRun};
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
    /// lets 16-bit integer numpy arrays be read as bf16 bit patterns.
    #[arg(long, value_name = "DTYPE")]
    pub dtype_hint: Option<String>,

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
            let line = format!("{side} ({}): {c}", src.path().display());
            eprintln!("hsdiff: {}", one_line(&line));
        }
        pairing::require_names(src)?;
    }

    // Token ids first: different inputs make every other number meaningless.
    let (input_ids, token_ids) = pairing::token_ids(&a, &b)?;

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
    let model = if args.no_floor {
        Err("no floor measured (--no-floor)".to_string())
    } else {
        pairing::calibration_model(args.model.as_deref(), &a, &b, &input_ids)?
    };
    let session = match model {
        Ok((model, how)) => {
            eprintln!("hsdiff: calibrating with {how}");
            model.check_tokens(&input_ids)?;
            pairing::check_sequence_len(&model, [&a, &b], !args.map.is_empty())?;
            notes.push(format!("floor and truth measured with {how}"));
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
            let plan = planner::plan(
                SideRun {
                    dtype: a_dtype,
                    is_reference_run: false,
                },
                SideRun {
                    dtype: b_dtype,
                    is_reference_run: false,
                },
            );
            Some(planner::execute_on_session(
                plan,
                session,
                capture_ops,
                None,
                last_layer,
            )?)
        }
        None => None,
    };

    let truth = calibration.as_ref().and_then(|c| c.truth_run());
    for note in pairing::read_layer_indices(&mut a, &mut b, truth)? {
        eprintln!("hsdiff: {}", one_line(&note));
        notes.push(note);
    }
    let alignment = pairing::align(&a, &mut b, thresholds(dtype).ok, args.shift)?;
    let layer_types = session
        .as_ref()
        .map(|s| s.model.config.layer_types.as_slice());
    if let Some(note) = one_sided_states(&a.names(), &b.names()) {
        eprintln!("hsdiff: {}", one_line(&note));
        notes.push(note);
    }
    let rows = pairing::paired_rows(
        &a,
        &b,
        layers.as_deref(),
        layer_types,
        extra_rows,
        last_layer.is_some(),
    )?;
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

    let comparison = Comparison {
        a: &a,
        b: &b,
        a_side: pairing::side(&a, label_a, dtype)?,
        b_side: pairing::side(&b, label_b, dtype)?,
        calibration: match (&calibration, &session) {
            (Some(cal), Some(session)) => Some(cal.calibrated(
                &a,
                &b,
                (a_dtype, b_dtype),
                &session.model.source.to_string(),
            )),
            _ => None,
        },
        floor_skipped: args.no_floor,
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
    };
    let report = build_report(&comparison)?;
    emit(&report, &args.report.options())
}
