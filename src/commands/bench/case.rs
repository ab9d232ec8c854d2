//! One measured case in this process (`hsdiff bench case`, what the parent runs in a child so
//! that the peak RSS is the case's own): read the inputs, time `warmup + repeats` calls, write
//! the last output for the agreement check, and report a [`Measurement`].

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};

use super::protocol::Measurement;
use crate::backends::{DeltaInputs, LinearAttentionBackend, backend_by_name};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::model::{Bf16Kernel, Model, RunOptions, WideKernel, product_flops};
use crate::util::progress::Progress;
use crate::util::sysinfo::own_status_kib;
use crate::weights::safetensors_file::SafetensorsFile;

/// What a case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseKind {
    /// The gated delta rule on q, k, v, g, beta; output `out`.
    Core,
    /// The whole prefill forward pass on `input_ids`; output `logits`.
    Forward,
}

impl CaseKind {
    /// What `--kind` says for this kind (the parent writes it, the case's command line reads it).
    pub fn label(self) -> &'static str {
        match self {
            CaseKind::Core => "core",
            CaseKind::Forward => "forward",
        }
    }
}

/// One case as the parent asks for it.
#[derive(Debug, Clone)]
pub struct CaseRequest {
    pub kind: CaseKind,
    pub backend: String,
    /// The inputs file (core: q, k, v, g, beta; forward: input_ids).
    pub inputs: PathBuf,
    /// Where the output goes (core: `out`; forward: `logits`).
    pub out: PathBuf,
    /// Forward only: the checkpoint folder.
    pub model: Option<PathBuf>,
    /// Forward only: the compute dtype.
    pub dtype: DType,
    pub repeats: usize,
    pub warmup: usize,
}

/// Times the timed calls of `call` after the warm-up ones; returns the times and the last result.
fn time_calls<T>(
    warmup: usize,
    repeats: usize,
    mut call: impl FnMut() -> Result<T>,
) -> Result<(Vec<f64>, Option<T>)> {
    let mut times = Vec::with_capacity(repeats);
    let mut last = None;
    for i in 0..warmup + repeats {
        let start = Instant::now();
        let out = call()?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if i >= warmup {
            times.push(ms);
        }
        last = Some(out);
    }
    Ok((times, last))
}

/// Runs the case and writes its output; the measurement is what the parent reads back.
pub fn run_case(req: &CaseRequest) -> Result<Measurement> {
    // Before any work, by the one output policy: the output is none of the case's inputs.
    let mut inputs = vec![req.inputs.as_path()];
    inputs.extend(req.model.as_deref());
    crate::util::output::reserve_all(&[(&req.out, "--out")], &inputs)?;
    let cpu = Device::Cpu;
    let backend = backend_by_name(&req.backend, &cpu)?;
    let mut implementation = backend.implementation(&cpu);
    if req.kind == CaseKind::Forward {
        implementation = match (req.dtype, WideKernel::chosen()) {
            (DType::BF16, _) => format!(
                "{implementation}, bf16 GEMM {}",
                Bf16Kernel::chosen().name()
            ),
            (DType::F32 | DType::F64, Some(k)) => {
                format!("{implementation}, products on bf16 weights {}", k.name())
            }
            _ => implementation,
        };
    }
    let mut flops_per_call = None;
    let (times_ms, rss_before_kib, output, out) = match req.kind {
        CaseKind::Core => {
            let inputs = load_core_inputs(req)?;
            let rss_before = own_status_kib("VmRSS");
            let (times, last) = time_calls(req.warmup, req.repeats, || {
                Ok(backend
                    .gated_delta_rule(DeltaInputs::from(&inputs), None)?
                    .0)
            })?;
            (times, rss_before, "out", last)
        }
        CaseKind::Forward => {
            let dir = req.model.as_ref().ok_or_else(|| {
                Error::argument("--model", "bench case --kind forward needs --model")
            })?;
            let model = Model::load(dir)?;
            // As in a live run: the warm-up pass reads (and packs) the weights, the timed passes
            // reuse them — transformers' timed forwards also start from loaded weights.
            model.keep_weights(req.dtype, &cpu);
            let ids = load_input_ids(req)?;
            let rss_before = own_status_kib("VmRSS");
            let flops_before = product_flops();
            let (times, last) = time_calls(req.warmup, req.repeats, || {
                run_forward(&model, &ids, req.dtype, backend.as_ref())
            })?;
            // Every call runs the same products.
            let calls = (req.warmup + req.repeats) as f64;
            flops_per_call = Some((product_flops() - flops_before) as f64 / calls);
            (times, rss_before, "logits", last.flatten())
        }
    };
    if let Some(out) = out {
        crate::util::output::write_with(&req.out, |file| {
            crate::weights::safetensors_file::write_tensors(&req.out, file, &[(output, &out)], None)
        })?;
    }
    Ok(Measurement {
        name: req.backend.clone(),
        implementation,
        times_ms,
        rss_before_kib,
        peak_rss_kib: own_status_kib("VmHWM"),
        output: output.to_string(),
        threads: Some(candle_core::utils::get_num_threads()),
        product_flops: flops_per_call,
    })
}

/// q, k, v, g, beta; the file is unmapped before the RSS is read.
fn load_core_inputs(req: &CaseRequest) -> Result<[Tensor; 5]> {
    let file = SafetensorsFile::open(&req.inputs)?;
    Ok([
        file.load("q")?,
        file.load("k")?,
        file.load("v")?,
        file.load("g")?,
        file.load("beta")?,
    ])
}

fn load_input_ids(req: &CaseRequest) -> Result<Vec<u32>> {
    let file = SafetensorsFile::open(&req.inputs)?;
    let ids = file.load(&Key::InputIds.to_string())?;
    let bad = |msg: String| Error::tensor(&req.inputs, Key::InputIds, msg);
    if ids.dtype() != DType::I64 {
        return Err(bad(format!("must be int64, not {:?}", ids.dtype())));
    }
    ids.flatten_all()?
        .to_vec1::<i64>()?
        .into_iter()
        .map(|i| u32::try_from(i).map_err(|_| bad(format!("id {i} out of u32 range"))))
        .collect()
}

fn run_forward(
    model: &Model,
    ids: &[u32],
    dtype: DType,
    backend: &dyn LinearAttentionBackend,
) -> Result<Option<Tensor>> {
    let opts = RunOptions {
        dtype,
        device: Device::Cpu,
        backend,
    };
    let caps = model.run(ids, &opts, &Progress::hidden())?;
    Ok(caps.get(Key::Logits).cloned())
}
