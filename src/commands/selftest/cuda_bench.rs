//! Step 4 (CUDA builds): both delta-rule kernels timed at Qwen3.5-27B and -397B-like
//! linear-layer geometry, with their error against the f64 truth; optionally the inputs, outputs
//! and timings written for scripts/gpu-bench.py.

use std::path::Path;

use candle_core::{DType, Device, IndexOp, Tensor};

use super::bench_dir::{self, GEOMETRIES};
use super::{Checklist, host};
use crate::backends::DeltaInputs;
use crate::backends::fused::cpu::{self, truth};
use crate::backends::fused::cuda::{self, RuleKernel};
use crate::compare::metrics::stats::{median, rel_l2};
use crate::error::{Error, Result};
use crate::util::output;

const DK: usize = 128;
const DV: usize = 128;
/// Both delta-rule kernels are timed: what the backend runs for bf16 (the tensor-core
/// kernel) and the exact f32 kernel.
const KERNELS: [(RuleKernel, &str); 2] =
    [(RuleKernel::Default, "tc"), (RuleKernel::Exact, "exact")];
/// Accuracy bound of the bench (issue 14): bf16 rel L2 against the f64 truth no worse than
/// flash-linear-attention's measured 4.12e-3 at T = 2048, rounded down.
const BENCH_BOUND: f64 = 4e-3;
/// Chunk length the nominal FLOP count is taken at (both hsdiff kernels and fla use 64).
const FLOP_CHUNK: usize = 64;

/// Value heads compared against the CPU f64 truth (the truth is slow): those of key heads
/// 0 and 1.
fn truth_heads(hk: usize, hv: usize) -> usize {
    2 * (hv / hk)
}

/// Nominal FLOPs of one call: per token and value head, the chunked algorithm's products at
/// chunk C: K S, Q S and the state update (2·dk·dv each), K Kᵀ and Q Kᵀ (2·C·dk each), the
/// triangular solve and M U (C·dv each, lower triangles). A speed unit shared with fla,
/// not the work either kernel does (hsdiff's hi/lo operand splits are not counted).
fn nominal_flops(t: usize, hv: usize) -> f64 {
    let c = FLOP_CHUNK;
    (t * hv) as f64 * (6 * DK * DV + 4 * c * DK + 2 * c * DV) as f64
}

/// Compulsory bytes of one call: q, k, v, g (f32), β in; output and final state (f32) out.
fn bytes_moved(t: usize, hk: usize, hv: usize) -> usize {
    2 * t * hk * DK * 2 + t * hv * DV * 2 * 2 + t * hv * (4 + 2) + hv * DK * DV * 4
}

/// CUDA-event times in ms of `kernel` (3 warm-ups, then 5–50 calls within ~3 s), sorted.
fn time_kernel(
    dev: &candle_core::CudaDevice,
    kernel: RuleKernel,
    x: DeltaInputs,
) -> Result<Vec<f64>> {
    let call = || cuda::gated_delta_rule_using(kernel, x, None, false).map(|_| ());
    for _ in 0..3 {
        call()?;
    }
    let first = cuda::time_ms(dev, call)?;
    let iters = ((3000.0 / first.max(1e-3)) as usize).clamp(5, 50);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        times.push(cuda::time_ms(dev, call)?);
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

pub(super) fn run(
    device: &Device,
    seqs: &[usize],
    dir: Option<&Path>,
    list: &mut Checklist,
) -> Result<()> {
    let Device::Cuda(dev) = device else {
        return Err(Error::device("cuda", "the CUDA bench needs a CUDA device"));
    };
    let bw = cuda::copy_bandwidth_gbs(dev, 1 << 30, 10)?;
    println!("device-to-device copy bandwidth: {bw:.0} GB/s (1 GiB copies, median of 10)");
    println!(
        "TFLOP/s: nominal FLOPs T·Hv·(6·dk·dv + 4·{FLOP_CHUNK}·dk + 2·{FLOP_CHUNK}·dv) over \
         the median time"
    );
    println!(
        "{:>8} {:>6} {:>7} {:>11} {:>11} {:>11} {:>9} {:>9} {:>7} {:>8}",
        "Hk/Hv",
        "kernel",
        "T",
        "median ms",
        "min ms",
        "p90 ms",
        "MB moved",
        "GB/s",
        "% copy",
        "TFLOP/s"
    );
    let mut summary = Vec::new();
    device.set_seed(20260)?;
    for (hk, hv) in GEOMETRIES {
        for &t in seqs {
            let q = Tensor::randn(0f32, 1.0, (1, t, hk, DK), device)?.to_dtype(DType::BF16)?;
            let k = Tensor::randn(0f32, 1.0, (1, t, hk, DK), device)?.to_dtype(DType::BF16)?;
            let v = Tensor::randn(0f32, 1.0, (1, t, hv, DV), device)?.to_dtype(DType::BF16)?;
            // Real-looking gates: g = −exp(N(−2, 1.5)) (log-normal decays), β = σ(N(0, 1)).
            let g = ((Tensor::randn(0f32, 1.5, (1, t, hv), device)? - 2.0)?.exp()? * -1.0)?;
            let beta = candle_nn::ops::sigmoid(&Tensor::randn(0f32, 1.0, (1, t, hv), device)?)?
                .to_dtype(DType::BF16)?;
            let bytes = bytes_moved(t, hk, hv);
            let truth = if bench_dir::has_truth(t, seqs) {
                Some(truth_out(&q, &k, &v, &g, &beta, t, hk, hv)?)
            } else {
                None
            };
            let mut kernels_meta = serde_json::Map::new();
            let mut default_out = None;
            for (kernel, label) in KERNELS {
                let name = cuda::delta_rule_kernel::<half::bf16>(kernel, DK);
                let x = DeltaInputs {
                    q: &q,
                    k: &k,
                    v: &v,
                    g: &g,
                    beta: &beta,
                };
                let times = time_kernel(dev, kernel, x)?;
                let med = median(&times);
                let p90 = times[(times.len() * 9 / 10).min(times.len() - 1)];
                let gbs = bytes as f64 / (med * 1e-3) / 1e9;
                let tflops = nominal_flops(t, hv) / (med * 1e-3) / 1e12;
                println!(
                    "{:>8} {label:>6} {t:>7} {med:>11.3} {:>11.3} {p90:>11.3} {:>9.1} {gbs:>9.0} {:>6.1}% {tflops:>8.2}",
                    format!("{hk}/{hv}"),
                    times[0],
                    bytes as f64 / 1e6,
                    100.0 * gbs / bw
                );
                let (out, _state) = cuda::gated_delta_rule_using(kernel, x, None, false)?;
                let mut accuracy = None;
                if let Some(want) = &truth {
                    let nh = truth_heads(hk, hv);
                    let got = host(&out.i((.., .., 0..nh, ..))?.contiguous()?)?;
                    let e = rel_l2(&got, want);
                    list.bound(
                        format!("bench {hk}/{hv} T{t} {name} vs f64 truth (heads 0..{nh})"),
                        e,
                        BENCH_BOUND,
                    );
                    accuracy = Some(e);
                }
                kernels_meta.insert(
                    label.to_string(),
                    serde_json::json!({
                        "kernel": name, "ms_median": med, "ms_min": times[0], "ms_p90": p90,
                        "ms_all": times, "gbs": gbs, "tflops": tflops,
                        "vs_truth_rel_l2": accuracy,
                    }),
                );
                summary.push((hk, hv, t, name, med, tflops));
                if kernel == RuleKernel::Default {
                    default_out = Some(out);
                }
            }
            if let (Some(dir), Some(out)) = (dir, default_out) {
                // Every file was reserved before the selftest began (bench_dir::reserve).
                let case = bench_dir::case_dir(dir, hv, t);
                write_case(
                    &case,
                    &[
                        ("q", &q),
                        ("k", &k),
                        ("v", &v),
                        ("g", &g),
                        ("beta", &beta),
                        ("hsdiff_out", &out),
                    ],
                )?;
                let default = &kernels_meta["tc"];
                let meta = serde_json::json!({
                    "B": 1, "T": t, "Hk": hk, "Hv": hv, "dk": DK, "dv": DV,
                    "dtype": "bf16", "g_dtype": "f32",
                    "hsdiff_ms_median": default["ms_median"],
                    "hsdiff_ms_min": default["ms_min"], "hsdiff_ms_p90": default["ms_p90"],
                    "hsdiff_ms_all": default["ms_all"], "hsdiff_kernel": default["kernel"],
                    "hsdiff_vs_truth_rel_l2": default["vs_truth_rel_l2"],
                    "kernels": kernels_meta,
                    "bytes_moved": bytes, "nominal_flops": nominal_flops(t, hv),
                    "copy_bw_gbs": bw, "truth_heads": truth_heads(hk, hv),
                    "implementation": cuda::implementation(),
                });
                let path = case.join(bench_dir::META_FILE);
                let json = serde_json::to_vec_pretty(&meta).map_err(|e| {
                    Error::Internal(format!("cannot encode {}: {e}", path.display()))
                })?;
                output::write_bytes(&path, &json)?;
                if let Some(tr) = &truth {
                    write_raw_f64(&case.join(bench_dir::TRUTH_FILE), tr)?;
                }
            }
        }
    }
    for (hk, hv, t, name, med, tflops) in summary {
        list.flag(
            format!("bench bf16 {hk}/{hv} T{t} {name}"),
            true,
            format!("{med:.3} ms median, {tflops:.2} TFLOP/s"),
        );
    }
    Ok(())
}

/// The f64 truth of value heads 0..truth_heads ([T, heads, dv], row-major).
#[allow(clippy::too_many_arguments)]
fn truth_out(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    t: usize,
    hk: usize,
    hv: usize,
) -> Result<Vec<f64>> {
    let (nk, nh) = (2, truth_heads(hk, hv));
    let h = |x: Tensor| -> Result<Vec<f64>> { host(&x.contiguous()?) };
    let q = h(q.i((.., .., 0..nk, ..))?)?;
    let k = h(k.i((.., .., 0..nk, ..))?)?;
    let v = h(v.i((.., .., 0..nh, ..))?)?;
    let g = h(g.i((.., .., 0..nh))?)?;
    let beta = h(beta.i((.., .., 0..nh))?)?;
    let d = cpu::GdnDims {
        batch: 1,
        seq: t,
        k_heads: nk,
        v_heads: nh,
        k_dim: DK,
        v_dim: DV,
        conv_kernel: 0,
    };
    let (out, _) =
        truth::gated_delta_rule(&q, &k, &v, &g, &beta, 1.0 / (DK as f64).sqrt(), None, &d);
    Ok(out)
}

/// Raw little-endian files `{name}.{bf16|f32}` in the folder `d` (made and reserved by
/// [`bench_dir::reserve`]).
fn write_case(d: &Path, tensors: &[(&str, &Tensor)]) -> Result<()> {
    for (name, x) in tensors {
        let x = x.flatten_all()?;
        let (ext, bytes): (&str, Vec<u8>) = match x.dtype() {
            DType::BF16 => (
                "bf16",
                x.to_vec1::<half::bf16>()?
                    .iter()
                    .flat_map(|v| v.to_bits().to_le_bytes())
                    .collect(),
            ),
            DType::F32 => (
                "f32",
                x.to_vec1::<f32>()?
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            other => return Err(Error::Internal(format!("cannot write {other:?}"))),
        };
        let file = format!("{name}.{ext}");
        if !bench_dir::CASE_FILES.contains(&file.as_str()) {
            return Err(Error::Internal(format!(
                "the bench writes {file}, which bench_dir.rs does not reserve"
            )));
        }
        output::write_bytes(&d.join(file), &bytes)?;
    }
    Ok(())
}

fn write_raw_f64(path: &Path, x: &[f64]) -> Result<()> {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    output::write_bytes(path, &bytes)
}
