//! `torch.save` files (the zip format of torch ≥ 1.6): the pickle is parsed with hsdiff's own
//! bounded reader ([`super::pickle`]), tensors are located in the archive's `data/N` storages and
//! read straight from the memory map (torch stores them uncompressed).
//!
//! Accepted top-level objects: a dict (nested dicts, tuples and lists allowed) whose tensor
//! leaves get dotted names (`hidden_states.3`), or a tuple/list of tensors (the
//! `output_hidden_states` tuple). A string or dict under the key `hsdiff` is read as the
//! fingerprint; a list of ints under `input_ids` as the token ids. A number, string, boolean or
//! None stored under a dict key (`{"prompt": "…", "step": 5}`) is metadata: it is left out and
//! listed in `left_out`, which the report states. Anything else (a custom object, bytes) is
//! refused with its name: nothing is skipped silently.

use std::path::Path;

use crate::util::mapped::FileMap;
use candle_core::DType;
use serde_json::Value as Json;

use super::pickle::{self, Obj, Value};
use super::{Entry, FileFormat, FileSource, ZipIndex, bad, npy, stem};
use crate::capture::dump::METADATA_KEY;
use crate::error;
use crate::util::limits;

/// Everything read from a `.pt` file's pickle.
pub struct Parsed {
    pub entries: Vec<Entry>,
    pub fingerprint: Option<Json>,
    pub input_ids: Option<Vec<i64>>,
    /// Scalar dict entries that are not tensors (`prompt (a string)`), left out of the comparison.
    pub left_out: Vec<String>,
    /// Dict keys pickled more than once (a crafted or concatenated pickle): the last value is
    /// read, as `torch.load` (a Python dict) keeps it.
    pub repeated_keys: Vec<String>,
}

impl FileSource {
    pub(super) fn torch(path: &Path, map: FileMap, zip: ZipIndex) -> error::Result<Self> {
        let parsed = parse(&map, &zip).map_err(|e| bad(path, e))?;
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
        if !parsed.repeated_keys.is_empty() {
            src.conventions.push(format!(
                "dict keys pickled more than once, the last value read (as torch.load does): {}",
                parsed.repeated_keys.join(", ")
            ));
        }
        Ok(src)
    }
}

pub fn parse(bytes: &[u8], zip: &ZipIndex) -> Result<Parsed, String> {
    let pkl = zip
        .names()
        .filter(|n| n.ends_with("/data.pkl") || *n == "data.pkl")
        .min_by_key(|n| n.len())
        .map(str::to_string)
        .ok_or("no data.pkl in the archive: not a torch.save file")?;
    let prefix = pkl.strip_suffix("data.pkl").unwrap_or_default().to_string();
    let pickle = zip.read_all(bytes, &pkl, limits::get().pickle_bytes)?;
    let obj = pickle::parse(&pickle).map_err(|e| format!("cannot unpickle {pkl}: {e}"))?;
    let mut walk = Walk {
        zip,
        prefix: &prefix,
        parsed: Parsed {
            entries: Vec::new(),
            fingerprint: None,
            input_ids: None,
            left_out: Vec::new(),
            repeated_keys: Vec::new(),
        },
    };
    match obj {
        Value::Dict(_) | Value::Tuple(_) | Value::List(_) => walk.visit(obj, "", None)?,
        other if tensor_call(&other).is_some() => walk.visit(other, "", None)?,
        other => {
            return Err(format!(
                "holds {}, not a dict or tuple/list of tensors (save `out.hidden_states`, or a dict)",
                describe(&other)
            ));
        }
    }
    Ok(walk.parsed)
}

struct Walk<'a> {
    zip: &'a ZipIndex,
    prefix: &'a str,
    parsed: Parsed,
}

impl Walk<'_> {
    /// Names the tensors under `obj`. Recursion is bounded: the pickle reader refused anything
    /// nested deeper than the pickle-depth limit.
    fn visit(
        &mut self,
        obj: Value,
        name: &str,
        seq: Option<(String, usize, usize)>,
    ) -> Result<(), String> {
        match obj {
            Value::Dict(items) => {
                let items = self.last_of_each_key(items, name);
                for (k, v) in items {
                    let key = match k.value {
                        Value::Str(s) => s,
                        Value::Int(i) => i.to_string(),
                        other => {
                            return Err(format!(
                                "`{}` has a key that is {}, not a string or integer",
                                display(name),
                                describe(&other)
                            ));
                        }
                    };
                    self.visit_item(&key, v.value, name)?;
                }
            }
            Value::Tuple(items) | Value::List(items) => {
                let len = items.len();
                // A tuple/list of tensors (or Nones) is a sequence: output_hidden_states.
                let is_seq = items
                    .iter()
                    .all(|o| matches!(o.value, Value::None) || tensor_call(&o.value).is_some());
                for (i, v) in items.into_iter().enumerate() {
                    if is_seq && v.value == Value::None {
                        continue; // an uncaptured position of a sequence
                    }
                    let seq = is_seq.then(|| (name.to_string(), i, len));
                    self.visit(v.value, &joined(name, &i.to_string()), seq)?;
                }
            }
            other => {
                let entry = self.tensor(&other, name, seq)?.ok_or_else(|| {
                    format!(
                        "`{}` holds {}, not a tensor (hsdiff reads dicts, tuples and lists of tensors)",
                        display(name),
                        describe(&other)
                    )
                })?;
                self.parsed.entries.push(entry);
            }
        }
        Ok(())
    }

    /// The value under `key` of the dict at `name`: the fingerprint at the top level, token ids
    /// as a list, a scalar left out (said), else visited for its tensors.
    fn visit_item(&mut self, key: &str, value: Value, name: &str) -> Result<(), String> {
        if key == METADATA_KEY && name.is_empty() {
            self.parsed.fingerprint = match value {
                Value::Str(s) => Some(
                    serde_json::from_str(&s)
                        .map_err(|e| format!("entry `{METADATA_KEY}` is not valid JSON: {e}"))?,
                ),
                other => to_json(other),
            };
            return Ok(());
        }
        if key == "input_ids"
            && let Value::List(items) | Value::Tuple(items) = &value
            && let Some(ids) = int_list(items)
        {
            self.parsed.input_ids = Some(ids);
            return Ok(());
        }
        if matches!(
            value,
            Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) | Value::None
        ) {
            let what = describe(&value);
            self.parsed
                .left_out
                .push(format!("`{}` ({what})", joined(name, key)));
            return Ok(());
        }
        self.visit(value, &joined(name, key), None)
    }

    /// A dict's items with each key once, in first-seen order, holding the value pickled last
    /// (what a Python dict does on repeated `SETITEM`s); repeated keys are recorded.
    fn last_of_each_key(&mut self, items: Vec<(Obj, Obj)>, name: &str) -> Vec<(Obj, Obj)> {
        let id = |k: &Obj| match &k.value {
            Value::Str(s) => Some(format!("'{s}'")),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        };
        let mut first: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut out: Vec<(Obj, Obj)> = Vec::with_capacity(items.len());
        for (k, v) in items {
            match id(&k).map(|key| (first.get(&key).copied(), key)) {
                Some((Some(at), key)) => {
                    let shown = format!("`{}` in `{}`", key, display(name));
                    if !self.parsed.repeated_keys.contains(&shown) {
                        self.parsed.repeated_keys.push(shown);
                    }
                    out[at].1 = v;
                }
                Some((None, key)) => {
                    first.insert(key, out.len());
                    out.push((k, v));
                }
                None => out.push((k, v)),
            }
        }
        out
    }

    /// The tensor `obj` describes, if it is one.
    fn tensor(
        &self,
        obj: &Value,
        name: &str,
        seq: Option<(String, usize, usize)>,
    ) -> Result<Option<Entry>, String> {
        let Some(args) = tensor_call(obj) else {
            return Ok(None);
        };
        let bad = |what: &str| format!("tensor `{}`: {what}", display(name));
        let Value::Tuple(args) = &args.value else {
            return Err(bad("unexpected pickle layout"));
        };
        // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, …)
        let [storage, offset, size, stride, ..] = args.as_slice() else {
            return Err(bad("unexpected pickle layout"));
        };
        let Value::Persistent(storage) = &storage.value else {
            return Err(bad("storage is not a persistent id"));
        };
        let Value::Tuple(storage) = &storage.value else {
            return Err(bad("storage is not a persistent id"));
        };
        // ('storage', torch.FloatStorage, key, location, numel)
        let (class, key) = match storage.as_slice() {
            [_, class, key, ..] => match (&class.value, &key.value) {
                (Value::Global { name, .. }, Value::Str(key)) => (name.as_str(), key.as_str()),
                _ => return Err(bad("unexpected storage record")),
            },
            _ => return Err(bad("unexpected storage record")),
        };
        let dtype = storage_dtype(class)
            .ok_or_else(|| bad(&format!("unsupported storage type {class}")))?;
        let offset = as_usize(offset).ok_or_else(|| bad("bad storage offset"))?;
        let shape = usize_tuple(size).ok_or_else(|| bad("bad size"))?;
        let stride = usize_tuple(stride).ok_or_else(|| bad("bad stride"))?;
        if stride.len() != shape.len() {
            return Err(bad("its stride and size have different lengths"));
        }
        let numel = npy::checked_bytes(&shape, 1).ok_or_else(|| bad("impossible size"))?;
        let c_order = contiguous_strides(&shape);
        let fortran = if numel > 1 && !strides_match(&shape, &stride, &c_order) {
            let mut rev_shape = shape.clone();
            rev_shape.reverse();
            let mut f = contiguous_strides(&rev_shape);
            f.reverse();
            if !strides_match(&shape, &stride, &f) {
                return Err(bad(&format!(
                    "saved as a non-contiguous view (stride {stride:?}); save `t.contiguous()`"
                )));
            }
            shape.len() > 1
        } else {
            false
        };
        let entry_name = format!("{}data/{key}", self.prefix);
        let size = dtype.size_in_bytes();
        let (Some(skip), Some(len)) = (offset.checked_mul(size), numel.checked_mul(size)) else {
            return Err(bad("impossible size"));
        };
        let loc = self.zip.loc(&entry_name, skip, len).map_err(|e| bad(&e))?;
        Ok(Some(Entry {
            raw: name.to_string(),
            dtype: Some(dtype),
            bits16: None,
            shape,
            fortran,
            loc,
            seq,
        }))
    }
}

/// The dtype of a torch storage class (`torch.FloatStorage`).
fn storage_dtype(class: &str) -> Option<DType> {
    Some(match class {
        "FloatStorage" => DType::F32,
        "DoubleStorage" => DType::F64,
        "HalfStorage" => DType::F16,
        "BFloat16Storage" => DType::BF16,
        "LongStorage" => DType::I64,
        "IntStorage" => DType::I32,
        "ShortStorage" => DType::I16,
        "ByteStorage" | "BoolStorage" => DType::U8,
        _ => return None,
    })
}

/// The dotted path of `key` under `name` (the top level has no name).
fn joined(name: &str, key: &str) -> String {
    if name.is_empty() {
        key.to_string()
    } else {
        format!("{name}.{key}")
    }
}

/// A dotted path for messages, shortened when a deep nesting made it long.
fn display(name: &str) -> std::borrow::Cow<'_, str> {
    if name.is_empty() {
        "(top level)".into()
    } else {
        crate::util::escape::shorten(name, crate::util::escape::SHORT)
    }
}

/// The arguments of `_rebuild_tensor_v2` if `obj` rebuilds a tensor (plain, parameter, or
/// subclass).
fn tensor_call(obj: &Value) -> Option<&Obj> {
    let Value::Reduce { callable, args } = obj else {
        return None;
    };
    let Value::Global { module, name } = &callable.value else {
        return None;
    };
    match (module.as_str(), name.as_str()) {
        ("torch._utils", "_rebuild_tensor_v2") => Some(args),
        ("torch._utils", "_rebuild_parameter") | ("torch._tensor", "_rebuild_from_type_v2") => {
            let Value::Tuple(inner) = &args.value else {
                return None;
            };
            inner.iter().find_map(|o| tensor_call(&o.value))
        }
        _ => None,
    }
}

fn as_usize(o: &Obj) -> Option<usize> {
    match o.value {
        Value::Int(i) => usize::try_from(i).ok(),
        _ => None,
    }
}

fn usize_tuple(o: &Obj) -> Option<Vec<usize>> {
    match &o.value {
        Value::Tuple(v) => v.iter().map(as_usize).collect(),
        _ => None,
    }
}

fn int_list(items: &[Obj]) -> Option<Vec<i64>> {
    items
        .iter()
        .map(|o| match o.value {
            Value::Int(i) => Some(i),
            _ => None,
        })
        .collect()
}

/// Whether `stride` lays `shape` out as `want` does. A dimension of size 1 is never stepped
/// along, so its stride is any (torch's own contiguity rule): `x[:, 1:]` of a batch of one
/// keeps the batch stride of the whole `x` and is contiguous all the same.
fn strides_match(shape: &[usize], stride: &[usize], want: &[usize]) -> bool {
    (shape.iter().zip(stride).zip(want)).all(|((&n, &s), &w)| n == 1 || s == w)
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

/// A plain pickled value as JSON (dicts, lists, strings, numbers, bools, None); other objects
/// are left out.
fn to_json(o: Value) -> Option<Json> {
    Some(match o {
        Value::Str(s) => Json::String(s),
        Value::Int(i) => Json::from(i),
        Value::Float(f) => Json::from(f),
        Value::Bool(b) => Json::Bool(b),
        Value::None => Json::Null,
        Value::Tuple(v) | Value::List(v) => {
            Json::Array(v.into_iter().filter_map(|o| to_json(o.value)).collect())
        }
        Value::Dict(items) => Json::Object(
            items
                .into_iter()
                .filter_map(|(k, v)| {
                    let k = match k.value {
                        Value::Str(s) => s,
                        Value::Int(i) => i.to_string(),
                        _ => return None,
                    };
                    Some((k, to_json(v.value)?))
                })
                .collect(),
        ),
        _ => return None,
    })
}

fn describe(o: &Value) -> String {
    match o {
        Value::Reduce { callable, .. } => describe(&callable.value),
        Value::Build { obj, .. } => describe(&obj.value),
        Value::Global { module, name } => format!("a {module}.{name}"),
        Value::Persistent(_) => "a bare storage".to_string(),
        Value::Str(_) => "a string".to_string(),
        Value::Bytes(_) => "a bytes object".to_string(),
        Value::Int(_) | Value::Float(_) => "a number".to_string(),
        Value::Bool(_) => "a boolean".to_string(),
        Value::None => "None".to_string(),
        Value::List(_) | Value::Tuple(_) | Value::Dict(_) => "a container".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_one_dimension_may_have_any_stride() {
        let shape = [1, 7, 64];
        let c = contiguous_strides(&shape);
        assert!(strides_match(&shape, &[512, 64, 1], &c));
        assert!(strides_match(&shape, &c, &c));
        // Every position's stride counts: a narrowed hidden dimension is a real view.
        assert!(!strides_match(
            &[1, 7, 32],
            &[512, 64, 1],
            &contiguous_strides(&[1, 7, 32])
        ));
        assert!(!strides_match(
            &[2, 7, 64],
            &[512, 64, 1],
            &contiguous_strides(&[2, 7, 64])
        ));
    }
}
