//! `--device` and `--dtype`: parsed, and checked to exist in this build — never substituted.

use candle_core::{DType, Device};

use crate::error::{Error, Result};

pub fn parse_device(arg: &str) -> Result<Device> {
    let ordinal = match arg {
        "cpu" => return Ok(Device::Cpu),
        "cuda" => 0,
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => n,
            _ => {
                return Err(Error::Device {
                    device: arg.to_string(),
                    msg: "expected cpu, cuda or cuda:N".to_string(),
                });
            }
        },
    };
    cuda_device(arg, ordinal)
}

#[cfg(feature = "cuda")]
fn cuda_device(arg: &str, ordinal: usize) -> Result<Device> {
    Device::new_cuda(ordinal).map_err(|e| Error::Device {
        device: arg.to_string(),
        msg: format!(
            "cannot open: {}",
            e.to_string().lines().next().unwrap_or_default()
        ),
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(arg: &str, _ordinal: usize) -> Result<Device> {
    Err(Error::Device {
        device: arg.to_string(),
        msg: "CUDA is not in this build (rebuild with --features cuda)".to_string(),
    })
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

pub fn parse_dtype(arg: &str) -> Result<DType> {
    match arg {
        "f64" | "float64" => Ok(DType::F64),
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        other => Err(Error::argument(
            "--dtype",
            format!("unknown dtype `{other}` (expected f64, f32, bf16 or f16)"),
        )),
    }
}

pub fn dtype_label(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::I64 => "i64",
        DType::U32 => "u32",
        DType::U8 => "u8",
        _ => "other",
    }
}
