//! Glue shared by the commands that run the model: one forward pass of a session, and the
//! fingerprint of a run (its parts come from `fingerprint` and the model).

use candle_core::DType;

use crate::backends::LinearAttentionBackend;
use crate::capture::Captures;
use crate::device::dtype_label;
use crate::error::Result;
use crate::fingerprint::{Fingerprint, run_fingerprint};
use crate::model::RunOptions;
use crate::progress::Progress;
use crate::session::Session;

/// Runs `backend` at `dtype` on the session's input (fed `feed`'s layer inputs in isolate mode),
/// with a progress line on stderr.
pub fn forward(
    session: &Session,
    backend: &dyn LinearAttentionBackend,
    dtype: DType,
    capture_ops: bool,
    feed: Option<&Captures>,
) -> Result<Captures> {
    forward_through(session, backend, dtype, capture_ops, feed, None)
}

/// [`forward`] that stops after decoder layer `last_layer` (see [`Model::run_through`]).
///
/// [`Model::run_through`]: crate::model::Model::run_through
pub fn forward_through(
    session: &Session,
    backend: &dyn LinearAttentionBackend,
    dtype: DType,
    capture_ops: bool,
    feed: Option<&Captures>,
    last_layer: Option<usize>,
) -> Result<Captures> {
    let label = format!("{} {}", backend.name(), dtype_label(dtype));
    let layers = session.model.config.num_hidden_layers;
    let total = last_layer.map_or(layers, |l| (l + 1).min(layers));
    let progress = Progress::new(&label, total as u64);
    let opts = RunOptions {
        dtype,
        device: session.device.clone(),
        backend,
        capture_ops,
        feed,
        // The live run's and the calibration's `state.layers.{i}.*` rows.
        capture_state: true,
    };
    session
        .model
        .run_through(&session.ids, &opts, &progress, last_layer)
}

/// What a run of `backend` in `session` is: this machine, the model, the input.
pub fn fingerprint_for(session: &Session, backend: &dyn LinearAttentionBackend) -> Fingerprint {
    let mut fp = run_fingerprint(
        backend,
        &session.device,
        session.dtype,
        &session.ids,
        session.prompt_label.clone(),
    );
    session.model.fill_fingerprint(&mut fp);
    fp
}
