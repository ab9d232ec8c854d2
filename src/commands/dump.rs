//! `hsdiff dump` without its command line: one backend's captures of a session (with `--ops`,
//! the values inside linear-attention layers; with a decode path, a cached prefill then one
//! token at a time), written to a safetensors dump with the run's fingerprint.

use std::path::Path;

use crate::backends::BackendKind;
use crate::capture::dump;
use crate::error::Result;
use crate::job::session::Session;
use crate::model::{DecodePlan, Recorder, RunOptions};
use crate::util::progress::Progress;

/// What to dump besides the session.
pub struct DumpRun {
    pub backend: BackendKind,
    pub ops: bool,
    /// `--decode-from P --decode-steps K`.
    pub decode: Option<(usize, usize)>,
}

/// Runs `run` on `session` and writes the dump to `out`; returns the line that says what was
/// written.
pub fn dump(session: &Session, run: &DumpRun, out: &Path) -> Result<String> {
    let backend = run.backend.open(&session.device)?;
    let plan = match run.decode {
        Some((from, steps)) => {
            let plan = DecodePlan {
                from,
                steps,
                state_dtype: None,
            };
            plan.check(session.ids.len())?; // before the runs
            Some(plan)
        }
        None => None,
    };
    let opts = RunOptions {
        dtype: session.dtype,
        device: session.device.clone(),
        backend: backend.as_ref(),
    };
    let mut recorder = Recorder::new(&session.ids)
        .with_ops(run.ops)
        // The prompt's final states; with a decode path, its states take the names instead.
        .with_states(plan.is_none());
    let progress = Progress::new(
        run.backend.name(),
        session.model.config.num_hidden_layers as u64,
    );
    session
        .model
        .observe(&session.ids, &opts, &mut recorder, &progress, None)?;
    let mut caps = recorder.into_captures();
    if let Some(plan) = plan {
        // Op captures (--ops) belong to the prefill rows; the decode path records none.
        let decoded = session
            .model
            .run_decode(&session.ids, plan, &opts, &Progress::hidden())?;
        for (key, t) in decoded.iter() {
            caps.insert(key, t.clone());
        }
    }
    let fingerprint = session.input().fingerprint(backend.as_ref(), session.dtype);
    dump::write(out, &caps, &fingerprint)?;
    Ok(format!(
        "hsdiff: wrote {} tensors for {} tokens to {} ({}, {}, key layout {})",
        caps.len() + 1,
        session.ids.len(),
        out.display(),
        fingerprint.implementation.as_deref().unwrap_or(""),
        fingerprint.dtype.as_deref().unwrap_or(""),
        fingerprint.key_layout.as_deref().unwrap_or(""),
    ))
}
