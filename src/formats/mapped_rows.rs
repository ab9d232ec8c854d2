//! A hidden state's token rows read straight from the file's map, without a copy: for scans
//! that look at every row but keep nothing (is this position all zeros?). Only a tensor stored
//! uncompressed in C order, `[T, D]` or `[1, T, D]`, or a box of one (a layer cut from a
//! concatenation); None otherwise, and the caller reads the tensor as usual.

use candle_core::DType;

use super::{FileSource, Loc, npy};
use crate::error::{Error, Result};

/// The token rows of one tensor: row `t` is `row_bytes` bytes at `first + t · stride`.
pub struct MappedRows<'a> {
    bytes: &'a [u8],
    pub dtype: DType,
    pub rows: usize,
    first: usize,
    stride: usize,
    row_bytes: usize,
}

impl<'a> MappedRows<'a> {
    /// The rows for the statistics ([`crate::compare::metrics::diff_stats_stored`]).
    pub fn stored(&self) -> crate::compare::metrics::StoredRows<'a> {
        crate::compare::metrics::StoredRows {
            bytes: self.bytes,
            dtype: self.dtype,
            rows: self.rows,
            first: self.first,
            stride: self.stride,
            row_bytes: self.row_bytes,
        }
    }

    /// Row `t`'s bytes (little-endian values of `dtype`).
    pub fn row(&self, t: usize) -> &'a [u8] {
        let at = self.first + t * self.stride;
        &self.bytes[at..at + self.row_bytes]
    }
}

impl FileSource {
    /// The rows of the hidden state hsdiff calls `name`, as [`FileSource::get`] would give
    /// them (`[1, T, D]`), borrowed from the map; None when that needs a copy (compressed,
    /// column-major, positions selected, a batch, not floating point). The caller must call
    /// [`crate::util::mapped::check`] once done reading, before trusting what it read.
    pub fn mapped_rows(&self, name: &str) -> Result<Option<MappedRows<'_>>> {
        let Some(&idx) = self.names.get(name) else {
            return Ok(None);
        };
        if self.is_pair(idx) {
            return Ok(None);
        }
        let e = &self.entries[idx];
        let (Loc::Range(a, b), false, Some(dtype)) = (&e.loc, e.fortran, e.dtype) else {
            return Ok(None);
        };
        if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32 | DType::F64) {
            return Ok(None);
        }
        let bx = match self.view(idx) {
            Some(v) => match v.as_box(&e.shape) {
                Some((bx, _)) => bx,
                None => return Ok(None),
            },
            None => e.shape.iter().map(|&n| (0, n)).collect(),
        };
        // [T, D], or [1, T, D] (a batch of more is refused by `get`, which says so).
        let r = e.shape.len();
        if !(r == 2 || (r == 3 && bx[0].1 == 1)) {
            return Ok(None);
        }
        let err = |msg: String| Error::tensor(&self.path, &e.raw, msg);
        let bytes = self
            .map
            .get(*a..*b)
            .ok_or_else(|| err("data lies past the end of the file (truncated?)".into()))?;
        let elem = dtype.size_in_bytes();
        if Some(bytes.len()) != npy::checked_bytes(&e.shape, elem) {
            return Err(err(format!(
                "holds {} bytes, its shape {:?} needs more or fewer (truncated?)",
                bytes.len(),
                e.shape
            )));
        }
        // Strides of the stored array in bytes; the box lies inside it (views are checked
        // against the stored shape when made).
        let stride = e.shape[r - 1] * elem;
        let first = if r == 3 {
            bx[0].0 * e.shape[1] * stride
        } else {
            0
        };
        Ok(Some(MappedRows {
            bytes,
            dtype,
            rows: bx[r - 2].1,
            first: first + bx[r - 2].0 * stride + bx[r - 1].0 * elem,
            stride,
            row_bytes: bx[r - 1].1 * elem,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use candle_core::{Device, Tensor};

    use super::*;
    use crate::formats::pipelines::{IdsFrom, LayerIds, ReadOptions};

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pipelines/qwen3_5_tiny")
            .join(rel)
    }

    /// Every row borrowed from the map holds the bytes `get` copies for it: layers cut from a
    /// concatenation, in each sample of a batch, and in a single-sample file.
    #[test]
    fn mapped_rows_are_the_rows_get_reads() -> Result<()> {
        let ids = || LayerIds {
            ids: vec![1, 2, 4, 5, 6],
            from: IdsFrom::BothSides,
        };
        let cases = [
            ("specforge_dflash_batch_nomask/batch.ckpt", Some(0)),
            ("specforge_dflash_batch_nomask/batch.ckpt", Some(2)),
            ("specforge_dflash/rows_0-5000/data_1.ckpt", None),
        ];
        for (rel, sample) in cases {
            let opts = ReadOptions {
                layer_ids: Some(ids()),
                sample,
                ..ReadOptions::default()
            };
            let src = FileSource::open_with(&fixture(rel), None, &opts)?;
            let mut seen = 0;
            for name in src.names().into_iter().filter(|n| n.starts_with("layers.")) {
                let rows = src
                    .mapped_rows(&name)?
                    .ok_or_else(|| Error::Internal(format!("{rel} {name}: no mapped rows")))?;
                let t = src.get(&name)?.expect("named");
                let [1, tokens, _] = t.dims()[..] else {
                    panic!("{rel} {name}: {:?}", t.dims());
                };
                assert_eq!(rows.rows, tokens);
                assert_eq!(rows.dtype, t.dtype());
                for token in 0..tokens {
                    let want: Vec<f64> = t.get(0)?.get(token)?.to_dtype(DType::F64)?.to_vec1()?;
                    let got: Vec<f64> = Tensor::from_raw_buffer(
                        rows.row(token),
                        rows.dtype,
                        &[want.len()],
                        &Device::Cpu,
                    )?
                    .to_dtype(DType::F64)?
                    .to_vec1()?;
                    assert_eq!(got, want, "{rel} {name} token {token}");
                }
                seen += 1;
            }
            assert_eq!(seen, 5, "{rel}");
        }
        crate::util::mapped::check()
    }
}
