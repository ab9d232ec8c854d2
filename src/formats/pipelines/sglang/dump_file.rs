//! One dumper file: `torch.save({"value": tensor, "meta": {…}})` (the current dumper) or the
//! bare tensor (versions before `meta`), read with hsdiff's bounded torch reader.

use std::path::Path;

use candle_core::Tensor;
use serde_json::{Map, Value as Json};

use crate::error::{Error, Result};
use crate::formats::pickle::{self, Value};
use crate::formats::{FileSource, ZipIndex};
use crate::util::limits;
use crate::util::mapped::FileMap;

/// A dumper file's tensor and its metadata (empty for a bare tensor).
pub struct DumpFile {
    pub value: Tensor,
    pub meta: Map<String, Json>,
}

/// A torch.save file opened with its pickle parsed (entries indexed, nothing named).
pub fn open_torch(path: &Path) -> Result<(FileSource, Value)> {
    let file = crate::util::input::open_regular(path)?;
    let map = FileMap::map(&file, path)?;
    let zip = ZipIndex::read(&map)
        .map_err(|e| Error::file(path, format!("not a torch.save archive: {e}")))?;
    let pkl = zip
        .names()
        .filter(|n| n.ends_with("/data.pkl") || *n == "data.pkl")
        .min_by_key(|n| n.len())
        .map(str::to_string)
        .ok_or_else(|| Error::file(path, "no data.pkl in the archive: not a torch.save file"))?;
    let bytes = zip
        .read_all(&map, &pkl, limits::get().pickle_bytes)
        .map_err(|e| Error::file(path, e))?;
    let obj = pickle::parse(&bytes).map_err(|e| Error::file(path, format!("{pkl}: {e}")))?;
    let src = FileSource::torch(path, map, zip)?;
    Ok((src, obj))
}

pub fn read(path: &Path) -> Result<DumpFile> {
    let (src, obj) = open_torch(path)?;
    let meta = match &obj {
        Value::Dict(items) => items
            .iter()
            .find(|(k, _)| k.value == Value::Str("meta".into()))
            .and_then(|(_, v)| match json(&v.value) {
                Some(Json::Object(m)) => Some(m),
                _ => None,
            }),
        _ => None,
    };
    // {value, meta}: the tensor is `value`; a bare tensor is the file's only entry.
    let wanted: Vec<usize> = src
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| meta.is_none() || e.raw == "value")
        .map(|(i, _)| i)
        .collect();
    let [idx] = wanted[..] else {
        let seen: Vec<&str> = src.entries.iter().map(|e| e.raw.as_str()).collect();
        return Err(Error::file(
            path,
            format!(
                "sglang-dumper: expected one tensor (`value` of {{value, meta}}, or a bare tensor); found {} ({})",
                seen.len(),
                seen.join(", ")
            ),
        ));
    };
    let value = src.load_entry(&src.entries[idx])?;
    Ok(DumpFile {
        value,
        meta: meta.unwrap_or_default(),
    })
}

/// A pickled value of plain data as JSON (None for tensors, globals and the like).
fn json(v: &Value) -> Option<Json> {
    Some(match v {
        Value::None => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Str(s) => Json::String(s.clone()),
        Value::List(xs) | Value::Tuple(xs) => Json::Array(
            xs.iter()
                .map(|x| json(&x.value).unwrap_or(Json::Null))
                .collect(),
        ),
        Value::Dict(items) => Json::Object(
            items
                .iter()
                .filter_map(|(k, v)| {
                    let key = match &k.value {
                        Value::Str(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        _ => return None,
                    };
                    Some((key, json(&v.value).unwrap_or(Json::Null)))
                })
                .collect(),
        ),
        _ => return None,
    })
}
