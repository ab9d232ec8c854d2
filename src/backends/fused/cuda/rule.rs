//! The gated delta rule: the exact SIMT kernel or the bf16 tensor-core one, its shared-memory
//! sizes and the checks of every extent it reads.

use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::{CudaDevice, DType, Tensor, WithDType};

use super::launch::{Input, alloc_out, i32_arg, launch, wrap};
use super::{
    DVT, GDN_THREADS, Kernel, MODULE, NAME, PTX, RuleKernel, TC_CHUNK, delta_rule_kernel, err,
    uses_tensor_cores,
};
use crate::backends::{DeltaInputs, GdnDims, accumulation_dtype, check_delta_rule_shapes};
use crate::error::Result;

/// Bytes of dynamic shared memory of the exact delta-rule kernel (layout in gdn.cu).
pub fn gdn_shared_bytes<T: Kernel>(dk: usize) -> usize {
    let c = T::CHUNK;
    (2 * c * (dk + 1) + DVT * dk + DVT * c + 2 * c * c + 3 * c) * std::mem::size_of::<T::Acc>()
}

/// Bytes of dynamic shared memory of the tensor-core kernel (`gdn_tc_shared_bytes` in gdn.cu:
/// bf16 q/k/v double buffers and hi/lo operand tiles, then the f32 tiles).
pub fn gdn_tc_shared_bytes(dk: usize) -> usize {
    let (c, dkp) = (TC_CHUNK, dk.div_ceil(16) * 16);
    let u16s = 4 * c * (dkp + 8)
        + 2 * c * (DVT + 8)
        + 2 * c * (c + 8)
        + 4 * DVT * (c + 8)
        + 2 * DVT * (dkp + 8);
    let f32s = c * (c + 1) + c * (DVT + 1) + 6 * c;
    2 * u16s + 4 * f32s
}

/// The gated delta rule with the q/k L2 norm and dk^-1/2 scale inside: q, k `[B, T, Hk, dk]`,
/// v `[B, T, Hv, dv]`, g `[B, T, Hv]` (any float dtype; used at the accumulation precision),
/// beta `[B, T, Hv]`, optional initial state `[B, Hv, dk, dv]`. Returns the output (v's dtype)
/// and the final state (accumulation dtype).
pub fn gated_delta_rule(
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    gated_delta_rule_using(RuleKernel::Default, x, initial_state, poison)
}

/// [`gated_delta_rule`] with the kernel choice made by the caller (the bench times both).
pub fn gated_delta_rule_using(
    kernel: RuleKernel,
    x: DeltaInputs,
    initial_state: Option<&Tensor>,
    poison: bool,
) -> Result<(Tensor, Tensor)> {
    let d = check_delta_rule_shapes(NAME, x, initial_state)?;
    let DeltaInputs { q, k, v, g, beta } = x;
    dispatch_dtype!(
        v.dtype(),
        "CUDA kernels",
        rule_typed(q, k, v, g, beta, initial_state, d, poison, kernel)
    )
}

#[allow(clippy::too_many_arguments)]
fn rule_typed<T: Kernel>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
    d: GdnDims,
    poison: bool,
    kernel: RuleKernel,
) -> Result<(Tensor, Tensor)> {
    let acc = accumulation_dtype(T::DTYPE);
    let (q, k, v, beta) = (
        q.contiguous()?,
        k.contiguous()?,
        v.contiguous()?,
        beta.contiguous()?,
    );
    let g = g.to_dtype(acc)?.contiguous()?;
    let init = initial_state
        .map(|s| s.to_dtype(acc).and_then(|s| s.contiguous()))
        .transpose()?;
    if d.seq == 0 {
        return empty_seq::<T>(&d, v.device(), init);
    }
    let qi = Input::new(&q, "q")?;
    let ki = Input::new(&k, "k")?;
    let vi = Input::new(&v, "v")?;
    let (gi, bi, ii) = gate_inputs(&g, &beta, init.as_ref())?;
    let dev = vi.device()?;
    let iv = ii.as_ref().map(|i| i.view::<T::Acc>()).transpose()?;
    let (out, state) = run_rule::<T>(
        &dev,
        RuleArgs {
            q: qi.view()?,
            k: ki.view()?,
            v: vi.view()?,
            g: gi.view()?,
            beta: bi.view()?,
            init: iv,
            qk_stride: d.k_heads * d.k_dim,
            v_stride: d.v_heads * d.v_dim,
        },
        &d,
        poison,
        kernel,
    )?;
    Ok(rule_tensors(out, state, dev, &d))
}

/// The delta rule's gates g and beta and its initial state (when given), read-locked for a
/// launch.
pub(super) fn gate_inputs<'a>(
    g: &'a Tensor,
    beta: &'a Tensor,
    init: Option<&'a Tensor>,
) -> Result<(Input<'a>, Input<'a>, Option<Input<'a>>)> {
    Ok((
        Input::new(g, "g")?,
        Input::new(beta, "beta")?,
        init.map(|s| Input::new(s, "initial state")).transpose()?,
    ))
}

pub(super) fn empty_seq<T: Kernel>(
    d: &GdnDims,
    device: &candle_core::Device,
    init: Option<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let (b, hv, dk, dv) = (d.batch, d.v_heads, d.k_dim, d.v_dim);
    let out = Tensor::zeros((b, 0, hv, dv), T::DTYPE, device)?;
    let state = match init {
        Some(s) => s.copy()?,
        None => Tensor::zeros((b, hv, dk, dv), accumulation_dtype(T::DTYPE), device)?,
    };
    Ok((out, state))
}

pub(super) fn rule_tensors<T: Kernel>(
    out: CudaSlice<T>,
    state: CudaSlice<T::Acc>,
    dev: CudaDevice,
    d: &GdnDims,
) -> (Tensor, Tensor) {
    let (b, t, hv, dk, dv) = (d.batch, d.seq, d.v_heads, d.k_dim, d.v_dim);
    (
        wrap(out, dev.clone(), (b, t, hv, dv)),
        wrap(state, dev, (b, hv, dk, dv)),
    )
}

/// Device views of one delta-rule call. q/k rows are `qk_stride` elements apart and v rows
/// `v_stride` apart, so q/k/v may be column slices of one conv output.
pub(super) struct RuleArgs<'a, T: Kernel> {
    pub(super) q: CudaView<'a, T>,
    pub(super) k: CudaView<'a, T>,
    pub(super) v: CudaView<'a, T>,
    pub(super) g: CudaView<'a, T::Acc>,
    pub(super) beta: CudaView<'a, T>,
    pub(super) init: Option<CudaView<'a, T::Acc>>,
    pub(super) qk_stride: usize,
    pub(super) v_stride: usize,
}

pub(super) fn run_rule<T: Kernel>(
    dev: &CudaDevice,
    a: RuleArgs<'_, T>,
    d: &GdnDims,
    poison: bool,
    choice: RuleKernel,
) -> Result<(CudaSlice<T>, CudaSlice<T::Acc>)> {
    let (b, t, hk, hv, dk, dv) = (d.batch, d.seq, d.k_heads, d.v_heads, d.k_dim, d.v_dim);
    if b == 0 || hv == 0 || dk == 0 || dv == 0 || t == 0 {
        return Err(err(format!("empty delta-rule call {d:?}")));
    }
    // Every extent the kernel indexes must lie inside its buffer.
    let rows = b * t;
    let need = |what: &str, have: usize, want: usize| -> Result<()> {
        if have < want {
            Err(err(format!(
                "{what}: buffer of {have} elements, the kernel reads {want}"
            )))
        } else {
            Ok(())
        }
    };
    need("q", a.q.len(), (rows - 1) * a.qk_stride + hk * dk)?;
    need("k", a.k.len(), (rows - 1) * a.qk_stride + hk * dk)?;
    need("v", a.v.len(), (rows - 1) * a.v_stride + hv * dv)?;
    need("g", a.g.len(), rows * hv)?;
    need("beta", a.beta.len(), rows * hv)?;
    if let Some(i) = &a.init {
        need("initial state", i.len(), b * hv * dk * dv)?;
    }
    let tiles = dv.div_ceil(DVT);
    if hv > 65535 || b > 65535 {
        return Err(err(format!(
            "grid ({tiles}, {hv}, {b}) exceeds CUDA's limits"
        )));
    }
    let tc = uses_tensor_cores(choice, T::DTYPE, dk);
    let smem = if tc {
        gdn_tc_shared_bytes(dk)
    } else {
        gdn_shared_bytes::<T>(dk)
    };
    let ctx = dev.cuda_stream().context().clone();
    let max_smem = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .w()? as usize;
    if smem > max_smem {
        return Err(err(format!(
            "dk = {dk} needs {smem} B of shared memory per block; this GPU allows {max_smem}"
        )));
    }
    let kernel = delta_rule_kernel::<T>(choice, dk);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    func.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )
    .w()?;
    let mut out = alloc_out::<T>(dev, rows * hv * dv, poison)?;
    let mut state = alloc_out::<T::Acc>(dev, b * hv * dk * dv, poison)?;
    let null: u64 = 0;
    let (tt, hkk, hvv, dkk, dvv) = (
        i32_arg("seq", t)?,
        i32_arg("Hk", hk)?,
        i32_arg("Hv", hv)?,
        i32_arg("dk", dk)?,
        i32_arg("dv", dv)?,
    );
    let (qks, vs) = (a.qk_stride as i64, a.v_stride as i64);
    let scale = T::Acc::from_f64(1.0 / (dk as f64).sqrt());
    {
        let mut args = func.builder();
        args.arg(&a.q).arg(&a.k).arg(&a.v).arg(&a.g).arg(&a.beta);
        match &a.init {
            Some(i) => args.arg(i),
            None => args.arg(&null),
        };
        args.arg(&mut out).arg(&mut state);
        args.arg(&tt).arg(&hkk).arg(&hvv).arg(&dkk).arg(&dvv);
        args.arg(&qks).arg(&vs).arg(&scale);
        let cfg = LaunchConfig {
            grid_dim: (tiles as u32, hv as u32, b as u32),
            block_dim: (GDN_THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        launch(args, cfg, dev, &kernel)?;
    }
    Ok((out, state))
}
