//! `--device` and `--dtype`: parsed, and checked to exist in this build — never substituted.

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};

/// A `--device` value as spelled: its syntax checked when it is read, the device opened only
/// when a command needs it ([`DeviceName::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceName {
    Cpu,
    /// `cuda` (None) or `cuda:N`.
    Cuda(Option<usize>),
}

impl std::str::FromStr for DeviceName {
    type Err = String;

    fn from_str(arg: &str) -> std::result::Result<DeviceName, String> {
        match arg {
            "cpu" => Ok(DeviceName::Cpu),
            "cuda" => Ok(DeviceName::Cuda(None)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceName::Cuda(Some(n))),
                _ => Err("expected cpu, cuda or cuda:N".to_string()),
            },
        }
    }
}

impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceName::Cpu => write!(f, "cpu"),
            DeviceName::Cuda(None) => write!(f, "cuda"),
            DeviceName::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceName {
    /// `arg` read as a device name, or an error naming it.
    pub fn parse(arg: &str) -> Result<DeviceName> {
        arg.parse().map_err(|msg: String| Error::device(arg, msg))
    }

    /// The device, or why this build or machine cannot open it (never substituted).
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceName::Cpu => Ok(Device::Cpu),
            DeviceName::Cuda(n) => cuda_device(&self.to_string(), n.unwrap_or(0)),
        }
    }
}

pub fn parse_device(arg: &str) -> Result<Device> {
    DeviceName::parse(arg)?.open()
}

#[cfg(feature = "cuda")]
fn cuda_device(arg: &str, ordinal: usize) -> Result<Device> {
    Device::new_cuda(ordinal).map_err(|e| {
        Error::device(
            arg,
            format!(
                "cannot open: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        )
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(arg: &str, _ordinal: usize) -> Result<Device> {
    Err(Error::device(
        arg,
        "CUDA is not in this build (rebuild with --features cuda)",
    ))
}

pub fn device_label(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(_) => match device.location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
            _ => "cuda".to_string(),
        },
        _ => format!("{:?}", device.location()),
    }
}

/// The compute dtypes a run can be asked for (`--dtype`), by [`dtype_label`]'s names.
pub const COMPUTE_DTYPES: [DType; 6] = [
    DType::F64,
    DType::F32,
    DType::BF16,
    DType::F16,
    // An FP8 checkpoint served in W8A8 (crate::fp8::serving): bf16 between layers.
    crate::fp8::serving::SERVED,
    crate::fp8::serving::SERVED_UE8M0,
];

/// The other names a compute dtype is accepted by (torch's).
pub fn dtype_aliases(dtype: DType) -> &'static [&'static str] {
    match dtype {
        DType::F64 => &["float64"],
        DType::F32 => &["float32"],
        DType::BF16 => &["bfloat16"],
        DType::F16 => &["float16"],
        _ => &[],
    }
}

/// The compute dtype `name` is the label or an alias of, if any.
pub fn dtype_named(name: &str) -> Option<DType> {
    COMPUTE_DTYPES
        .into_iter()
        .find(|&d| dtype_label(d) == name || dtype_aliases(d).contains(&name))
}

pub fn dtype_label(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        crate::fp8::serving::SERVED => "fp8",
        crate::fp8::serving::SERVED_UE8M0 => "fp8-ue8m0",
        DType::I64 => "i64",
        DType::U32 => "u32",
        DType::U8 => "u8",
        _ => "other",
    }
}

/// Surfaces an asynchronous device error now, saying what ran (`during layer 3`): CUDA kernels
/// are launched without waiting (`HSDIFF_CUDA_SYNC=1` waits after each and names the kernel).
/// A no-op on the CPU.
pub fn check_device(device: &Device, what: &str) -> Result<()> {
    if device.is_cpu() {
        return Ok(());
    }
    device.synchronize().map_err(|e| {
        Error::device(
            device_label(device),
            format!(
                "error {what}: {} (rerun with HSDIFF_CUDA_SYNC=1 to name the kernel)",
                e.to_string().lines().next().unwrap_or_default()
            ),
        )
    })
}

/// Free memory of a GPU in bytes (the driver's count for its context); `None` on the CPU or
/// when the driver cannot say.
pub fn gpu_free_bytes(device: &Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        let ctx = dev.cuda_stream().context().clone();
        return ctx.mem_get_info().ok().map(|(free, _)| free as u64);
    }
    let _ = device;
    None
}

/// `t` (on the CPU, as read from a checkpoint) converted to `dtype` on `device`. On a GPU, an
/// exact widening conversion (bf16/f16 → f32/f64, f32 → f64) runs there after the upload: fewer
/// bytes cross the bus and the host does no conversion, with identical values. Any rounding
/// conversion runs on the host first, so every device gets the host's rounding.
pub fn to_dtype_on(t: Tensor, dtype: DType, device: &Device) -> Result<Tensor> {
    let widening = dtype.size_in_bytes() > t.dtype().size_in_bytes()
        && matches!(t.dtype(), DType::BF16 | DType::F16 | DType::F32)
        && matches!(dtype, DType::F32 | DType::F64);
    if device.is_cpu() || !widening {
        return Ok(t.to_dtype(dtype)?.to_device(device)?);
    }
    Ok(t.to_device(device)?.to_dtype(dtype)?)
}
