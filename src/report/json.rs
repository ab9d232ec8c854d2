//! `--format json`: the report as JSON, schema `hsdiff.report/v1` (docs/report-schema.md).

use super::{Render, Report};
use crate::error::{Error, Result};

pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        // serde_json writes non-finite floats as null; anything else it refuses is a bug here.
        let mut bytes = serde_json::to_vec_pretty(report)
            .map_err(|e| Error::Internal(format!("cannot encode the report as JSON: {e}")))?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}
