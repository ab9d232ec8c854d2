//! `--format markdown`: paste-ready for a bug report — summary, table, environment, and the
//! command that reproduces it.

use super::Render;
use super::cells::{TENSOR_COLUMNS, clip, escaped, sci, tensor_cells};
use super::sentences::{
    amplification, env_empty_note, env_shown, logits_line, router_agreement, routing_line,
    token_ids_note,
};
use crate::compare::verdict::Verdict;
use crate::error::Result;
use crate::report::{Lead, Report, Side};
use crate::util::escape::{LONG, SHORT, markdown_block, markdown_code, markdown_text};

#[derive(Debug, Clone, Copy, Default)]
pub struct Markdown {
    /// List every environment difference, not only what ran differently (`--env all`).
    pub env_all: bool,
}

/// One row of the environment block: how to read a field of a side.
type SideField = fn(&Side) -> Option<String>;

/// A column header for a table: `|` would end the cell.
fn header_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

impl Render<Report> for Markdown {
    fn render(&self, raw: &Report) -> Result<Vec<u8>> {
        // Text from files is escaped once here: nothing in it can open a tag, leave a table
        // cell or close the `<details>` block (labels are code spans, from the raw report).
        let r = &escaped(raw, |s| markdown_text(s, SHORT), |s| markdown_text(s, LONG));
        let mut out = headline(r);
        out.push_str(&format!(
            "A: {} ({}) · B: {} ({}) · {} mode · {} · {} tokens\n\n",
            markdown_code(&raw.a.label, SHORT, false),
            r.a.implementation.as_deref().unwrap_or("?"),
            markdown_code(&raw.b.label, SHORT, false),
            r.b.implementation.as_deref().unwrap_or("?"),
            r.mode,
            r.thresholds.dtype,
            r.inputs.tokens,
        ));
        out.push_str(&tensor_table(r));
        out.push_str(&under_the_table(r));
        out.push_str(&env_differences(r, self.env_all));
        out.push_str(&environment(r));
        if let Some(cmd) = &r.command {
            out.push_str(&format!("\nReproduce:\n\n{}", markdown_block(cmd, LONG)));
        }
        Ok(out.into_bytes())
    }
}

/// The summary, then the notes as a list. The summary leads with the verdict word (drift,
/// mismatch) or a word for ok (benign, uncalibrated): the verdict is bolded rather than
/// repeated, a word for ok kept.
fn headline(r: &Report) -> String {
    let word = r.verdict.as_str();
    let rest = match r.summary.lead {
        Some(Lead::Flagged(v)) if v == r.verdict => r.summary.rest(),
        _ => r.summary.to_string(),
    };
    let mut out = format!("**{word}** — {rest}\n\n");
    for note in &r.notes {
        out.push_str(&format!("- {note}\n"));
    }
    if !r.notes.is_empty() {
        out.push('\n');
    }
    out
}

/// The tensor table, flagged verdicts in bold.
fn tensor_table(r: &Report) -> String {
    let header: Vec<String> = TENSOR_COLUMNS.iter().map(|c| header_cell(c)).collect();
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!("|{}\n", "---|".repeat(TENSOR_COLUMNS.len())));
    for t in &r.tensors {
        let verdict = if t.judgement.verdict == Verdict::Ok {
            "ok".to_string()
        } else {
            format!("**{}**", t.judgement.verdict.as_str())
        };
        let cells = tensor_cells(t);
        out.push_str(&format!("| {} | {verdict} |\n", cells.join(" | ")));
    }
    out
}

/// The paragraphs under the table: logits, routing flips, router agreement, amplification, the
/// thresholds, token ids and the alignment.
fn under_the_table(r: &Report) -> String {
    let mut out = String::new();
    if let Some(l) = &r.logits {
        out.push_str(&format!("\nLogits: {}.\n", logits_line(l)));
    }
    if let Some(line) = routing_line(&r.routing_flips, 12) {
        out.push_str(&format!("\n{line}.\n"));
    }
    if !r.routers.is_empty() {
        out.push_str("\nMoE router top-k agreement:\n\n");
    }
    for router in &r.routers {
        let agreement = router_agreement(router, 12, |f| format!(" (flipped at {f})"));
        out.push_str(&format!("- layer {}: {agreement}\n", router.layer));
    }
    if let Some(grows) = amplification(r) {
        out.push_str(&format!("\nAmplification: the error {grows}.\n"));
    }
    out.push_str(&format!(
        "\nThresholds ({}): ok ≤ {}, fail > {}; flagged only above {}× (drift) / {}× (mismatch) the floor{}.\n",
        r.thresholds.dtype,
        sci(Some(r.thresholds.bands.ok)),
        sci(Some(r.thresholds.bands.fail)),
        r.thresholds.k_drift,
        r.thresholds.k_mismatch,
        r.thresholds.floor_source.as_deref().map(|s| format!(" ({s})")).unwrap_or_default()
    ));
    if let Some(note) = token_ids_note(r) {
        out.push_str(&format!("\n{note}.\n"));
    }
    if let Some(al) = &r.alignment {
        out.push_str(&format!(
            "\n**Alignment:** {}.\n",
            crate::compare::alignment::describe(al)
        ));
    }
    out
}

/// The "Environment differences" section: what ran differently (or, with `all`, every
/// difference) as a table, then a line counting the rest.
fn env_differences(r: &Report, all: bool) -> String {
    let mut out = "\n### Environment differences\n\n".to_string();
    if r.env_diff.is_empty() {
        out.push_str(&format!("{}.\n", env_empty_note(r)));
        return out;
    }
    let (shown, rest) = env_shown(r, all);
    if !all {
        out.push_str("What ran differently:\n\n");
    }
    out.push_str("| key | A | B | matters |\n|---|---|---|---|\n");
    for d in shown {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            d.key,
            clip(d.a.as_deref()),
            clip(d.b.as_deref()),
            if d.matters { "**yes**" } else { "no" }
        ));
    }
    if let Some(rest) = rest {
        out.push_str(&format!("\n{rest}.\n"));
    }
    out
}

/// The folded `<details>` block: both sides' fields and the tokens.
fn environment(r: &Report) -> String {
    let mut out = "\n<details><summary>Environment</summary>\n\n".to_string();
    out.push_str("| | A | B |\n|---|---|---|\n");
    let rows: [(&str, SideField); 8] = [
        ("label", |s| Some(s.label.clone())),
        ("backend", |s| s.backend.clone()),
        ("implementation", |s| s.implementation.clone()),
        ("dtype", |s| s.dtype.clone()),
        ("device", |s| s.device.clone()),
        ("model", |s| s.fingerprint.model.clone()),
        ("config sha256", |s| s.fingerprint.config_sha256.clone()),
        ("hsdiff", |s| s.fingerprint.tool_version.clone()),
    ];
    for (name, field) in rows {
        let (a, b) = (
            field(&r.a).unwrap_or_default(),
            field(&r.b).unwrap_or_default(),
        );
        out.push_str(&format!("| {name} | {a} | {b} |\n"));
    }
    out.push_str(&format!(
        "| tokens | {} (ids sha256 {}) | |\n",
        r.inputs.tokens,
        r.inputs
            .token_ids_sha256
            .chars()
            .take(16)
            .collect::<String>()
    ));
    out.push_str("\n</details>\n");
    out
}
