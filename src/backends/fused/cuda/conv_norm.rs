//! Causal conv + SiLU and the gated RMSNorm.

use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::{DType, Tensor, WithDType};

use super::launch::{Input, alloc_out, grid_for, i32_arg, launch, wrap};
use super::{Kernel, MODULE, NAME, PTX, err};
use crate::backends::{check_conv_shapes, check_norm_shapes};
use crate::error::Result;

/// Causal depthwise conv + SiLU: x `[B, T, C]`, weight `[C, K]` → `[B, T, C]`.
pub fn conv1d_silu(x: &Tensor, weight: &Tensor, poison: bool) -> Result<Tensor> {
    let dims = check_conv_shapes(NAME, x, weight)?;
    dispatch_dtype!(
        x.dtype(),
        "CUDA kernels",
        conv_typed(x, weight, dims, poison)
    )
}

fn conv_typed<T: Kernel>(
    x: &Tensor,
    w: &Tensor,
    (b, t, c, k): (usize, usize, usize, usize),
    poison: bool,
) -> Result<Tensor> {
    let n = b * t * c;
    if n == 0 {
        return Ok(Tensor::zeros(x.dims(), x.dtype(), x.device())?);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let (xi, wi) = (
        Input::new(&x, "conv input")?,
        Input::new(&w, "conv weight")?,
    );
    let dev = xi.device()?;
    let mut out = alloc_out::<T>(&dev, n, poison)?;
    let kernel = format!("conv1d_silu_{}", T::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let (xv, wv) = (xi.view::<T>()?, wi.view::<T>()?);
    let (bb, tt, cc, kk) = (b as i64, t as i64, c as i64, i32_arg("conv kernel", k)?);
    let mut args = func.builder();
    args.arg(&xv).arg(&wv).arg(&mut out);
    args.arg(&bb).arg(&tt).arg(&cc).arg(&kk);
    launch(args, grid_for(n, 256), &dev, &kernel)?;
    Ok(wrap(out, dev, x.dims()))
}

// --- gated RMSNorm -------------------------------------------------------------------------

/// `w ⊙ x·rsqrt(mean x² + eps) ⊙ SiLU(z)` over the last dim; x, z, w one dtype.
pub fn gated_rms_norm(
    x: &Tensor,
    z: &Tensor,
    weight: &Tensor,
    eps: f64,
    poison: bool,
) -> Result<Tensor> {
    let dim = check_norm_shapes(NAME, x, z, weight)?;
    if z.dtype() != x.dtype() || weight.dtype() != x.dtype() {
        return Err(err(
            "gated norm input, gate and weight must share one dtype",
        ));
    }
    dispatch_dtype!(
        x.dtype(),
        "CUDA kernels",
        norm_typed(x, z, weight, eps, dim, poison)
    )
}

fn norm_typed<T: Kernel>(
    x: &Tensor,
    z: &Tensor,
    w: &Tensor,
    eps: f64,
    dim: usize,
    poison: bool,
) -> Result<Tensor> {
    let n = x.elem_count();
    if n == 0 || dim == 0 {
        return Ok(Tensor::zeros(x.dims(), x.dtype(), x.device())?);
    }
    let rows = n / dim;
    let (x, z, w) = (x.contiguous()?, z.contiguous()?, w.contiguous()?);
    let xi = Input::new(&x, "gated norm input")?;
    let zi = Input::new(&z, "gated norm gate")?;
    let wi = Input::new(&w, "gated norm weight")?;
    let dev = xi.device()?;
    let mut out = alloc_out::<T>(&dev, n, poison)?;
    let kernel = format!("gated_rms_norm_{}", T::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let (xv, zv, wv) = (xi.view::<T>()?, zi.view::<T>()?, wi.view::<T>()?);
    let (rr, dd, ee) = (
        rows as i64,
        i32_arg("gated norm dim", dim)?,
        T::Acc::from_f64(eps),
    );
    let mut args = func.builder();
    args.arg(&xv).arg(&zv).arg(&wv).arg(&mut out);
    args.arg(&rr).arg(&dd).arg(&ee);
    // One warp per row, 8 rows per block.
    launch(args, grid_for(rows, 8), &dev, &kernel)?;
    Ok(wrap(out, dev, x.dims()))
}
