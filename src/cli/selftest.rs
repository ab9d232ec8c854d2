//! `hsdiff selftest --device cpu|cuda [--bench]`: one command that proves a build works on a
//! device (docs/cuda.md). The checks are [`crate::selftest`]; this file holds the options and
//! the live run's report options.
//!
//! Prints a pass/fail list; exit 0 when everything passed, 1 when something failed, 2 when
//! the device cannot be used.

use std::path::PathBuf;

use clap::Args;

use super::common::RunArgs;
use super::diff::{DiffArgs, Mode};
use super::report_args::ReportArgs;
use crate::device::parse_device;
use crate::error::Result;
use crate::report::emit::{EnvList, FailOn, Format};
use crate::selftest::{self, BenchOptions, LiveRun, Options};

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,

    /// Folder of the golden states (the repository's golden/states).
    #[arg(long, default_value = "golden/states", value_name = "DIR")]
    pub golden: PathBuf,

    /// Skip the long (T = 1000) kernel cases.
    #[arg(long)]
    pub quick: bool,

    /// Also time both delta-rule kernels at Qwen3.5-27B and -397B-like geometry (CUDA builds,
    /// --device cuda).
    #[arg(long)]
    pub bench: bool,

    /// Sequence lengths of the bench.
    #[arg(long, value_delimiter = ',', default_value = "2048,8192,32768,65536")]
    pub bench_seq: Vec<usize>,

    /// Write the bench inputs, hsdiff's outputs and timings here, for scripts/gpu-bench.py.
    #[arg(long, value_name = "DIR")]
    pub bench_dir: Option<PathBuf>,
}

pub fn run(args: &SelftestArgs) -> Result<i32> {
    let opts = Options {
        device: parse_device(&args.device)?,
        device_name: args.device.clone(),
        golden: args.golden.clone(),
        quick: args.quick,
        bench: args.bench.then(|| BenchOptions {
            seqs: args.bench_seq.clone(),
            dir: args.bench_dir.clone(),
        }),
    };
    selftest::run(&opts, || live_diff(&args.device))
}

/// `hsdiff --a fused --b reference --device D --out <temp file>` on the built-in model and the
/// default prompt, at f32, with the floor; the report goes to a file the selftest line names.
fn live_diff(device: &str) -> Result<LiveRun> {
    let report =
        std::env::temp_dir().join(format!("hsdiff-selftest-diff-{}.txt", std::process::id()));
    let args = DiffArgs {
        a: Some("fused".to_string()),
        b: Some("reference".to_string()),
        run: RunArgs {
            model: None,
            prompt: None,
            tokens: None,
            dtype: "f32".to_string(),
            device: device.to_string(),
            random_weights: None,
        },
        mode: Mode::Propagate,
        ops: false,
        no_floor: false,
        report: ReportArgs {
            format: Format::Table,
            out: Some(report.clone()),
            fail_on: FailOn::Mismatch,
            layers: None,
            env: EnvList::Ran,
            plot: None,
        },
    };
    Ok(LiveRun {
        exit_code: super::diff::run(&args)?,
        report,
    })
}
