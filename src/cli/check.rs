//! `hsdiff check [--golden FILE]`: recompute what a golden dump describes — its model, its token
//! ids, its dtype — with a backend of this build on this machine, and compare (same report,
//! verdicts and exit codes as the live run: 0 ok, 1 divergence, 2 trouble). With no file it checks
//! the built-in golden set: transformers' states of the built-in model at f64 (strict), f32 and
//! bf16, compiled into the binary.

use std::path::PathBuf;

use candle_core::{DType, Device};
use clap::Args;

use super::common::command_line;
use super::report_args::ReportArgs;
use crate::backends::{LinearAttentionBackend, backend_by_name};
use crate::builtin;
use crate::capture::{dump::Dump, names};
use crate::check::{
    BUILTIN_SET, CheckOutcome, builtin_golden, golden_side, line, note_model_differences, set_json,
    set_text, shared_states, worst,
};
use crate::compare::{TensorSource, plan_rows};
use crate::device::{parse_device, parse_dtype};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::planner::{self, SideRun};
use crate::report::emit::{Format, emit};
use crate::report::{Comparison, Report, Side, build_report};
use crate::run::{fingerprint_for, forward};
use crate::session::{Session, check_layer_list, find_model};

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A dump to recompute and compare against (hsdiff dump, scripts/capture_hf.py output or a
    /// golden file). Default: the built-in golden set.
    #[arg(long, value_name = "FILE")]
    pub golden: Option<PathBuf>,

    /// Backend(s) to recompute with, comma-separated (see `hsdiff backends`).
    #[arg(long, default_value = "reference", value_name = "LIST")]
    pub backend: String,

    /// Checkpoint folder. Default: the model the dump's fingerprint names (a folder, or the
    /// built-in model).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Compute dtype. Default: the dump's (fingerprint `dtype`, else its tensors' dtype).
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,

    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,

    /// Skip the f64 truth and floor runs: verdicts then use the depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// The model a golden file's fingerprint names ([`find_model`]), looked for beside the file too.
fn named_model(golden: &Dump) -> Result<Model> {
    let fp = golden.fingerprint.as_ref();
    let name = fp.and_then(|f| f.model.as_deref());
    match find_model(
        name,
        fp.and_then(|f| f.weights_digest.as_deref()),
        golden.path().parent(),
    )? {
        Some((model, _)) => Ok(model),
        None => Err(Error::file(
            golden.path(),
            match name {
                Some(name) => {
                    format!("the model it names, `{name}`, is not a folder here; pass --model DIR")
                }
                None => "the fingerprint names no model; pass --model DIR".to_string(),
            },
        )),
    }
}

pub fn run(args: &CheckArgs) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = [args.golden.as_deref(), args.model.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    args.report.options().check_targets(&inputs)?;
    let device = parse_device(&args.device)?;
    let backends: Vec<Box<dyn LinearAttentionBackend>> = args
        .backend
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|b| backend_by_name(b, &device))
        .collect::<Result<_>>()?;
    if backends.is_empty() {
        return Err(Error::argument("--backend", "names no backend"));
    }
    let dtype_override = args.dtype.as_deref().map(parse_dtype).transpose()?;

    match &args.golden {
        Some(path) => {
            let golden = Dump::open(path)?;
            let model = match &args.model {
                Some(dir) => Model::load(dir)?,
                None => named_model(&golden)?,
            };
            let session = session_for(&golden, model, dtype_override, &device)?;
            let mut outcomes = Vec::new();
            for backend in &backends {
                let report = check_one(&golden, &session, backend.as_ref(), args)?;
                let name = path.display().to_string();
                eprintln!("{}", line(&name, &report));
                outcomes.push(CheckOutcome { name, report });
            }
            if let [only] = outcomes.as_slice() {
                return emit(&only.report, &args.report.options());
            }
            render_set(&outcomes, &args.report)
        }
        None => {
            if args.report.plot.is_some() {
                return Err(Error::argument(
                    "--plot",
                    "draws one report: use it with --golden FILE",
                ));
            }
            let mut outcomes = Vec::new();
            for (name, bytes) in BUILTIN_SET {
                let golden = builtin_golden(name, bytes)?;
                let model = match &args.model {
                    Some(dir) => Model::load(dir)?,
                    None => builtin::model()?,
                };
                let session = session_for(&golden, model, dtype_override, &device)?;
                for backend in &backends {
                    let report = check_one(&golden, &session, backend.as_ref(), args)?;
                    outcomes.push(CheckOutcome {
                        name: (*name).to_string(),
                        report,
                    });
                }
            }
            render_set(&outcomes, &args.report)
        }
    }
}

/// The run a golden file describes: its ids, its dtype (unless overridden), this model.
fn session_for(
    golden: &Dump,
    model: Model,
    dtype_override: Option<DType>,
    device: &Device,
) -> Result<Session> {
    let ids = golden.required_input_ids()?;
    model.check_tokens(&ids)?;
    let dtype = match dtype_override {
        Some(d) => d,
        None => golden.states_dtype()?,
    };
    if let Some(fp) = &golden.fingerprint {
        note_model_differences(golden.path(), fp, &model);
    }
    Ok(Session {
        model,
        ids,
        prompt_label: golden.fingerprint.as_ref().and_then(|f| f.prompt.clone()),
        dtype,
        device: device.clone(),
    })
}

fn check_one(
    golden: &Dump,
    session: &Session,
    backend: &dyn LinearAttentionBackend,
    args: &CheckArgs,
) -> Result<Report> {
    let (dtype, device) = (session.dtype, &session.device);
    let golden_names = golden.names();
    let capture_ops = golden_names.iter().any(|n| names::parse_op(n).is_some());
    let ours = forward(session, backend, dtype, capture_ops, None)?;
    let golden_dtype = golden.states_dtype()?;
    let calibration = if args.no_floor {
        None
    } else {
        let plan = planner::plan(
            SideRun {
                dtype: golden_dtype,
                is_reference_run: false,
            },
            SideRun {
                dtype,
                is_reference_run: backend.name() == "reference",
            },
        );
        Some(planner::execute(plan, device, |backend, d| {
            forward(session, backend, d, capture_ops, None)
        })?)
    };

    let common = shared_states(golden, &TensorSource::names(&ours))?;
    let layers = args.report.layers()?;
    if let Some(layers) = &layers {
        check_layer_list(layers, session.model.config.num_hidden_layers, "the model")?;
    }
    let rows = plan_rows(
        &common,
        Some(&session.model.config.layer_types),
        layers.as_deref(),
    );
    if rows.is_empty() {
        return Err(Error::file(
            golden.path(),
            "holds no hidden states hsdiff captures (embed, layers.N, final_norm, logits)",
        ));
    }
    let b_side = Side::from_fingerprint(
        format!("{} (here)", backend.name()),
        fingerprint_for(session, backend),
    );
    let comparison = Comparison {
        a: golden,
        b: &ours,
        a_side: golden_side(golden),
        b_side,
        calibration: calibration.as_ref().map(|cal| {
            cal.calibrated(
                golden,
                &ours,
                (golden_dtype, dtype),
                &session.model.source.to_string(),
            )
        }),
        floor_skipped: args.no_floor,
        uncalibrated_why: None,
        one_sided: None,
        rows,
        dtype: [golden_dtype, dtype]
            .into_iter()
            .max_by_key(|d| crate::formats::coarseness(*d))
            .unwrap_or(dtype),
        mode: "check".to_string(),
        input: session.compared_input(),
        command: Some(command_line()),
        alignment: None,
        notes: Vec::new(),
    };
    build_report(&comparison)
}

/// Several checks: each report rendered in turn (JSON: one object with every report), one line
/// per check at the end, and the exit code of the worst.
fn render_set(outcomes: &[CheckOutcome], args: &ReportArgs) -> Result<i32> {
    let options = args.options();
    let text = match options.format {
        Format::Json => set_json(outcomes)?,
        Format::Markdown | Format::Table => {
            let renderer = options.renderer();
            set_text(outcomes, |r| renderer.render(r))?
        }
    };
    let lines: Vec<String> = outcomes.iter().map(|o| line(&o.name, &o.report)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    options.write(&text, &lines)?;
    Ok(i32::from(args.fail_on.flags(worst(outcomes))))
}
