//! A bias-optional linear layer, `y = x Wᵀ (+ b)`, in the compute dtype. On the CPU a bf16 weight
//! is packed once (here) for [`bf16_gemm`](super::bf16_gemm): its bf16 GEMM in a bf16 pass, its
//! f32 / f64 kernels in an f32 / f64 pass where the CPU has AVX-512F or AVX2 + FMA; a quantised
//! weight in a served FP8 run (`--dtype fp8`) runs the W8A8 GEMM of [`crate::fp8::w8a8`] (on the
//! host, for every device); everything else runs on candle's matmul.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{DType, Storage, Tensor, WithDType};
use half::bf16;

use super::Weights;
use super::bf16_gemm::{self, PackedBf16, WideFloat};
use crate::error::{Error, Result};
use crate::fp8::{ActScale, Fp8Weight, w8a8};

/// The floating-point operations (2·m·n·k each) of every [`Linear::forward`] in this process so
/// far: what a bench case divides by its time for a forward pass's GFLOP/s.
static PRODUCT_FLOPS: AtomicU64 = AtomicU64::new(0);

/// [`PRODUCT_FLOPS`]' count so far.
pub fn product_flops() -> u64 {
    PRODUCT_FLOPS.load(Ordering::Relaxed)
}

pub struct Linear {
    weight: Weight,
    bias: Option<Tensor>,
}

enum Weight {
    Tensor(Tensor),
    /// A bf16 weight on the CPU, packed for the bf16 GEMM (possibly kept across passes).
    PackedBf16(Arc<PackedBf16>),
    /// A quantised weight of a served FP8 run, with the run's activation scales.
    Fp8(Arc<Fp8Weight>, ActScale),
}

impl Linear {
    /// Reads `weight` `[out, in]` (and `bias` `[out]` when `bias`) under `w`.
    pub fn new(w: &Weights, out_features: usize, in_features: usize, bias: bool) -> Result<Self> {
        let weight = if let Some((q, act)) = w.fp8_weight("weight", out_features, in_features)? {
            Weight::Fp8(Arc::new(q), act)
        } else {
            match w.packed("weight", out_features, in_features)? {
                Some(packed) => Weight::PackedBf16(packed),
                None => Weight::new(w.get("weight", &[out_features, in_features])?)?,
            }
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

    /// A served FP8 run's quantised weight (without bias).
    pub fn from_fp8(weight: Fp8Weight, act: ActScale) -> Self {
        Linear {
            weight: Weight::Fp8(Arc::new(weight), act),
            bias: None,
        }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            Weight::Tensor(w) => x.broadcast_matmul(&w.t()?)?,
            Weight::PackedBf16(w) => packed_forward(x, w)?,
            Weight::Fp8(w, act) => fp8_forward(x, w, *act)?,
        };
        self.finish(x, y)
    }

    /// The product `y` of input `x` counted in [`PRODUCT_FLOPS`], with the bias added.
    fn finish(&self, x: &Tensor, y: Tensor) -> Result<Tensor> {
        // 2·m·k per output column: `x`'s elements times the weight's rows.
        let n = match &self.weight {
            Weight::Tensor(w) => w.elem_count() / x.dim(candle_core::D::Minus1)?.max(1),
            Weight::PackedBf16(w) => w.rows(),
            Weight::Fp8(w, _) => w.rows(),
        };
        PRODUCT_FLOPS.fetch_add(2 * (x.elem_count() * n) as u64, Ordering::Relaxed);
        match &self.bias {
            Some(b) => Ok(y.broadcast_add(b)?),
            None => Ok(y),
        }
    }
}

/// `x · Wᵀ (+ b)` of one input `x` for each of `layers` (all of `x`'s width): where every layer
/// holds a packed bf16 weight and runs on the CPU in bf16 / f32 / f64, `x` is laid out for the
/// kernels once and the products share one pass of the workers ([`bf16_gemm::matmul_many`],
/// [`bf16_gemm::matmul_wide_many`]: q/k/v/z/b/a, gate/up); otherwise one
/// [`Linear::forward`] each. The values are those of one [`Linear::forward`] per layer.
pub fn forward_shared<const N: usize>(x: &Tensor, layers: [&Linear; N]) -> Result<[Tensor; N]> {
    forward_many(x, &layers)?
        .try_into()
        .map_err(|_| Error::Internal(format!("{N} products of one input: not {N} outputs")))
}

/// [`forward_shared`] of any number of layers.
fn forward_many(x: &Tensor, layers: &[&Linear]) -> Result<Vec<Tensor>> {
    let packed: Option<Vec<&PackedBf16>> = layers
        .iter()
        .map(|l| match &l.weight {
            Weight::PackedBf16(w) => Some(&**w),
            _ => None,
        })
        .collect();
    let Some(ws) = packed else {
        return layers.iter().map(|l| l.forward(x)).collect();
    };
    packed_forward_many(x, &ws)?
        .into_iter()
        .zip(layers)
        .map(|(y, l)| l.finish(x, y))
        .collect()
}

impl Weight {
    fn new(weight: Tensor) -> Result<Self> {
        if weight.dtype() != DType::BF16 || !weight.device().is_cpu() {
            return Ok(Weight::Tensor(weight));
        }
        Ok(Weight::PackedBf16(Arc::new(pack_tensor(&weight)?)))
    }
}

/// A bf16 CPU `[n, k]` weight packed for the bf16 GEMM.
pub(super) fn pack_tensor(weight: &Tensor) -> Result<PackedBf16> {
    let (n, k) = weight.dims2()?;
    with_slice(weight, |w: &[bf16]| PackedBf16::pack(w, n, k))
}

/// `x · wᵀ` over the last dimension of a CPU `x` (any leading dimensions) in bf16 (the bf16 GEMM)
/// or f32 / f64 (`matmul_wide`).
fn packed_forward(x: &Tensor, w: &PackedBf16) -> Result<Tensor> {
    let mut ys = packed_forward_many(x, &[w])?;
    ys.pop()
        .ok_or_else(|| Error::Internal("a product of one weight returned none".into()))
}

/// [`packed_forward`] of one `x` with each of `ws`, `x` laid out once.
fn packed_forward_many(x: &Tensor, ws: &[&PackedBf16]) -> Result<Vec<Tensor>> {
    let dims = x.dims();
    let k = *dims.last().unwrap_or(&0);
    if let Some(w) = ws.iter().find(|w| w.cols() != k) {
        return Err(candle_core::Error::ShapeMismatchBinaryOp {
            lhs: x.shape().clone(),
            rhs: (w.rows(), w.cols()).into(),
            op: "linear (bf16 weight)",
        }
        .into());
    }
    let m = x.elem_count() / k.max(1);
    let ys = match x.dtype() {
        DType::BF16 => {
            let ys = with_slice(x, |x: &[bf16]| bf16_gemm::matmul_many(x, m, ws))?;
            as_tensors(ys, dims, ws, x.device())?
        }
        DType::F32 => wide_forward::<f32>(x, m, ws)?,
        DType::F64 => wide_forward::<f64>(x, m, ws)?,
        other => {
            return Err(candle_core::Error::DTypeMismatchBinaryOp {
                lhs: other,
                rhs: DType::BF16,
                op: "linear (bf16 weight)",
            }
            .into());
        }
    };
    Ok(ys)
}

/// Product j's values `ys[j]` as a tensor of `x`'s dimensions `dims` with the last one
/// `ws[j].rows()`.
fn as_tensors<T: WithDType>(
    ys: Vec<Vec<T>>,
    dims: &[usize],
    ws: &[&PackedBf16],
    device: &candle_core::Device,
) -> Result<Vec<Tensor>> {
    ys.into_iter()
        .zip(ws)
        .map(|(y, w)| {
            let mut out_dims = dims.to_vec();
            if let Some(last) = out_dims.last_mut() {
                *last = w.rows();
            }
            Ok(Tensor::from_vec(y, out_dims, device)?)
        })
        .collect()
}

/// `x · wᵀ` over the last dimension of a bf16 `x` on any device, served in W8A8 on the host
/// (an emulation on a GPU: the activations go to the host and the bf16 output comes back).
fn fp8_forward(x: &Tensor, w: &Fp8Weight, act: ActScale) -> Result<Tensor> {
    let dims = x.dims();
    let k = *dims.last().unwrap_or(&0);
    if k != w.cols() || x.dtype() != DType::BF16 {
        return Err(Error::Internal(format!(
            "W8A8 linear of a [{}, {}] weight called on a {:?} {:?} input",
            w.rows(),
            w.cols(),
            x.dtype(),
            x.shape()
        )));
    }
    let m = x.elem_count() / k.max(1);
    let host = x
        .to_device(&candle_core::Device::Cpu)?
        .to_dtype(DType::F32)?;
    let y = with_slice(&host, |x: &[f32]| w8a8::matmul(x, m, w, act))?;
    let mut out_dims = dims.to_vec();
    if let Some(last) = out_dims.last_mut() {
        *last = w.rows();
    }
    Ok(Tensor::from_vec(y, out_dims, &candle_core::Device::Cpu)?.to_device(x.device())?)
}

/// [`packed_forward_many`] of an f32 / f64 `x` (`m` rows) on `bf16_gemm::matmul_wide_many`.
fn wide_forward<E: WideFloat + WithDType>(
    x: &Tensor,
    m: usize,
    ws: &[&PackedBf16],
) -> Result<Vec<Tensor>> {
    let ys = with_slice(x, |x: &[E]| bf16_gemm::matmul_wide_many(x, m, ws))?.ok_or_else(|| {
        Error::Internal("a weight was packed for a CPU without AVX-512F or AVX2 + FMA".into())
    })?;
    as_tensors(ys, x.dims(), ws, x.device())
}

/// `f` on the elements of a CPU tensor of element type `T` in row-major order: borrowed from its
/// storage when contiguous (no copy of a 356 MB weight), copied otherwise.
fn with_slice<T: WithDType, R>(t: &Tensor, f: impl FnOnce(&[T]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets())
            && let Ok(data) = cpu.as_slice::<T>()
        {
            return Ok(f(&data[start..end]));
        }
    }
    Ok(f(&t.flatten_all()?.to_vec1::<T>()?))
}
