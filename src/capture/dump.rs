//! Dump files: safetensors with `input_ids` (i64 `[1, T]`), the captured tensors under their
//! [`names`](super::names), and a JSON [`Fingerprint`] under the metadata key `hsdiff`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::{Captures, names};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::safetensors_file::SafetensorsFile;

pub const METADATA_KEY: &str = "hsdiff";

pub fn write(path: &Path, caps: &Captures, fingerprint: &Fingerprint) -> Result<()> {
    let t = caps.input_ids.len();
    let ids: Vec<i64> = caps.input_ids.iter().map(|&x| i64::from(x)).collect();
    let mut tensors: Vec<(String, Tensor)> = vec![(
        names::INPUT_IDS.to_string(),
        Tensor::from_vec(ids, (1, t), &Device::Cpu)?,
    )];
    for (name, tensor) in caps.iter() {
        tensors.push((
            name.to_string(),
            tensor.to_device(&Device::Cpu)?.contiguous()?,
        ));
    }
    let json = serde_json::to_string(fingerprint).map_err(|e| Error::file(path, e.to_string()))?;
    let metadata = HashMap::from([(METADATA_KEY.to_string(), json)]);
    crate::output::write_with(path, |tmp| {
        safetensors::serialize_to_file(
            tensors.iter().map(|(n, t)| (n.as_str(), t)),
            Some(metadata),
            tmp,
        )
        .map_err(|e| Error::file(path, format!("cannot write: {e}")))
    })
}

/// A dump opened for reading, tensor by tensor from a memory map.
pub struct Dump {
    file: SafetensorsFile,
    pub fingerprint: Option<Fingerprint>,
}

impl Dump {
    pub fn open(path: &Path) -> Result<Self> {
        let file = SafetensorsFile::open(path)?;
        let fingerprint = match file.user_metadata().and_then(|m| m.get(METADATA_KEY)) {
            Some(json) => Some(serde_json::from_str(json).map_err(|e| {
                Error::file(path, format!("metadata `{METADATA_KEY}` is not valid: {e}"))
            })?),
            None => None,
        };
        Ok(Dump { file, fingerprint })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn names(&self) -> Vec<String> {
        self.file.names()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.file.contains(name)
    }

    /// One tensor, as stored (CPU).
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        self.file.load(name)
    }

    /// The token ids, if the dump carries them (`input_ids`, `[1, T]` or `[T]`, integer).
    pub fn input_ids(&self) -> Result<Option<Vec<u32>>> {
        if !self.contains(names::INPUT_IDS) {
            return Ok(None);
        }
        let t = self.tensor(names::INPUT_IDS)?;
        let bad = || {
            Error::tensor(
                self.path(),
                names::INPUT_IDS,
                "must be integer token ids, [1, T] or [T]",
            )
        };
        if !matches!(t.dtype(), DType::I64 | DType::U32 | DType::U8) {
            return Err(bad());
        }
        let t = match t.rank() {
            1 => t,
            2 if t.dim(0)? == 1 => t.squeeze(0)?,
            _ => return Err(bad()),
        };
        let ids: Vec<i64> = t.to_dtype(DType::I64)?.to_vec1()?;
        ids.into_iter()
            .map(|x| {
                u32::try_from(x).map_err(|_| {
                    Error::tensor(
                        self.path(),
                        names::INPUT_IDS,
                        format!("token id {x} out of range"),
                    )
                })
            })
            .collect::<Result<Vec<u32>>>()
            .map(Some)
    }
}
