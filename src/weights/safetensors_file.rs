//! The one safetensors layer: the header parsed with every size checked first and every failure
//! in words, the one map from safetensors dtypes to candle's, and byte ranges checked against the
//! file. Checkpoints ([`crate::weights::checkpoint`]), dumps ([`crate::capture::dump`]) and the files
//! `compare` reads ([`crate::formats`]) all read safetensors through it.

use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype as StDtype, SafeTensors};

use crate::error::{Error, Result};
use crate::util::mapped::FileMap;

/// The bytes of one safetensors file: a memory map, or a blob compiled into the binary.
enum Bytes {
    Mapped(FileMap),
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
    header: SafetensorsHeader,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::util::input::open_regular(path)?;
        let map = FileMap::map(&file, path)?;
        Self::parse(path.to_path_buf(), Bytes::Mapped(map))
    }

    /// A file compiled into the binary; `name` stands in for its path in messages.
    pub fn from_static(name: &str, bytes: &'static [u8]) -> Result<Self> {
        Self::parse(PathBuf::from(name), Bytes::Static(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self> {
        let header = SafetensorsHeader::parse(&path, &bytes)?;
        Ok(SafetensorsFile {
            path,
            bytes,
            header,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.header.metadata.tensors().into_keys().collect();
        names.sort();
        names
    }

    pub fn contains(&self, name: &str) -> bool {
        self.header.metadata.info(name).is_some()
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.header.metadata.info(name)
    }

    /// The free-form string map of the header (`__metadata__`).
    pub fn user_metadata(&self) -> Option<&HashMap<String, String>> {
        self.header.metadata.metadata().as_ref()
    }

    /// Raw little-endian bytes of one tensor.
    pub fn raw(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .info(name)
            .ok_or_else(|| Error::tensor(&self.path, name, "not in this file"))?;
        let range = self
            .header
            .range(&self.path, name, info, self.bytes.len())?;
        Ok((info, &self.bytes[range]))
    }

    /// Loads a tensor as stored (CPU), converting the safetensors dtype to candle's.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let (info, data) = self.raw(name)?;
        let dtype = stored_dtype(&self.path, name, info)?;
        let t = Tensor::from_raw_buffer(data, dtype, &info.shape, &Device::Cpu)
            .map_err(|e| Error::tensor(&self.path, name, e.to_string()))?;
        // Pages past a truncated end read as zeros: never hand those on.
        crate::util::mapped::check()?;
        Ok(t)
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
            let _ = m.inner().advise(advice);
        }
        #[cfg(not(unix))]
        let _ = random;
    }
}

/// Writes `tensors` and `metadata` to `out` as a safetensors file (`path` names it in
/// messages): the header the safetensors crate validates, tensors ordered by descending element
/// size (every tensor aligned to its dtype), then the data. Written through the caller's file so
/// that [`crate::util::output`] owns the only temp file.
pub fn write_tensors(
    path: &Path,
    out: &mut impl std::io::Write,
    tensors: &[(&str, &Tensor)],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    use safetensors::View;
    let cannot = |msg: String| Error::output(path, format!("cannot write: {msg}"));
    let mut order: Vec<(&str, Tensor)> = tensors
        .iter()
        .map(|(n, t)| Ok((*n, t.to_device(&Device::Cpu)?.contiguous()?)))
        .collect::<Result<_>>()?;
    order.sort_by(|(an, at), (bn, bt)| {
        bt.dtype()
            .size_in_bytes()
            .cmp(&at.dtype().size_in_bytes())
            .then(an.cmp(bn))
    });
    let mut infos = Vec::with_capacity(order.len());
    let mut offset = 0usize;
    for (name, t) in &order {
        let len = View::data_len(t);
        let end = offset
            .checked_add(len)
            .ok_or_else(|| cannot("the tensors are too large to address".into()))?;
        infos.push((
            name.to_string(),
            TensorInfo {
                dtype: View::dtype(t),
                shape: t.dims().to_vec(),
                data_offsets: (offset, end),
            },
        ));
        offset = end;
    }
    let header = Metadata::new(metadata, infos).map_err(|e| cannot(describe_st_error(&e)))?;
    let mut json = serde_json::to_vec(&header).map_err(|e| cannot(e.to_string()))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let io = |e: std::io::Error| Error::write(path, "cannot write", e);
    let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
    w.write_all(&(json.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(&json).map_err(io)?;
    for (_, t) in &order {
        w.write_all(&View::data(t)).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Largest safetensors header read (the safetensors crate's own cap).
const MAX_HEADER: usize = 100 << 20;

/// A parsed safetensors header: its length and what it lists.
pub struct SafetensorsHeader {
    /// Bytes of the JSON header (the data starts 8 bytes later).
    len: usize,
    metadata: Metadata,
}

/// One tensor a header lists, not yet read: its candle dtype, shape and bytes in the file.
pub struct StoredTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub range: Range<usize>,
}

impl SafetensorsHeader {
    /// Parses the header at the start of `bytes` (the whole file).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let (len, metadata) = read_metadata(path, bytes)?;
        Ok(SafetensorsHeader { len, metadata })
    }

    /// The free-form string map of the header (`__metadata__`).
    pub fn user_metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.metadata().as_ref()
    }

    /// Every tensor listed, by name, each with a dtype candle has and a byte range inside a file
    /// of `file_len` bytes.
    pub fn tensors(&self, path: &Path, file_len: usize) -> Result<Vec<StoredTensor>> {
        let mut infos: Vec<(String, &TensorInfo)> = self.metadata.tensors().into_iter().collect();
        infos.sort_by(|x, y| x.0.cmp(&y.0));
        infos
            .into_iter()
            .map(|(name, info)| {
                let dtype = stored_dtype(path, &name, info)?;
                let range = self.range(path, &name, info, file_len)?;
                Ok(StoredTensor {
                    name,
                    dtype,
                    shape: info.shape.clone(),
                    range,
                })
            })
            .collect()
    }

    /// Where `name`'s data lies in a file of `file_len` bytes.
    fn range(
        &self,
        path: &Path,
        name: &str,
        info: &TensorInfo,
        file_len: usize,
    ) -> Result<Range<usize>> {
        let base = 8 + self.len;
        let (start, end) = (base + info.data_offsets.0, base + info.data_offsets.1);
        if end > file_len || start > end {
            return Err(Error::tensor(
                path,
                name,
                "data lies past the end of the file (truncated?)",
            ));
        }
        Ok(start..end)
    }
}

/// Parses a safetensors header with every size checked first and every failure in words: the
/// header length against the file, duplicate tensor names (which the safetensors crate would
/// report as a bad offset), then the crate's own validation of dtypes, shapes and offsets.
fn read_metadata(path: &Path, bytes: &[u8]) -> Result<(usize, Metadata)> {
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
        E::IoError(err) => crate::error::io_words(err),
    }
}

/// The one map from safetensors dtypes to candle's; `None` for those candle has no type for.
/// Booleans are read as bytes.
pub fn candle_dtype(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::F64 => DType::F64,
        StDtype::F32 => DType::F32,
        StDtype::BF16 => DType::BF16,
        StDtype::F16 => DType::F16,
        StDtype::I64 => DType::I64,
        StDtype::I32 => DType::I32,
        StDtype::I16 => DType::I16,
        StDtype::U32 => DType::U32,
        StDtype::U8 | StDtype::BOOL => DType::U8,
        _ => return None,
    })
}

/// [`candle_dtype`] of a listed tensor, or an error naming it.
fn stored_dtype(path: &Path, name: &str, info: &TensorInfo) -> Result<DType> {
    candle_dtype(info.dtype)
        .ok_or_else(|| Error::tensor(path, name, format!("unsupported dtype {}", info.dtype)))
}
