//! Weights kept in memory across the forward passes of one run (A, B and the floor run share the
//! compute dtype), so that each tensor is read and converted once instead of once per pass —
//! only where the whole model fits comfortably: a model bigger than memory keeps streaming.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::{DType, Device, DeviceLocation, Tensor};

use super::bf16_gemm::PackedBf16;
use crate::error::Result;

#[derive(Default)]
pub struct WeightCache {
    /// The dtype and device whose tensors are kept; unset: nothing is kept.
    kept: OnceLock<(DType, DeviceLocation)>,
    tensors: Mutex<HashMap<String, Tensor>>,
    /// Linear layers' bf16 weights on the CPU, kept packed for the products with bf16 weights
    /// (instead of as tensors: the packed form is what every pass needs whatever its dtype —
    /// the bf16, f32 and f64 passes of a live run share it — and it is the bf16 size).
    packed: Mutex<HashMap<String, Arc<PackedBf16>>>,
}

impl WeightCache {
    /// Keep `dtype`'s tensors from now on when `bytes` (the whole model in that dtype) is at most
    /// half of the memory available now on `device` (host memory, or the GPU's free memory: the
    /// weights are then uploaded and converted once per run). Returns whether they will be kept.
    pub fn keep(&self, dtype: DType, device: &Device, bytes: u64) -> bool {
        let avail = if device.is_cpu() {
            available_memory_bytes()
        } else {
            crate::util::device::gpu_free_bytes(device)
        };
        let fits = avail.is_some_and(|avail| bytes <= avail / 2);
        fits && self.kept.set((dtype, device.location())).is_ok()
    }

    /// Whether `dtype`'s tensors on `device` are kept.
    fn keeps(&self, dtype: DType, device: &Device) -> bool {
        self.kept.get() == Some(&(dtype, device.location()))
    }

    /// The tensor under `key` in `dtype` on `device`: kept from an earlier pass, or made by
    /// `load` (and kept when `dtype` and `device` are the kept ones).
    pub fn get_or_load(
        &self,
        key: &str,
        dtype: DType,
        device: &Device,
        load: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor> {
        if !self.keeps(dtype, device) {
            return load();
        }
        get_or_insert(&self.tensors, key, load)
    }

    /// The bf16 weight under `key` packed for the products with bf16 weights on the CPU: kept
    /// from an earlier pass, or made by `pack` (and kept when this cache keeps a dtype on the
    /// CPU: the packed weights are never larger than the bf16 ones).
    pub fn get_or_pack(
        &self,
        key: &str,
        pack: impl FnOnce() -> Result<PackedBf16>,
    ) -> Result<Arc<PackedBf16>> {
        let pack = || pack().map(Arc::new);
        if self
            .kept
            .get()
            .is_none_or(|(_, at)| *at != DeviceLocation::Cpu)
        {
            return pack();
        }
        get_or_insert(&self.packed, key, pack)
    }
}

/// The value under `key` in `map`, made by `make` and inserted when missing. The lock is not held
/// while `make` runs (reading a weight can take seconds).
fn get_or_insert<T: Clone>(
    map: &Mutex<HashMap<String, T>>,
    key: &str,
    make: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let lock = || map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = lock().get(key) {
        return Ok(v.clone());
    }
    let v = make()?;
    lock().insert(key.to_string(), v.clone());
    Ok(v)
}

/// `MemAvailable` of /proc/meminfo, in bytes; `None` where there is no procfs.
fn available_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_tensors_are_loaded_once_and_other_dtypes_every_time() -> Result<()> {
        let cache = WeightCache::default();
        let t = Tensor::new(&[1.5f32, -2.0], &Device::Cpu)?;
        let loads = std::cell::Cell::new(0);
        let load = || {
            loads.set(loads.get() + 1);
            Ok(t.clone())
        };
        cache.get_or_load("w", DType::F32, &Device::Cpu, load)?;
        cache.get_or_load("w", DType::F32, &Device::Cpu, load)?;
        assert_eq!(loads.get(), 2, "nothing is kept before keep()");
        assert!(cache.keep(DType::F32, &Device::Cpu, 8));
        cache.get_or_load("w", DType::F32, &Device::Cpu, load)?;
        let again = cache.get_or_load("w", DType::F32, &Device::Cpu, load)?;
        assert_eq!(loads.get(), 3);
        assert_eq!(again.to_vec1::<f32>()?, vec![1.5, -2.0]);
        cache.get_or_load("w", DType::F64, &Device::Cpu, load)?;
        assert_eq!(loads.get(), 4, "another dtype is not kept");
        assert!(!cache.keep(DType::F64, &Device::Cpu, 8), "one dtype only");
        assert!(!WeightCache::default().keep(DType::F32, &Device::Cpu, u64::MAX));
        Ok(())
    }
}
