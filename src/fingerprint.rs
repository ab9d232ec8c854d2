//! What actually ran: recorded in every dump and shown in every report, so that two captures
//! from two machines can be told apart by more than their numbers.

use serde::{Deserialize, Serialize};

/// The record stored as JSON under the `hsdiff` key of a dump's safetensors metadata.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Fingerprint {
    /// `hsdiff.dump/v1`
    pub format: String,
    /// Who wrote the dump: `hsdiff` or `transformers` (scripts/).
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The implementation that ran, e.g. `fused/cpu-rayon-2t`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_layout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Anything else the writer recorded (PyTorch-side versions, kernel availability, …).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

pub const DUMP_FORMAT: &str = "hsdiff.dump/v1";

pub fn tool_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
