//! `hsdiff merge PART.json…`: the parts of `hsdiff compare … --shard I/N --format json` runs
//! joined into the report of the whole dataset (docs/datasets.md). It takes only the options it
//! honours: how the merged report is written and which verdict fails the exit code.

use std::path::PathBuf;

use clap::Args;

use crate::commands::compare::dataset;
use crate::error::Result;
use crate::printer::Format;
use crate::printer::dataset::emit as emit_dataset;
use crate::printer::emit::{EnvList, FailOn, ReportOptions};

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' parts (`--shard I/N --format json --out PART.json`), all N of them.
    #[arg(value_name = "PART.json", required = true)]
    pub parts: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,

    /// Write the merged report to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Which verdict of the merged report makes the exit code 1.
    #[arg(long, value_enum, default_value = "mismatch")]
    pub fail_on: FailOn,

    /// Also draw the merged report to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

pub fn run(args: &MergeArgs) -> Result<i32> {
    let options = ReportOptions {
        format: args.format,
        out: args.out.clone(),
        fail_on: args.fail_on,
        // A dataset report lists no environment differences.
        env: EnvList::Ran,
        plot: args.plot.clone(),
    };
    let inputs: Vec<&std::path::Path> = args.parts.iter().map(PathBuf::as_path).collect();
    options.check_targets(&inputs)?;
    let report = dataset::merge::merge(&args.parts)?;
    emit_dataset(&report, &options)?;
    Ok(dataset::exit_code(&report, options.fail_on))
}
