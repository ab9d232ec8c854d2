//! Dump files: safetensors with `input_ids` (i64 `[1, T]`), the captured tensors under their
//! [`Key`] names, and a JSON [`Fingerprint`] under the metadata key `hsdiff`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::{Captures, Key};
use crate::capture::fingerprint::Fingerprint;
use crate::error::{Error, Result};
use crate::util::device::dtype_named;
use crate::weights::safetensors_file::{SafetensorsFile, candle_dtype};

pub const METADATA_KEY: &str = "hsdiff";

pub fn write(path: &Path, caps: &Captures, fingerprint: &Fingerprint) -> Result<()> {
    let t = caps.input_ids.len();
    let ids: Vec<i64> = caps.input_ids.iter().map(|&x| i64::from(x)).collect();
    let mut tensors: Vec<(String, Tensor)> = vec![(
        Key::InputIds.to_string(),
        Tensor::from_vec(ids, (1, t), &Device::Cpu)?,
    )];
    for (key, tensor) in caps.iter() {
        tensors.push((
            key.to_string(),
            tensor.to_device(&Device::Cpu)?.contiguous()?,
        ));
    }
    let json = serde_json::to_string(fingerprint).map_err(|e| Error::file(path, e.to_string()))?;
    let metadata = HashMap::from([(METADATA_KEY.to_string(), json)]);
    let list: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    crate::util::output::write_with(path, |file| {
        crate::weights::safetensors_file::write_tensors(path, file, &list, Some(metadata))
    })
}

/// A dump opened for reading, tensor by tensor from a memory map (or from bytes compiled into
/// the binary: the built-in golden set).
pub struct Dump {
    file: SafetensorsFile,
    pub fingerprint: Option<Fingerprint>,
}

impl Dump {
    pub fn open(path: &Path) -> Result<Self> {
        Self::new(SafetensorsFile::open(path)?)
    }

    /// A dump compiled into the binary; `label` stands for its path in messages.
    pub fn from_static(label: &str, bytes: &'static [u8]) -> Result<Self> {
        Self::new(SafetensorsFile::from_static(label, bytes)?)
    }

    fn new(file: SafetensorsFile) -> Result<Self> {
        let fingerprint = match file.user_metadata().and_then(|m| m.get(METADATA_KEY)) {
            Some(json) => Some(serde_json::from_str(json).map_err(|e| {
                Error::file(
                    file.path(),
                    format!("metadata `{METADATA_KEY}` is not valid: {e}"),
                )
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

    /// The token ids, if the dump carries them (see [`token_ids`]).
    pub fn input_ids(&self) -> Result<Option<Vec<u32>>> {
        let name = Key::InputIds.to_string();
        if !self.contains(&name) {
            return Ok(None);
        }
        let t = self.tensor(&name)?;
        token_ids(self.path(), &name, &t).map(Some)
    }

    /// The token ids of a dump that is to be recomputed (golden files): present and not empty.
    pub fn required_input_ids(&self) -> Result<Vec<u32>> {
        let bad = |msg: &str| Error::tensor(self.path(), Key::InputIds, msg.to_string());
        let ids = self.input_ids()?.ok_or_else(|| {
            bad("missing: a golden file must carry the token ids it was computed from")
        })?;
        if ids.is_empty() {
            return Err(bad("holds no token ids"));
        }
        Ok(ids)
    }

    /// The dtype the states were computed in: the fingerprint's `dtype`, else the dtype of the
    /// first hidden state stored (`embed` or `layers.N`).
    pub fn states_dtype(&self) -> Result<DType> {
        if let Some(d) = self.fingerprint.as_ref().and_then(|f| f.dtype.as_deref()) {
            return dtype_named(d).ok_or_else(|| {
                Error::file(
                    self.path(),
                    format!("fingerprint dtype `{d}` is not one hsdiff computes in"),
                )
            });
        }
        let name = self
            .names()
            .into_iter()
            .find(|n| matches!(Key::of(n), Some(Key::Embed | Key::Layer(_))))
            .ok_or_else(|| {
                Error::file(
                    self.path(),
                    "no `embed` or `layers.N` tensor: not a dump of hidden states",
                )
            })?;
        let info = self
            .file
            .info(&name)
            .ok_or_else(|| Error::tensor(self.path(), &name, "not in this file"))?;
        candle_dtype(info.dtype)
            .filter(|d| d.is_float())
            .ok_or_else(|| {
                Error::tensor(
                    self.path(),
                    &name,
                    format!("dtype {:?} is not a float type", info.dtype),
                )
            })
    }
}

/// Token ids from the tensor `name` of the file `path`: integers, one sequence (`[1, T]` or
/// `[T]`), each a valid `u32`. The one check every reader of token ids uses.
pub fn token_ids(path: &Path, name: &str, t: &Tensor) -> Result<Vec<u32>> {
    let bad = |msg: &str| Error::tensor(path, name, msg.to_string());
    if !matches!(
        t.dtype(),
        DType::I64 | DType::I32 | DType::I16 | DType::U32 | DType::U8
    ) {
        return Err(bad("must be integer token ids, [1, T] or [T]"));
    }
    let t = match t.rank() {
        1 => t.clone(),
        2 if t.dim(0)? == 1 => t.squeeze(0)?,
        _ => return Err(bad("must be token ids of one sequence, [1, T] or [T]")),
    };
    ids_in_range(path, t.to_dtype(DType::I64)?.to_vec1()?)
}

/// `ids` as `u32`, or an error naming the first that is out of range.
pub fn ids_in_range(path: &Path, ids: Vec<i64>) -> Result<Vec<u32>> {
    ids.into_iter()
        .map(|x| {
            u32::try_from(x).map_err(|_| {
                Error::tensor(path, Key::InputIds, format!("token id {x} out of range"))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(t: Tensor) -> Result<Vec<u32>> {
        token_ids(Path::new("d.safetensors"), "input_ids", &t)
    }

    #[test]
    fn token_ids_take_one_integer_sequence_in_range() -> Result<()> {
        let cpu = &Device::Cpu;
        assert_eq!(ids(Tensor::new(&[[5i64, 7, 9]], cpu)?)?, vec![5, 7, 9]);
        assert_eq!(ids(Tensor::new(&[3u32, 4], cpu)?)?, vec![3, 4]);
        let float = ids(Tensor::new(&[1.0f32], cpu)?).unwrap_err().to_string();
        assert!(float.contains("must be integer token ids"), "{float}");
        let batch = ids(Tensor::new(&[[1i64], [2]], cpu)?)
            .unwrap_err()
            .to_string();
        assert!(batch.contains("one sequence"), "{batch}");
        let negative = ids(Tensor::new(&[[-1i64]], cpu)?).unwrap_err().to_string();
        assert!(negative.contains("token id -1 out of range"), "{negative}");
        Ok(())
    }
}
