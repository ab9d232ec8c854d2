//! Glue shared by the commands that run the model: one forward pass of a session, and the
//! fingerprint of a run.

use candle_core::DType;

use crate::backends::LinearAttentionBackend;
use crate::capture::Captures;
use crate::device::{device_label, dtype_label};
use crate::error::Result;
use crate::fingerprint::{
    DUMP_FORMAT, Fingerprint, MachineInfo, git_commit, now_rfc3339, sha256_hex, token_ids_sha256,
    tool_version,
};
use crate::model::RunOptions;
use crate::model::{Model, ModelSource};
use crate::progress::Progress;
use crate::session::Session;

/// The built-in model's tokenizer, for its digest (the same bytes `builtin` compiles in).
const BUILTIN_TOKENIZER: &[u8] = include_bytes!("../golden/qwen3_5_tiny/tokenizer.json");

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
    };
    session
        .model
        .run_through(&session.ids, &opts, &progress, last_layer)
}

/// What a run of `backend` in `session` is: this machine, the model, the input.
pub fn fingerprint_for(session: &Session, backend: &dyn LinearAttentionBackend) -> Fingerprint {
    let model = &session.model;
    let mut fp = Fingerprint {
        format: DUMP_FORMAT.to_string(),
        source: "hsdiff".to_string(),
        tool_version: Some(tool_version()),
        git_commit: Some(git_commit()),
        backend: Some(backend.name().to_string()),
        implementation: Some(backend.implementation(&session.device)),
        dtype: Some(dtype_label(session.dtype).to_string()),
        device: Some(device_label(&session.device)),
        tokens: Some(session.ids.len()),
        token_ids_sha256: Some(token_ids_sha256(&session.ids)),
        prompt: session.prompt_label.clone(),
        created: Some(now_rfc3339()),
        ..Default::default()
    };
    MachineInfo::collect(&session.device).fill(&mut fp);
    fill_model(&mut fp, model);
    fp
}

/// The model's part of a fingerprint: source, key layout and digests. A digest that cannot be
/// computed (unreadable tokenizer.json, a tensor past the end of its file) is left out rather
/// than failing the run; the run itself reports such files.
pub fn fill_model(fp: &mut Fingerprint, model: &Model) {
    fp.model = Some(model.source.to_string());
    fp.key_layout = Some(format!("{}layers.*", model.layout().root()));
    fp.config_sha256 = Some(model.config.sha256.clone());
    fp.weights_digest = model.weights.digest().ok();
    fp.tokenizer_sha256 = match &model.source {
        ModelSource::Builtin => Some(sha256_hex(BUILTIN_TOKENIZER)),
        ModelSource::Dir(dir) => std::fs::read(dir.join("tokenizer.json"))
            .ok()
            .map(|b| sha256_hex(&b)),
    };
}
