//! Safetensors checkpoints: one file or shards, memory-mapped, read tensor by tensor.
//!
//! Nothing is materialised until the forward pass asks for it, and every request states the
//! shape it expects: a missing tensor or a wrong shape is an error naming the tensor and file,
//! never a default-initialised weight.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use memmap2::Mmap;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype as StDtype, SafeTensors};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The bytes of one safetensors file: a memory map, or a blob compiled into the binary.
enum Bytes {
    Mapped(Mmap),
    Static(&'static [u8]),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Static(s) => s,
        }
    }
}

/// One parsed safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    bytes: Bytes,
    header_len: usize,
    metadata: Metadata,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::input::open_regular(path)?;
        // SAFETY: the map is read-only; a file truncated underneath us is the user's own race.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::file(path, e.to_string()))?;
        Self::parse(path.to_path_buf(), Bytes::Mapped(mmap))
    }

    /// A file compiled into the binary; `name` stands in for its path in messages.
    pub fn from_static(name: &str, bytes: &'static [u8]) -> Result<Self> {
        Self::parse(PathBuf::from(name), Bytes::Static(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self> {
        let (header_len, metadata) = read_metadata(&path, &bytes)?;
        Ok(SafetensorsFile {
            path,
            bytes,
            header_len,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.metadata.tensors().into_keys().collect();
        names.sort();
        names
    }

    pub fn contains(&self, name: &str) -> bool {
        self.metadata.info(name).is_some()
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.metadata.info(name)
    }

    /// The free-form string map of the header (`__metadata__`).
    pub fn user_metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.metadata().as_ref()
    }

    /// Raw little-endian bytes of one tensor.
    pub fn raw(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .info(name)
            .ok_or_else(|| Error::tensor(&self.path, name, "not in this file"))?;
        let start = 8 + self.header_len + info.data_offsets.0;
        let end = 8 + self.header_len + info.data_offsets.1;
        let data = self.bytes.get(start..end).ok_or_else(|| {
            Error::tensor(
                &self.path,
                name,
                "data lies past the end of the file (truncated?)",
            )
        })?;
        Ok((info, data))
    }

    /// Loads a tensor as stored (CPU), converting the safetensors dtype to candle's.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let (info, data) = self.raw(name)?;
        let dtype = candle_dtype(info.dtype).ok_or_else(|| {
            Error::tensor(
                &self.path,
                name,
                format!("unsupported dtype {}", info.dtype),
            )
        })?;
        Tensor::from_raw_buffer(data, dtype, &info.shape, &Device::Cpu)
            .map_err(|e| Error::tensor(&self.path, name, e.to_string()))
    }

    /// Whether reads of the map will be scattered (no readahead: a sampled digest then reads
    /// only the pages it samples) or normal. Compiled-in files ignore it.
    pub fn advise_random(&self, random: bool) {
        #[cfg(unix)]
        if let Bytes::Mapped(m) = &self.bytes {
            let advice = if random {
                memmap2::Advice::Random
            } else {
                memmap2::Advice::Normal
            };
            let _ = m.advise(advice);
        }
        #[cfg(not(unix))]
        let _ = random;
    }

    /// SHA-256 over the whole file, streamed from the map.
    pub fn sha256(&self) -> String {
        let mut h = Sha256::new();
        for chunk in self.bytes.chunks(1 << 20) {
            h.update(chunk);
        }
        format!("{:x}", h.finalize())
    }
}

/// Largest safetensors header read (the safetensors crate's own cap).
const MAX_HEADER: usize = 100 << 20;

/// Parses a safetensors header with every size checked first and every failure in words: the
/// header length against the file, duplicate tensor names (which the safetensors crate would
/// report as a bad offset), then the crate's own validation of dtypes, shapes and offsets.
pub fn read_metadata(path: &Path, bytes: &[u8]) -> Result<(usize, Metadata)> {
    let bad = |msg: String| Error::file(path, format!("not a valid safetensors file: {msg}"));
    let head: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("too small to hold a header".into()))?;
    let n = u64::from_le_bytes(head);
    let header = usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_HEADER)
        .and_then(|n| bytes.get(8..8 + n))
        .ok_or_else(|| {
            bad(format!(
                "its header claims {n} bytes, the file holds {} after the length field (truncated?)",
                bytes.len().saturating_sub(8)
            ))
        })?;
    if let Err(e) = serde_json::from_slice::<UniqueKeys>(header) {
        let text = e.to_string();
        return Err(match text.strip_prefix(DUPLICATE) {
            Some(rest) => {
                let name = rest.split(" at line").next().unwrap_or(rest);
                Error::tensor(path, name, "named twice in the safetensors header")
            }
            None => bad(format!("the header is not a JSON object ({text})")),
        });
    }
    SafeTensors::read_metadata(bytes).map_err(|e| bad(describe_st_error(&e)))
}

const DUPLICATE: &str = "duplicate key ";

/// Deserialises a JSON object's keys only, failing on the first key seen twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<UniqueKeys, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!("{DUPLICATE}{k}")));
                    }
                }
                Ok(UniqueKeys)
            }
        }
        d.deserialize_map(Visit)
    }
}

fn describe_st_error(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::MetadataIncompleteBuffer => "shorter than its header says: truncated".to_string(),
        E::HeaderTooSmall => "too small to hold a header".to_string(),
        E::HeaderTooLarge => "its header is over 100 MB".to_string(),
        E::InvalidHeaderLength => "its header length points past the end of the file".to_string(),
        E::InvalidHeader(_) => "its header is not UTF-8 text".to_string(),
        E::InvalidHeaderDeserialization(err) | E::JsonError(err) => {
            format!("its header does not describe tensors ({err})")
        }
        E::TensorInvalidInfo => {
            "a tensor's byte range does not match its shape and dtype".to_string()
        }
        E::InvalidOffset(name) => format!(
            "tensor `{name}` has a byte range that overlaps another tensor, leaves a gap, or runs past the data"
        ),
        E::ValidationOverflow => "a tensor's shape is too large to address".to_string(),
        E::MisalignedSlice => "a tensor's data is not aligned to its dtype".to_string(),
        E::TensorNotFound(name) => format!("tensor `{name}` is missing"),
        E::InvalidTensorView(dtype, shape, n) => {
            format!("a {dtype} tensor of shape {shape:?} cannot hold {n} bytes")
        }
        E::IoError(err) => crate::input::io_words(err),
    }
}

pub fn candle_dtype(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::F64 => DType::F64,
        StDtype::F32 => DType::F32,
        StDtype::BF16 => DType::BF16,
        StDtype::F16 => DType::F16,
        StDtype::I64 => DType::I64,
        StDtype::U32 => DType::U32,
        StDtype::U8 => DType::U8,
        _ => return None,
    })
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
    pub fn get(
        &self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let file = self.locate(name, shape)?;
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
                    crate::device::dtype_label(t.dtype())
                ),
            ));
        }
        let t = t.to_dtype(dtype)?.to_device(device)?;
        Ok(t)
    }

    /// The file holding `name`, which must have exactly `shape`.
    /// The stored bytes of `name` when it is stored in bf16 with exactly `shape` (`None` for
    /// another stored dtype): what a bf16 consumer can read without a copy.
    pub fn stored_bf16(&self, name: &str, shape: &[usize]) -> Result<Option<&[u8]>> {
        let (info, data) = self.locate(name, shape)?.raw(name)?;
        Ok((info.dtype == StDtype::BF16).then_some(data))
    }

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
    pub fn get_rows(
        &self,
        name: &str,
        shape: &[usize],
        rows: &[usize],
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let file = self.locate(name, shape)?;
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
        Ok(t.to_dtype(dtype)?.to_device(device)?)
    }

    /// Every tensor's header entry and raw bytes, in name order across shards (for digests).
    pub fn raw_tensors(&self) -> impl Iterator<Item = (&str, Result<(&TensorInfo, &[u8])>)> {
        self.index
            .iter()
            .map(|(name, &i)| (name.as_str(), self.files[i].raw(name)))
    }

    /// [`SafetensorsFile::advise_random`] for every file.
    pub fn advise_random(&self, random: bool) {
        for f in &self.files {
            f.advise_random(random);
        }
    }

    /// A digest of every tensor file, in shard order.
    pub fn weights_sha256(&self) -> String {
        let mut h = Sha256::new();
        for f in &self.files {
            h.update(f.sha256().as_bytes());
        }
        format!("{:x}", h.finalize())
    }
}

/// The shard file names (sorted, deduplicated) and the tensor → file map of an index.json.
fn read_index(index_path: &Path) -> Result<(Vec<String>, BTreeMap<String, String>)> {
    let bytes =
        crate::input::read_regular(index_path, crate::limits::get().json_bytes, "json-bytes")?;
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
