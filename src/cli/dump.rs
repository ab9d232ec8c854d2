//! `hsdiff dump`: run one backend and write its captures to a safetensors dump.

use std::path::PathBuf;

use clap::Args;

use super::common::RunArgs;
use crate::backends::backend_by_name;
use crate::capture::dump;
use crate::error::Result;
use crate::model::RunOptions;
use crate::progress::Progress;
use crate::run::fingerprint_for;

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Linear-attention backend (see `hsdiff backends`).
    #[arg(long, default_value = "reference")]
    pub backend: String,

    #[command(flatten)]
    pub run: RunArgs,

    /// Also capture values inside linear-attention layers (conv out, q, k, v, beta, g, …).
    #[arg(long)]
    pub ops: bool,

    /// Output file (.safetensors).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(args: &DumpArgs) -> Result<i32> {
    // Before the run: a dump never replaces a device, a folder or one of its own inputs.
    crate::output::check_target(&args.out, "--out", &args.run.input_paths())?;
    let session = args.run.resolve()?;
    let backend = backend_by_name(&args.backend, &session.device)?;
    let opts = RunOptions {
        dtype: session.dtype,
        device: session.device.clone(),
        backend: backend.as_ref(),
        capture_ops: args.ops,
        feed: None,
    };
    let progress = Progress::new(&args.backend, session.model.config.num_hidden_layers as u64);
    let caps = session.model.run(&session.ids, &opts, &progress)?;
    let fingerprint = fingerprint_for(&session, backend.as_ref());
    dump::write(&args.out, &caps, &fingerprint)?;
    eprintln!(
        "hsdiff: wrote {} tensors for {} tokens to {} ({}, {}, key layout {})",
        caps.len() + 1,
        session.ids.len(),
        args.out.display(),
        fingerprint.implementation.as_deref().unwrap_or(""),
        fingerprint.dtype.as_deref().unwrap_or(""),
        fingerprint.key_layout.as_deref().unwrap_or(""),
    );
    Ok(0)
}
