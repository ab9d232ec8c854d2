//! A bias-optional linear layer, `y = x Wᵀ (+ b)`, in the compute dtype.

use candle_core::Tensor;

use super::Weights;
use crate::error::Result;

pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Reads `weight` `[out, in]` (and `bias` `[out]` when `bias`) under `w`.
    pub fn new(w: &Weights, out_features: usize, in_features: usize, bias: bool) -> Result<Self> {
        let weight = w.get("weight", &[out_features, in_features])?;
        let bias = if bias {
            Some(w.get("bias", &[out_features])?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    pub fn from_weight(weight: Tensor) -> Self {
        Linear { weight, bias: None }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.broadcast_matmul(&self.weight.t()?)?;
        match &self.bias {
            Some(b) => Ok(y.broadcast_add(b)?),
            None => Ok(y),
        }
    }
}
