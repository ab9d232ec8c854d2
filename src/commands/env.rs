//! `hsdiff env` without its command line: this machine's fingerprint — what a dump made here
//! would record about the environment — and what every backend would run on each device.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use serde_json::json;

use crate::backends::available_backends;
use crate::capture::fingerprint::{Fingerprint, backend_implementations, machine_fingerprint};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::util::device::{DeviceName, parse_device};

/// The features this binary was built with.
pub fn build_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "cuda") {
        f.push("cuda");
    }
    f
}

/// The devices `hsdiff env` reports backends for: the CPU, and on CUDA builds the requested
/// CUDA device (or `cuda:0`) when it opens.
fn devices(requested: &Device, label: &str) -> Vec<(String, Device)> {
    let mut out = vec![("cpu".to_string(), Device::Cpu)];
    if !matches!(requested, Device::Cpu) {
        out.push((label.to_string(), requested.clone()));
    } else if cfg!(feature = "cuda")
        && let Ok(d) = parse_device("cuda:0")
    {
        out.push(("cuda:0".to_string(), d));
    }
    out
}

/// This machine's fingerprint as `hsdiff env --json` prints it: `device`'s facts, `model`'s
/// digests when given, every backend's implementation per device, the build's features.
pub fn env_fingerprint(device: DeviceName, model: Option<&Path>) -> Result<Fingerprint> {
    let label = device.to_string();
    let device = device.open()?;
    let mut fp = machine_fingerprint(&device);
    if let Some(dir) = model {
        let model = Model::load(dir)?;
        model.fill_fingerprint(&mut fp);
    }
    // backend → device → implementation
    let mut backends: BTreeMap<String, BTreeMap<String, String>> = available_backends()
        .iter()
        .map(|b| (b.name.to_string(), BTreeMap::new()))
        .collect();
    for (label, dev) in devices(&device, &label) {
        for (name, imp) in backend_implementations(&dev) {
            backends.entry(name).or_default().insert(label.clone(), imp);
        }
    }
    let backends = serde_json::to_value(backends)
        .map_err(|e| Error::Internal(format!("cannot encode the backend list: {e}")))?;
    fp.extra.insert("backends".to_string(), backends);
    fp.extra
        .insert("build_features".to_string(), json!(build_features()));
    Ok(fp)
}
