//! Typed access to one module's tensors: a weight source plus a name prefix, the compute dtype and
//! the device, in the spirit of candle's `VarBuilder` — but never default-initialising.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};

use super::WeightSource;
use super::bf16_gemm::{self, PackedBf16};
use super::linear::pack_tensor;
use super::weight_cache::WeightCache;
use crate::error::{Error, Result};
use crate::fp8::serving::{act_scale, compute_dtype};
use crate::fp8::{ActScale, Fp8Weight};
use crate::weights::checkpoint::TensorRequest;

#[derive(Clone)]
pub struct Weights<'a> {
    src: &'a WeightSource,
    cache: &'a WeightCache,
    prefix: String,
    /// The compute dtype (bf16 for a served FP8 run).
    dtype: DType,
    /// A served FP8 run (`--dtype fp8`): its quantised Linear weights are read for W8A8.
    serving: Option<ActScale>,
    device: &'a Device,
}

impl<'a> Weights<'a> {
    /// A view for a run of `dtype`: a served FP8 dtype computes in bf16, its quantised Linear
    /// weights read for W8A8 ([`Weights::fp8_weight`]).
    pub fn new(
        src: &'a WeightSource,
        cache: &'a WeightCache,
        dtype: DType,
        device: &'a Device,
    ) -> Self {
        Weights {
            src,
            cache,
            prefix: String::new(),
            dtype: compute_dtype(dtype),
            serving: act_scale(dtype),
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

    fn request<'n>(&'n self, full: &'n str, shape: &'n [usize]) -> TensorRequest<'n> {
        TensorRequest {
            name: full,
            shape,
            dtype: self.dtype,
            device: self.device,
        }
    }

    /// `name` with exactly `shape`, in the compute dtype.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        self.refuse_dequantised_in_serving(&full)?;
        self.cache.get_or_load(&full, self.dtype, self.device, || {
            self.src.get(&self.request(&full, shape))
        })
    }

    /// `name` (`[n, k]`) packed for the products with bf16 weights (`bf16_gemm`) on the CPU, when
    /// the compute dtype is bf16, or f32/f64 on a CPU that runs `matmul_wide` and a weight whose
    /// values are bf16 (stored as bf16, or generated); `None` otherwise (candle's matmul then).
    /// Straight from the checkpoint's bf16 bytes where it stores bf16 — one pass over the weight
    /// instead of a copy into a tensor and a pass over that. Kept packed across passes when the
    /// weight cache keeps weights on the CPU.
    pub fn packed(&self, name: &str, n: usize, k: usize) -> Result<Option<Arc<PackedBf16>>> {
        let wide = matches!(self.dtype, DType::F32 | DType::F64) && bf16_gemm::has_wide();
        if !self.device.is_cpu() || !(self.dtype == DType::BF16 || wide) {
            return Ok(None);
        }
        let full = self.full_name(name);
        let shape = [n, k];
        let stored = self.src.stored_bf16(&full, &shape)?;
        if stored.is_none() && self.dtype != DType::BF16 && !self.src.is_generated() {
            return Ok(None);
        }
        let packed = self.cache.get_or_pack(&full, || match stored {
            Some(bytes) => Ok(PackedBf16::pack_le_bytes(bytes, n, k)),
            None => {
                let request = TensorRequest {
                    dtype: DType::BF16,
                    ..self.request(&full, &shape)
                };
                pack_tensor(&self.src.get(&request)?)
            }
        })?;
        Ok(Some(packed))
    }

    /// Rows `rows` (along the first dimension) of `name`, which has exactly `shape`, in the
    /// compute dtype: only those rows are read or generated. A contiguous range of rows (an lm_head block, one expert) may be kept across passes.
    pub fn get_rows(&self, name: &str, shape: &[usize], rows: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        self.refuse_dequantised_in_serving(&full)?;
        let load = || self.src.get_rows(&self.request(&full, shape), rows);
        let contiguous = rows.windows(2).all(|w| w[1] == w[0] + 1);
        match (rows.first(), rows.last()) {
            (Some(&a), Some(&b)) if contiguous => {
                self.cache
                    .get_or_load(&format!("{full}[{a}..={b}]"), self.dtype, self.device, load)
            }
            _ => load(),
        }
    }

    /// In a served FP8 run, the quantised `[n, k]` weight `name` as W8A8 reads it, with the
    /// run's activation scales; `None` otherwise (not a served run, or not stored in FP8).
    pub fn fp8_weight(
        &self,
        name: &str,
        n: usize,
        k: usize,
    ) -> Result<Option<(Fp8Weight, ActScale)>> {
        let Some(act) = self.serving else {
            return Ok(None);
        };
        Ok(self
            .src
            .fp8_weight(&self.full_name(name), n, k)?
            .map(|w| (w, act)))
    }

    /// A served FP8 run reads quantised weights only through [`Weights::fp8_weight`]: a layer
    /// that asks for one dequantised would silently run it in bf16 instead of W8A8.
    fn refuse_dequantised_in_serving(&self, full: &str) -> Result<()> {
        if self.serving.is_some() && self.src.stored_fp8(full) {
            return Err(Error::argument(
                "--dtype",
                format!(
                    "`{full}` is quantised, but hsdiff serves W8A8 only for Linear weights of \
                     shape [out, in] (not this one); run it with --dtype bf16"
                ),
            ));
        }
        Ok(())
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        self.device
    }
}
