//! Backends by name, and what each would run on the devices this build knows.

use candle_core::Device;

use super::{Chunked, Fused, LinearAttentionBackend, Reference};
use crate::error::{Error, Result};

/// One row of `hsdiff backends`.
pub struct BackendInfo {
    pub name: &'static str,
    pub description: &'static str,
}

const BACKENDS: &[BackendInfo] = &[
    BackendInfo {
        name: "reference",
        description: "token-by-token recurrence from plain tensor ops, transformers' PyTorch-fallback casts",
    },
    BackendInfo {
        name: "chunked",
        description: "chunked (64) UT-transform algorithm of transformers' torch fallback, from tensor ops",
    },
    BackendInfo {
        name: "fused",
        description: "hand-written fused kernels: conv + L2 norm + gated delta rule in one pass, fused gated norm",
    },
];

pub fn available_backends() -> &'static [BackendInfo] {
    BACKENDS
}

/// The backend called `name`, checked to be able to run on `device`.
pub fn backend_by_name(name: &str, device: &Device) -> Result<Box<dyn LinearAttentionBackend>> {
    let backend: Box<dyn LinearAttentionBackend> = match name {
        "reference" => Box::new(Reference),
        "chunked" => Box::new(Chunked),
        "fused" => Box::new(Fused),
        other => {
            let known: Vec<&str> = BACKENDS.iter().map(|b| b.name).collect();
            return Err(Error::backend(
                other,
                format!("unknown backend (known: {})", known.join(", ")),
            ));
        }
    };
    backend.check_device(device)?;
    Ok(backend)
}

/// What `name` would run on `device` (its `implementation()`), or why it cannot run there (the
/// error of `check_device()`). Used by `hsdiff backends`.
pub fn implementation_on(name: &str, device: &Device) -> Result<String> {
    let backend = backend_by_name(name, device)?;
    Ok(backend.implementation(device))
}
