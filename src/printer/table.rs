//! The terminal table: summary first, one row per compared tensor, verdicts coloured on a TTY.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, Color, ContentArrangement, Table as Grid};

use super::Render;
use super::cells::{TENSOR_COLUMNS, clip, escaped, tensor_cells};
use super::sentences::{
    amplification, env_empty_note, env_shown, logits_line, router_agreement, routing_line,
    token_ids_note,
};
use crate::compare::verdict::Verdict;
use crate::error::Result;
use crate::report::Report;
use crate::util::escape::{LONG, SHORT, plain};

pub struct TerminalTable {
    /// Colour the verdicts (only when writing to a terminal).
    pub color: bool,
    /// List every environment difference, not only what ran differently (`--env all`).
    pub env_all: bool,
}

impl Render<Report> for TerminalTable {
    fn render(&self, r: &Report) -> Result<Vec<u8>> {
        // Names from files cannot move the cursor, colour the terminal or break a line.
        let r = &escaped(r, |s| plain(s, SHORT), |s| plain(s, LONG));
        let mut out = String::new();
        out.push_str(&format!("{}\n\n", r.summary));
        for note in &r.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out.push_str(&format!(
            "A: {}  [{}]\nB: {}  [{}]\n{} tokens, {} mode, dtype {}\n",
            r.a.label,
            r.a.implementation.as_deref().unwrap_or("?"),
            r.b.label,
            r.b.implementation.as_deref().unwrap_or("?"),
            r.inputs.tokens,
            r.mode,
            r.thresholds.dtype,
        ));
        if let Some(note) = token_ids_note(r) {
            out.push_str(&format!("{note}\n"));
        }
        let mut grid = grid(TENSOR_COLUMNS.to_vec());
        for t in &r.tensors {
            let verdict = Cell::new(t.judgement.verdict.as_str());
            let verdict = if self.color {
                verdict.fg(color(t.judgement.verdict))
            } else {
                verdict
            };
            grid.add_row(tensor_cells(t).into_iter().map(Cell::new).chain([verdict]));
        }
        out.push_str(&grid.to_string());
        out.push('\n');
        if let Some(l) = &r.logits {
            out.push_str(&format!("logits: {}\n", logits_line(l)));
        }
        if let Some(line) = routing_line(&r.routing_flips, 6) {
            out.push_str(&format!("{line}\n"));
        }
        for router in &r.routers {
            let agreement = router_agreement(router, 6, |f| format!(": flipped at {f}"));
            out.push_str(&format!("router layer {}: {agreement}\n", router.layer));
        }
        if let Some(grows) = amplification(r) {
            out.push_str(&format!("amplification: error {grows}\n"));
        }
        if let Some(al) = &r.alignment {
            out.push_str(&format!(
                "alignment: {}\n",
                crate::compare::alignment::describe(al)
            ));
        }
        out.push_str(&env_section(r, self.env_all));
        Ok(out.into_bytes())
    }
}

/// A condensed UTF-8 table with these column headers, laid out as wide as its cells (also the
/// table of `hsdiff paths`).
pub fn grid(header: Vec<&str>) -> Grid {
    let mut grid = Grid::new();
    grid.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header);
    grid
}

/// The "environment differences" section: one row per differing fingerprint key.
fn env_section(r: &Report, all: bool) -> String {
    if r.env_diff.is_empty() {
        return format!("environment differences: {}\n", env_empty_note(r));
    }
    let (shown, rest) = env_shown(r, all);
    let rest = rest.map(|l| format!("{l}\n")).unwrap_or_default();
    if shown.is_empty() {
        return format!("environment differences: nothing that ran differently; {rest}");
    }
    let mut grid = grid(vec!["key", "A", "B", "matters"]);
    for d in shown {
        grid.add_row(vec![
            Cell::new(&d.key),
            Cell::new(clip(d.a.as_deref())),
            Cell::new(clip(d.b.as_deref())),
            Cell::new(if d.matters { "yes" } else { "no" }),
        ]);
    }
    let title = if all {
        "environment differences"
    } else {
        "what ran differently"
    };
    format!("{title}:\n{grid}\n{rest}")
}

fn color(v: Verdict) -> Color {
    match v {
        Verdict::Ok => Color::Green,
        Verdict::Drift => Color::Yellow,
        Verdict::Mismatch => Color::Red,
    }
}
