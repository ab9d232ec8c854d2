//! A `[tokens, channels]` tensor's token rows widened to f64 one at a time, into one buffer
//! reused for every row: read straight from a contiguous CPU tensor's storage (no per-row
//! tensor, conversion tensor and vector), through candle otherwise. Widening bf16, f16 and f32
//! to f64 is exact, so both ways give the same values.

use candle_core::{CpuStorage, DType, Storage, Tensor};

use crate::error::Result;

/// Where a tensor's rows come from.
enum Source<'a> {
    /// The storage of a contiguous CPU tensor, from element `start`.
    Storage {
        /// The storage's read guard (candle's lock type, not named here).
        storage: Box<dyn std::ops::Deref<Target = Storage> + 'a>,
        start: usize,
    },
    Tensor(&'a Tensor),
}

pub struct Rows<'a> {
    source: Source<'a>,
    cols: usize,
    buf: Vec<f64>,
}

impl<'a> Rows<'a> {
    /// The rows of `t`, a `[rows, cols]` tensor.
    pub fn of(t: &'a Tensor) -> Result<Self> {
        let (_, cols) = t.dims2()?;
        let (storage, layout) = t.storage_and_layout();
        let start = layout.contiguous_offsets().map(|(start, _)| start);
        let source = match (&*storage, start) {
            (Storage::Cpu(_), Some(start)) => Source::Storage {
                storage: Box::new(storage),
                start,
            },
            _ => {
                drop(storage);
                Source::Tensor(t)
            }
        };
        Ok(Rows {
            source,
            cols,
            buf: vec![0.0; cols],
        })
    }

    /// Row `token` as f64.
    pub fn row(&mut self, token: usize) -> Result<&[f64]> {
        let (cols, out) = (self.cols, &mut self.buf);
        match &self.source {
            Source::Storage { storage, start } => {
                let from = start + token * cols;
                match &***storage {
                    // bf16 is the top half of an f32: the shift widens it exactly (and
                    // vectorises, where half's conversion also quiets signalling NaNs — a NaN
                    // either way).
                    Storage::Cpu(CpuStorage::BF16(v)) => widen(&v[from..from + cols], out, |x| {
                        f64::from(f32::from_bits(u32::from(x.to_bits()) << 16))
                    }),
                    Storage::Cpu(CpuStorage::F16(v)) => {
                        widen(&v[from..from + cols], out, |x| x.to_f64())
                    }
                    Storage::Cpu(CpuStorage::F32(v)) => {
                        widen(&v[from..from + cols], out, f64::from)
                    }
                    Storage::Cpu(CpuStorage::F64(v)) => out.copy_from_slice(&v[from..from + cols]),
                    _ => {
                        return Err(crate::error::Error::Internal(
                            "a compared tensor holds no floating-point values".into(),
                        ));
                    }
                }
            }
            Source::Tensor(t) => {
                let v: Vec<f64> = t.get(token)?.to_dtype(DType::F64)?.to_vec1()?;
                out.copy_from_slice(&v);
            }
        }
        Ok(&self.buf)
    }
}

fn widen<T: Copy>(from: &[T], out: &mut [f64], f: impl Fn(T) -> f64) {
    for (o, &x) in out.iter_mut().zip(from) {
        *o = f(x);
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// Storage rows, a narrowed (non-contiguous) tensor's rows and candle's own widening agree.
    #[test]
    fn rows_as_candle_widens_them() -> Result<()> {
        let t = Tensor::randn(0f32, 1.0, (5, 12), &Device::Cpu)?;
        for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
            let t = t.to_dtype(dtype)?;
            let narrowed = t.narrow(1, 3, 6)?;
            for x in [&t, &narrowed] {
                let mut rows = Rows::of(x)?;
                for token in 0..5 {
                    let want: Vec<f64> = x.get(token)?.to_dtype(DType::F64)?.to_vec1()?;
                    assert_eq!(rows.row(token)?, want.as_slice(), "{dtype:?}");
                }
            }
        }
        Ok(())
    }
}
