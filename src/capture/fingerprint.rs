//! What actually ran: recorded in every dump and shown in every report, so that two captures
//! from two machines can be told apart by more than their numbers.
//!
//! The field names are a stable contract (docs/capture-pytorch.md lists them, with what each
//! holds); `hsdiff-capture` (python/) writes the same names from the PyTorch side, and anything a
//! writer records beyond them lands in [`Fingerprint::extra`].

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use candle_core::{DType, Device};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::backends::LinearAttentionBackend;
use crate::error::Result;
use crate::weights::checkpoint::Checkpoint;

/// The record stored as JSON under the `hsdiff` key of a dump's safetensors metadata.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Fingerprint {
    /// `hsdiff.dump/v1`
    pub format: String,
    /// Who wrote the dump: `hsdiff`, `pytorch` (hsdiff-capture) or `transformers`
    /// (golden/make.py).
    pub source: String,
    /// hsdiff's version (hsdiff dumps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// The git commit hsdiff was built from, or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// The linear-attention backend asked for (`reference`, `fused`, …; `transformers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The implementation that ran, e.g. `fused/cpu-rayon-2t-avx512`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// Compute dtype: `f64`, `f32`, `bf16`, `f16` (PyTorch writers: `float32`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// `cpu`, `cuda:0`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// What the device is: the CPU model on `cpu`, the GPU name on `cuda:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The CPU model (from /proc/cpuinfo), whatever the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// SIMD features the CPU reports at run time (`avx2`, `fma`, `avx512f`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_features: Option<Vec<String>>,
    /// Worker threads of the CPU kernels (rayon; torch.get_num_threads() on the PyTorch side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// NVIDIA kernel driver version (from /proc/driver/nvidia/version), where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_driver: Option<String>,
    /// CUDA version: the driver API's on `cuda:N` devices (hsdiff), torch.version.cuda (PyTorch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// Compute capability of the GPU, e.g. `9.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `linux-x86_64`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// The model folder (or `built-in tiny Qwen3.5`; golden files: the golden model's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the decoder layers were read from: `model.language_model.layers.*` (hsdiff: the
    /// checkpoint key prefix; PyTorch: the module path hooked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_layout: Option<String>,
    /// SHA-256 of config.json's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// MoE models: experts per MoE layer (config.json's `num_experts`); the router choices a
    /// file carries are checked against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts: Option<usize>,
    /// MoE models: experts chosen per token (config.json's `num_experts_per_tok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<usize>,
    /// `sampled-sha256-v1:<hex>`: see [`weights_digest`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_digest: Option<String>,
    /// SHA-256 of tokenizer.json's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_sha256: Option<String>,
    /// Number of tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// SHA-256 of the token ids as little-endian u32s (the same as the report's
    /// `inputs.token_ids_sha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids_sha256: Option<String>,
    /// The prompt as given: a built-in prompt's name, `@FILE`, or the text; absent for `--tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// When the dump was written, UTC, RFC 3339 (`2026-05-01T12:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Anything else the writer recorded (PyTorch-side versions, kernel availability, …).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl crate::util::json_doc::JsonDocument for Fingerprint {
    const WHAT: &'static str = "the fingerprint";
}

pub const DUMP_FORMAT: &str = "hsdiff.dump/v1";

/// Prefix of [`weights_digest`] values: names the method, so that a later method can never be
/// mistaken for this one.
pub const WEIGHTS_DIGEST_METHOD: &str = "sampled-sha256-v1";

/// Tensors up to this size are hashed whole.
const DIGEST_WHOLE_BELOW: usize = 64 << 10;
/// Larger tensors: a window of this many bytes …
const DIGEST_WINDOW: usize = 4 << 10;
/// … every this many bytes, plus the last window.
const DIGEST_STRIDE: usize = 1 << 20;

pub fn tool_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// The git commit this binary was built from (build.rs), or `unknown`.
pub fn git_commit() -> String {
    env!("HSDIFF_GIT_COMMIT").to_string()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// SHA-256 of the ids as little-endian u32s.
pub fn token_ids_sha256(ids: &[u32]) -> String {
    let mut sha = Sha256::new();
    for id in ids {
        sha.update(id.to_le_bytes());
    }
    format!("{:x}", sha.finalize())
}

/// A fast digest of a checkpoint's weights, independent of how they are split into shards and of
/// the order of the safetensors headers. SHA-256 over, for every tensor in name order: the name,
/// a NUL, the dtype, the shape, the data length, then the data — whole for tensors up to 64 KiB,
/// otherwise a 4 KiB window every 1 MiB (offsets 0, 1 Mi, 2 Mi, … while the window fits) plus the
/// last 4 KiB. It reads ~0.4 % of a large checkpoint: it catches any change of dtype, shape,
/// name or of whole tensors (fine-tuning, a different checkpoint, a different quantisation),
/// not a change confined to bytes between windows. Value: `sampled-sha256-v1:<hex>`.
pub fn weights_digest(checkpoint: &Checkpoint) -> Result<String> {
    // Without this, each sampled page pulls in the device's whole readahead window (8 MiB on
    // some VMs), i.e. the entire file.
    checkpoint.advise_random(true);
    let digest = sampled_digest(checkpoint);
    checkpoint.advise_random(false);
    digest
}

fn sampled_digest(checkpoint: &Checkpoint) -> Result<String> {
    let mut sha = Sha256::new();
    for (name, raw) in checkpoint.raw_tensors() {
        let (info, data) = raw?;
        sha.update(name.as_bytes());
        sha.update([0u8]);
        sha.update(format!("{:?}", info.dtype).as_bytes());
        sha.update((info.shape.len() as u64).to_le_bytes());
        for d in &info.shape {
            sha.update((*d as u64).to_le_bytes());
        }
        sha.update((data.len() as u64).to_le_bytes());
        if data.len() <= DIGEST_WHOLE_BELOW {
            sha.update(data);
            continue;
        }
        let last = data.len() - DIGEST_WINDOW;
        let mut off = 0;
        while off < last {
            sha.update(&data[off..off + DIGEST_WINDOW]);
            off += DIGEST_STRIDE;
        }
        sha.update(&data[last..]);
    }
    Ok(format!("{WEIGHTS_DIGEST_METHOD}:{:x}", sha.finalize()))
}

/// Now, UTC, RFC 3339 with seconds.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Facts about this machine and the device a run uses.
#[derive(Debug, Clone, Default)]
pub struct MachineInfo {
    pub device_name: Option<String>,
    pub cpu: Option<String>,
    pub cpu_features: Vec<String>,
    pub threads: usize,
    pub gpu_driver: Option<String>,
    pub cuda_version: Option<String>,
    pub gpu_compute_capability: Option<String>,
    pub hostname: Option<String>,
    pub os: String,
}

impl MachineInfo {
    pub fn collect(device: &Device) -> Self {
        let cpu = cpu_model();
        let mut info = MachineInfo {
            device_name: None,
            cpu: cpu.clone(),
            cpu_features: cpu_features(),
            threads: rayon::current_num_threads(),
            gpu_driver: nvidia_driver(),
            cuda_version: None,
            gpu_compute_capability: None,
            hostname: hostname(),
            os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        };
        match device {
            Device::Cpu => info.device_name = cpu,
            _ => gpu_info(device, &mut info),
        }
        info
    }

    /// Writes these facts into a fingerprint.
    pub fn fill(&self, fp: &mut Fingerprint) {
        fp.device_name = self.device_name.clone();
        fp.cpu = self.cpu.clone();
        fp.cpu_features = Some(self.cpu_features.clone());
        fp.threads = Some(self.threads);
        fp.gpu_driver = self.gpu_driver.clone();
        fp.cuda_version = self.cuda_version.clone();
        fp.gpu_compute_capability = self.gpu_compute_capability.clone();
        fp.hostname = self.hostname.clone();
        fp.os = Some(self.os.clone());
    }
}

#[cfg(feature = "cuda")]
fn gpu_info(device: &Device, info: &mut MachineInfo) {
    if let Device::Cuda(dev) = device {
        let stream = dev.cuda_stream();
        let ctx = stream.context();
        info.device_name = ctx.name().ok();
        info.gpu_compute_capability = ctx
            .compute_capability()
            .ok()
            .map(|(major, minor)| format!("{major}.{minor}"));
        let mut v: std::ffi::c_int = 0;
        // SAFETY: cuDriverGetVersion writes one int; the driver is initialised (a context exists).
        let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            info.cuda_version = Some(format!("{}.{}", v / 1000, v % 1000 / 10));
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn gpu_info(_device: &Device, _info: &mut MachineInfo) {}

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn cpu_model() -> Option<String> {
    crate::util::sysinfo::CpuInfo::read()?.model
}

fn hostname() -> Option<String> {
    read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| read_trimmed("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
}

/// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  …" → `580.65.06`.
fn nvidia_driver() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    let rest = line.split("Kernel Module").nth(1)?;
    rest.split_whitespace().next().map(str::to_string)
}

#[cfg(target_arch = "x86_64")]
fn cpu_features() -> Vec<String> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {
            $( if std::arch::is_x86_feature_detected!($f) { out.push($f.to_string()); } )*
        };
    }
    probe!(
        "sse4.2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512vnni",
        "avx512bf16",
        "avx512fp16"
    );
    out
}

#[cfg(target_arch = "aarch64")]
fn cpu_features() -> Vec<String> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {
            $( if std::arch::is_aarch64_feature_detected!($f) { out.push($f.to_string()); } )*
        };
    }
    probe!("neon", "fp16", "bf16", "sve", "sve2", "i8mm", "dotprod");
    out
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn cpu_features() -> Vec<String> {
    Vec::new()
}

/// Every registered backend's implementation on `device` (or why it cannot run there).
pub fn backend_implementations(device: &Device) -> BTreeMap<String, String> {
    crate::backends::available_backends()
        .iter()
        .map(|info| {
            let imp = match crate::backends::backend_by_name(info.name, device) {
                Ok(b) => b.implementation(device),
                Err(e) => format!("unavailable: {e}"),
            };
            (info.name.to_string(), imp)
        })
        .collect()
}

/// The fingerprint of this machine alone (no run): what `hsdiff env` prints.
pub fn machine_fingerprint(device: &Device) -> Fingerprint {
    let mut fp = Fingerprint {
        format: DUMP_FORMAT.to_string(),
        source: "hsdiff".to_string(),
        tool_version: Some(tool_version()),
        git_commit: Some(git_commit()),
        device: Some(crate::util::device::device_label(device)),
        created: Some(now_rfc3339()),
        ..Default::default()
    };
    MachineInfo::collect(device).fill(&mut fp);
    fp
}

/// What a run of `backend` at `dtype` on `device` over the token ids `ids` is: this machine and
/// the run's settings. The model's part is added by [`crate::model::Model::fill_fingerprint`].
pub fn run_fingerprint(
    backend: &dyn LinearAttentionBackend,
    device: &Device,
    dtype: DType,
    ids: &[u32],
    prompt: Option<String>,
) -> Fingerprint {
    let mut fp = machine_fingerprint(device);
    fp.backend = Some(backend.name().to_string());
    fp.implementation = Some(backend.implementation(device));
    fp.dtype = Some(crate::util::device::dtype_label(dtype).to_string());
    fp.tokens = Some(ids.len());
    fp.token_ids_sha256 = Some(token_ids_sha256(ids));
    fp.prompt = prompt;
    fp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_shape() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
    }

    #[test]
    fn token_hash_is_u32_le() {
        // sha256 of [1,0,0,0, 2,0,0,0]
        assert_eq!(
            token_ids_sha256(&[1, 2]),
            sha256_hex(&[1, 0, 0, 0, 2, 0, 0, 0])
        );
    }
}
