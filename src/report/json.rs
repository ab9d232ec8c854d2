//! `--format json`: the report as JSON, schema `hsdiff.report/v1` (docs/report-schema.md).

use super::{Render, Report};
use crate::error::Result;

pub struct Json;

impl Render for Json {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        crate::json_doc::pretty(report, "the report")
    }
}
