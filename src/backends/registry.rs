//! Backends by kind (and by name at the file and command-line boundaries), and what each would
//! run on the devices this build knows.

use candle_core::Device;

use super::{Chunked, Fused, LinearAttentionBackend, Reference};
use crate::error::{Error, Result};

/// The linear-attention backends of this build, as a type: runs are planned and made with a
/// kind, and a name is read or written only where a file or a command line holds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Reference,
    Chunked,
    Fused,
}

impl BackendKind {
    /// Every kind, in the order `hsdiff backends` lists them.
    pub const ALL: [BackendKind; 3] = [
        BackendKind::Reference,
        BackendKind::Chunked,
        BackendKind::Fused,
    ];

    /// The registry name (`reference`, `chunked`, `fused`): the backend's own `name()`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// One line saying what the backend computes and how.
    pub fn description(self) -> &'static str {
        self.info().description
    }

    fn info(self) -> &'static BackendInfo {
        &BACKENDS[self as usize]
    }

    /// The kind called `name`, or an error listing the known names.
    pub fn from_name(name: &str) -> Result<BackendKind> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = BACKENDS.iter().map(|b| b.name).collect();
                Error::backend(
                    name,
                    format!("unknown backend (known: {})", known.join(", ")),
                )
            })
    }

    /// The backend, checked to be able to run on `device` (never substituted).
    pub fn open(self, device: &Device) -> Result<Box<dyn LinearAttentionBackend>> {
        let backend: Box<dyn LinearAttentionBackend> = match self {
            BackendKind::Reference => Box::new(Reference),
            BackendKind::Chunked => Box::new(Chunked),
            BackendKind::Fused => Box::new(Fused),
        };
        backend.check_device(device)?;
        Ok(backend)
    }
}

/// One row of `hsdiff backends`.
pub struct BackendInfo {
    pub name: &'static str,
    pub description: &'static str,
}

/// In [`BackendKind`]'s order.
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
    BackendKind::from_name(name)?.open(device)
}

/// What `name` would run on `device` (its `implementation()`), or why it cannot run there (the
/// error of `check_device()`). Used by `hsdiff backends`.
pub fn implementation_on(name: &str, device: &Device) -> Result<String> {
    let backend = backend_by_name(name, device)?;
    Ok(backend.implementation(device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_opens_the_backend_of_its_name() -> Result<()> {
        for kind in BackendKind::ALL {
            assert_eq!(kind.open(&Device::Cpu)?.name(), kind.name());
            assert_eq!(BackendKind::from_name(kind.name())?, kind);
        }
        let err = BackendKind::from_name("nope").expect_err("unknown");
        assert!(
            err.to_string().contains("known: reference, chunked, fused"),
            "{err}"
        );
        Ok(())
    }
}
