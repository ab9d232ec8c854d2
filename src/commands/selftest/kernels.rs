//! Step 1: the device's fused kernels against the f64 truth, on the cases and bounds of
//! [`crate::backends::cases`].

#[cfg(feature = "cuda")]
use candle_core::{DType, Tensor};
use candle_core::{Device, WithDType};

use super::Checklist;
#[cfg(feature = "cuda")]
use super::host;
use crate::backends::cases::{
    CONV_CASES, CONV_SEED, GdnCase, NORM_CASES, NORM_EPS, NORM_SEED, SplitMix, gdn_truth,
    kernel_bound, kernel_cases, round_to_storage, rounded, run_fused_cpu, storage_to_f64,
    to_storage,
};
use crate::backends::fused::cpu::{self, Accum, Element, truth};
use crate::compare::metrics::stats::rel_l2;
use crate::error::{Error, Result};
use crate::util::device::dtype_label;

/// The kernel's results as f64: (core out, final state, conv out, standalone == fused bitwise).
type GdnResult = (Vec<f64>, Vec<f64>, Vec<f64>, bool);

/// Every kernel case in storage type `S` on `device`, one line each.
pub(super) fn check<S: Element + WithDType>(device: &Device, quick: bool, list: &mut Checklist) {
    let dt = dtype_label(S::DTYPE);
    let Some(bound) = kernel_bound(S::DTYPE) else {
        list.error(
            format!("kernels {dt}"),
            &Error::Internal(format!("no kernel bound for {dt}")),
        );
        return;
    };
    for case in kernel_cases(quick) {
        let label = format!("gdn {dt} {}", case.label());
        let inputs = rounded::<S>(&case.inputs());
        let (t_out, t_fin, t_conv) = gdn_truth(&inputs);
        match run_gdn::<S>(device, &inputs) {
            Ok((out, fin, conv, same)) => {
                list.bound(format!("{label} out"), rel_l2(&out, &t_out), bound);
                list.bound(format!("{label} state"), rel_l2(&fin, &t_fin), bound);
                list.bound(format!("{label} conv"), rel_l2(&conv, &t_conv), bound);
                list.flag(
                    format!("{label} standalone == fused"),
                    same,
                    if same { "bit-identical" } else { "differs" }.into(),
                );
            }
            Err(e) => list.error(label, &e),
        }
    }
    let mut rng = SplitMix::new(CONV_SEED);
    for (b, t, c, k) in CONV_CASES {
        let x = round_to_storage::<S>(&rng.normals(b * t * c, 1.0));
        let w = round_to_storage::<S>(&rng.normals(c * k, 0.5));
        let want = truth::causal_conv1d_silu(&x, &w, b, t, c, k);
        let label = format!("conv {dt} B{b} T{t} C{c} K{k}");
        match run_conv::<S>(device, &x, &w, (b, t, c, k)) {
            Ok(got) => list.bound(label, rel_l2(&got, &want), bound),
            Err(e) => list.error(label, &e),
        }
    }
    let mut rng = SplitMix::new(NORM_SEED);
    for (rows, dim) in NORM_CASES {
        let x = round_to_storage::<S>(&rng.normals(rows * dim, 2.0));
        let z = round_to_storage::<S>(&rng.normals(rows * dim, 1.5));
        let w = round_to_storage::<S>(&rng.normals(dim, 1.0));
        let want = truth::gated_rms_norm(&x, &z, &w, NORM_EPS, dim);
        let label = format!("gated norm {dt} N{rows} dim{dim}");
        match run_norm::<S>(device, &x, &z, &w, (rows, dim)) {
            Ok(got) => list.bound(label, rel_l2(&got, &want), bound),
            Err(e) => list.error(label, &e),
        }
    }
}

#[cfg(feature = "cuda")]
fn dev_tensor(x: &[f64], shape: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(x.to_vec(), shape, device)?.to_dtype(dtype)?)
}

fn kernel_error(e: cpu::KernelError) -> Error {
    Error::backend("fused", e.to_string())
}

/// The fused kernel of the device on `case` (already rounded to `S`).
fn run_gdn<S: Element + WithDType>(device: &Device, case: &GdnCase) -> Result<GdnResult> {
    if !device.is_cuda() {
        let run = run_fused_cpu::<S>(case, false).map_err(kernel_error)?;
        return Ok((run.out, run.state, run.conv, run.standalone_same));
    }
    #[cfg(feature = "cuda")]
    {
        use crate::backends::{self, DeltaInputs, fused::cuda};
        let d = case.dims;
        let c = d.conv_dim();
        let dt = S::DTYPE;
        let acc = backends::accumulation_dtype(dt);
        let (b, t, hv) = (d.batch, d.seq, d.v_heads);
        let mixed = dev_tensor(&case.mixed, &[b, t, c], dt, device)?;
        let w = dev_tensor(&case.w, &[c, d.conv_kernel], dt, device)?;
        let g = dev_tensor(&case.g, &[b, t, hv], acc, device)?;
        let beta = dev_tensor(&case.beta, &[b, t, hv], dt, device)?;
        let init = case
            .init
            .as_ref()
            .map(|s| dev_tensor(s, &[b, hv, d.k_dim, d.v_dim], acc, device))
            .transpose()?;
        let (core, state, conv) = cuda::fused_core(&mixed, &w, &g, &beta, init.as_ref(), &d, true)?;
        let (q, k, v) = backends::split_qkv(&conv, &d)?;
        let (core2, state2) = cuda::gated_delta_rule(
            DeltaInputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
            },
            init.as_ref(),
            true,
        )?;
        let (o, f) = (host(&core)?, host(&state)?);
        let same = host(&core2)? == o && host(&state2)? == f;
        Ok((o, f, host(&conv)?, same))
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::device("cuda", "CUDA is not in this build"))
}

fn run_conv<S: Element + WithDType>(
    device: &Device,
    x: &[f64],
    w: &[f64],
    (b, t, c, k): (usize, usize, usize, usize),
) -> Result<Vec<f64>> {
    if !device.is_cuda() {
        let mut out = vec![S::from_acc(S::Acc::from_f64(f64::NAN)); x.len()];
        let dims = cpu::ConvDims {
            batch: b,
            seq: t,
            channels: c,
            kernel: k,
        };
        cpu::causal_conv1d_silu(&to_storage::<S>(x), &to_storage::<S>(w), dims, &mut out)
            .map_err(kernel_error)?;
        return Ok(storage_to_f64(&out));
    }
    #[cfg(feature = "cuda")]
    {
        let xt = dev_tensor(x, &[b, t, c], S::DTYPE, device)?;
        let wt = dev_tensor(w, &[c, k], S::DTYPE, device)?;
        host(&crate::backends::fused::cuda::conv1d_silu(&xt, &wt, true)?)
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::device("cuda", "CUDA is not in this build"))
}

fn run_norm<S: Element + WithDType>(
    device: &Device,
    x: &[f64],
    z: &[f64],
    w: &[f64],
    (rows, dim): (usize, usize),
) -> Result<Vec<f64>> {
    if !device.is_cuda() {
        let mut out = vec![S::from_acc(S::Acc::from_f64(f64::NAN)); x.len()];
        cpu::gated_rms_norm(
            &to_storage::<S>(x),
            &to_storage::<S>(z),
            &to_storage::<S>(w),
            NORM_EPS,
            cpu::NormDims { rows, dim },
            &mut out,
        )
        .map_err(kernel_error)?;
        return Ok(storage_to_f64(&out));
    }
    #[cfg(feature = "cuda")]
    {
        let dt = S::DTYPE;
        let xt = dev_tensor(x, &[rows, dim], dt, device)?;
        let zt = dev_tensor(z, &[rows, dim], dt, device)?;
        let wt = dev_tensor(w, &[dim], dt, device)?;
        host(&crate::backends::fused::cuda::gated_rms_norm(
            &xt, &zt, &wt, NORM_EPS, true,
        )?)
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::device("cuda", "CUDA is not in this build"))
}
