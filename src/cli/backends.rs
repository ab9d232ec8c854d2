//! `hsdiff backends`: every registered linear-attention backend, and for each device kind what
//! it would run there or why it cannot. Everything shown comes from the backends themselves
//! (`implementation()`, `check_device()`) and from `--device` parsing; nothing is restated here.

use candle_core::Device;

use crate::backends::{available_backends, implementation_on};
use crate::error::{Error, Result, RunError};
use crate::util::device::parse_device;

/// The device kinds hsdiff knows, by the `--device` spelling that opens the first of each.
const DEVICE_KINDS: &[(&str, &str)] = &[("cpu", "cpu"), ("cuda", "cuda:0")];

pub fn run() -> Result<i32> {
    // Open each device kind once; an unavailable kind carries its reason for every backend.
    let devices: Vec<(&str, std::result::Result<Device, String>)> = DEVICE_KINDS
        .iter()
        .map(|&(kind, spec)| (kind, parse_device(spec).map_err(|e| reason(&e))))
        .collect();
    let name_width = available_backends()
        .iter()
        .map(|b| b.name.len())
        .max()
        .unwrap_or(0);
    let kind_width = DEVICE_KINDS.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (i, info) in available_backends().iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("{:<name_width$}  {}", info.name, info.description);
        for (kind, device) in &devices {
            let line = match device {
                Ok(device) => match implementation_on(info.name, device) {
                    Ok(implementation) => implementation,
                    Err(e) => format!("unavailable: {}", reason(&e)),
                },
                Err(why) => format!("unavailable: {why}"),
            };
            let label = format!("{kind}:");
            println!("{:<name_width$}    {label:<kind_width$} {line}", "");
        }
    }
    Ok(0)
}

/// The part of an error that says why, without the `backend `x`:` / `device `y`:` prefix the
/// listing already shows.
fn reason(e: &Error) -> String {
    match e {
        Error::Run(RunError::Backend { msg, .. } | RunError::Device { msg, .. }) => msg.clone(),
        other => other.to_string(),
    }
}
