//! Readers for the files `hsdiff compare` accepts: hsdiff dumps, safetensors written by PyTorch,
//! `torch.save` files (`.pt` / `.pth`) and numpy `.npy` / `.npz`. Each opens as a
//! [`FileSource`]: the file memory-mapped, its tensors indexed (name, dtype, shape, where the
//! bytes are) and renamed to hsdiff's names ([`naming`]); a tensor is only read when the
//! comparison asks for it, so memory stays near one tensor pair whatever the file size.
//!
//! docs/file-formats.md describes the formats and name conventions for users.

pub mod naming;
pub mod npy;
pub mod pickle;
mod torch;
mod zipdir;

pub use zipdir::ZipIndex;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use memmap2::Mmap;
use serde_json::Value;

use crate::capture::dump::{METADATA_KEY, ids_in_range, token_ids};
use crate::capture::names;
use crate::error::{Error, Result};

/// Alignment of the ranges released from the map (see [`FileSource::release`]).
const RELEASE_ALIGN: usize = 64 << 10;

/// What kind of file a side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// safetensors with an `hsdiff` fingerprint in its metadata.
    HsdiffDump,
    Safetensors,
    Torch,
    Npy,
    Npz,
}

impl FileFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::HsdiffDump => "hsdiff dump",
            FileFormat::Safetensors => "safetensors",
            FileFormat::Torch => "torch.save",
            FileFormat::Npy => "numpy .npy",
            FileFormat::Npz => "numpy .npz",
        }
    }
}

/// Where the bytes of a tensor are.
#[derive(Debug, Clone)]
pub enum Loc {
    /// A byte range of the memory map.
    Range(usize, usize),
    /// Inside a compressed zip entry: `len` bytes after the first `skip`.
    Zip {
        entry: String,
        skip: usize,
        len: usize,
    },
}

impl Loc {
    /// The sub-range `[skip, skip + len)` of this location.
    fn part(&self, off: usize, n: usize) -> Loc {
        match self {
            Loc::Range(a, _) => Loc::Range(a + off, a + off + n),
            Loc::Zip { entry, skip, .. } => Loc::Zip {
                entry: entry.clone(),
                skip: skip + off,
                len: n,
            },
        }
    }
}

/// One tensor of a file, not yet read.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name in the file (dotted path for nested pickles).
    pub raw: String,
    /// None for 16-bit integer/void arrays that may hold bf16 bits.
    pub dtype: Option<DType>,
    pub bits16: Option<npy::Bits16>,
    pub shape: Vec<usize>,
    /// Column-major data (numpy `fortran_order`, torch transposed views).
    pub fortran: bool,
    pub loc: Loc,
    /// Place in an `output_hidden_states` sequence: (sequence name, index, length).
    pub seq: Option<(String, usize, usize)>,
}

/// A file of captured tensors, opened for comparison.
pub struct FileSource {
    path: PathBuf,
    pub format: FileFormat,
    map: Mmap,
    entries: Vec<Entry>,
    /// hsdiff name → entry.
    names: BTreeMap<String, usize>,
    /// The name conventions that were applied (for the report).
    pub conventions: Vec<String>,
    /// Layers named from bare indices, whose reading (output of layer N, or its input) the
    /// caller decides ([`naming::Assignment::index_keyed`]).
    pub index_keyed: bool,
    /// Entries read as an `output_hidden_states` sequence of this length, if any.
    pub sequence_len: Option<usize>,
    /// The fingerprint JSON the file carries, if any.
    pub fingerprint: Option<Value>,
    ids_list: Option<Vec<i64>>,
    dtype_hint: Option<DType>,
    /// The archive's directory, for entries that are read through the inflater.
    zip: Option<ZipIndex>,
}

fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::file(path, msg)
}

impl FileSource {
    /// Opens and indexes `path`. `dtype_hint` (`--dtype-hint`) is the compute dtype of files that
    /// record none, and lets 16-bit integer arrays be read as bf16 bits.
    pub fn open(path: &Path, dtype_hint: Option<DType>) -> Result<Self> {
        let file = crate::input::open_regular(path)?;
        let len = file.metadata().map_err(|e| bad(path, e.to_string()))?.len();
        if len == 0 {
            return Err(bad(path, "empty file"));
        }
        // SAFETY: read-only map; a file truncated underneath us is the user's own race.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| bad(path, e.to_string()))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut src = if map.starts_with(b"\x93NUMPY") {
            Self::npy(path, map)?
        } else if map.starts_with(b"PK\x03\x04") || map.starts_with(b"PK\x05\x06") {
            let zip = ZipIndex::read(&map)
                .map_err(|e| bad(path, format!("not a readable zip archive: {e}")))?;
            let is_torch = zip.names().any(|n| n.ends_with("data.pkl"));
            if is_torch {
                Self::torch(path, map, zip)?
            } else if ext == "npz" || zip.names().any(|n| n.ends_with(".npy")) {
                Self::npz(path, map, zip)?
            } else {
                return Err(bad(
                    path,
                    "a zip archive holding neither data.pkl (torch.save) nor .npy arrays (np.savez)",
                ));
            }
        } else if map.first() == Some(&0x80) && matches!(ext.as_str(), "pt" | "pth" | "bin") {
            return Err(bad(
                path,
                "a legacy (pre-1.6, non-zip) torch.save file: re-save it with torch ≥ 1.6 defaults",
            ));
        } else {
            Self::safetensors(path, map).map_err(|e| match (&e, ext.as_str()) {
                (_, "safetensors" | "st") => e,
                _ => bad(
                    path,
                    "unrecognised format: expected safetensors, torch.save (.pt/.pth), .npy or .npz",
                ),
            })?
        };
        src.dtype_hint = dtype_hint;
        src.split_stacked();
        src.assign_names();
        Ok(src)
    }

    fn empty(path: &Path, format: FileFormat, map: Mmap) -> Self {
        FileSource {
            path: path.to_path_buf(),
            format,
            map,
            entries: Vec::new(),
            names: BTreeMap::new(),
            conventions: Vec::new(),
            index_keyed: false,
            sequence_len: None,
            fingerprint: None,
            ids_list: None,
            dtype_hint: None,
            zip: None,
        }
    }

    fn safetensors(path: &Path, map: Mmap) -> Result<Self> {
        let (header_len, meta) = crate::checkpoint::read_metadata(path, &map)?;
        let fingerprint = match meta.metadata().as_ref().and_then(|m| m.get(METADATA_KEY)) {
            Some(json) => Some(serde_json::from_str::<Value>(json).map_err(|e| {
                bad(
                    path,
                    format!("metadata `{METADATA_KEY}` is not valid JSON: {e}"),
                )
            })?),
            None => None,
        };
        let base = 8 + header_len;
        let mut entries = Vec::new();
        let mut infos: Vec<(String, &safetensors::tensor::TensorInfo)> =
            meta.tensors().into_iter().collect();
        infos.sort_by(|x, y| x.0.cmp(&y.0));
        for (name, info) in infos {
            use safetensors::Dtype as S;
            let dtype = match info.dtype {
                S::F64 => DType::F64,
                S::F32 => DType::F32,
                S::BF16 => DType::BF16,
                S::F16 => DType::F16,
                S::I64 => DType::I64,
                S::I32 => DType::I32,
                S::I16 => DType::I16,
                S::U32 => DType::U32,
                S::U8 | S::BOOL => DType::U8,
                other => {
                    return Err(Error::tensor(
                        path,
                        &name,
                        format!("unsupported dtype {other}"),
                    ));
                }
            };
            let (start, end) = (base + info.data_offsets.0, base + info.data_offsets.1);
            if end > map.len() || start > end {
                return Err(Error::tensor(
                    path,
                    &name,
                    "data lies past the end of the file (truncated?)",
                ));
            }
            entries.push(Entry {
                raw: name.clone(),
                dtype: Some(dtype),
                bits16: None,
                shape: info.shape.clone(),
                fortran: false,
                loc: Loc::Range(start, end),
                seq: None,
            });
        }
        let format = if fingerprint.is_some() {
            FileFormat::HsdiffDump
        } else {
            FileFormat::Safetensors
        };
        let mut src = Self::empty(path, format, map);
        src.entries = entries;
        src.fingerprint = fingerprint;
        Ok(src)
    }

    fn npy(path: &Path, map: Mmap) -> Result<Self> {
        let h = npy::parse_header(&map).map_err(|e| bad(path, e))?;
        let end = h
            .data_len()
            .and_then(|n| n.checked_add(h.data_offset))
            .ok_or_else(|| bad(path, format!("impossible shape {:?}", h.shape)))?;
        if end > map.len() {
            return Err(bad(
                path,
                format!(
                    "truncated: the array needs {end} bytes, the file has {}",
                    map.len()
                ),
            ));
        }
        let entry = Entry {
            raw: stem(path),
            dtype: h.dtype,
            bits16: h.bits16,
            shape: h.shape.clone(),
            fortran: h.fortran_order && h.shape.len() > 1,
            loc: Loc::Range(h.data_offset, end),
            seq: None,
        };
        let mut src = Self::empty(path, FileFormat::Npy, map);
        src.entries.push(entry);
        Ok(src)
    }

    fn npz(path: &Path, map: Mmap, zip: ZipIndex) -> Result<Self> {
        let mut entries = Vec::new();
        for name in zip.names() {
            let Some(stem) = name.strip_suffix(".npy") else {
                continue;
            };
            // The header: at most a few KiB at the start of the entry.
            let head_len = zip.size(name).min(64 << 10);
            let head = zip
                .extract(&map, name, 0, head_len)
                .map_err(|e| Error::tensor(path, stem, e))?;
            let h = npy::parse_header(&head).map_err(|e| Error::tensor(path, stem, e))?;
            let len = h.data_len().ok_or_else(|| {
                Error::tensor(path, stem, format!("impossible shape {:?}", h.shape))
            })?;
            let loc = zip
                .loc(name, h.data_offset, len)
                .map_err(|e| Error::tensor(path, stem, e))?;
            entries.push(Entry {
                raw: stem.to_string(),
                dtype: h.dtype,
                bits16: h.bits16,
                shape: h.shape.clone(),
                fortran: h.fortran_order && h.shape.len() > 1,
                loc,
                seq: None,
            });
        }
        if entries.is_empty() {
            return Err(bad(
                path,
                "a zip archive holding neither data.pkl (torch.save) nor .npy arrays (np.savez)",
            ));
        }
        let mut src = Self::empty(path, FileFormat::Npz, map);
        src.entries = entries;
        src.zip = Some(zip);
        Ok(src)
    }

    fn torch(path: &Path, map: Mmap, zip: ZipIndex) -> Result<Self> {
        let parsed = torch::parse(&map, &zip).map_err(|e| bad(path, e))?;
        let mut src = Self::empty(path, FileFormat::Torch, map);
        src.entries = parsed.entries;
        src.zip = Some(zip);
        // A bare tensor is named after the file, as a .npy is.
        for e in &mut src.entries {
            if e.raw.is_empty() {
                e.raw = stem(path);
            }
        }
        src.fingerprint = parsed.fingerprint;
        src.ids_list = parsed.input_ids;
        if !parsed.left_out.is_empty() {
            src.conventions.push(format!(
                "not tensors, left out: {}",
                parsed.left_out.join(", ")
            ));
        }
        Ok(src)
    }

    /// A stacked `output_hidden_states` array (`torch.stack(hs)`: `[N, 1, T, D]`; or `[N, T, D]`
    /// alone in a `.npy`) becomes N entries of one sequence.
    fn split_stacked(&mut self) {
        // A lone array (a .npy, or a bare tensor torch.save'd) may be a stack of 3-D states.
        let lone =
            self.entries.len() == 1 && matches!(self.format, FileFormat::Npy | FileFormat::Torch);
        let mut out = Vec::with_capacity(self.entries.len());
        for e in std::mem::take(&mut self.entries) {
            let stacked = !e.fortran
                && e.seq.is_none()
                && !naming::is_ours(&e.raw)
                && e.shape.first().is_some_and(|&n| n > 1)
                && match e.shape.len() {
                    4 => e.shape[1] == 1,
                    3 => lone || e.raw.ends_with("hidden_states"),
                    _ => false,
                };
            let elem = match (e.dtype, e.bits16) {
                (Some(d), _) => d.size_in_bytes(),
                (None, _) => 2,
            };
            if !stacked {
                out.push(e);
                continue;
            }
            let n = e.shape[0];
            let inner: Vec<usize> = e.shape[1..].to_vec();
            let Some(bytes) = npy::checked_bytes(&inner, elem) else {
                out.push(e);
                continue;
            };
            for i in 0..n {
                out.push(Entry {
                    raw: format!("{}.{i}", e.raw),
                    dtype: e.dtype,
                    bits16: e.bits16,
                    shape: inner.clone(),
                    fortran: false,
                    loc: e.loc.part(i * bytes, bytes),
                    seq: Some((e.raw.clone(), i, n)),
                });
            }
        }
        self.entries = out;
    }

    fn assign_names(&mut self) {
        let named: Vec<naming::Named> = self
            .entries
            .iter()
            .map(|e| naming::Named {
                raw: &e.raw,
                seq: e.seq.as_ref().map(|(s, i, n)| (s.as_str(), *i, *n)),
            })
            .collect();
        let a = naming::assign(&named);
        self.names = a.names;
        self.conventions.extend(a.conventions);
        self.index_keyed = a.index_keyed;
        self.sequence_len = a.sequence_len;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names of the tensors as stored in the file.
    pub fn raw_names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.raw.clone()).collect()
    }

    /// hsdiff names of the tensors this file holds.
    pub fn names(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The name a tensor has in the file.
    pub fn raw_name(&self, name: &str) -> Option<&str> {
        self.names.get(name).map(|&i| self.entries[i].raw.as_str())
    }

    /// `--map`: the tensor called `from` in the file (raw name first, then hsdiff name) is
    /// compared under the name `to`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        let idx = self
            .entries
            .iter()
            .position(|e| e.raw == from)
            .or_else(|| self.names.get(from).copied())
            .ok_or_else(|| {
                Error::tensor(&self.path, from, "named in --map, but not in this file")
            })?;
        self.names.retain(|n, i| *i != idx && n != to);
        self.names.insert(to.to_string(), idx);
        Ok(())
    }

    /// `--shift K`: layer i (embed = −1) is renamed i + K; names that fall below −1 are dropped.
    pub fn shift_layers(&mut self, k: i64) {
        if k == 0 {
            return;
        }
        let old = std::mem::take(&mut self.names);
        for (name, idx) in old {
            let (layer, op) = match (name.as_str(), names::parse_op(&name)) {
                (names::EMBED, _) => (Some(-1), None),
                (_, Some((i, op))) => (Some(i as i64), Some(op.to_string())),
                _ => (names::parse_layer(&name).map(|i| i as i64), None),
            };
            let renamed = match (layer, op) {
                (None, _) => Some(name),
                (Some(l), op) => match (l.saturating_add(k), op) {
                    (-1, None) => Some(names::EMBED.to_string()),
                    (j, None) if j >= 0 => Some(names::layer(j as usize)),
                    (j, Some(op)) if j >= 0 => Some(names::op(j as usize, &op)),
                    _ => None,
                },
            };
            if let Some(n) = renamed {
                self.names.insert(n, idx);
            }
        }
    }

    /// Reads one entry as stored.
    fn load(&self, idx: usize) -> Result<Tensor> {
        self.load_entry(&self.entries[idx])
    }

    fn load_entry(&self, e: &Entry) -> Result<Tensor> {
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
        drop(bytes);
        if let Loc::Range(a, b) = e.loc {
            self.release(a, b);
        }
        Ok(t)
    }

    /// Drops the pages of `[a, b)` from this process's mapping once they have been copied into
    /// a tensor, so that resident memory stays near one tensor pair however large the file
    /// (the kernel keeps them in its page cache; a later read faults them back in).
    fn release(&self, a: usize, b: usize) {
        // madvise wants a page-aligned start; 64 KiB is a multiple of every page size in use.
        let start = a & !(RELEASE_ALIGN - 1);
        if b <= start || b > self.map.len() {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only, file-backed mapping only drops page-table
        // entries: later reads see the file's bytes again. No reference into the range is alive
        // (the tensor holds a copy).
        let _ = unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, b - start)
        };
    }

    /// The first `n` token rows of the tensor hsdiff calls `name`, reading only their bytes.
    pub fn get_head(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
        let Some(&idx) = self.names.get(name) else {
            return Ok(None);
        };
        let e = &self.entries[idx];
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
        if name == names::INPUT_IDS || name.starts_with("router.") {
            return Ok(t);
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
                    crate::device::dtype_label(t.dtype())
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
        let e = &self.entries[*self.names.get(name)?];
        Some(if e.shape.len() == 2 {
            [&[1], e.shape.as_slice()].concat()
        } else {
            e.shape.clone()
        })
    }

    /// The token ids the file carries, if any (`input_ids`, `[1, T]` or `[T]`, integers).
    pub fn input_ids(&self) -> Result<Option<Vec<u32>>> {
        if let Some(&idx) = self.names.get(names::INPUT_IDS) {
            let t = self.load(idx)?;
            token_ids(&self.path, &self.entries[idx].raw, &t).map(Some)
        } else if let Some(ids) = &self.ids_list {
            ids_in_range(&self.path, ids.clone()).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The compute dtype: as recorded in the fingerprint, else `--dtype-hint`, else the coarsest
    /// floating-point dtype stored.
    pub fn compute_dtype(&self) -> Option<DType> {
        let recorded = self
            .fingerprint
            .as_ref()
            .and_then(|f| f.get("dtype"))
            .and_then(Value::as_str)
            .and_then(parse_dtype_label);
        recorded.or(self.dtype_hint).or_else(|| {
            self.names
                .iter()
                .filter(|(n, _)| n.as_str() != names::INPUT_IDS)
                .filter_map(
                    |(_, &i)| match (self.entries[i].dtype, self.entries[i].bits16) {
                        (Some(d), _) if d.is_float() => Some(d),
                        (None, Some(_)) => Some(DType::BF16),
                        _ => None,
                    },
                )
                .max_by_key(|d| coarseness(*d))
        })
    }
}

impl crate::compare::TensorSource for FileSource {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>> {
        self.get(name)
    }
    fn names(&self) -> Vec<String> {
        FileSource::names(self)
    }
    fn tensor_head(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
        self.get_head(name, n)
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("array")
        .to_string()
}

/// `f32`, `float32`, `torch.float32`, `bfloat16`, … → DType.
pub fn parse_dtype_label(s: &str) -> Option<DType> {
    let s = s.trim().trim_start_matches("torch.");
    match s {
        "float" | "single" => Some(DType::F32),
        "double" => Some(DType::F64),
        "half" => Some(DType::F16),
        other => crate::device::parse_dtype(other).ok(),
    }
}

/// Orders float dtypes by rounding error: f64 < f32 < f16 < bf16.
pub fn coarseness(d: DType) -> u8 {
    match d {
        DType::F64 => 0,
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        _ => 0,
    }
}
