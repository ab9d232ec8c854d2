//! `hsdiff check [--golden FILE]`: recompute what a golden dump describes — its model, its token
//! ids, its dtype — with a backend of this build on this machine, and compare (same report,
//! verdicts and exit codes as the live run: 0 ok, 1 divergence, 2 trouble). With no file it checks
//! the built-in golden set: transformers' states of the built-in model at f64 (strict), f32 and
//! bf16, compiled into the binary.

use std::path::PathBuf;

use clap::Args;

use super::common::command_line;
use super::report_args::ReportArgs;
use super::values::DtypeArg;
use crate::backends::BackendKind;
use crate::commands::check::{CheckRun, check_builtin_set, check_file, worst, write_set};
use crate::error::{Error, Result};
use crate::printer::emit::emit;
use crate::util::device::DeviceName;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A dump to recompute and compare against (hsdiff dump, hsdiff-capture output or a
    /// golden file). Default: the built-in golden set.
    #[arg(long, value_name = "FILE")]
    pub golden: Option<PathBuf>,

    /// Backend(s) to recompute with, comma-separated (see `hsdiff backends`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "reference",
        value_name = "LIST"
    )]
    pub backend: Vec<BackendKind>,

    /// Checkpoint folder. Default: the model the dump's fingerprint names (a folder, or the
    /// built-in model).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Compute dtype. Default: the dump's (fingerprint `dtype`, else its tensors' dtype).
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub dtype: Option<DtypeArg>,

    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceName,

    /// Skip the f64 truth and floor runs: verdicts then use the depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &CheckArgs) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = [args.golden.as_deref(), args.model.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let options = args.report.options();
    options.check_targets(&inputs)?;
    let device = args.device.open()?;
    // Every backend asked for can run on the device, before any work.
    for backend in &args.backend {
        backend.open(&device)?;
    }
    let run = CheckRun {
        backends: args.backend.clone(),
        dtype: args.dtype.map(|d| d.0),
        device,
        model: args.model.clone(),
        no_floor: args.no_floor,
        layers: args.report.layers.clone(),
        command: Some(command_line()),
    };
    let outcomes = match &args.golden {
        Some(path) => check_file(path, &run)?,
        None if options.plot.is_some() => {
            return Err(Error::argument(
                "--plot",
                "draws one report: use it with --golden FILE",
            ));
        }
        None => check_builtin_set(&run)?,
    };
    if let ([only], Some(_)) = (outcomes.as_slice(), &args.golden) {
        return emit(&only.report, &options);
    }
    write_set(&outcomes, &options)?;
    Ok(i32::from(args.report.fail_on.flags(worst(&outcomes))))
}
