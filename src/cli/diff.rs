//! The default command: `hsdiff --a BACKEND --b BACKEND …` runs both backends on identical
//! inputs (plus the f64 truth and the rounding floor), compares every capture and prints the
//! report.

use clap::Args;
use clap::ValueEnum;
use clap::builder::PossibleValue;

use super::common::{RunArgs, command_line};
use super::report_args::ReportArgs;
use crate::backends::backend_by_name;
use crate::error::{Error, Result};
use crate::live::{self, LiveRun, Mode};
use crate::report::emit::emit;

/// `--mode`'s values, with the library's descriptions.
impl ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &[Mode::Propagate, Mode::Isolate]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Mode::Propagate => PossibleValue::new("propagate").help(
                "Each backend carries its own residual stream (as in a real train/eval split)",
            ),
            Mode::Isolate => PossibleValue::new("isolate").help(
                "Each layer of B is fed A's input to that layer: the error a layer adds, apart \
                 from what it inherits",
            ),
        })
    }
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
    let a = backend_by_name(a_name, &session.device)?;
    let b = backend_by_name(b_name, &session.device)?;
    let report = live::report(
        &session,
        &LiveRun {
            a: a.as_ref(),
            b: b.as_ref(),
            mode: args.mode,
            ops: args.ops,
            no_floor: args.no_floor,
            layers: args.report.layers()?,
            command: Some(command_line()),
        },
    )?;
    emit(&report, &args.report.options())
}
