//! A set of checks as one document (`hsdiff check` of several files or the built-in set): JSON
//! (schema [`SET_SCHEMA`]) or text (each report under a heading, then one line per check),
//! rendered through the one [`Render`] family.

use serde::{Serialize, Serializer};

use super::{CheckOutcome, SET_SCHEMA};
use crate::compare::verdict::Verdict;
use crate::error::Result;
use crate::printer::emit::ReportOptions;
use crate::printer::{Format, Json, Render};
use crate::report::Report;
use crate::util::escape::{LONG, markdown_text, plain};
use crate::util::json_doc::JsonDocument;

/// The checks of one `hsdiff check` run, in order.
pub struct CheckSet<'a>(pub &'a [CheckOutcome]);

/// `check fizzbuzz.f64  reference/cpu-candle  f64: ok — <summary>`
pub fn line(name: &str, r: &Report) -> String {
    format!(
        "check {name}  {}  {}: {} — {}",
        r.b.implementation.as_deref().unwrap_or("?"),
        r.thresholds.dtype,
        r.verdict.as_str(),
        r.summary
    )
}

/// The worst verdict of a set of checks (ok for none).
pub fn worst(outcomes: &[CheckOutcome]) -> Verdict {
    outcomes
        .iter()
        .map(|o| o.report.verdict)
        .max()
        .unwrap_or(Verdict::Ok)
}

/// `{checks: [{backend, dtype, implementation, name, report, verdict}], schema, verdict}` with
/// keys sorted (each `report` too: a full `hsdiff.report/v1` object).
impl Serialize for CheckSet<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let checks = self
            .0
            .iter()
            .map(|o| {
                Ok(serde_json::json!({
                    "name": o.name,
                    "backend": o.report.b.backend,
                    "implementation": o.report.b.implementation,
                    "dtype": o.report.thresholds.dtype,
                    "verdict": o.report.verdict,
                    "report": serde_json::to_value(&o.report)?,
                }))
            })
            .collect::<serde_json::Result<Vec<_>>>()
            .map_err(serde::ser::Error::custom)?;
        serde_json::json!({
            "schema": SET_SCHEMA,
            "verdict": worst(self.0),
            "checks": checks,
        })
        .serialize(s)
    }
}

impl JsonDocument for CheckSet<'_> {
    const WHAT: &'static str = "the check set";
}

/// A set of checks as text: each report rendered by `report` under a `== check NAME ==`
/// heading, then one [`line`] per check, with the names from files escaped for the sink.
pub struct CheckSetText<'a> {
    pub report: &'a dyn Render<Report>,
    /// Markdown (else the terminal).
    pub markdown: bool,
}

impl CheckSetText<'_> {
    fn safe(&self, s: &str) -> String {
        if self.markdown {
            markdown_text(s, LONG)
        } else {
            plain(s, LONG)
        }
    }
}

impl Render<CheckSet<'_>> for CheckSetText<'_> {
    fn render(&self, set: &CheckSet) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for o in set.0 {
            out.extend_from_slice(format!("== check {} ==\n", self.safe(&o.name)).as_bytes());
            out.extend_from_slice(&self.report.render(&o.report)?);
            out.push(b'\n');
        }
        for o in set.0 {
            out.extend_from_slice(self.safe(&line(&o.name, &o.report)).as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }
}

/// Several checks written as `options` say (JSON: one object with every report; text: each
/// report, then one line per check).
pub fn write_set(outcomes: &[CheckOutcome], options: &ReportOptions) -> Result<()> {
    let set = CheckSet(outcomes);
    let text = match options.format {
        Format::Json => Json.render(&set)?,
        Format::Markdown | Format::Table => CheckSetText {
            report: options.renderer().as_ref(),
            markdown: options.format == Format::Markdown,
        }
        .render(&set)?,
    };
    let lines: Vec<String> = outcomes.iter().map(|o| line(&o.name, &o.report)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    options.write(&text, &lines)
}
