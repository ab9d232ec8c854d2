//! GPU timing for the bench: CUDA events on the device's stream.

use candle_core::CudaDevice;
use candle_core::cuda_backend::WrapErr;

use crate::error::Result;

/// GPU time of `f` in milliseconds, from CUDA events recorded around it on the device's stream.
pub fn time_ms(dev: &CudaDevice, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
    let stream = dev.cuda_stream();
    let start = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .w()?;
    f()?;
    let end = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .w()?;
    end.synchronize().w()?;
    Ok(start.elapsed_ms(&end).w()? as f64)
}

/// Device-to-device copy bandwidth in GB/s (read + write bytes over time), median of `reps`
/// copies of `bytes` bytes.
pub fn copy_bandwidth_gbs(dev: &CudaDevice, bytes: usize, reps: usize) -> Result<f64> {
    let n = bytes / 4;
    let src = dev.alloc_zeros::<f32>(n)?;
    let mut dst = dev.alloc_zeros::<f32>(n)?;
    let mut times = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let ms = time_ms(dev, || Ok(dev.memcpy_dtod(&src, &mut dst)?))?;
        if i >= 2 {
            times.push(ms);
        }
    }
    times.sort_by(f64::total_cmp);
    let ms = times[times.len() / 2];
    Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e9)
}
