//! Two kernels of `gdn.cu` that serve code outside the fused backend, both at the accumulation
//! precision (f32 or f64), so that nothing of a layer leaves the GPU:
//! - [`log_decay`]: the shell's gate `g = −exp(A_log)·softplus(a + dt_bias)` (src/model/gdn.rs
//!   computes the same formula on the CPU, in the same dtype);
//! - [`recurrent_rule`]: the `reference` backend's delta rule as one launch of the plain
//!   token-by-token recurrence (`gdn_recurrent_*`) instead of a dozen small tensor ops per token;
//! - [`router_rank`]: the MoE router's top experts per token (`router_rank_*`), so that only
//!   `[tokens, k + 1]` values come back to the host (which loads the routed experts) instead of
//!   every probability.

use candle_core::cuda_backend::CudaDType;
use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::{DType, Tensor, WithDType};

use super::launch::{Input, alloc_out, grid_for, i32_arg, launch, wrap};
use super::{MODULE, PTX, err};
use crate::error::Result;

/// Value columns per block of `gdn_recurrent_*` (`REC_COLS` in gdn.cu: one warp).
const REC_COLS: usize = 32;

/// f32 and f64, the accumulation types the two kernels exist for.
trait Acc: CudaDType + DeviceRepr + WithDType {
    const SUFFIX: &'static str;
}
impl Acc for f32 {
    const SUFFIX: &'static str = "f32";
}
impl Acc for f64 {
    const SUFFIX: &'static str = "f64";
}

fn acc_dtype_of(what: &str, t: &Tensor) -> Result<DType> {
    match t.dtype() {
        d @ (DType::F32 | DType::F64) => Ok(d),
        other => Err(err(format!(
            "{what} must be f32 or f64 (an accumulation type), got {other:?}"
        ))),
    }
}

fn same_dtype(dtype: DType, tensors: &[(&str, &Tensor)]) -> Result<()> {
    match tensors.iter().find(|(_, t)| t.dtype() != dtype) {
        Some((what, t)) => Err(err(format!(
            "{what} is {:?}, expected {dtype:?} like the other inputs",
            t.dtype()
        ))),
        None => Ok(()),
    }
}

/// `g = neg_a[h] · softplus(a + dt_bias[h])` (torch's softplus: threshold 20) for `a` `[…, Hv]`,
/// `neg_a = −exp(A_log)` and `dt_bias` `[Hv]`, all in one accumulation dtype on one CUDA device.
pub fn log_decay(a: &Tensor, neg_a: &Tensor, dt_bias: &Tensor) -> Result<Tensor> {
    let dtype = acc_dtype_of("the gate input", a)?;
    same_dtype(dtype, &[("-exp(A_log)", neg_a), ("dt_bias", dt_bias)])?;
    let hv = neg_a.elem_count();
    if neg_a.dims() != [hv] || dt_bias.dims() != [hv] || a.dims().last() != Some(&hv) {
        return Err(err(format!(
            "gate shapes: a {:?}, -exp(A_log) {:?}, dt_bias {:?}",
            a.dims(),
            neg_a.dims(),
            dt_bias.dims()
        )));
    }
    match dtype {
        DType::F64 => gate_typed::<f64>(a, neg_a, dt_bias, hv),
        _ => gate_typed::<f32>(a, neg_a, dt_bias, hv),
    }
}

fn gate_typed<A: Acc>(a: &Tensor, neg_a: &Tensor, dt_bias: &Tensor, hv: usize) -> Result<Tensor> {
    let n = a.elem_count();
    if n == 0 {
        return Ok(a.zeros_like()?);
    }
    let (a_c, na, dt) = (a.contiguous()?, neg_a.contiguous()?, dt_bias.contiguous()?);
    let ai = Input::new(&a_c, "gate input")?;
    let ni = Input::new(&na, "-exp(A_log)")?;
    let di = Input::new(&dt, "dt_bias")?;
    let dev = ai.device()?;
    let mut out = alloc_out::<A>(&dev, n, false)?;
    let kernel = format!("gdn_gate_{}", A::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let (av, nv, dv) = (ai.view::<A>()?, ni.view::<A>()?, di.view::<A>()?);
    let (nn, hh) = (n as i64, i32_arg("Hv", hv)?);
    let mut args = func.builder();
    args.arg(&av)
        .arg(&nv)
        .arg(&dv)
        .arg(&mut out)
        .arg(&nn)
        .arg(&hh);
    launch(args, grid_for(n, 256), &dev, &kernel)?;
    Ok(wrap(out, dev, a.dims()))
}

/// The gated delta rule as the plain recurrence on inputs the `reference` backend prepared in
/// one accumulation dtype: q (L2-normalised, scaled) and k (L2-normalised) `[B, Hv, T, dk]`, v
/// `[B, Hv, T, dv]`, decay = exp(g) and beta `[B, Hv, T]`, optional initial state
/// `[B, Hv, dk, dv]`. Returns the output `[B, T, Hv, dv]` and the final state, both in that dtype.
pub fn recurrent_rule(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    decay: &Tensor,
    beta: &Tensor,
    initial_state: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let dtype = acc_dtype_of("q", q)?;
    same_dtype(
        dtype,
        &[("k", k), ("v", v), ("decay", decay), ("beta", beta)],
    )?;
    let (b, hv, t, dk) = q.dims4()?;
    let dv = v.dim(3)?;
    let rows = [b, hv, t];
    let shapes_ok = k.dims() == q.dims()
        && v.dims() == [b, hv, t, dv]
        && decay.dims() == rows
        && beta.dims() == rows
        && initial_state.is_none_or(|s| s.dims() == [b, hv, dk, dv]);
    if !shapes_ok {
        return Err(err(format!(
            "recurrence shapes: q {:?} k {:?} v {:?} decay {:?} beta {:?} state {:?}",
            q.dims(),
            k.dims(),
            v.dims(),
            decay.dims(),
            beta.dims(),
            initial_state.map(|s| s.dims().to_vec())
        )));
    }
    let init = initial_state
        .map(|s| s.to_dtype(dtype).and_then(|s| s.contiguous()))
        .transpose()?;
    if t == 0 || b == 0 || hv == 0 || dk == 0 || dv == 0 {
        let out = Tensor::zeros((b, t, hv, dv), dtype, q.device())?;
        let state = match init {
            Some(s) => s,
            None => Tensor::zeros((b, hv, dk, dv), dtype, q.device())?,
        };
        return Ok((out, state));
    }
    let d = RecDims { b, hv, t, dk, dv };
    match dtype {
        DType::F64 => rec_typed::<f64>(q, k, v, decay, beta, init.as_ref(), d),
        _ => rec_typed::<f32>(q, k, v, decay, beta, init.as_ref(), d),
    }
}

#[derive(Clone, Copy)]
struct RecDims {
    b: usize,
    hv: usize,
    t: usize,
    dk: usize,
    dv: usize,
}

fn rec_typed<A: Acc>(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    decay: &Tensor,
    beta: &Tensor,
    init: Option<&Tensor>,
    RecDims { b, hv, t, dk, dv }: RecDims,
) -> Result<(Tensor, Tensor)> {
    let (q, k, v, decay, beta) = (
        q.contiguous()?,
        k.contiguous()?,
        v.contiguous()?,
        decay.contiguous()?,
        beta.contiguous()?,
    );
    let qi = Input::new(&q, "q")?;
    let ki = Input::new(&k, "k")?;
    let vi = Input::new(&v, "v")?;
    let di = Input::new(&decay, "decay")?;
    let bi = Input::new(&beta, "beta")?;
    let ii = init.map(|s| Input::new(s, "initial state")).transpose()?;
    let dev = qi.device()?;
    let tiles = dv.div_ceil(REC_COLS);
    if hv > 65535 || b > 65535 {
        return Err(err(format!(
            "grid ({tiles}, {hv}, {b}) exceeds CUDA's limits"
        )));
    }
    // The state columns, then q_t and k_t, in shared memory (layout in gdn.cu).
    let smem = (REC_COLS * dk + 2 * dk) * std::mem::size_of::<A>();
    let ctx = dev.cuda_stream().context().clone();
    let max_smem = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .w()? as usize;
    if smem > max_smem {
        return Err(err(format!(
            "dk = {dk} needs {smem} B of shared memory per block; this GPU allows {max_smem}"
        )));
    }
    let kernel = format!("gdn_recurrent_{}", A::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    func.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )
    .w()?;
    let mut out = alloc_out::<A>(&dev, b * t * hv * dv, false)?;
    let mut state = alloc_out::<A>(&dev, b * hv * dk * dv, false)?;
    let (qv, kv, vv) = (qi.view::<A>()?, ki.view::<A>()?, vi.view::<A>()?);
    let (dcv, btv) = (di.view::<A>()?, bi.view::<A>()?);
    let iv = ii.as_ref().map(|i| i.view::<A>()).transpose()?;
    let null: u64 = 0;
    let (tt, hvv, dkk, dvv) = (
        i32_arg("seq", t)?,
        i32_arg("Hv", hv)?,
        i32_arg("dk", dk)?,
        i32_arg("dv", dv)?,
    );
    {
        let mut args = func.builder();
        args.arg(&qv).arg(&kv).arg(&vv).arg(&dcv).arg(&btv);
        match &iv {
            Some(i) => args.arg(i),
            None => args.arg(&null),
        };
        args.arg(&mut out).arg(&mut state);
        args.arg(&tt).arg(&hvv).arg(&dkk).arg(&dvv);
        let cfg = LaunchConfig {
            grid_dim: (tiles as u32, hv as u32, b as u32),
            block_dim: (REC_COLS as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        launch(args, cfg, &dev, &kernel)?;
    }
    Ok((
        wrap(out, dev.clone(), (b, t, hv, dv)),
        wrap(state, dev, (b, hv, dk, dv)),
    ))
}

/// Most experts [`router_rank`] ranks per token (`TOPK_MAX` in gdn.cu).
pub const RANK_MAX: usize = 33;

/// The MoE router's ranking on the GPU: for `probs` `[n, e]` (f32 or f64), each token's `keep`
/// most probable experts, most probable first, equal probabilities in ascending expert index.
/// Returns (expert indices, their probabilities as f64), both `n × keep` row-major, read back.
pub fn router_rank(probs: &Tensor, keep: usize) -> Result<(Vec<u32>, Vec<f64>)> {
    let dtype = acc_dtype_of("router probabilities", probs)?;
    let (n, e) = probs.dims2()?;
    if keep == 0 || keep > e.min(RANK_MAX) {
        return Err(err(format!(
            "router ranking of {keep} of {e} experts (the kernel ranks 1 to {RANK_MAX})"
        )));
    }
    match dtype {
        DType::F64 => rank_typed::<f64>(probs, n, e, keep),
        _ => rank_typed::<f32>(probs, n, e, keep),
    }
}

fn rank_typed<A: Acc>(
    probs: &Tensor,
    n: usize,
    e: usize,
    keep: usize,
) -> Result<(Vec<u32>, Vec<f64>)> {
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let p = probs.contiguous()?;
    let pi = Input::new(&p, "router probabilities")?;
    let dev = pi.device()?;
    let mut idx = alloc_out::<u32>(&dev, n * keep, false)?;
    let mut top = alloc_out::<A>(&dev, n * keep, false)?;
    let kernel = format!("router_rank_{}", A::SUFFIX);
    let func = dev.get_or_load_custom_func(&kernel, MODULE, PTX)?;
    let pv = pi.view::<A>()?;
    let (nn, ee, kk) = (n as i64, i32_arg("experts", e)?, i32_arg("keep", keep)?);
    let mut args = func.builder();
    args.arg(&pv).arg(&mut idx).arg(&mut top);
    args.arg(&nn).arg(&ee).arg(&kk);
    launch(args, grid_for(n, 256), &dev, &kernel)?;
    let idx = wrap(idx, dev.clone(), n * keep).to_vec1::<u32>()?;
    let top = wrap(top, dev, n * keep)
        .to_dtype(DType::F64)?
        .to_vec1::<f64>()?;
    Ok((idx, top))
}
