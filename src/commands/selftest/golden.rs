//! Step 2: the built-in model on the device, every backend, f32 and f64, against the float64
//! golden states.

use std::path::Path;

use candle_core::{DType, Device};

use super::{Checklist, host};
use crate::backends::{available_backends, backend_by_name};
use crate::capture::Key;
use crate::capture::dump::Dump;
use crate::compare::metrics::stats::rel_l2;
use crate::error::{Error, Result};
use crate::model::builtin;
use crate::model::{Model, RunOptions};
use crate::util::device::dtype_label;
use crate::util::progress::Progress;

/// Largest rel L2 against the f64 golden states per compute dtype (the bounds of
/// tests/model/golden_parity.rs).
const BOUNDS: [(DType, f64); 2] = [(DType::F32, 1e-5), (DType::F64, 1e-10)];

/// Built-in model on `device`, every backend, f32 and f64, against each
/// `{golden}/qwen3_5_tiny/{prompt}.f64.safetensors`.
pub(super) fn check(device: &Device, golden: &Path, list: &mut Checklist) -> Result<()> {
    let dir = golden.join("qwen3_5_tiny");
    if !dir.is_dir() {
        return Err(Error::file(
            &dir,
            "no such folder: pass --golden DIR, the repository's golden/states folder",
        ));
    }
    let mut prompts: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| Error::io(&dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_suffix(".f64.safetensors")
                .map(str::to_string)
        })
        .collect();
    prompts.sort();
    if prompts.is_empty() {
        return Err(Error::file(&dir, "holds no *.f64.safetensors"));
    }
    let model = builtin::model()?;
    for prompt in &prompts {
        let path = dir.join(format!("{prompt}.f64.safetensors"));
        let dump = Dump::open(&path)?;
        let ids = dump.required_input_ids()?;
        let mut truth = Vec::new();
        for name in dump.names() {
            let t = dump.tensor(&name)?;
            if t.dtype().is_float() {
                let key = name
                    .parse::<Key>()
                    .map_err(|e| Error::tensor(&path, &name, e.to_string()))?;
                truth.push((key, host(&t)?));
            }
        }
        // A golden file that lacks a state is no evidence for it: every one must be there.
        let missing = missing_states(&model, &truth);
        if !missing.is_empty() {
            list.error(
                format!("golden {prompt}"),
                &Error::file(
                    &path,
                    format!(
                        "lacks the golden state(s) {}: a golden file holds embed, every layers.N, final_norm and logits",
                        missing.join(", ")
                    ),
                ),
            );
            continue;
        }
        for info in available_backends() {
            for (dtype, bound) in BOUNDS {
                let label = format!("golden {prompt} {} {}", dtype_label(dtype), info.name);
                match run(&model, &ids, dtype, device, info.name, &truth) {
                    Ok((worst, name)) => list.bound_note(label, worst, bound, name),
                    Err(e) => list.error(label, &e),
                }
            }
        }
    }
    Ok(())
}

/// The hidden states a run of `model` captures that `truth` does not hold.
fn missing_states(model: &Model, truth: &[(Key, Vec<f64>)]) -> Vec<String> {
    let expected = std::iter::once(Key::Embed)
        .chain((0..model.config.num_hidden_layers).map(Key::Layer))
        .chain([Key::FinalNorm, Key::Logits]);
    expected
        .filter(|k| !truth.iter().any(|(t, _)| t == k))
        .map(String::from)
        .collect()
}

/// Largest rel L2 over the golden tensors, and which tensor it was.
fn run(
    model: &Model,
    ids: &[u32],
    dtype: DType,
    device: &Device,
    backend: &str,
    truth: &[(Key, Vec<f64>)],
) -> Result<(f64, String)> {
    let b = backend_by_name(backend, device)?;
    let opts = RunOptions {
        dtype,
        device: device.clone(),
        backend: b.as_ref(),
    };
    let caps = model.run(ids, &opts, &Progress::hidden())?;
    let (mut worst, mut which) = (0.0f64, String::new());
    for &(key, ref want) in truth {
        let got = caps
            .get(key)
            .ok_or_else(|| Error::Internal(format!("the run captured no `{key}`")))?;
        let e = rel_l2(&host(got)?, want);
        if e.is_nan() || e > worst {
            worst = e;
            which = key.to_string();
            if e.is_nan() {
                break;
            }
        }
    }
    Ok((worst, which))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_golden_folder_is_refused_naming_the_flag() {
        // The default (golden/states) is relative: run elsewhere than a checkout's root, it is
        // absent, and the message must say which flag to pass.
        let mut list = Checklist::default();
        let e = check(&Device::Cpu, Path::new("no/such/golden/states"), &mut list)
            .expect_err("refused");
        assert!(e.to_string().contains("pass --golden DIR"), "{e}");
    }
}
