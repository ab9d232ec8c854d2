//! The host side of a launch: inputs read-locked, fresh output buffers, the launch itself
//! (synchronised after every kernel with `HSDIFF_CUDA_SYNC=1`) and its shape.

use candle_core::cuda_backend::CudaDType;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchArgs, LaunchConfig,
};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Shape, Storage, StorageRef, Tensor, WithDType};

use super::err;
use crate::error::Result;

/// A contiguous CUDA tensor, read-locked for the duration of a launch.
pub(super) struct Input<'a> {
    storage: StorageRef<'a>,
    start: usize,
    len: usize,
}

impl<'a> Input<'a> {
    pub(super) fn new(t: &'a Tensor, what: &str) -> Result<Self> {
        let (storage, layout) = t.storage_and_layout();
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| err(format!("{what} is not contiguous")))?;
        if !matches!(&*storage, Storage::Cuda(_)) {
            return Err(err(format!("{what} is not on a CUDA device")));
        }
        Ok(Self {
            storage,
            start,
            len: end - start,
        })
    }

    pub(super) fn cuda(&self) -> Result<&CudaStorage> {
        match &*self.storage {
            Storage::Cuda(cs) => Ok(cs),
            _ => Err(err("tensor is not on a CUDA device")),
        }
    }

    pub(super) fn view<T: CudaDType>(&self) -> Result<CudaView<'_, T>> {
        Ok(self
            .cuda()?
            .as_cuda_slice::<T>()?
            .slice(self.start..self.start + self.len))
    }

    pub(super) fn device(&self) -> Result<CudaDevice> {
        Ok(self.cuda()?.device.clone())
    }
}

/// A fresh output buffer: NaN-filled when `poison`, else uninitialised (the kernels write
/// every element).
pub(super) fn alloc_out<T: DeviceRepr + WithDType>(
    dev: &CudaDevice,
    n: usize,
    poison: bool,
) -> Result<CudaSlice<T>> {
    if poison {
        Ok(dev.clone_htod(&vec![T::from_f64(f64::NAN); n])?)
    } else {
        // SAFETY: every kernel here writes all n elements before anything reads them.
        Ok(unsafe { dev.alloc::<T>(n) }?)
    }
}

pub(super) fn wrap<T: CudaDType>(
    slice: CudaSlice<T>,
    dev: CudaDevice,
    shape: impl Into<Shape>,
) -> Tensor {
    Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev)),
        shape,
        BackpropOp::none(),
        false,
    )
}

/// The environment variable that makes every launch wait for its kernel ([`launch`]).
pub const SYNC_ENV: &str = "HSDIFF_CUDA_SYNC";

/// Whether `HSDIFF_CUDA_SYNC` is set to 1 (read once).
pub fn sync_every_launch() -> bool {
    static SYNC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SYNC.get_or_init(|| std::env::var(SYNC_ENV).is_ok_and(|v| v == "1"))
}

/// Launches on the device's stream; with `HSDIFF_CUDA_SYNC=1`, then waits for the stream so
/// that a fault is reported here, naming the kernel.
pub(super) fn launch(
    mut args: LaunchArgs<'_>,
    cfg: LaunchConfig,
    dev: &CudaDevice,
    kernel: &str,
) -> Result<()> {
    // SAFETY: argument lists match the kernels' signatures in gdn.cu (checked by the callers'
    // shapes), and every buffer extent was validated against what the kernel indexes.
    unsafe { args.launch(cfg) }.map_err(|e| err(format!("launching {kernel}: {e}")))?;
    if !sync_every_launch() {
        return Ok(());
    }
    dev.cuda_stream()
        .synchronize()
        .map_err(|e| err(format!("CUDA error in {kernel}: {e}")))
}

pub(super) fn i32_arg(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| err(format!("{what} = {v} does not fit the kernel's i32")))
}

/// Grid-stride launch shape for n independent work items.
pub(super) fn grid_for(n: usize, per_block: usize) -> LaunchConfig {
    let blocks = n.div_ceil(per_block).clamp(1, 1 << 20) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}
