//! The terminal table: summary first, one row per compared tensor, verdicts coloured on a TTY.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, Color, ContentArrangement, Table as Grid};

use super::{Render, Report, cosine, sci};
use crate::verdict::Verdict;

pub struct Table {
    /// Colour the verdicts (only when writing to a terminal).
    pub color: bool,
    /// List every environment difference, not only what ran differently (`--env all`).
    pub env_all: bool,
}

impl Render for Table {
    fn render(&self, r: &Report) -> String {
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
        if let Some(note) = super::token_ids_note(r) {
            out.push_str(&format!("{note}\n"));
        }
        let mut grid = Grid::new();
        grid.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(vec![
                "tensor",
                "mean |Δ|",
                "max |Δ| (tok, ch)",
                "rel L2",
                "cosine",
                "min cos (tok)",
                "floor",
                "×floor",
                "A vs f64",
                "B vs f64",
                "verdict",
            ]);
        for t in &r.tensors {
            let verdict = Cell::new(t.verdict.as_str());
            let verdict = if self.color {
                verdict.fg(color(t.verdict))
            } else {
                verdict
            };
            grid.add_row(vec![
                Cell::new(&t.name),
                Cell::new(sci(Some(t.mean_abs))),
                Cell::new(format!(
                    "{} ({}, {})",
                    sci(Some(t.max_abs)),
                    t.max_abs_at.token,
                    t.max_abs_at.channel
                )),
                Cell::new(sci(Some(t.rel_l2))),
                Cell::new(cosine(t.cosine)),
                Cell::new(format!("{} ({})", cosine(t.cosine_min), t.cosine_min_token)),
                Cell::new(sci(t.floor)),
                Cell::new(
                    t.ratio_to_floor
                        .map(|x| format!("{x:.1}"))
                        .unwrap_or_else(|| "—".into()),
                ),
                Cell::new(sci(t.a_vs_truth)),
                Cell::new(sci(t.b_vs_truth)),
                verdict,
            ]);
        }
        out.push_str(&grid.to_string());
        out.push('\n');
        if let Some(l) = &r.logits {
            out.push_str(&format!("logits: {}\n", super::summary::logits_line(l)));
        }
        if let Some(line) = super::summary::routing_line(&r.routing_flips, 6) {
            out.push_str(&format!("{line}\n"));
        }
        for router in &r.routers {
            let flipped = match router.describe_flips(6) {
                f if f.is_empty() => f,
                f => format!(": flipped at {f}"),
            };
            out.push_str(&format!(
                "router layer {}: top-k sets agree on {:.1}% of tokens{flipped}\n",
                router.layer,
                100.0 * router.agree
            ));
        }
        if !r.amplification.is_empty() {
            let starts: Vec<String> = r
                .amplification
                .iter()
                .map(|l| format!("layers.{l}"))
                .collect();
            out.push_str(&format!(
                "amplification: error grows > 2× per layer for 3 layers from {}\n",
                starts.join(", ")
            ));
        }
        if let Some(al) = &r.alignment {
            out.push_str(&format!("alignment: {}\n", crate::alignment::describe(al)));
        }
        out.push_str(&env_section(r, self.env_all));
        out
    }
}

/// The "environment differences" section: one row per differing fingerprint key.
fn env_section(r: &Report, all: bool) -> String {
    if r.env_diff.is_empty() {
        return format!("environment differences: {}\n", super::env_empty_note(r));
    }
    let (shown, rest) = super::env_shown(r, all);
    let rest = rest.map(|l| format!("{l}\n")).unwrap_or_default();
    if shown.is_empty() {
        return format!("environment differences: nothing that ran differently; {rest}");
    }
    let mut grid = Grid::new();
    grid.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(vec!["key", "A", "B", "matters"]);
    for d in shown {
        grid.add_row(vec![
            Cell::new(&d.key),
            Cell::new(super::clip(d.a.as_deref())),
            Cell::new(super::clip(d.b.as_deref())),
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
