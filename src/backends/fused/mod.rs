//! `fused`: hand-written fused kernels. On the CPU, one rayon task per (batch, key head) does
//! the conv + SiLU, the q/k L2 norm, the scale and the gated delta rule in a single pass over
//! the data ([`cpu::fused_gdn`]), then a fused gated RMSNorm. Precision policy of production
//! fused kernels: in bf16/f16, inputs and outputs in that dtype with f32 accumulation, f32
//! state and one rounding per fused step; in f32/f64, that dtype throughout.
//!
//! Tensors move between candle and the kernels as host vectors; the copies are O(T·channels),
//! next to the O(T·Hv·dk·dv) work of the recurrence.

/// Calls `$body::<S>(…)` for the storage type matching `$dtype`; any other dtype is an error
/// naming the `$kernels` that lack it. Defined before the submodules so the CUDA path shares it.
macro_rules! dispatch_dtype {
    ($dtype:expr, $kernels:expr, $body:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::F64 => $body::<f64>($($arg),*),
            DType::F32 => $body::<f32>($($arg),*),
            DType::BF16 => $body::<half::bf16>($($arg),*),
            DType::F16 => $body::<half::f16>($($arg),*),
            other => Err(crate::error::Error::backend(
                "fused",
                format!("dtype {other:?} is not supported by the {}", $kernels),
            )),
        }
    };
}

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

use candle_core::{DType, Device, Tensor, WithDType};

use super::{
    DeltaInputs, GdnDims, GdnInputs, GdnOutputs, GdnState, LinearAttentionBackend,
    accumulation_dtype, check_conv_shapes, check_delta_rule_shapes, check_norm_shapes,
    compose_forward_cached, next_conv_state,
};
use crate::error::{Error, Result};
use cpu::{Accum, Element, KernelError};

#[derive(Debug, Default)]
pub struct Fused;

const NAME: &str = "fused";

fn kernel_error(e: KernelError) -> Error {
    Error::backend(NAME, e.to_string())
}

fn host<S: WithDType>(t: &Tensor) -> Result<Vec<S>> {
    Ok(t.flatten_all()?.to_vec1::<S>()?)
}

fn require_cpu(t: &Tensor) -> Result<()> {
    match t.device() {
        Device::Cpu => Ok(()),
        other => Err(Error::backend(
            NAME,
            format!(
                "the fused CPU kernels got a tensor on {:?}; the CUDA kernels are not in this build",
                other.location()
            ),
        )),
    }
}

impl LinearAttentionBackend for Fused {
    fn name(&self) -> &'static str {
        NAME
    }

    fn implementation(&self, device: &Device) -> String {
        match device {
            Device::Cpu => format!(
                "fused/cpu-rayon-{}t-{}",
                rayon::current_num_threads(),
                cpu::isa_name()
            ),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => cuda::implementation(),
            _ => "fused/unavailable".to_string(),
        }
    }

    fn check_device(&self, device: &Device) -> Result<()> {
        match device {
            Device::Cpu => match cpu::isa_override_error() {
                None => Ok(()),
                Some(why) => Err(Error::backend(NAME, why)),
            },
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => Ok(()),
            _ => Err(Error::backend(
                NAME,
                "its CUDA kernels are not in this build (rebuild with --features cuda)",
            )),
        }
    }

    fn conv1d_silu(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor> {
        let (batch, seq, channels, kernel) = check_conv_shapes(NAME, x, weight)?;
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            return cuda::conv1d_silu(x, weight, false);
        }
        require_cpu(x)?;
        let dims = cpu::ConvDims {
            batch,
            seq,
            channels,
            kernel,
        };
        dispatch_dtype!(x.dtype(), "CPU kernels", conv_typed(x, weight, dims))
    }

    fn gated_delta_rule(&self, x: DeltaInputs, state: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let d = check_delta_rule_shapes(NAME, x, state)?;
        #[cfg(feature = "cuda")]
        if x.q.device().is_cuda() {
            return cuda::gated_delta_rule(x, state, false);
        }
        require_cpu(x.q)?;
        dispatch_dtype!(x.q.dtype(), "CPU kernels", delta_rule_typed(x, state, d))
    }

    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        let dim = check_norm_shapes(NAME, x, z, weight)?;
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            return cuda::gated_rms_norm(x, z, weight, eps, false);
        }
        require_cpu(x)?;
        if z.dtype() != x.dtype() || weight.dtype() != x.dtype() {
            return Err(Error::backend(
                NAME,
                "gated norm input, gate and weight must share one dtype",
            ));
        }
        let dims = cpu::NormDims {
            rows: x.elem_count() / dim.max(1),
            dim,
        };
        dispatch_dtype!(
            x.dtype(),
            "CPU kernels",
            norm_typed(x, z, weight, eps, dims)
        )
    }

    fn forward(&self, inputs: &GdnInputs, capture_ops: bool) -> Result<GdnOutputs> {
        let d = inputs.dims;
        check_conv_shapes(NAME, inputs.mixed_qkv, inputs.conv_weight)?;
        #[cfg(feature = "cuda")]
        if inputs.mixed_qkv.device().is_cuda() {
            return cuda_forward(self, inputs, capture_ops);
        }
        require_cpu(inputs.mixed_qkv)?;
        let (core, state, conv) = dispatch_dtype!(
            inputs.mixed_qkv.dtype(),
            "CPU kernels",
            fused_typed(inputs, d, capture_ops)
        )?;
        let out = self.gated_rms_norm(&core, inputs.z, inputs.norm_weight, inputs.norm_eps)?;
        GdnOutputs::new(out, state, conv.filter(|_| capture_ops), core, &d)
    }

    /// A fresh sequence on the CPU runs the same single-pass kernel as [`forward`](Self::forward)
    /// and keeps its final state; a continuation composes the fused conv, delta-rule and norm
    /// kernels from the state (the trait's default), as does every call on CUDA.
    fn forward_cached(
        &self,
        inputs: &GdnInputs,
        state: Option<&GdnState>,
        capture_ops: bool,
    ) -> Result<(GdnOutputs, GdnState)> {
        let d = inputs.dims;
        if state.is_some() || !matches!(inputs.mixed_qkv.device(), Device::Cpu) {
            return compose_forward_cached(self, inputs, state, capture_ops);
        }
        check_conv_shapes(NAME, inputs.mixed_qkv, inputs.conv_weight)?;
        let (core, recurrent, conv) = dispatch_dtype!(
            inputs.mixed_qkv.dtype(),
            "CPU kernels",
            fused_typed(inputs, d, capture_ops)
        )?;
        let out = self.gated_rms_norm(&core, inputs.z, inputs.norm_weight, inputs.norm_eps)?;
        let conv_state = next_conv_state(None, inputs.mixed_qkv, d.conv_kernel)?;
        Ok((
            GdnOutputs::new(
                out,
                recurrent.clone(),
                conv.filter(|_| capture_ops),
                core,
                &d,
            )?,
            GdnState {
                conv: conv_state,
                recurrent,
            },
        ))
    }
}

/// The storage type's zero, for allocating outputs the kernels overwrite.
fn zero<S: Element>() -> S {
    S::from_acc(<S::Acc as Accum>::ZERO)
}

/// `t` at the accumulation precision of `S` (g and states are handed over at that precision).
fn host_acc<S: Element + WithDType>(t: &Tensor) -> Result<Vec<S::Acc>>
where
    S::Acc: WithDType,
{
    host::<S::Acc>(&t.to_dtype(accumulation_dtype(S::DTYPE))?)
}

fn scale(key_head_dim: usize) -> f64 {
    1.0 / (key_head_dim as f64).sqrt()
}

fn conv_typed<S: Element + WithDType>(
    x: &Tensor,
    w: &Tensor,
    dims: cpu::ConvDims,
) -> Result<Tensor> {
    let mut out = vec![zero::<S>(); x.elem_count()];
    cpu::causal_conv1d_silu(&host::<S>(x)?, &host::<S>(w)?, dims, &mut out)
        .map_err(kernel_error)?;
    Ok(Tensor::from_vec(out, x.dims(), x.device())?)
}

fn delta_rule_typed<S: Element + WithDType>(
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
    dims: GdnDims,
) -> Result<(Tensor, Tensor)>
where
    S::Acc: WithDType,
{
    let DeltaInputs { q, k, v, g, beta } = x;
    let init = initial_state.map(host_acc::<S>).transpose()?;
    let mut out = vec![zero::<S>(); v.elem_count()];
    let mut state =
        vec![<S::Acc as Accum>::ZERO; dims.batch * dims.v_heads * dims.k_dim * dims.v_dim];
    cpu::gated_delta_rule(
        &host::<S>(q)?,
        &host::<S>(k)?,
        &host::<S>(v)?,
        &host_acc::<S>(g)?,
        &host::<S>(beta)?,
        scale(dims.k_dim),
        init.as_deref(),
        dims,
        &mut out,
        &mut state,
    )
    .map_err(kernel_error)?;
    let device = v.device();
    Ok((
        Tensor::from_vec(out, v.dims(), device)?,
        Tensor::from_vec(
            state,
            (dims.batch, dims.v_heads, dims.k_dim, dims.v_dim),
            device,
        )?,
    ))
}

fn norm_typed<S: Element + WithDType>(
    x: &Tensor,
    z: &Tensor,
    w: &Tensor,
    eps: f64,
    dims: cpu::NormDims,
) -> Result<Tensor> {
    let mut out = vec![zero::<S>(); x.elem_count()];
    cpu::gated_rms_norm(
        &host::<S>(x)?,
        &host::<S>(z)?,
        &host::<S>(w)?,
        eps,
        dims,
        &mut out,
    )
    .map_err(kernel_error)?;
    Ok(Tensor::from_vec(out, x.dims(), x.device())?)
}

/// The fused conv + delta rule: returns the core output `[B, T, Hv, dv]`, the final state
/// `[B, Hv, dk, dv]` (accumulation dtype) and, when asked, the conv output `[B, T, conv_dim]`.
fn fused_typed<S: Element + WithDType>(
    inputs: &GdnInputs,
    dims: GdnDims,
    capture_conv: bool,
) -> Result<(Tensor, Tensor, Option<Tensor>)>
where
    S::Acc: WithDType,
{
    let device = inputs.mixed_qkv.device();
    let (b, t) = (dims.batch, dims.seq);
    let mut core = vec![zero::<S>(); b * t * dims.v_heads * dims.v_dim];
    let mut state = vec![<S::Acc as Accum>::ZERO; b * dims.v_heads * dims.k_dim * dims.v_dim];
    let mut conv = capture_conv.then(|| vec![zero::<S>(); inputs.mixed_qkv.elem_count()]);
    cpu::fused_gdn(
        &host::<S>(inputs.mixed_qkv)?,
        &host::<S>(inputs.conv_weight)?,
        &host_acc::<S>(inputs.g)?,
        &host::<S>(inputs.beta)?,
        scale(dims.k_dim),
        None,
        dims,
        &mut core,
        &mut state,
        conv.as_deref_mut(),
    )
    .map_err(kernel_error)?;
    let core = Tensor::from_vec(core, (b, t, dims.v_heads, dims.v_dim), device)?;
    let state = Tensor::from_vec(state, (b, dims.v_heads, dims.k_dim, dims.v_dim), device)?;
    let conv = conv
        .map(|c| Tensor::from_vec(c, inputs.mixed_qkv.dims(), device))
        .transpose()?;
    Ok((core, state, conv))
}

/// `forward` on a CUDA device: conv kernel, delta-rule kernel reading q/k/v out of the conv
/// output, gated-norm kernel.
#[cfg(feature = "cuda")]
fn cuda_forward(fused: &Fused, inputs: &GdnInputs, capture_ops: bool) -> Result<GdnOutputs> {
    let d = inputs.dims;
    let (core, state, conv) = cuda::fused_core(
        inputs.mixed_qkv,
        inputs.conv_weight,
        inputs.g,
        inputs.beta,
        None,
        &d,
        false,
    )?;
    let out = fused.gated_rms_norm(&core, inputs.z, inputs.norm_weight, inputs.norm_eps)?;
    GdnOutputs::new(out, state, capture_ops.then_some(conv), core, &d)
}
