//! An SGLang sample made into a [`FileSource`]: its tensors, already reconstructed and joined,
//! laid out in anonymous memory and indexed under hsdiff's names, so the comparison reads it as
//! any other file.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Tensor};
use memmap2::MmapMut;

use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::{Entry, FileFormat, FileSource, Loc};
use crate::util::limits;
use crate::util::mapped::FileMap;

/// One sample's tensors under hsdiff's names (`input_ids`, `embed`, `layers.N`, `final_norm`).
pub struct Sample {
    pub tensors: Vec<(String, Tensor)>,
    /// What the reading was, for stderr and the report.
    pub description: String,
    /// Each request's token count when the forward pass batched several (else one entry).
    pub requests: Vec<usize>,
    /// Positions 0..absent_prefix of the request are in no pass (served from the prefix cache):
    /// the sample's first row is position `absent_prefix`.
    pub absent_prefix: usize,
}

/// Checks a hidden state's shape `[T, H]` against the limits and the model at hand.
pub fn check_hidden(
    what: &str,
    t: &Tensor,
    hidden_size: Option<usize>,
) -> std::result::Result<(usize, usize), String> {
    let (tokens, h) = match t.dims() {
        [tokens, h] => (*tokens, *h),
        other => {
            return Err(format!(
                "{what} has shape {other:?}: SGLang's hidden states are [tokens, hidden]"
            ));
        }
    };
    let l = limits::get();
    if tokens > l.tokens {
        return Err(limits::exceeded(what, tokens, "tokens", l.tokens));
    }
    if h > l.dim {
        return Err(limits::exceeded(what, h, "dim", l.dim));
    }
    match hidden_size {
        Some(want) if want != h => Err(format!(
            "{what} is {h} wide, but the model's hidden size is {want}"
        )),
        _ => Ok((tokens, h)),
    }
}

/// The shape `[tokens, hidden]` the hidden states of one sample share: the first one checked
/// sets it, every later one must have it.
pub struct HiddenShapes {
    hidden_size: Option<usize>,
    first: Option<(usize, usize)>,
}

impl HiddenShapes {
    pub fn new(hidden_size: Option<usize>) -> Self {
        HiddenShapes {
            hidden_size,
            first: None,
        }
    }

    /// Checks `t` with [`check_hidden`]; a shape other than the first one's is refused in the
    /// words of `mismatch(shape, first)` (each dump layout says it its own way).
    pub fn check(
        &mut self,
        what: &str,
        t: &Tensor,
        mismatch: impl FnOnce((usize, usize), (usize, usize)) -> String,
    ) -> std::result::Result<(), String> {
        let s = check_hidden(what, t, self.hidden_size)?;
        match self.first {
            Some(first) if first != s => Err(mismatch(s, first)),
            _ => {
                self.first = Some(s);
                Ok(())
            }
        }
    }

    /// The shape of the first hidden state checked.
    pub fn first(&self) -> Option<(usize, usize)> {
        self.first
    }
}

/// `hidden + residual` as the next fused add-RMSNorm forms it: summed in f32 and rounded to the
/// dtype they are stored in (that sum is the residual stream SGLang carries on).
pub fn layer_output(hidden: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
    let sum = (hidden.to_dtype(DType::F32)? + residual.to_dtype(DType::F32)?)?;
    if hidden.dtype() == residual.dtype() {
        sum.to_dtype(hidden.dtype())
    } else {
        Ok(sum)
    }
}

fn le_bytes(t: &Tensor) -> candle_core::Result<Option<Vec<u8>>> {
    let t = t.flatten_all()?;
    Ok(Some(match t.dtype() {
        DType::BF16 => t
            .to_vec1::<half::bf16>()?
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()?
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F32 => t
            .to_vec1::<f32>()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec1::<f64>()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec1::<i64>()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        _ => return Ok(None),
    }))
}

/// The sample as a file source named `path` (the file standing for the forward pass).
/// `requests` is the number of requests in the forward pass the sample is one of, `pass_ids`
/// each one's token ids ([`super::requests::each_requests_ids`]).
pub fn source(
    path: &Path,
    sample: Sample,
    dtype_hint: Option<DType>,
    requests: usize,
    pass_ids: Vec<Tensor>,
) -> Result<FileSource> {
    let mut bytes = Vec::new();
    let mut entries = Vec::new();
    let mut index = BTreeMap::new();
    for (name, t) in &sample.tensors {
        let t = match Key::of(name) {
            Some(Key::InputIds) => t.to_dtype(DType::I64)?,
            // SGLang's tensors are token-major without a batch axis; hsdiff's captures of more
            // than two axes (an op's `[1, T, heads, dim]`) carry it.
            _ if t.rank() > 2 => t.unsqueeze(0)?,
            _ => t.clone(),
        };
        let Some(b) = le_bytes(&t)? else {
            return Err(Error::tensor(
                path,
                name,
                format!(
                    "{} values: hsdiff reads SGLang's hidden states in bf16, f16, f32 or f64",
                    crate::util::device::dtype_label(t.dtype())
                ),
            ));
        };
        let start = bytes.len();
        bytes.extend_from_slice(&b);
        index.insert(name.clone(), entries.len());
        entries.push(Entry {
            raw: name.clone(),
            dtype: Some(t.dtype()),
            bits16: None,
            shape: t.dims().to_vec(),
            fortran: false,
            loc: Loc::Range(start, bytes.len()),
            seq: None,
        });
    }
    // A map cannot be empty; one spare byte keeps every range inside it.
    bytes.push(0);
    let mut anon = MmapMut::map_anon(bytes.len()).map_err(|e| Error::io(path, e))?;
    anon.copy_from_slice(&bytes);
    let map = anon.make_read_only().map_err(|e| Error::io(path, e))?;
    let mut src = FileSource::empty(
        path,
        FileFormat::Torch,
        FileMap::anonymous(std::sync::Arc::new(map)),
    );
    src.entries = entries;
    src.names = index;
    src.conventions.push(sample.description);
    src.dtype_hint = dtype_hint;
    src.samples_in_file = requests;
    src.pass_ids = pass_ids;
    src.held_from = sample.absent_prefix;
    // Anonymous memory: releasing its pages would zero them.
    src.inflated = true;
    Ok(src)
}
