//! CUDA kernels of the `fused` backend (`gdn.cu` next to this file, compiled to PTX for sm_90
//! by build.rs and loaded once per device): causal conv + SiLU, the chunked gated delta rule
//! with the q/k L2 norm, scale and gates fused in, and the gated RMSNorm. Precision: the storage
//! dtype in and out, f32 sums and f32 state (f64 throughout for f64), one rounding per step.
//!
//! Two delta-rule kernels: bf16 with dk ≤ 128 runs `gdn_chunk_tc_bf16` (tensor cores, f32
//! operands carried as bf16 hi + lo, so it keeps the exact kernel's accuracy); every other case
//! runs the exact f32/f64 SIMT kernel `gdn_chunk_*`. [`implementation`] states this rule, and
//! [`delta_rule_kernel`] names the kernel a call runs.
//!
//! Launches are asynchronous: an asynchronous fault surfaces at the next synchronisation (the
//! forward checks the device after every layer, [`crate::util::device::check_device`], and every
//! read-back checks too). `HSDIFF_CUDA_SYNC=1` synchronises the stream after every launch
//! instead, so that a fault is reported by the kernel that caused it, by name (debugging; it
//! costs a host round trip per launch). Inputs are made contiguous first; outputs are fresh
//! buffers, optionally NaN-poisoned (`poison`) so that a test can prove every element was written.
//!
//! `shell` holds two kernels for code outside this backend: the gate of the layer shell and the
//! `reference` backend's recurrence, and the MoE router's ranking.
//!
//! The kernels' logic can be run without a GPU through `scripts/cuda-emu-test.sh`.
//!
//! By job: `launch` the host side of every launch (inputs, output buffers, the launch and its
//! optional sync); `conv_norm` the conv + SiLU and gated RMSNorm kernels; `rule` the delta
//! rule; `layer_core` the fused layer core (conv, then the rule on its output); `shell` the
//! kernels for code outside this backend; `timing` the bench's CUDA-event timing.

mod conv_norm;
mod launch;
mod layer_core;
mod rule;
mod shell;
mod timing;
pub use conv_norm::{conv1d_silu, gated_rms_norm};
pub use launch::{SYNC_ENV, sync_every_launch};
pub use layer_core::fused_core;
pub use rule::{gated_delta_rule, gated_delta_rule_using, gdn_shared_bytes, gdn_tc_shared_bytes};
pub use shell::{RANK_MAX, log_decay, recurrent_rule, router_rank};
pub use timing::{copy_bandwidth_gbs, time_ms};

use candle_core::cuda_backend::CudaDType;
use candle_core::cuda_backend::cudarc::driver::DeviceRepr;
use candle_core::{DType, WithDType};

use crate::error::Error;

/// The kernels, as PTX text (nvcc -ptx at build time).
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gdn.ptx"));
const MODULE: &str = "hsdiff_fused_gdn";
const NAME: &str = "fused";
/// Threads per block of the delta-rule kernels and value columns per block (gdn.cu; the same
/// for the exact and the tensor-core kernel).
const GDN_THREADS: u32 = 256;
const DVT: usize = 32;
/// Largest dk of the tensor-core kernel (`TC_DKMAX` in gdn.cu: its state registers).
pub const TC_MAX_DK: usize = 128;
const TC_CHUNK: usize = 64;
const L2NORM_EPS_NOTE: &str = "q/k L2 norm eps 1e-6 (fixed in gdn.cu)";

/// What `--device cuda` runs for the fused backend.
pub fn implementation() -> String {
    format!(
        "fused/cuda-ptx-sm90 (chunk 64; delta rule: bf16 with dk <= {TC_MAX_DK} on the tensor \
         cores (gdn_chunk_tc_bf16: mma.sync bf16, f32 accumulation and state, f32 operands as \
         bf16 hi+lo), all else the exact f32/f64 kernel (gdn_chunk_*); {L2NORM_EPS_NOTE})"
    )
}

/// Which delta-rule kernel a call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKernel {
    /// The tensor-core kernel where it applies (bf16, dk ≤ [`TC_MAX_DK`]), else the exact one:
    /// what the backend runs.
    Default,
    /// The exact f32/f64 SIMT kernel whatever the dtype (the bench's comparison).
    Exact,
}

/// The name of the delta-rule kernel `kernel` runs for storage type `T` and head dim `dk`.
pub fn delta_rule_kernel<T: Kernel>(kernel: RuleKernel, dk: usize) -> String {
    if uses_tensor_cores(kernel, T::DTYPE, dk) {
        "gdn_chunk_tc_bf16".to_string()
    } else {
        format!("gdn_chunk_{}", T::SUFFIX)
    }
}

fn uses_tensor_cores(kernel: RuleKernel, dtype: DType, dk: usize) -> bool {
    kernel == RuleKernel::Default && dtype == DType::BF16 && dk <= TC_MAX_DK
}

fn err(msg: impl Into<String>) -> Error {
    Error::backend(NAME, msg)
}

/// Storage types the kernels exist for, with their accumulation type and chunk length.
pub trait Kernel: CudaDType + DeviceRepr + WithDType {
    const SUFFIX: &'static str;
    /// Tokens per chunk of the delta-rule kernel (64; 32 in f64 to keep shared memory equal).
    const CHUNK: usize;
    type Acc: CudaDType + DeviceRepr + WithDType;
}
impl Kernel for half::bf16 {
    const SUFFIX: &'static str = "bf16";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for half::f16 {
    const SUFFIX: &'static str = "f16";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for f32 {
    const SUFFIX: &'static str = "f32";
    const CHUNK: usize = 64;
    type Acc = f32;
}
impl Kernel for f64 {
    const SUFFIX: &'static str = "f64";
    const CHUNK: usize = 32;
    type Acc = f64;
}
