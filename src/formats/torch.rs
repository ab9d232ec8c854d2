//! `torch.save` files (the zip format of torch ≥ 1.6): the pickle is parsed with candle's
//! unpickler, tensors are located in the archive's `data/N` storages and read straight from the
//! memory map (torch stores them uncompressed).
//!
//! Accepted top-level objects: a dict (nested dicts, tuples and lists allowed) whose tensor
//! leaves get dotted names (`hidden_states.3`), or a tuple/list of tensors (the
//! `output_hidden_states` tuple). A string or dict under the key `hsdiff` is read as the
//! fingerprint; a list of ints under `input_ids` as the token ids.

use std::io::{BufReader, Cursor, Read};

use candle_core::DType;
use candle_core::pickle::{Object, Stack};
use serde_json::Value;

use super::{Entry, ZipIndex, npy};
use crate::capture::dump::METADATA_KEY;

/// Everything read from a `.pt` file's pickle.
pub struct Parsed {
    pub entries: Vec<Entry>,
    pub fingerprint: Option<Value>,
    pub input_ids: Option<Vec<i64>>,
}

pub fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let zip = ZipIndex::read(bytes).map_err(|e| {
        if bytes.first() == Some(&0x80) {
            "a legacy (pre-1.6, non-zip) torch.save file: re-save it with torch ≥ 1.6 defaults"
                .to_string()
        } else {
            format!("not a torch.save zip archive ({e})")
        }
    })?;
    let pkl = zip
        .names()
        .filter(|n| n.ends_with("/data.pkl") || *n == "data.pkl")
        .min_by_key(|n| n.len())
        .map(str::to_string)
        .ok_or("no data.pkl in the archive: not a torch.save file")?;
    let prefix = pkl.strip_suffix("data.pkl").unwrap_or_default().to_string();
    let pickle = zip.read_all(bytes, &pkl)?;
    let obj = unpickle(&pickle).map_err(|e| {
        format!("cannot unpickle {pkl} ({e}); save a dict of tensors or the hidden_states tuple")
    })?;
    let mut walk = Walk {
        zip: &zip,
        prefix: &prefix,
        parsed: Parsed {
            entries: Vec::new(),
            fingerprint: None,
            input_ids: None,
        },
    };
    match obj {
        Object::Dict(_) | Object::Tuple(_) | Object::List(_) => walk.visit(obj, "", None)?,
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
    fn visit(
        &mut self,
        obj: Object,
        name: &str,
        seq: Option<(String, usize, usize)>,
    ) -> Result<(), String> {
        let join = |k: &str| {
            if name.is_empty() {
                k.to_string()
            } else {
                format!("{name}.{k}")
            }
        };
        match obj {
            Object::Dict(items) => {
                for (k, v) in items {
                    let key = match k {
                        Object::Unicode(s) => s,
                        Object::Int(i) => i.to_string(),
                        Object::Long(i) => i.to_string(),
                        _ => continue,
                    };
                    if key == METADATA_KEY && name.is_empty() {
                        self.parsed.fingerprint = match v {
                            Object::Unicode(s) => Some(serde_json::from_str(&s).map_err(|e| {
                                format!("entry `{METADATA_KEY}` is not valid JSON: {e}")
                            })?),
                            other => to_json(other),
                        };
                        continue;
                    }
                    if key == "input_ids"
                        && let Object::List(items) | Object::Tuple(items) = &v
                        && let Some(ids) = int_list(items)
                    {
                        self.parsed.input_ids = Some(ids);
                        continue;
                    }
                    self.visit(v, &join(&key), None)?;
                }
            }
            Object::Tuple(items) | Object::List(items) => {
                let len = items.len();
                // A tuple/list of tensors (or Nones) is a sequence: output_hidden_states.
                let is_seq = items
                    .iter()
                    .all(|o| matches!(o, Object::None) || tensor_call(o).is_some());
                for (i, v) in items.into_iter().enumerate() {
                    let seq = is_seq.then(|| (name.to_string(), i, len));
                    self.visit(v, &join(&i.to_string()), seq)?;
                }
            }
            other => {
                if let Some(entry) = self.tensor(other, name, seq)? {
                    self.parsed.entries.push(entry);
                }
            }
        }
        Ok(())
    }

    /// The tensor `obj` describes, if it is one.
    fn tensor(
        &self,
        obj: Object,
        name: &str,
        seq: Option<(String, usize, usize)>,
    ) -> Result<Option<Entry>, String> {
        let Some(args) = tensor_call(&obj) else {
            return Ok(None);
        };
        let bad = |what: &str| format!("tensor `{name}`: {what}");
        let Object::Tuple(args) = args else {
            return Err(bad("unexpected pickle layout"));
        };
        // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, …)
        let [storage, offset, size, stride, ..] = args.as_slice() else {
            return Err(bad("unexpected pickle layout"));
        };
        let Object::PersistentLoad(storage) = storage else {
            return Err(bad("storage is not a persistent id"));
        };
        let Object::Tuple(storage) = storage.as_ref() else {
            return Err(bad("storage is not a persistent id"));
        };
        // ('storage', torch.FloatStorage, key, location, numel)
        let (class, key) = match storage.as_slice() {
            [
                _,
                Object::Class { class_name, .. },
                Object::Unicode(key),
                ..,
            ] => (class_name.as_str(), key.as_str()),
            _ => return Err(bad("unexpected storage record")),
        };
        let dtype = match class {
            "FloatStorage" => DType::F32,
            "DoubleStorage" => DType::F64,
            "HalfStorage" => DType::F16,
            "BFloat16Storage" => DType::BF16,
            "LongStorage" => DType::I64,
            "IntStorage" => DType::I32,
            "ShortStorage" => DType::I16,
            "ByteStorage" | "BoolStorage" => DType::U8,
            other => return Err(bad(&format!("unsupported storage type {other}"))),
        };
        let offset = as_usize(offset).ok_or_else(|| bad("bad storage offset"))?;
        let shape = usize_tuple(size).ok_or_else(|| bad("bad size"))?;
        let stride = usize_tuple(stride).ok_or_else(|| bad("bad stride"))?;
        let numel = npy::checked_bytes(&shape, 1).ok_or_else(|| bad("impossible size"))?;
        if numel > 1 && stride != contiguous_strides(&shape) {
            let mut rev_shape = shape.clone();
            rev_shape.reverse();
            let mut f = contiguous_strides(&rev_shape);
            f.reverse();
            let fortran = stride == f;
            if !fortran {
                return Err(bad(&format!(
                    "saved as a non-contiguous view (stride {stride:?}); save `t.contiguous()`"
                )));
            }
        }
        let fortran = numel > 1 && shape.len() > 1 && stride != contiguous_strides(&shape);
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

/// Runs candle's unpickler. It can panic on malformed input (an over-long `LONG1`, …); a panic
/// is caught, kept off stderr, and turned into an error.
fn unpickle(bytes: &[u8]) -> Result<Object, String> {
    let run = || -> Result<Object, String> {
        let mut stack = Stack::empty();
        stack
            .read_loop(&mut BufReader::new(Cursor::new(bytes)))
            .map_err(|e| short(&e.to_string()))?;
        stack.finalize().map_err(|e| short(&e.to_string()))
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(run);
    std::panic::set_hook(hook);
    out.unwrap_or_else(|_| Err("malformed pickle".to_string()))
}

/// The arguments of `_rebuild_tensor_v2` if `obj` rebuilds a tensor (plain, parameter, or
/// subclass).
fn tensor_call(obj: &Object) -> Option<&Object> {
    let Object::Reduce { callable, args } = obj else {
        return None;
    };
    let Object::Class {
        module_name,
        class_name,
    } = callable.as_ref()
    else {
        return None;
    };
    match (module_name.as_str(), class_name.as_str()) {
        ("torch._utils", "_rebuild_tensor_v2") => Some(args),
        ("torch._utils", "_rebuild_parameter") | ("torch._tensor", "_rebuild_from_type_v2") => {
            let Object::Tuple(inner) = args.as_ref() else {
                return None;
            };
            inner.iter().find_map(tensor_call)
        }
        _ => None,
    }
}

fn as_usize(o: &Object) -> Option<usize> {
    match o {
        Object::Int(i) => usize::try_from(*i).ok(),
        Object::Long(i) => usize::try_from(*i).ok(),
        _ => None,
    }
}

fn usize_tuple(o: &Object) -> Option<Vec<usize>> {
    match o {
        Object::Tuple(v) => v.iter().map(as_usize).collect(),
        _ => None,
    }
}

fn int_list(items: &[Object]) -> Option<Vec<i64>> {
    items
        .iter()
        .map(|o| match o {
            Object::Int(i) => Some(i64::from(*i)),
            Object::Long(i) => Some(*i),
            _ => None,
        })
        .collect()
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// A plain pickled value as JSON (dicts, lists, strings, numbers, bools, None); other objects
/// are left out.
fn to_json(o: Object) -> Option<Value> {
    Some(match o {
        Object::Unicode(s) => Value::String(s),
        Object::Int(i) => Value::from(i),
        Object::Long(i) => Value::from(i),
        Object::Float(f) => Value::from(f),
        Object::Bool(b) => Value::Bool(b),
        Object::None => Value::Null,
        Object::Tuple(v) | Object::List(v) => {
            Value::Array(v.into_iter().filter_map(to_json).collect())
        }
        Object::Dict(items) => Value::Object(
            items
                .into_iter()
                .filter_map(|(k, v)| {
                    let k = match k {
                        Object::Unicode(s) => s,
                        Object::Int(i) => i.to_string(),
                        _ => return None,
                    };
                    Some((k, to_json(v)?))
                })
                .collect(),
        ),
        _ => return None,
    })
}

fn describe(o: &Object) -> String {
    match o {
        Object::Reduce { callable, .. } | Object::Build { callable, .. } => match callable.as_ref()
        {
            Object::Class {
                module_name,
                class_name,
            } => format!("a {module_name}.{class_name}"),
            Object::Reduce { callable, .. } => describe(&Object::Reduce {
                callable: callable.clone(),
                args: Box::new(Object::None),
            }),
            _ => "an object".to_string(),
        },
        Object::Unicode(_) => "a string".to_string(),
        Object::Int(_) | Object::Long(_) | Object::Float(_) => "a number".to_string(),
        _ => "an object".to_string(),
    }
}

/// The first line of an error, at most 160 characters.
fn short(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(160).collect::<String>())
    } else {
        line.to_string()
    }
}

/// Reads the rest of an entry through the zip decoder (compressed entries).
pub fn read_entry(bytes: &[u8], entry: &str, skip: usize, len: usize) -> Result<Vec<u8>, String> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut f = zip.by_name(entry).map_err(|e| format!("{entry}: {e}"))?;
    std::io::copy(&mut f.by_ref().take(skip as u64), &mut std::io::sink())
        .map_err(|e| format!("{entry}: {e}"))?;
    let mut out = vec![0u8; len];
    f.read_exact(&mut out)
        .map_err(|e| format!("{entry}: {e} (truncated?)"))?;
    Ok(out)
}
