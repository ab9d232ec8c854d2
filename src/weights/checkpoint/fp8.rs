//! A checkpoint's FP8 tensors: checked against config.json's `quantization_config` when the
//! model is loaded ([`crate::fp8::consistency`]), then read dequantised (every request of a
//! quantised tensor, in any dtype: exact in f64, see [`crate::fp8::blocks`]) or, for a served
//! run, as the codes and scales the W8A8 GEMM reads.

use candle_core::{DType, Device, Tensor};

use super::Checkpoint;
use crate::error::{Error, Result};
use crate::fp8::consistency::{self, scale_name};
use crate::fp8::{BlockScales, Fp8Format, Fp8Scheme, Fp8Weight};
use crate::weights::safetensors_file::SafetensorsFile;

impl Checkpoint {
    /// Checks every tensor against the FP8 scheme of config.json (`None`: it has no
    /// `quantization_config`) and keeps the scheme for reading the FP8 tensors. A quantised
    /// tensor without its scales, scales of the wrong shape or on a module the config keeps in
    /// high precision, and FP8 tensors without a scheme are refused, naming the tensor.
    pub fn check_quantization(&mut self, scheme: Option<&Fp8Scheme>) -> Result<()> {
        let info = |name: &str| {
            let i = *self.index.get(name)?;
            let t = self.files[i].info(name)?;
            Some((t.dtype, t.shape.clone()))
        };
        consistency::check(self.index.keys().map(String::as_str), info, scheme)
            .map_err(|p| Error::tensor(self.file_of(&p.tensor), &p.tensor, p.msg))?;
        self.fp8 = scheme.cloned();
        Ok(())
    }

    /// The FP8 format `name` is stored in; `None` when it is not stored in FP8 (or missing).
    pub fn stored_fp8(&self, name: &str) -> Option<Fp8Format> {
        let &i = self.index.get(name)?;
        Fp8Format::of(self.files[i].info(name)?.dtype)
    }

    /// `name` (in `file`, shape checked) dequantised, all of it or rows `rows` along the first
    /// dimension, as a CPU tensor in f64 — or in f32 where that is exact too (bf16 / f16 scales)
    /// and `dtype` is not f64; `None` when `name` is not stored in FP8.
    pub(super) fn dequantized(
        &self,
        file: &SafetensorsFile,
        name: &str,
        shape: &[usize],
        rows: Option<&[usize]>,
        dtype: DType,
    ) -> Result<Option<Tensor>> {
        let (info, data) = file.raw(name)?;
        let Some(format) = Fp8Format::of(info.dtype) else {
            return Ok(None);
        };
        let (scales, f32_exact) = self.block_scales(file, name, format, shape)?;
        let n_rows = shape.first().copied().unwrap_or(1);
        let row_len: usize = shape.iter().skip(1).product();
        let all: Vec<usize>;
        let rows = match rows {
            Some(rows) => rows,
            None => {
                all = (0..n_rows).collect();
                &all
            }
        };
        let mut out_shape = shape.to_vec();
        if let Some(first) = out_shape.first_mut() {
            *first = rows.len();
        }
        let limit = weight_limit(dtype);
        let row_codes = |r: usize| {
            let codes = data
                .get(r * row_len..(r + 1) * row_len)
                .filter(|_| r < n_rows)
                .ok_or_else(|| {
                    Error::tensor(file.path(), name, format!("row {r} of {n_rows} requested"))
                })?;
            scales
                .check_weights(format, codes, r * row_len, limit)
                .map_err(|msg| Error::tensor(file.path(), name, msg))?;
            Ok::<_, Error>(codes)
        };
        let t = if dtype == DType::F64 || !f32_exact {
            let mut v = Vec::with_capacity(rows.len() * row_len);
            for &r in rows {
                v.extend(scales.dequantize_f64(format, row_codes(r)?, r * row_len));
            }
            Tensor::from_vec(v, out_shape, &Device::Cpu)?
        } else {
            let mut v = Vec::with_capacity(rows.len() * row_len);
            for &r in rows {
                v.extend(scales.dequantize_f32(format, row_codes(r)?, r * row_len));
            }
            Tensor::from_vec(v, out_shape, &Device::Cpu)?
        };
        Ok(Some(t))
    }

    /// The quantised `[rows, cols]` weight `name` as the served W8A8 GEMM reads it; `None` when
    /// it is not stored in FP8.
    pub fn fp8_weight(&self, name: &str, rows: usize, cols: usize) -> Result<Option<Fp8Weight>> {
        let shape = [rows, cols];
        let file = self.locate(name, &shape)?;
        let (info, codes) = file.raw(name)?;
        let Some(format) = Fp8Format::of(info.dtype) else {
            return Ok(None);
        };
        let (scales, _) = self.block_scales(file, name, format, &shape)?;
        scales
            .check_weights(format, codes, 0, weight_limit(DType::BF16))
            .map_err(|msg| Error::tensor(file.path(), name, msg))?;
        Fp8Weight::new(format, codes, rows, cols, &scales)
            .map(Some)
            .map_err(|msg| Error::tensor(file.path(), name, msg))
    }

    /// The block scales of the quantised tensor `name` of `shape`, and whether they are bf16 or
    /// f16 (so that a product with an fp8 value is exact in f32). Scales that are not positive
    /// and finite are refused: a zero scale erases its block, a negative one flips its signs,
    /// and a quantiser writes neither (`amax / fmt_max`, amax clamped above zero).
    fn block_scales(
        &self,
        file: &SafetensorsFile,
        name: &str,
        format: Fp8Format,
        shape: &[usize],
    ) -> Result<(BlockScales, bool)> {
        let Some(scheme) = &self.fp8 else {
            return Err(Error::tensor(
                file.path(),
                name,
                format!(
                    "stored as {}, but config.json has no quantization_config: an FP8 \
                     checkpoint's block size comes from it",
                    format.name()
                ),
            ));
        };
        let scale = scale_name(name);
        let bad = |msg: String| Error::tensor(self.file_of(&scale), &scale, msg);
        let want = BlockScales::expected_shape(shape, scheme.block)
            .ok_or_else(|| bad(format!("block scales of a tensor of shape {shape:?}")))?;
        let t = self.locate(&scale, &want)?.load(&scale)?;
        let f32_exact = matches!(t.dtype(), DType::BF16 | DType::F16);
        let values: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        if let Some(at) = values.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(bad(format!(
                "block scale {at} (row-major) is {}: block scales are positive and finite",
                values[at]
            )));
        }
        let scales = BlockScales::new(shape, scheme.block, values)
            .ok_or_else(|| bad(format!("not {want:?} scales")))?;
        Ok((scales, f32_exact))
    }
}

/// The largest magnitude a dequantised weight may have when it is used in `dtype`: the dtype's
/// finite range (f32's for f32 and f64, which is where the weights of an FP8 checkpoint live
/// before the cast).
fn weight_limit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => f64::from(half::f16::MAX),
        DType::BF16 => f64::from(half::bf16::MAX),
        _ => f64::from(f32::MAX),
    }
}
