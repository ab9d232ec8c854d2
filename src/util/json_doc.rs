//! The JSON documents the commands write (reports, check sets, `paths`, `bench`, `env --json`):
//! pretty-printed, one trailing newline.

use serde::Serialize;

use crate::error::{Error, Result};

/// A document with a JSON form (`--format json`, printed by `printer::Json`): what it is called
/// in an encoding error.
pub trait JsonDocument: Serialize {
    const WHAT: &'static str;
}

/// `value` as pretty JSON and a newline; `what` names it in the error. serde_json writes
/// non-finite floats as null; anything else it refuses (a map with non-string keys) is a bug
/// here, hence `Error::Internal`.
pub fn pretty<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Internal(format!("cannot encode {what} as JSON: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}
