//! `hsdiff env`: this machine's fingerprint — what a dump made here would record about the
//! environment — and what every backend would run on each device.

use std::collections::BTreeMap;
use std::path::PathBuf;

use candle_core::Device;
use clap::Args;
use serde_json::{Value, json};

use crate::backends::available_backends;
use crate::device::parse_device;
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, backend_implementations, machine_fingerprint};
use crate::model::Model;

#[derive(Args, Debug)]
pub struct EnvArgs {
    /// Print JSON (the fingerprint's fields, plus `backends` and `build_features`).
    #[arg(long)]
    pub json: bool,

    /// The device whose facts go in the fingerprint (cpu, cuda, cuda:N).
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,

    /// Also record a checkpoint folder: its config, weights and tokenizer digests.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
}

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

/// This machine's fingerprint as `hsdiff env --json` prints it.
pub fn env_fingerprint(args: &EnvArgs) -> Result<Fingerprint> {
    let device = parse_device(&args.device)?;
    let mut fp = machine_fingerprint(&device);
    if let Some(dir) = &args.model {
        let model = Model::load(dir)?;
        model.fill_fingerprint(&mut fp);
    }
    // backend → device → implementation
    let mut backends: BTreeMap<String, BTreeMap<String, String>> = available_backends()
        .iter()
        .map(|b| (b.name.to_string(), BTreeMap::new()))
        .collect();
    for (label, dev) in devices(&device, &args.device) {
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

pub fn run(args: &EnvArgs) -> Result<i32> {
    let fp = env_fingerprint(args)?;
    if args.json {
        let text = serde_json::to_string_pretty(&fp)
            .map_err(|e| Error::Internal(format!("cannot encode the fingerprint: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", human(&fp));
    }
    Ok(0)
}

/// `key  value` lines in a fixed order, then the backends.
pub fn human(fp: &Fingerprint) -> String {
    let opt = |x: &Option<String>| x.clone();
    let rows: Vec<(&str, Option<String>)> = vec![
        ("hsdiff", opt(&fp.tool_version)),
        ("git commit", opt(&fp.git_commit)),
        ("build features", {
            let f = build_features();
            Some(if f.is_empty() {
                "(none)".to_string()
            } else {
                f.join(", ")
            })
        }),
        ("hostname", opt(&fp.hostname)),
        ("os", opt(&fp.os)),
        ("cpu", opt(&fp.cpu)),
        (
            "cpu features",
            fp.cpu_features.as_ref().map(|f| f.join(" ")),
        ),
        ("threads", fp.threads.map(|t| t.to_string())),
        ("device", opt(&fp.device)),
        ("device name", opt(&fp.device_name)),
        ("gpu driver", opt(&fp.gpu_driver)),
        ("cuda version", opt(&fp.cuda_version)),
        ("compute capability", opt(&fp.gpu_compute_capability)),
        ("model", opt(&fp.model)),
        ("key layout", opt(&fp.key_layout)),
        ("config sha256", opt(&fp.config_sha256)),
        ("weights digest", opt(&fp.weights_digest)),
        ("tokenizer sha256", opt(&fp.tokenizer_sha256)),
        ("created", opt(&fp.created)),
    ];
    let mut out = String::new();
    for (k, v) in rows {
        if let Some(v) = v {
            out.push_str(&format!("{k:<20} {v}\n"));
        }
    }
    if let Some(Value::Object(backends)) = fp.extra.get("backends") {
        out.push_str("backends\n");
        for (name, per_device) in backends {
            if let Value::Object(per_device) = per_device {
                for (dev, imp) in per_device {
                    let imp = imp.as_str().unwrap_or_default();
                    out.push_str(&format!("  {name:<10} {dev:<8} {imp}\n"));
                }
            }
        }
    }
    out
}
