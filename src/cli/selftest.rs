//! `hsdiff selftest --device cpu|cuda [--bench]`: one command that proves a build works on a
//! device (docs/cuda.md). The checks are [`crate::commands::selftest`]; this file holds the options.
//!
//! Prints a pass/fail list; exit 0 when everything passed, 1 when something failed, 2 when
//! the device cannot be used.

use std::path::PathBuf;

use clap::Args;

use crate::commands::selftest::{self, BenchOptions, Options};
use crate::error::{Error, Result};
use crate::util::device::DeviceName;

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceName,

    /// Folder of the golden states (default: golden/states, the checkout's when run from its
    /// root; a missing folder is refused with this flag named).
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
        device: args.device.open()?,
        device_name: args.device.to_string(),
        golden: args.golden.clone(),
        quick: args.quick,
        bench: args.bench.then(|| BenchOptions {
            seqs: args.bench_seq.clone(),
            dir: args.bench_dir.clone(),
        }),
    };
    if opts.bench.is_some() && !opts.device.is_cuda() {
        return Err(Error::argument("--bench", "needs --device cuda"));
    }
    selftest::run(&opts)
}
