//! An SGLang `Pass{n}.pt` from a tensor dump filtered to its first layers
//! (tests/fixtures/pipelines/make.py, `--only filtered`: layers 0-3 of the tiny Qwen3.5's 8, with
//! `model.norm`): `model.norm`'s residual is the last layer's output, never `layers.3`'s.

use std::path::Path;

use super::harness::{Expect, args, expect, s};
use crate::common::{golden_model_dir, notes, repo_root, row_names};

fn pipelines(rel: &str) -> String {
    s(&repo_root()
        .join("tests/fixtures/pipelines/qwen3_5_tiny")
        .join(rel))
}

fn filtered(case: &str) -> String {
    pipelines(&format!("sglang/{case}/TP0_PP0_Rank0_pid4242/Pass00000.pt"))
}

/// `compare PASS prompt_0 --format json --out DIR/r.json` and any `extra` flags.
fn compare(pass: &str, d: &Path, extra: &[&str]) -> Vec<String> {
    let out = s(&d.join("r.json"));
    let eval = pipelines("eval/prompt_0.safetensors");
    let mut list = vec!["compare", pass, &eval, "--format", "json", "--out", &out];
    list.extend_from_slice(extra);
    args(&list)
}

fn report(d: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(d.join("r.json")).expect("report written");
    serde_json::from_str(&text).expect("json")
}

hostile!(
    filtered_pass_with_the_model_reads_the_last_layer,
    |d| {
        let model = s(&golden_model_dir("qwen3_5_tiny"));
        expect(
            compare(&filtered("tensor_dump_filtered"), d, &["--model", &model]),
            Expect::Clean,
        )
    },
    then |d: &Path| {
        let r = report(d);
        let got = row_names(&r);
        for want in ["layers.0", "layers.1", "layers.2", "layers.7", "final_norm"] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:?}");
        }
        for absent in ["layers.3", "layers.4", "layers.6"] {
            assert!(!got.contains(&absent.to_string()), "{absent} in {got:?}");
        }
        let n = notes(&r);
        assert!(
            n.contains("holds layers 0 to 3 of 8 (filtered"),
            "no word of the filter: {n}"
        );
    }
);

hostile!(
    filtered_pass_without_a_model_reads_no_false_layer,
    |d| { expect(compare(&filtered("tensor_dump_filtered"), d, &[]), Expect::Clean) },
    then |d: &Path| {
        let r = report(d);
        let got = row_names(&r);
        assert!(
            got.contains(&"layers.2".to_string()) && got.contains(&"final_norm".to_string()),
            "{got:?}"
        );
        assert!(
            !got.contains(&"layers.3".to_string()),
            "model.norm's residual read as layers.3: {got:?}"
        );
        let n = notes(&r);
        assert!(
            n.contains("the last layer's output (`model.norm`'s residual) is not compared without --model"),
            "no word of the unread last layer: {n}"
        );
    }
);

hostile!(filtered_pass_with_a_planted_bug_at_layer_1_flagged, |d| {
    let model = s(&golden_model_dir("qwen3_5_tiny"));
    expect(
        compare(&filtered("tensor_dump_filtered_bug"), d, &["--model", &model]),
        Expect::Flagged,
    )
}, then |d: &Path| {
    let r = report(d);
    assert!(
        r["summary"].as_str().unwrap_or_default().contains("layers.1"),
        "{}",
        r["summary"]
    );
});

hostile!(
    filtered_pass_with_a_planted_bug_flagged_without_a_model,
    |d| {
        expect(
            compare(&filtered("tensor_dump_filtered_bug"), d, &[]),
            Expect::Flagged,
        )
    }
);
