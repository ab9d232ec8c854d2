//! Reading the tensors of an opened file: only the bytes a comparison asks for, checked against
//! their shape, given a batch dimension, and released from the map once copied.

use std::borrow::Cow;

use candle_core::{DType, Device, Tensor};

use super::{Entry, FileSource, Loc, npy, router_ids};
use crate::capture::dump::{ids_in_range, token_ids};
use crate::capture::{Key, RouterField};
use crate::error::{Error, Result};

/// Alignment of the ranges released from the map (see [`FileSource::release`]).
const RELEASE_ALIGN: usize = 64 << 10;

impl FileSource {
    /// Reads one entry as stored.
    fn load(&self, idx: usize) -> Result<Tensor> {
        if !self.is_pair(idx)
            && let Some(t) = self.load_box(idx, None)?
        {
            return Ok(t);
        }
        let e = &self.entries[idx];
        let t = self.stored.get_or_read(e, || self.load_entry(e))?;
        // A pair's sum is the tensor its positions are then selected from.
        let t = self.add_residual(idx, t)?;
        self.apply_view(idx, t)
    }

    /// A view that is a box of its stored tensor (a layer cut from a concatenation), read
    /// straight from the map: only its bytes (its first `head` token rows, when given) are
    /// copied, so the k layers of a sample read the stored tensor's bytes once between them.
    /// A view that selects positions out of a box smaller than the stored tensor (the real
    /// positions of one row of a batch) reads that box and selects from it, so a batch's rows
    /// do not each read the whole batch. The pages stay mapped until the file is closed (its
    /// other layers lie in them). None when the view or the entry does not allow it (positions
    /// selected from the whole stored tensor, which the stored cache reads once for its views;
    /// compressed, 16-bit integers, column-major).
    fn load_box(&self, idx: usize, head: Option<usize>) -> Result<Option<Tensor>> {
        let e = &self.entries[idx];
        let (Some(view), Loc::Range(a, b), false, Some(dtype)) =
            (self.view(idx), &e.loc, e.fortran, e.dtype)
        else {
            return Ok(None);
        };
        let Some((boxed, rest)) = view.split_at_select(&e.shape) else {
            return Ok(None);
        };
        let Some((mut bx, axes)) = boxed.as_box(&e.shape) else {
            return Ok(None);
        };
        let whole = bx.iter().zip(&e.shape).all(|(&(_, len), &n)| len == n);
        if !rest.ops.is_empty() && whole {
            return Ok(None);
        }
        let mut shape = boxed.shape.clone();
        if let Some(n) = head.filter(|_| rest.ops.is_empty()) {
            let axis = usize::from(shape.len() >= 3);
            if let (Some(rows), Some(&s)) = (shape.get_mut(axis), axes.get(axis)) {
                *rows = (*rows).min(n);
                bx[s].1 = *rows;
            }
        }
        let err = |msg: String| Error::tensor(&self.path, &e.raw, msg);
        let bytes = self
            .map
            .get(*a..*b)
            .ok_or_else(|| err("data lies past the end of the file (truncated?)".into()))?;
        if Some(bytes.len()) != npy::checked_bytes(&e.shape, dtype.size_in_bytes()) {
            return Err(err(format!(
                "holds {} bytes, its shape {:?} needs more or fewer (truncated?)",
                bytes.len(),
                e.shape
            )));
        }
        let t = match dtype {
            DType::BF16 => box_tensor::<half::bf16>(bytes, &e.shape, &bx, &shape),
            DType::F16 => box_tensor::<half::f16>(bytes, &e.shape, &bx, &shape),
            DType::F32 => box_tensor::<f32>(bytes, &e.shape, &bx, &shape),
            DType::F64 => box_tensor::<f64>(bytes, &e.shape, &bx, &shape),
            _ => return Ok(None),
        }
        .map_err(|x| err(x.to_string()))?;
        self.stored
            .note_read(t.elem_count() * dtype.size_in_bytes());
        // Pages past a truncated end read as zeros: never hand those on.
        crate::util::mapped::check()?;
        if rest.ops.is_empty() {
            return Ok(Some(t));
        }
        match head {
            Some(n) => rest.apply_head(t, n).map(Some),
            None => rest.apply(t).map(Some),
        }
    }

    /// Bytes of tensor data read from the file so far (a stored tensor that several views cut
    /// layers from counts once).
    pub fn bytes_read(&self) -> u64 {
        self.stored.bytes_read()
    }

    pub(super) fn load_entry(&self, e: &Entry) -> Result<Tensor> {
        let err = |msg: String| Error::tensor(&self.path, &e.raw, msg);
        let dtype = match (e.dtype, e.bits16) {
            (Some(d), _) => d,
            (None, Some(npy::Bits16::Void)) => DType::BF16,
            (None, Some(npy::Bits16::Integer)) if self.dtype_hint == Some(DType::BF16) => {
                DType::BF16
            }
            (None, _) => {
                return Err(err(
                    "a 16-bit integer array: if it holds bfloat16 bits (t.view(torch.int16)), pass --dtype-hint bf16; or save it as float32 (exact for bf16)".into(),
                ));
            }
        };
        let bytes: Cow<[u8]> =
            match &e.loc {
                Loc::Range(a, b) => Cow::Borrowed(self.map.get(*a..*b).ok_or_else(|| {
                    err("data lies past the end of the file (truncated?)".into())
                })?),
                Loc::Zip { entry, skip, len } => {
                    let zip = self
                        .zip
                        .as_ref()
                        .ok_or_else(|| err("a compressed entry outside a zip archive".into()))?;
                    Cow::Owned(zip.extract(&self.map, entry, *skip, *len).map_err(err)?)
                }
            };
        let expect = npy::checked_bytes(&e.shape, dtype.size_in_bytes());
        if Some(bytes.len()) != expect {
            return Err(err(format!(
                "holds {} bytes, its shape {:?} needs {} (truncated?)",
                bytes.len(),
                e.shape,
                expect.map_or("more".to_string(), |n| n.to_string())
            )));
        }
        let t = if e.fortran {
            let mut rev = e.shape.clone();
            rev.reverse();
            let t = Tensor::from_raw_buffer(&bytes, dtype, &rev, &Device::Cpu)?;
            let dims: Vec<usize> = (0..rev.len()).rev().collect();
            t.permute(dims)?.contiguous()?
        } else {
            Tensor::from_raw_buffer(&bytes, dtype, &e.shape, &Device::Cpu)
                .map_err(|x| err(x.to_string()))?
        };
        self.stored.note_read(bytes.len());
        drop(bytes);
        if let Loc::Range(a, b) = e.loc {
            self.release(a, b);
        }
        // Pages past a truncated end read as zeros: never hand those on.
        crate::util::mapped::check()?;
        Ok(t)
    }

    /// Drops the pages of `[a, b)` from this process's mapping once they have been copied into
    /// a tensor, so that resident memory stays near one tensor pair however large the file
    /// (the kernel keeps them in its page cache; a later read faults them back in).
    fn release(&self, a: usize, b: usize) {
        // madvise wants a page-aligned start; 64 KiB is a multiple of every page size in use.
        let start = a & !(RELEASE_ALIGN - 1);
        if self.inflated || b <= start || b > self.map.len() {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only, file-backed mapping only drops page-table
        // entries: later reads see the file's bytes again. No reference into the range is alive
        // (the tensor holds a copy).
        let _ = unsafe {
            self.map.inner().unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start,
                b - start,
            )
        };
    }

    /// The first `n` token rows of the tensor hsdiff calls `name`, reading only their bytes.
    pub fn get_head(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
        let Some(&idx) = self.names.get(name) else {
            return Ok(None);
        };
        // A (hidden, residual) pair is a sum of two tensors: read whole, then cut.
        if self.is_pair(idx) {
            let t = self.load(idx)?;
            let axis = usize::from(t.rank() >= 3);
            let rows = t.dim(axis)?.min(n);
            return self
                .normalise(idx, name, t.narrow(axis, 0, rows)?)
                .map(Some);
        }
        let e = &self.entries[idx];
        if let Some(t) = self.load_box(idx, Some(n))? {
            return self.normalise(idx, name, t).map(Some);
        }
        if let Some(view) = self.view(idx) {
            // A layer cut from a stored tensor: its first n rows, not the whole layer.
            let stored = self.stored.get_or_read(e, || self.load_entry(e))?;
            let t = view.apply_head(stored, n)?;
            return self.normalise(idx, name, t).map(Some);
        }
        // Token axis: 1 for [1, T, …], 0 for [T, D]; only C-order single sequences.
        let axis = match e.shape.len() {
            2 => 0,
            r if r >= 3 && e.shape[0] == 1 => 1,
            _ => return self.get(name),
        };
        if e.fortran || e.shape[axis] <= n {
            return self.get(name);
        }
        let elem = match (e.dtype, e.bits16) {
            (Some(d), _) => d.size_in_bytes(),
            (None, _) => 2,
        };
        let Some(len) =
            npy::checked_bytes(&e.shape[axis + 1..], elem).and_then(|r| r.checked_mul(n))
        else {
            return self.get(name);
        };
        let mut head = e.clone();
        head.shape[axis] = n;
        head.loc = e.loc.part(0, len);
        let t = self.load_entry(&head)?;
        self.normalise(idx, name, t).map(Some)
    }

    /// The tensor hsdiff calls `name`, as stored, with a missing batch dimension added
    /// (`[T, D]` → `[1, T, D]`).
    pub fn get(&self, name: &str) -> Result<Option<Tensor>> {
        let Some(&idx) = self.names.get(name) else {
            return Ok(None);
        };
        let t = self.load(idx)?;
        self.normalise(idx, name, t).map(Some)
    }

    /// Checks a loaded capture and gives it a batch dimension.
    fn normalise(&self, idx: usize, name: &str, t: Tensor) -> Result<Tensor> {
        match Key::of(name) {
            Some(Key::Router(layer, RouterField::TopkIds)) => {
                let recorded = router_ids::Recorded::of(self, layer);
                router_ids::check(&self.path, &self.entries[idx].raw, layer, &t, &recorded)?;
                return Ok(t);
            }
            Some(Key::InputIds | Key::Router(..)) => return Ok(t),
            _ => {}
        }
        if !matches!(
            t.dtype(),
            DType::F64 | DType::F32 | DType::BF16 | DType::F16
        ) {
            return Err(Error::tensor(
                &self.path,
                &self.entries[idx].raw,
                format!(
                    "holds {} values, not floating point",
                    crate::util::device::dtype_label(t.dtype())
                ),
            ));
        }
        match t.rank() {
            0 | 1 => Err(Error::tensor(
                &self.path,
                &self.entries[idx].raw,
                format!(
                    "has shape {:?}: a hidden state is [1, T, D] or [T, D]",
                    t.dims()
                ),
            )),
            2 => Ok(t.unsqueeze(0)?),
            r if r >= 3 && t.dim(0)? > 1 => Err(Error::tensor(
                &self.path,
                &self.entries[idx].raw,
                format!(
                    "batch of {} sequences {:?}: hsdiff compares one (save `t[0:1]`)",
                    t.dim(0)?,
                    t.dims()
                ),
            )),
            _ => Ok(t),
        }
    }

    /// Shape of the tensor hsdiff calls `name`, normalised as by [`FileSource::get`].
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let idx = *self.names.get(name)?;
        let shape = self
            .views
            .get(&idx)
            .map_or(&self.entries[idx].shape, |v| &v.shape);
        Some(if shape.len() == 2 {
            [&[1], shape.as_slice()].concat()
        } else {
            shape.clone()
        })
    }

    /// The token ids the file carries, if any (`input_ids`, `[1, T]` or `[T]`, integers).
    pub fn input_ids(&self) -> Result<Option<Vec<u32>>> {
        if let Some(&idx) = self.names.get(&Key::InputIds.to_string()) {
            let t = self.load(idx)?;
            token_ids(&self.path, &self.entries[idx].raw, &t).map(Some)
        } else if let Some(ids) = &self.ids_list {
            ids_in_range(&self.path, ids.clone()).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The box `bx` of the C-order array of `T` in `src` (of `stored` shape) as a tensor of `shape`,
/// copied once, straight into the tensor's own buffer (never zeroed first: every byte of it is
/// written by the copy).
fn box_tensor<T: candle_core::WithDType>(
    src: &[u8],
    stored: &[usize],
    bx: &[(usize, usize)],
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let n: usize = bx.iter().map(|b| b.1).product();
    let len = n * std::mem::size_of::<T>();
    let mut values: Vec<T> = Vec::with_capacity(n);
    let spare = &mut values.spare_capacity_mut()[..n];
    // SAFETY: the first n slots of the spare capacity viewed as their len bytes (MaybeUninit<u8>
    // has no alignment and may hold anything).
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(), len)
    };
    let written =
        super::pipelines::view::copy_box(src, stored, bx, std::mem::size_of::<T>(), bytes);
    if written != len {
        return Err(candle_core::Error::Msg(format!(
            "a box of {len} bytes was given {written}"
        )));
    }
    // SAFETY: all n values were written (checked just above), and T is a plain number type
    // (bf16, f16, f32, f64): every byte pattern is one of its values.
    unsafe { values.set_len(n) };
    Tensor::from_vec(values, shape, &Device::Cpu)
}

/// The file's tensors by the keys of the names they are read under ([`Key::named`]: hsdiff's
/// names and those `--map` gave); a name is made from a key only to look it up here.
impl crate::compare::TensorSource for FileSource {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        self.get(&key.to_string())
    }
    fn keys(&self) -> Vec<Key> {
        self.names.keys().filter_map(|n| Key::named(n)).collect()
    }
    fn tensor_head(&self, key: Key, n: usize) -> Result<Option<Tensor>> {
        self.get_head(&key.to_string(), n)
    }
    fn stored_rows(&self, key: Key) -> Result<Option<crate::compare::metrics::StoredRows<'_>>> {
        Ok(self.mapped_rows(&key.to_string())?.map(|r| r.stored()))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::compare::TensorSource;
    use crate::formats::pipelines::{IdsFrom, LayerIds, ReadOptions};

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel)
    }

    /// Every name a file is read under is a key that displays as that name and reads the same
    /// tensor, for each reader: the names are mapped to keys once, and nothing is lost between.
    #[test]
    fn each_readers_names_are_keys_that_display_as_them() -> Result<()> {
        let ids = LayerIds {
            ids: vec![1, 2, 4, 5, 6],
            from: IdsFrom::BothSides,
        };
        let with_ids = ReadOptions {
            layer_ids: Some(ids),
            ..ReadOptions::default()
        };
        let plain = ReadOptions::default();
        let cases = [
            ("compare/hooks.safetensors", &plain),
            ("compare/hs.npz", &plain),
            ("compare/hs_compressed.npz", &plain),
            ("compare/hs_stacked.npy", &plain),
            ("compare/hs_tuple.pt", &plain),
            ("compare/hs_dict.pt", &plain),
            ("vllm/pairs.bf16.safetensors", &plain),
            (
                "pipelines/qwen3_5_tiny/specforge_dflash/rows_0-5000/data_1.ckpt",
                &with_ids,
            ),
            (
                "sglang_ops/dumper/dump_20261201_120000_000000/step=0___rank=0___dump_index=13___name=non_intrusive__model.layers.1.output.0___recompute_status=disabled___layer_id=1.pt",
                &plain,
            ),
        ];
        for (rel, opts) in cases {
            let src = FileSource::open_with(&fixture(rel), None, opts)?;
            let keys = TensorSource::keys(&src);
            let shown: Vec<String> = keys.iter().map(Key::to_string).collect();
            assert!(!keys.is_empty(), "{rel}");
            assert_eq!(shown, src.names(), "{rel}");
            for (key, name) in keys.iter().zip(&shown) {
                assert_eq!(Key::named(name), Some(*key), "{rel} {name}");
                let (by_key, by_name) = (TensorSource::tensor(&src, *key)?, src.get(name)?);
                let bits = |t: Option<Tensor>| -> Result<Vec<f64>> {
                    let t = t.unwrap_or_else(|| panic!("{rel} {name}: not read"));
                    Ok(t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?)
                };
                let (x, y) = (bits(by_key)?, bits(by_name)?);
                assert!(x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
                assert_eq!(x.len(), y.len(), "{rel} {name}");
            }
        }
        Ok(())
    }

    /// A name `--map` gives that is none of hsdiff's becomes a key of the file under that name;
    /// the file's other names stay no keys.
    #[test]
    fn a_mapped_name_is_a_key_of_the_file() -> Result<()> {
        let mut src = FileSource::open(&fixture("compare/hooks.safetensors"), None)?;
        let from = src.names()[0].clone();
        let key = Key::mapped("h4.mapped.block");
        src.rename(&from, "h4.mapped.block")?;
        assert!(TensorSource::keys(&src).contains(&key));
        assert!(TensorSource::tensor(&src, key)?.is_some());
        assert_eq!(Key::named("h4.never.mapped"), None);
        Ok(())
    }
}
