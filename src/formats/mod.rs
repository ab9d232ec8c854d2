//! Readers for the files `hsdiff compare` accepts: hsdiff dumps, safetensors written by PyTorch,
//! `torch.save` files (`.pt` / `.pth`) and numpy `.npy` / `.npz`. Each opens as a
//! [`FileSource`]: the file memory-mapped, its tensors indexed (name, dtype, shape, where the
//! bytes are) and renamed to hsdiff's names ([`naming`]); a tensor is only read when the
//! comparison asks for it, so memory stays near one tensor pair whatever the file size.
//!
//! docs/file-formats.md describes the formats and name conventions for users. This file tells
//! the formats apart and holds what they share; each format indexes its entries in its own
//! module (`safetensors_entries`, `npy`, `torch`), `entry_names` gives them hsdiff's names,
//! and `read` reads them.

mod entry_names;
mod hook_batch;
pub mod mapped_rows;
pub mod naming;
pub mod npy;
pub mod pickle;
pub mod pipelines;
mod read;
mod residual_pairs;
mod router_ids;
mod safetensors_entries;
mod torch;
mod value_dtype;
mod zipdir;

pub use value_dtype::value_dtype_notes;
pub use zipdir::ZipIndex;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::mapped::FileMap;
use candle_core::{DType, Tensor};
use serde_json::Value;

use crate::capture::Key;
use crate::error::{Error, Result};

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
    map: FileMap,
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
    /// The dtype other tools record in safetensors metadata (`dtype`, `torch_dtype`).
    metadata_dtype: Option<DType>,
    /// The dtype every hidden state's values are exact in, when narrower than stored
    /// ([`FileSource::infer_dtype_from_values`]).
    value_dtype: Option<DType>,
    /// The archive's directory, for entries that are read through the inflater.
    zip: Option<ZipIndex>,
    /// hsdiff names two entries map to equally well, with the entries (refused unless `--map`
    /// picks one: [`FileSource::check_unambiguous`]).
    clashes: BTreeMap<String, Vec<usize>>,
    /// Entries that are a part of a stored tensor (a drafter pipeline's layer), by index.
    views: BTreeMap<usize, pipelines::view::View>,
    /// The stored tensor several views cut their layers from, read once.
    stored: pipelines::stored::StoredCache,
    /// The residual halves of vLLM (hidden, residual) pairs, by the entry of their hidden half,
    /// which reads as their sum ([`residual_pairs`]).
    residuals: BTreeMap<usize, Entry>,
    /// What a drafter pipeline's file was read as ([`pipelines`]), if one wrote it.
    pub pipeline: Option<pipelines::PipelineInfo>,
    /// Samples the file holds when no pipeline reading says: an SGLang forward pass's requests,
    /// a masked hook batch's rows ([`hook_batch`]); 1 otherwise.
    pub samples_in_file: usize,
    /// Such a pass's token ids of each request (empty when it holds one or carries none): the
    /// other requests' ids without reading the pass again ([`FileSource::held_input_ids`]).
    pass_ids: Vec<Tensor>,
    /// The position of the file's first token row: > 0 when the positions before it are in no
    /// dump (an SGLang request extended after a prefix-cache hit); 0 otherwise.
    pub held_from: usize,
    /// The map is anonymous memory (an inflated `.gz`): its pages are never released, as
    /// releasing them would zero them.
    inflated: bool,
    /// The expert count of the model at hand (`--model`), which router expert ids are below.
    model_experts: Option<usize>,
}

fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::file(path, msg)
}

impl FileSource {
    /// The samples the file holds: a batch's rows, an SGLang pass's requests, else 1.
    pub fn samples_held(&self) -> usize {
        self.pipeline
            .as_ref()
            .map_or(self.samples_in_file, |p| p.batch)
    }

    /// The token ids of sample `b` of this file when this source already holds them (every
    /// request's of an SGLang pass, read once with the pass); None: open sample `b` for them.
    pub fn held_input_ids(&self, b: usize) -> Option<Result<Vec<u32>>> {
        let ids = self.pass_ids.get(b)?;
        let name = Key::InputIds.to_string();
        Some(crate::capture::dump::token_ids(&self.path, &name, ids))
    }

    /// Opens and indexes `path`. `dtype_hint` (`--dtype-hint`) is the compute dtype of files that
    /// record none, and lets 16-bit integer arrays be read as bf16 bits.
    pub fn open(path: &Path, dtype_hint: Option<DType>) -> Result<Self> {
        Self::open_with(path, dtype_hint, &pipelines::ReadOptions::default())
    }

    /// [`FileSource::open`], with what a drafter pipeline's file needs to be read (its layer
    /// ids, the model's size, the sample of a batch).
    pub fn open_with(
        path: &Path,
        dtype_hint: Option<DType>,
        opts: &pipelines::ReadOptions,
    ) -> Result<Self> {
        // SGLang's dumps: a sample is many files (or a leaf-module dict), rebuilt in memory.
        if let Some(src) = pipelines::sglang::open(path, dtype_hint, opts)? {
            return Ok(src);
        }
        let file = crate::util::input::open_regular(path)?;
        let len = file.metadata().map_err(|e| bad(path, e.to_string()))?.len();
        if len == 0 {
            return Err(bad(path, "empty file"));
        }
        let mut map = FileMap::map(&file, path)?;
        let inflated = pipelines::gzip::is_gzip(&map);
        if inflated {
            map = FileMap::anonymous(pipelines::gzip::inflate(path, &file, &map)?);
        }
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
        } else if map.first() == Some(&0x80)
            && matches!(ext.as_str(), "pt" | "pth" | "bin" | "ckpt")
        {
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
        src.inflated = inflated;
        src.model_experts = opts.num_experts;
        if !src.read_as_pipeline(opts)? {
            src.pair_residuals()?;
            src.split_stacked()?;
            src.assign_names();
            src.read_hook_batch(opts.sample)?;
        }
        Ok(src)
    }

    fn empty(path: &Path, format: FileFormat, map: FileMap) -> Self {
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
            metadata_dtype: None,
            value_dtype: None,
            zip: None,
            clashes: BTreeMap::new(),
            views: BTreeMap::new(),
            stored: Default::default(),
            residuals: BTreeMap::new(),
            pipeline: None,
            samples_in_file: 1,
            pass_ids: Vec::new(),
            held_from: 0,
            inflated: false,
            model_experts: None,
        }
    }

    /// Whether the file was a gzip file, inflated into memory to be read.
    pub fn inflated(&self) -> bool {
        self.inflated
    }

    /// The compute dtype: as recorded in the fingerprint, else `--dtype-hint`, else as other
    /// tools' safetensors metadata records it, else the dtype every value is exact in (when
    /// [`FileSource::infer_dtype_from_values`] ran), else the coarsest floating-point dtype stored.
    pub fn compute_dtype(&self) -> Option<DType> {
        let recorded = self
            .fingerprint
            .as_ref()
            .and_then(|f| f.get("dtype"))
            .and_then(Value::as_str)
            .and_then(parse_dtype_label);
        recorded
            .or(self.dtype_hint)
            .or(self.metadata_dtype)
            .or(self.value_dtype)
            .or_else(|| {
                self.names
                    .iter()
                    .filter(|(n, _)| Key::of(n) != Some(Key::InputIds))
                    .filter_map(
                        |(_, &i)| match (self.entries[i].dtype, self.entries[i].bits16) {
                            (Some(d), _) if d.is_float() => Some(d),
                            (None, Some(_)) => Some(DType::BF16),
                            _ => None,
                        },
                    )
                    .max_by_key(|d| crate::util::precision::coarseness(*d))
            })
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
        other => crate::util::device::dtype_named(other),
    }
}
