//! The default command: `hsdiff --a BACKEND --b BACKEND …` runs both backends on identical
//! inputs (plus the f64 truth and the rounding floor), compares every capture and prints the
//! report.

use clap::{Args, ValueEnum};

use super::common::{RunArgs, command_line};
use super::report_args::ReportArgs;
use crate::backends::{LinearAttentionBackend, backend_by_name};
use crate::compare::plan_rows;
use crate::error::{Error, Result};
use crate::planner;
use crate::report::emit::emit;
use crate::report::{Comparison, Side, build_report};
use crate::run::{fingerprint_for, forward};
use crate::session::{Session, check_layer_list};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Each backend carries its own residual stream (as in a real train/eval split).
    Propagate,
    /// Each layer of B is fed A's input to that layer: the error a layer adds, apart from what
    /// it inherits.
    Isolate,
}

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    /// Backend of side A (see `hsdiff backends`).
    #[arg(long = "a", value_name = "BACKEND")]
    pub a: Option<String>,

    /// Backend of side B.
    #[arg(long = "b", value_name = "BACKEND")]
    pub b: Option<String>,

    #[command(flatten)]
    pub run: RunArgs,

    #[arg(long, value_enum, default_value = "propagate")]
    pub mode: Mode,

    /// Also compare values inside linear-attention layers (conv out, q, k, v, beta, g, core
    /// out, gated-norm out, out_proj) to find the first divergent op.
    #[arg(long)]
    pub ops: bool,

    /// Skip the f64 truth and floor runs: verdicts then use the depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &DiffArgs) -> Result<i32> {
    let (Some(a_name), Some(b_name)) = (&args.a, &args.b) else {
        return Err(Error::argument(
            "--a/--b",
            "name both backends: hsdiff --a BACKEND --b BACKEND (see `hsdiff backends`)",
        ));
    };
    // Output targets are checked before the (long) runs.
    args.report
        .options()
        .check_targets(&args.run.input_paths())?;
    let session = args.run.resolve()?;
    // A, B and the floor run read the same weights in the same dtype: convert them once.
    session.model.keep_weights(session.dtype, &session.device);
    let a = backend_by_name(a_name, &session.device)?;
    let b = backend_by_name(b_name, &session.device)?;
    let layers = args.report.layers()?;
    if let Some(layers) = &layers {
        check_layer_list(layers, session.model.config.num_hidden_layers, "the model")?;
    }

    let caps_a = forward(&session, a.as_ref(), session.dtype, args.ops, None)?;
    let isolate = args.mode == Mode::Isolate;
    let feed = isolate.then_some(&caps_a);
    let caps_b = forward(&session, b.as_ref(), session.dtype, args.ops, feed)?;
    let calibration = if args.no_floor {
        None
    } else {
        let plan = planner::plan_live(session.dtype, a.name(), b.name(), isolate);
        Some(planner::execute_on_session(
            plan, &session, args.ops, feed, None,
        )?)
    };

    let rows = plan_rows(
        &crate::compare::TensorSource::names(&caps_a),
        Some(&session.model.config.layer_types),
        layers.as_deref(),
    );
    let comparison = Comparison {
        a: &caps_a,
        b: &caps_b,
        a_side: side(&session, a.as_ref()),
        b_side: side(&session, b.as_ref()),
        calibration: calibration.as_ref().map(|cal| {
            cal.calibrated(
                &caps_a,
                &caps_b,
                (session.dtype, session.dtype),
                &session.model.source.to_string(),
            )
        }),
        floor_skipped: args.no_floor,
        rows,
        dtype: session.dtype,
        mode: match args.mode {
            Mode::Propagate => "propagate",
            Mode::Isolate => "isolate",
        }
        .to_string(),
        input: session.compared_input(),
        command: Some(command_line()),
        alignment: None,
        notes: Vec::new(),
    };
    let report = build_report(&comparison)?;
    emit(&report, &args.report.options())
}

fn side(session: &Session, backend: &dyn LinearAttentionBackend) -> Side {
    Side::from_fingerprint(
        backend.name().to_string(),
        fingerprint_for(session, backend),
    )
}
