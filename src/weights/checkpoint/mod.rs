//! Safetensors checkpoints: one file or shards, memory-mapped, read tensor by tensor (each file
//! through [`crate::weights::safetensors_file`]).
//!
//! Nothing is materialised until the forward pass asks for it, and every request states the
//! shape it expects: a missing tensor or a wrong shape is an error naming the tensor and file,
//! never a default-initialised weight.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor};
use safetensors::tensor::TensorInfo;

use crate::error::{Error, Result};
use crate::fp8::Fp8Scheme;
use crate::weights::non_finite::{NonFiniteTensor, scan_tensor};
use crate::weights::safetensors_file::{SafetensorsFile, candle_dtype};

mod fp8;

/// A tensor the forward pass asks a weight source for: its name, the exact shape it must have,
/// and the dtype and device it is wanted in.
#[derive(Debug, Clone, Copy)]
pub struct TensorRequest<'a> {
    pub name: &'a str,
    pub shape: &'a [usize],
    pub dtype: DType,
    pub device: &'a Device,
}

/// Where the text model's tensors live inside the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLayout {
    /// `model.layers.*` (Qwen3-Next, text-only exports).
    TextOnly,
    /// `model.language_model.layers.*` (Qwen3.5 vision-language checkpoints).
    VisionLanguage,
}

impl KeyLayout {
    /// Prefix of embed_tokens, norm and layers.
    pub fn root(&self) -> &'static str {
        match self {
            KeyLayout::TextOnly => "model.",
            KeyLayout::VisionLanguage => "model.language_model.",
        }
    }
}

/// All tensors of a checkpoint folder, by name, across shards.
pub struct Checkpoint {
    dir: PathBuf,
    files: Vec<SafetensorsFile>,
    /// tensor name → index into `files`
    index: BTreeMap<String, usize>,
    /// tensor name → shard file that `model.safetensors.index.json` lists it under (sharded
    /// checkpoints only), so that a tensor the index promises but the shard lacks is reported
    /// against the right file.
    declared: BTreeMap<String, PathBuf>,
    layout: KeyLayout,
    /// The FP8 scheme of config.json, once [`Checkpoint::check_quantization`] accepted the
    /// tensors against it; FP8 tensors are refused without one.
    fp8: Option<Fp8Scheme>,
    /// What [`Checkpoint::non_finite`] found, scanned once however many runs ask.
    non_finite: OnceLock<Vec<NonFiniteTensor>>,
}

impl Checkpoint {
    /// Opens `model.safetensors`, or the shards listed in `model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        let index_path = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let mut declared = BTreeMap::new();
        let files = if index_path.exists() {
            let (shards, weight_map) = read_index(&index_path)?;
            declared = weight_map
                .into_iter()
                .map(|(tensor, file)| (tensor, dir.join(file)))
                .collect();
            shards
                .iter()
                .map(|name| SafetensorsFile::open(&dir.join(name)))
                .collect::<Result<Vec<_>>>()?
        } else if single.exists() {
            vec![SafetensorsFile::open(&single)?]
        } else {
            return Err(Error::file(
                dir,
                "no model.safetensors or model.safetensors.index.json in this folder",
            ));
        };
        let mut ckpt = Self::from_files(dir.to_path_buf(), files)?;
        if !declared.is_empty() {
            ckpt.verify_index(&index_path, &declared)?;
        }
        ckpt.declared = declared;
        Ok(ckpt)
    }

    pub fn from_files(dir: PathBuf, files: Vec<SafetensorsFile>) -> Result<Self> {
        let mut index = BTreeMap::new();
        for (i, f) in files.iter().enumerate() {
            for name in f.names() {
                if let Some(j) = index.insert(name.clone(), i) {
                    let other: &SafetensorsFile = &files[j];
                    return Err(Error::tensor(
                        f.path(),
                        &name,
                        format!(
                            "also in {}: a tensor must be in exactly one shard",
                            other.path().display()
                        ),
                    ));
                }
            }
        }
        let layout = if index.contains_key("model.language_model.embed_tokens.weight") {
            KeyLayout::VisionLanguage
        } else if index.contains_key("model.embed_tokens.weight") {
            KeyLayout::TextOnly
        } else {
            let first = files
                .first()
                .map(|f| f.path().to_path_buf())
                .unwrap_or_else(|| dir.clone());
            return Err(Error::tensor(
                first,
                "model.embed_tokens.weight",
                "missing (neither model.embed_tokens.weight nor \
                 model.language_model.embed_tokens.weight is present)",
            ));
        };
        Ok(Checkpoint {
            dir,
            files,
            index,
            declared: BTreeMap::new(),
            layout,
            fp8: None,
            non_finite: OnceLock::new(),
        })
    }

    /// Every tensor the shards hold is in the shard the index names for it.
    fn verify_index(&self, index_path: &Path, declared: &BTreeMap<String, PathBuf>) -> Result<()> {
        for (name, &i) in &self.index {
            let actual = self.files[i].path();
            match declared.get(name) {
                Some(listed) if listed == actual => {}
                Some(listed) => {
                    return Err(Error::tensor(
                        actual,
                        name,
                        format!(
                            "{} lists it under {}, but it is in this shard",
                            index_path.display(),
                            listed.display()
                        ),
                    ));
                }
                None => {
                    return Err(Error::tensor(
                        actual,
                        name,
                        format!("in this shard but not listed in {}", index_path.display()),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The file a tensor would come from (or the first file), for messages.
    pub fn file_of(&self, name: &str) -> &Path {
        let i = self.index.get(name).copied().unwrap_or(0);
        self.files.get(i).map(|f| f.path()).unwrap_or(&self.dir)
    }

    /// Loads `name`, checks its shape, and converts it to `dtype` on `device`.
    pub fn get(&self, want: &TensorRequest) -> Result<Tensor> {
        let (name, shape, dtype, device) = (want.name, want.shape, want.dtype, want.device);
        let file = self.locate(name, shape)?;
        if let Some(t) = self.dequantized(file, name, shape, None, dtype)? {
            return crate::util::device::to_dtype_on(t, dtype, device);
        }
        let t = file.load(name)?;
        if !matches!(
            t.dtype(),
            DType::BF16 | DType::F16 | DType::F32 | DType::F64
        ) {
            return Err(Error::tensor(
                file.path(),
                name,
                format!(
                    "dtype {} is not a float type",
                    crate::util::device::dtype_label(t.dtype())
                ),
            ));
        }
        crate::util::device::to_dtype_on(t, dtype, device)
    }

    /// The stored bytes of `name` when it is stored in bf16 with exactly `shape` (`None` for
    /// another stored dtype): what a bf16 consumer can read without a copy.
    pub fn stored_bf16(&self, name: &str, shape: &[usize]) -> Result<Option<&[u8]>> {
        let (info, data) = self.locate(name, shape)?.raw(name)?;
        Ok((info.dtype == safetensors::Dtype::BF16).then_some(data))
    }

    /// The file holding `name`, which must have exactly `shape`.
    fn locate(&self, name: &str, shape: &[usize]) -> Result<&SafetensorsFile> {
        let Some(&i) = self.index.get(name) else {
            if let Some(shard) = self.declared.get(name) {
                return Err(Error::tensor(
                    shard,
                    name,
                    "listed in model.safetensors.index.json for this shard, but missing from it",
                ));
            }
            return Err(Error::tensor(
                self.file_of(name),
                name,
                "missing from the checkpoint",
            ));
        };
        let file = &self.files[i];
        let info = file
            .info(name)
            .ok_or_else(|| Error::tensor(file.path(), name, "not in this file"))?;
        if info.shape != shape {
            return Err(Error::tensor(
                file.path(),
                name,
                format!("shape {:?}, expected {:?}", info.shape, shape),
            ));
        }
        Ok(file)
    }

    /// Rows `rows` (indices along the first dimension) of `name`, which must have exactly
    /// `shape`, converted to `dtype` on `device`. Only those rows' bytes are read from the map,
    /// so an embedding lookup or one block of the lm_head never materialises the whole matrix.
    pub fn get_rows(&self, want: &TensorRequest, rows: &[usize]) -> Result<Tensor> {
        let (name, shape, dtype, device) = (want.name, want.shape, want.dtype, want.device);
        let file = self.locate(name, shape)?;
        if let Some(t) = self.dequantized(file, name, shape, Some(rows), dtype)? {
            return crate::util::device::to_dtype_on(t, dtype, device);
        }
        let (info, data) = file.raw(name)?;
        let stored = candle_dtype(info.dtype)
            .filter(|d| d.is_float())
            .ok_or_else(|| {
                Error::tensor(
                    file.path(),
                    name,
                    format!("dtype {:?} is not a float type", info.dtype),
                )
            })?;
        let n_rows = shape.first().copied().unwrap_or(1);
        let row_bytes = shape.iter().skip(1).product::<usize>() * stored.size_in_bytes();
        let mut bytes = Vec::with_capacity(rows.len() * row_bytes);
        for &r in rows {
            let row = data
                .get(r * row_bytes..(r + 1) * row_bytes)
                .filter(|_| r < n_rows)
                .ok_or_else(|| {
                    Error::tensor(file.path(), name, format!("row {r} of {n_rows} requested"))
                })?;
            bytes.extend_from_slice(row);
        }
        let mut out_shape = shape.to_vec();
        if let Some(first) = out_shape.first_mut() {
            *first = rows.len();
        }
        let t = Tensor::from_raw_buffer(&bytes, stored, &out_shape, &Device::Cpu)
            .map_err(|e| Error::tensor(file.path(), name, e.to_string()))?;
        crate::util::device::to_dtype_on(t, dtype, device)
    }

    /// Every tensor's header entry and raw bytes, in name order across shards (for digests).
    pub fn raw_tensors(&self) -> impl Iterator<Item = (&str, Result<(&TensorInfo, &[u8])>)> {
        self.index
            .iter()
            .map(|(name, &i)| (name.as_str(), self.files[i].raw(name)))
    }

    /// Every float tensor holding NaN or ±Inf, in name order ([`crate::weights::non_finite`]); a
    /// tensor whose bytes cannot be read is left to the load that needs it, which names it.
    pub fn non_finite(&self) -> &[NonFiniteTensor] {
        self.non_finite.get_or_init(|| {
            self.raw_tensors()
                .filter_map(|(name, raw)| {
                    let (info, data) = raw.ok()?;
                    let stored = (info.dtype, info.shape.as_slice());
                    scan_tensor(name, self.file_of(name).to_path_buf(), stored, data)
                })
                .collect()
        })
    }

    /// [`SafetensorsFile::advise_random`] for every file.
    pub fn advise_random(&self, random: bool) {
        for f in &self.files {
            f.advise_random(random);
        }
    }
}

/// The shard file names (sorted, deduplicated) and the tensor → file map of an index.json.
fn read_index(index_path: &Path) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let bytes = crate::util::input::read_regular(
        index_path,
        crate::util::limits::get().json_bytes,
        "json-bytes",
    )?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::file(index_path, format!("not valid JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| Error::file(index_path, "no `weight_map` object"))?;
    let mut names: Vec<String> = Vec::new();
    let mut weight_map = BTreeMap::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            Error::file(
                index_path,
                format!("weight_map entry for `{tensor}` is not a file name"),
            )
        })?;
        // A shard is a file next to the index, never a path elsewhere.
        if file.is_empty() || file.contains(['/', '\\']) || file == "." || file == ".." {
            return Err(Error::file(
                index_path,
                format!(
                    "weight_map entry for `{tensor}` names `{file}`, not a file in this folder"
                ),
            ));
        }
        if !names.iter().any(|n| n == file) {
            names.push(file.to_string());
        }
        weight_map.insert(tensor.clone(), file.to_string());
    }
    names.sort();
    Ok((names, weight_map))
}
