//! Glue shared by the commands that run the model: the fingerprint of a run.

use crate::backends::LinearAttentionBackend;
use crate::cli::common::Session;
use crate::device::{device_label, dtype_label};
use crate::fingerprint::{DUMP_FORMAT, Fingerprint, tool_version};

pub fn fingerprint_for(session: &Session, backend: &dyn LinearAttentionBackend) -> Fingerprint {
    let model = &session.model;
    Fingerprint {
        format: DUMP_FORMAT.to_string(),
        source: "hsdiff".to_string(),
        tool_version: Some(tool_version()),
        backend: Some(backend.name().to_string()),
        implementation: Some(backend.implementation(&session.device)),
        dtype: Some(dtype_label(session.dtype).to_string()),
        device: Some(device_label(&session.device)),
        model: Some(model.source.to_string()),
        key_layout: Some(format!("{}layers.*", model.layout().root())),
        config_sha256: Some(model.config.sha256.clone()),
        tokens: Some(session.ids.len()),
        prompt: session.prompt_label.clone(),
        extra: Default::default(),
    }
}
