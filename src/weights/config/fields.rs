//! Typed reads of one JSON object's fields, naming the file and the field in every error.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Reads typed fields out of one JSON object, naming the file and field in errors.
pub(super) struct Fields<'a> {
    pub(super) path: &'a Path,
    pub(super) obj: &'a Map<String, Value>,
}

impl Fields<'_> {
    pub(super) fn err(&self, msg: String) -> Error {
        Error::config(self.path, msg)
    }

    pub(super) fn usize(&self, key: &str) -> Result<usize> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Err(self.err(format!("missing required field `{key}`"))),
            Some(v) => v.as_u64().map(|x| x as usize).ok_or_else(|| {
                self.err(format!(
                    "field `{key}` must be a non-negative integer, got {v}"
                ))
            }),
        }
    }

    pub(super) fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(_) => self.usize(key),
        }
    }

    pub(super) fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.err(format!("field `{key}` must be a number, got {v}"))),
        }
    }

    pub(super) fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(format!("field `{key}` must be true or false, got {v}"))),
        }
    }

    pub(super) fn str_or<'b>(&'b self, key: &str, default: &'b str) -> Result<&'b str> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_str()
                .ok_or_else(|| self.err(format!("field `{key}` must be a string, got {v}"))),
        }
    }

    pub(super) fn object(&self, key: &str) -> Result<Option<Fields<'_>>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(obj)) => Ok(Some(Fields {
                path: self.path,
                obj,
            })),
            Some(v) => Err(self.err(format!("field `{key}` must be an object, got {v}"))),
        }
    }

    pub(super) fn usize_list_or(&self, key: &str) -> Result<Vec<usize>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64().map(|x| x as usize).ok_or_else(|| {
                        self.err(format!(
                            "field `{key}` must list non-negative integers, got {v}"
                        ))
                    })
                })
                .collect(),
            Some(v) => Err(self.err(format!("field `{key}` must be a list, got {v}"))),
        }
    }
}
