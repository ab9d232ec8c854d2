//! A `[tokens, channels]` tensor's token rows as stored, one at a time: borrowed straight from
//! a contiguous CPU tensor's storage (no copy, no widening: [`super::kernel`] widens inside its
//! loop), widened through candle into one reused f64 buffer otherwise. Widening bf16, f16 and
//! f32 to f64 is exact, so both ways give the same values.

use candle_core::{CpuStorage, DType, Storage, Tensor};

use super::kernel::Row;
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
        let buf = match source {
            Source::Tensor(_) => vec![0.0; cols],
            Source::Storage { .. } => Vec::new(),
        };
        Ok(Rows { source, cols, buf })
    }

    /// Row `token`, as stored (f64 when read through candle).
    pub fn row(&mut self, token: usize) -> Result<Row<'_>> {
        let cols = self.cols;
        match &self.source {
            Source::Storage { storage, start } => {
                let r = start + token * cols..start + (token + 1) * cols;
                Ok(match &***storage {
                    Storage::Cpu(CpuStorage::BF16(v)) => Row::BF16(&v[r]),
                    Storage::Cpu(CpuStorage::F16(v)) => Row::F16(&v[r]),
                    Storage::Cpu(CpuStorage::F32(v)) => Row::F32(&v[r]),
                    Storage::Cpu(CpuStorage::F64(v)) => Row::F64(&v[r]),
                    _ => {
                        return Err(crate::error::Error::Internal(
                            "a compared tensor holds no floating-point values".into(),
                        ));
                    }
                })
            }
            Source::Tensor(t) => {
                let v: Vec<f64> = t.get(token)?.to_dtype(DType::F64)?.to_vec1()?;
                self.buf.copy_from_slice(&v);
                Ok(Row::F64(&self.buf))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::super::kernel::Widen;
    use super::*;

    fn widened(r: Row) -> Vec<f64> {
        match r {
            Row::BF16(v) => v.iter().map(|x| x.widen()).collect(),
            Row::F16(v) => v.iter().map(|x| x.widen()).collect(),
            Row::F32(v) => v.iter().map(|x| x.widen()).collect(),
            Row::F64(v) => v.to_vec(),
        }
    }

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
                    assert_eq!(widened(rows.row(token)?), want, "{dtype:?}");
                }
            }
        }
        Ok(())
    }
}
