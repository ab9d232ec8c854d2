//! `hsdiff paths` output: a terminal table (one row per path, the signature under it) or JSON
//! `{"paths": [{"name", "verdict", "rows": […], …}]}`. No statistics are computed here.

use comfy_table::Cell;

use super::PathsReport;
use crate::error::Result;
use crate::printer::cells::{ratio, sci};
use crate::printer::table::grid;
use crate::printer::{Format, Json, Render};
use crate::util::json_doc::JsonDocument;

impl JsonDocument for PathsReport {
    const WHAT: &'static str = "the paths report";
}

/// The renderer of `format`: a table or JSON; None for markdown, which `paths` does not write.
pub fn renderer(format: Format) -> Option<Box<dyn Render<PathsReport>>> {
    match format {
        Format::Table => Some(Box::new(PathsTable)),
        Format::Json => Some(Box::new(Json)),
        Format::Markdown => None,
    }
}

/// The terminal table: one row per path, the signatures and skipped paths under it.
pub struct PathsTable;

impl Render<PathsReport> for PathsTable {
    fn render(&self, r: &PathsReport) -> Result<Vec<u8>> {
        Ok(table(r).into_bytes())
    }
}

fn table(r: &PathsReport) -> String {
    let mut out = format!(
        "{}\n\nbackend {}  [{}], dtype {}, {} tokens; each path vs the full prefill of the same tokens\n",
        r.summary, r.backend, r.implementation, r.dtype, r.tokens
    );
    let mut grid = grid(vec![
        "path",
        "positions",
        "departs at",
        "worst tensor",
        "rel L2",
        "×floor",
        "logits rel L2",
        "state rel L2",
        "conv state",
        "floor dtype",
        "verdict",
        "state verdict",
    ]);
    for p in &r.paths {
        let positions = match (p.positions.first(), p.positions.last()) {
            (Some(a), Some(b)) => format!("{a}–{b}"),
            _ => "—".to_string(),
        };
        grid.add_row(vec![
            Cell::new(&p.name),
            Cell::new(positions),
            Cell::new(p.departs_at.map_or("—".to_string(), |x| x.to_string())),
            Cell::new(p.worst.as_deref().unwrap_or("—")),
            Cell::new(sci(Some(p.worst_rel_l2))),
            Cell::new(ratio(p.worst_ratio_to_floor)),
            Cell::new(sci(p.logits_rel_l2)),
            Cell::new(sci(p.state_recurrent_rel_l2)),
            Cell::new(sci(p.state_conv_rel_l2)),
            Cell::new(&p.floor_dtype),
            Cell::new(p.verdict.as_str()),
            Cell::new(if p.state_rows.is_empty() {
                "—"
            } else {
                p.state_verdict.as_str()
            }),
        ]);
    }
    out.push_str(&format!("{grid}\n"));
    for p in &r.paths {
        if let Some(s) = &p.signature {
            out.push_str(&format!(
                "{}: looks like {} — {}\n",
                p.name, s.name, s.evidence
            ));
        }
    }
    for s in &r.skipped {
        out.push_str(&format!("skipped {}: {}\n", s.path, s.reason));
    }
    out
}
