//! The default command: `hsdiff --a BACKEND --b BACKEND …` runs both backends on identical
//! inputs (plus the f64 truth and the rounding floor), compares every capture and prints the
//! report.

use clap::Args;

use super::common::{RunArgs, command_line};
use super::report_args::ReportArgs;
use crate::backends::BackendKind;
use crate::commands::live::{self, LiveRun, Mode};
use crate::error::Result;
use crate::printer::emit::emit;

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    /// Backend of side A (see `hsdiff backends`).
    #[arg(long = "a", value_name = "BACKEND", value_enum, required = true)]
    pub a: Option<BackendKind>,

    /// Backend of side B.
    #[arg(long = "b", value_name = "BACKEND", value_enum, required = true)]
    pub b: Option<BackendKind>,

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
    // Output targets are checked before the (long) runs.
    args.report
        .options()
        .check_targets(&args.run.input_paths())?;
    let session = args.run.resolve()?;
    let (Some(a), Some(b)) = (args.a, args.b) else {
        // clap requires both unless a subcommand is given.
        return Err(crate::error::Error::Internal("--a/--b missing".to_string()));
    };
    let report = live::report(
        &session,
        &LiveRun {
            a,
            b,
            mode: args.mode,
            ops: args.ops,
            no_floor: args.no_floor,
            layers: args.report.layers.clone(),
            command: Some(command_line()),
        },
    )?;
    emit(&report, &args.report.options())
}
