//! A bias-optional linear layer, `y = x Wᵀ (+ b)`, in the compute dtype. bf16 on the CPU runs on
//! [`bf16_gemm`](super::bf16_gemm) (weight packed once, here); everything else on candle's matmul.

use candle_core::{CpuStorage, DType, Storage, Tensor};
use half::bf16;

use super::Weights;
use super::bf16_gemm::{self, PackedBf16};
use crate::error::Result;

pub struct Linear {
    weight: Weight,
    bias: Option<Tensor>,
}

enum Weight {
    Tensor(Tensor),
    /// A bf16 weight on the CPU, packed for the bf16 GEMM.
    PackedBf16(PackedBf16),
}

impl Linear {
    /// Reads `weight` `[out, in]` (and `bias` `[out]` when `bias`) under `w`.
    pub fn new(w: &Weights, out_features: usize, in_features: usize, bias: bool) -> Result<Self> {
        let weight = match w.packed_bf16("weight", out_features, in_features)? {
            Some(packed) => Weight::PackedBf16(packed),
            None => Weight::new(w.get("weight", &[out_features, in_features])?)?,
        };
        let bias = if bias {
            Some(w.get("bias", &[out_features])?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    pub fn from_weight(weight: Tensor) -> Result<Self> {
        Ok(Linear {
            weight: Weight::new(weight)?,
            bias: None,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            Weight::Tensor(w) => x.broadcast_matmul(&w.t()?)?,
            Weight::PackedBf16(w) => packed_forward(x, w)?,
        };
        match &self.bias {
            Some(b) => Ok(y.broadcast_add(b)?),
            None => Ok(y),
        }
    }
}

impl Weight {
    fn new(weight: Tensor) -> Result<Self> {
        if weight.dtype() != DType::BF16 || !weight.device().is_cpu() {
            return Ok(Weight::Tensor(weight));
        }
        let (n, k) = weight.dims2()?;
        let packed = with_bf16_slice(&weight, |w| PackedBf16::pack(w, n, k))?;
        Ok(Weight::PackedBf16(packed))
    }
}

/// `x · wᵀ` over the last dimension of a bf16 CPU `x` (any leading dimensions).
fn packed_forward(x: &Tensor, w: &PackedBf16) -> Result<Tensor> {
    let dims = x.dims();
    let k = *dims.last().unwrap_or(&0);
    if x.dtype() != DType::BF16 {
        return Err(candle_core::Error::DTypeMismatchBinaryOp {
            lhs: x.dtype(),
            rhs: DType::BF16,
            op: "linear (bf16 GEMM)",
        }
        .into());
    }
    if k != w.cols() {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: x.shape().clone(),
            rhs: (w.rows(), w.cols()).into(),
            op: "linear (bf16 GEMM)",
        }
        .into());
    }
    let m = x.elem_count() / k.max(1);
    let y = with_bf16_slice(x, |x| bf16_gemm::matmul(x, m, w))?;
    let mut out_dims = dims.to_vec();
    if let Some(last) = out_dims.last_mut() {
        *last = w.rows();
    }
    Ok(Tensor::from_vec(y, out_dims, x.device())?)
}

/// `f` on the elements of a bf16 CPU tensor in row-major order: borrowed from its storage when
/// contiguous (no copy of a 356 MB weight), copied otherwise.
fn with_bf16_slice<R>(t: &Tensor, f: impl FnOnce(&[bf16]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::BF16(data)), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&data[start..end]));
        }
    }
    Ok(f(&t.flatten_all()?.to_vec1::<bf16>()?))
}
