//! Typed access to one module's tensors: a checkpoint plus a name prefix, the compute dtype and
//! the device, in the spirit of candle's `VarBuilder` — but never default-initialising.

use candle_core::{DType, Device, Tensor};

use crate::checkpoint::Checkpoint;
use crate::error::Result;

#[derive(Clone)]
pub struct Weights<'a> {
    ckpt: &'a Checkpoint,
    prefix: String,
    dtype: DType,
    device: &'a Device,
}

impl<'a> Weights<'a> {
    pub fn new(ckpt: &'a Checkpoint, dtype: DType, device: &'a Device) -> Self {
        Weights {
            ckpt,
            prefix: String::new(),
            dtype,
            device,
        }
    }

    /// A view one level down: `pp("mlp")` turns `a.b.` into `a.b.mlp.`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        Weights {
            prefix: format!("{}{}.", self.prefix, name),
            ..self.clone()
        }
    }

    /// A view rooted at an absolute prefix (e.g. `model.language_model.`).
    pub fn root(&self, prefix: &str) -> Self {
        Weights {
            prefix: prefix.to_string(),
            ..self.clone()
        }
    }

    pub fn full_name(&self, name: &str) -> String {
        format!("{}{}", self.prefix, name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.ckpt.contains(&self.full_name(name))
    }

    /// `name` with exactly `shape`, in the compute dtype.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.ckpt
            .get(&self.full_name(name), shape, self.dtype, self.device)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        self.device
    }
}
