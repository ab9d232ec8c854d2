//! `hsdiff dump`: run one backend and write its captures to a safetensors dump.

use std::path::PathBuf;

use clap::Args;

use super::common::RunArgs;
use crate::backends::backend_by_name;
use crate::capture::dump;
use crate::error::Result;
use crate::model::{DecodePlan, RunOptions};
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
    crate::output::reserve_all(&[(&args.out, "--out")], &args.run.input_paths())?;
    let session = args.run.resolve()?;
    let backend = backend_by_name(&args.backend, &session.device)?;
    let plan = match (args.decode_from, args.decode_steps) {
        (Some(from), Some(steps)) => {
            let plan = DecodePlan {
                from,
                steps,
                state_dtype: None,
            };
            plan.check(session.ids.len())?; // before the runs
            Some(plan)
        }
        _ => None,
    };
    let opts = RunOptions {
        dtype: session.dtype,
        device: session.device.clone(),
        backend: backend.as_ref(),
        capture_ops: args.ops,
        feed: None,
        // The prompt's final states; with a decode path, its states take the names instead.
        capture_state: plan.is_none(),
    };
    let progress = Progress::new(&args.backend, session.model.config.num_hidden_layers as u64);
    let mut caps = session.model.run(&session.ids, &opts, &progress)?;
    if let Some(plan) = plan {
        // Op captures (--ops) belong to the prefill rows; the decode path records none.
        let decode_opts = RunOptions {
            capture_ops: false,
            capture_state: false,
            ..opts
        };
        let decoded =
            session
                .model
                .run_decode(&session.ids, plan, &decode_opts, &Progress::hidden())?;
        for (name, t) in decoded.iter() {
            caps.push(name, t.clone());
        }
    }
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
