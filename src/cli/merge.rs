//! `hsdiff merge PART.json…`: the dataset reports of `hsdiff compare … --shard I/N --format
//! json` runs joined into the report of the whole dataset (docs/datasets.md).

use std::path::PathBuf;

use clap::Args;

use super::report_args::ReportArgs;
use crate::commands::compare::dataset;
use crate::error::Result;
use crate::report::dataset_render;

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' JSON reports (`--format json --out PART.json`), all N of them.
    #[arg(value_name = "PART.json", required = true)]
    pub parts: Vec<PathBuf>,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &MergeArgs) -> Result<i32> {
    let options = args.report.options();
    let inputs: Vec<&std::path::Path> = args.parts.iter().map(PathBuf::as_path).collect();
    options.check_targets(&inputs)?;
    let report = dataset::merge::merge(&args.parts)?;
    dataset_render::emit(&report, &options)?;
    Ok(dataset::exit_code(&report, options.fail_on))
}
