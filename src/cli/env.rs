//! `hsdiff env`: this machine's fingerprint — what a dump made here would record about the
//! environment — and what every backend would run on each device.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use crate::capture::fingerprint::Fingerprint;
use crate::commands::env::{build_features, env_fingerprint};
use crate::error::Result;
use crate::printer::emit::write_stdout;
use crate::printer::{Json, Render};
use crate::util::device::DeviceName;

#[derive(Args, Debug)]
pub struct EnvArgs {
    /// Print JSON (the fingerprint's fields, plus `backends` and `build_features`).
    #[arg(long)]
    pub json: bool,

    /// The device whose facts go in the fingerprint (cpu, cuda, cuda:N).
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceName,

    /// Also record a checkpoint folder: its config, weights and tokenizer digests.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
}

pub fn run(args: &EnvArgs) -> Result<i32> {
    let fp = env_fingerprint(args.device, args.model.as_deref())?;
    if args.json {
        write_stdout(&Json.render(&fp)?)?;
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
