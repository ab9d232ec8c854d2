//! `--format markdown`: paste-ready for a bug report — summary, table, environment, and the
//! command that reproduces it.

use super::{Render, Report, Side, cosine, sci};

pub struct Markdown;

impl Render for Markdown {
    fn render(&self, r: &Report) -> String {
        let mut out = String::new();
        out.push_str(&format!("**{}** — {}\n\n", r.verdict.as_str(), r.summary));
        out.push_str("| tensor | mean \\|Δ\\| | max \\|Δ\\| (tok, ch) | rel L2 | cosine | min cos (tok) | floor | ×floor | A vs f64 | B vs f64 | verdict |\n");
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for t in &r.tensors {
            out.push_str(&format!(
                "| {} | {} | {} ({}, {}) | {} | {} | {} ({}) | {} | {} | {} | {} | {} |\n",
                t.name,
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
            out.push_str(&format!(
                "\nLogits: KL mean {}, p99 {}, max {}; top-1 agreement {:.2}% ({} flips, {} near-ties); top-5 overlap {:.1}%.\n",
                sci(Some(l.kl_mean)),
                sci(Some(l.kl_p99)),
                sci(Some(l.kl_max)),
                100.0 * l.top1_agree,
                l.top1_flips,
                l.near_ties,
                100.0 * l.top5_overlap
            ));
        }
        for router in &r.routers {
            out.push_str(&format!(
                "\nRouter layer {}: top-k sets agree on {:.1}% of tokens.",
                router.layer,
                100.0 * router.agree
            ));
        }
        if !r.routers.is_empty() {
            out.push('\n');
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
        out.push_str("\n<details><summary>Environment</summary>\n\n");
        out.push_str(&format!("| | A | B |\n|---|---|---|\n"));
        let field = |f: fn(&Side) -> Option<String>| {
            (f(&r.a).unwrap_or_default(), f(&r.b).unwrap_or_default())
        };
        let rows: [(&str, fn(&Side) -> Option<String>); 8] = [
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
            out.push_str(&format!("| {name} | {a} | {b} |\n"));
        }
        out.push_str(&format!(
            "| tokens | {} (ids sha256 {}) | |\n",
            r.inputs.tokens,
            &r.inputs.token_ids_sha256[..16.min(r.inputs.token_ids_sha256.len())]
        ));
        out.push_str("\n</details>\n");
        if let Some(cmd) = &r.command {
            out.push_str(&format!("\nReproduce:\n\n```\n{cmd}\n```\n"));
        }
        out
    }
}
