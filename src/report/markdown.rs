//! `--format markdown`: paste-ready for a bug report — summary, table, environment, and the
//! command that reproduces it.

use super::{Render, Report, Side, cosine, sci};

#[derive(Debug, Clone, Copy, Default)]
pub struct Markdown {
    /// List every environment difference, not only what ran differently (`--env all`).
    pub env_all: bool,
}

/// One row of the environment block: how to read a field of a side.
type SideField = fn(&Side) -> Option<String>;

/// A value for a table cell: `|` would end the cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

impl Render for Markdown {
    fn render(&self, r: &Report) -> String {
        let mut out = String::new();
        // The summary leads with the verdict word already; bold it rather than repeat it.
        let word = r.verdict.as_str();
        let rest = r
            .summary
            .strip_prefix(word)
            .and_then(|s| s.strip_prefix(": "))
            .unwrap_or(&r.summary);
        out.push_str(&format!("**{word}** — {rest}\n\n"));
        for note in &r.notes {
            out.push_str(&format!("- {note}\n"));
        }
        if !r.notes.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!(
            "A: `{}` ({}) · B: `{}` ({}) · {} mode · {} · {} tokens\n\n",
            r.a.label,
            r.a.implementation.as_deref().unwrap_or("?"),
            r.b.label,
            r.b.implementation.as_deref().unwrap_or("?"),
            r.mode,
            r.thresholds.dtype,
            r.inputs.tokens,
        ));
        out.push_str("| tensor | mean \\|Δ\\| | max \\|Δ\\| (tok, ch) | rel L2 | cosine | min cos (tok) | floor | ×floor | A vs f64 | B vs f64 | verdict |\n");
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for t in &r.tensors {
            out.push_str(&format!(
                "| {} | {} | {} ({}, {}) | {} | {} | {} ({}) | {} | {} | {} | {} | {} |\n",
                cell(&t.name),
                sci(Some(t.mean_abs)),
                sci(Some(t.max_abs)),
                t.max_abs_at.token,
                t.max_abs_at.channel,
                sci(Some(t.rel_l2)),
                cosine(t.cosine),
                cosine(t.cosine_min),
                t.cosine_min_token,
                sci(t.floor),
                t.ratio_to_floor
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "—".into()),
                sci(t.a_vs_truth),
                sci(t.b_vs_truth),
                if t.verdict == crate::verdict::Verdict::Ok {
                    "ok".to_string()
                } else {
                    format!("**{}**", t.verdict.as_str())
                },
            ));
        }
        if let Some(l) = &r.logits {
            out.push_str(&format!("\nLogits: {}.\n", super::summary::logits_line(l)));
        }
        if let Some(line) = super::summary::routing_line(&r.routing_flips, 12) {
            out.push_str(&format!("\n{line}.\n"));
        }
        if !r.routers.is_empty() {
            out.push_str("\nMoE router top-k agreement:\n\n");
        }
        for router in &r.routers {
            let flipped = match router.describe_flips(12) {
                f if f.is_empty() => f,
                f => format!(" (flipped at {f})"),
            };
            out.push_str(&format!(
                "- layer {}: top-k sets agree on {:.1}% of tokens{flipped}\n",
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
                "\nAmplification: the error grows > 2× per layer for 3 layers from {}.\n",
                starts.join(", ")
            ));
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
        if let Some(note) = super::token_ids_note(r) {
            out.push_str(&format!("\n{note}.\n"));
        }
        if let Some(al) = &r.alignment {
            out.push_str(&format!(
                "\n**Alignment:** {}.\n",
                crate::alignment::describe(al)
            ));
        }
        out.push_str("\n### Environment differences\n\n");
        if r.env_diff.is_empty() {
            out.push_str(&format!("{}.\n", super::env_empty_note(r)));
        } else {
            let (shown, rest) = super::env_shown(r, self.env_all);
            if !self.env_all {
                out.push_str("What ran differently:\n\n");
            }
            out.push_str("| key | A | B | matters |\n|---|---|---|---|\n");
            for d in shown {
                out.push_str(&format!(
                    "| {} | {} | {} | {} |\n",
                    d.key,
                    super::clip(d.a.as_deref()).replace('|', "\\|"),
                    super::clip(d.b.as_deref()).replace('|', "\\|"),
                    if d.matters { "**yes**" } else { "no" }
                ));
            }
            if let Some(rest) = rest {
                out.push_str(&format!("\n{rest}.\n"));
            }
        }
        out.push_str("\n<details><summary>Environment</summary>\n\n");
        out.push_str("| | A | B |\n|---|---|---|\n");
        let field = |f: fn(&Side) -> Option<String>| {
            (f(&r.a).unwrap_or_default(), f(&r.b).unwrap_or_default())
        };
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
        for (name, f) in rows {
            let (a, b) = field(f);
            out.push_str(&format!("| {name} | {} | {} |\n", cell(&a), cell(&b)));
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
        if let Some(cmd) = &r.command {
            out.push_str(&format!("\nReproduce:\n\n```\n{cmd}\n```\n"));
        }
        out
    }
}
