//! `hsdiff dump`: run one backend and write its captures to a safetensors dump.

use std::path::PathBuf;

use clap::Args;

use super::common::RunArgs;
use crate::backends::BackendKind;
use crate::commands::dump::{DumpRun, dump};
use crate::error::Result;

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Linear-attention backend (see `hsdiff backends`).
    #[arg(long, value_enum, default_value = "reference")]
    pub backend: BackendKind,

    #[command(flatten)]
    pub run: RunArgs,

    /// Also capture values inside linear-attention layers (conv out, q, k, v, beta, g, …).
    #[arg(long)]
    pub ops: bool,

    /// Output file (.safetensors).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Also run the decode path: a cached prefill of tokens 0..=P, then one token at a time;
    /// writes `decode.logits`, `decode.layers.{i}` and the final `state.layers.{i}.*`.
    #[arg(long, value_name = "P", requires = "decode_steps")]
    pub decode_from: Option<usize>,

    /// Positions the decode path produces: P (from the prefill) and the K − 1 after it.
    #[arg(long, value_name = "K", requires = "decode_from")]
    pub decode_steps: Option<usize>,
}

pub fn run(args: &DumpArgs) -> Result<i32> {
    // Before the run: a dump never replaces a device, a folder or one of its own inputs.
    crate::util::output::reserve_all(&[(&args.out, "--out")], &args.run.input_paths())?;
    let session = args.run.resolve()?;
    let run = DumpRun {
        backend: args.backend,
        ops: args.ops,
        decode: args.decode_from.zip(args.decode_steps),
    };
    eprintln!("{}", dump(&session, &run, &args.out)?);
    Ok(0)
}
