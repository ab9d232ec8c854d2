//! `--format json`: the report as JSON, schema `hsdiff.report/v1` (docs/report-schema.md).

use super::{Render, Report};

pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report) -> String {
        // Serialising plain data with finite or non-finite floats cannot fail with serde_json's
        // Value model except for non-finite floats, which it writes as null.
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
            + "\n"
    }
}
