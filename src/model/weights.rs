//! Typed access to one module's tensors: a weight source plus a name prefix, the compute dtype and
//! the device, in the spirit of candle's `VarBuilder` — but never default-initialising.

use candle_core::{DType, Device, Tensor};

use super::WeightSource;
use crate::error::Result;

#[derive(Clone)]
pub struct Weights<'a> {
    src: &'a WeightSource,
    prefix: String,
    dtype: DType,
    device: &'a Device,
}

impl<'a> Weights<'a> {
    pub fn new(src: &'a WeightSource, dtype: DType, device: &'a Device) -> Self {
        Weights {
            src,
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
        self.src.contains(&self.full_name(name))
    }

    /// `name` with exactly `shape`, in the compute dtype.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.src
            .get(&self.full_name(name), shape, self.dtype, self.device)
    }

    /// Rows `rows` (along the first dimension) of `name`, which has exactly `shape`, in the
    /// compute dtype: only those rows are read or generated.
    pub fn get_rows(&self, name: &str, shape: &[usize], rows: &[usize]) -> Result<Tensor> {
        self.src
            .get_rows(&self.full_name(name), shape, rows, self.dtype, self.device)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        self.device
    }
}
