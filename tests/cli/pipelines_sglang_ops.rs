//! Per-op rows from SGLang's dumper in all-modules mode (`tests/fixtures/sglang_ops/`, emulated
//! from SGLang's code by its `make.py` from transformers forwards of golden/qwen3_5_tiny): the
//! Gated DeltaNet layers' `linear_attn.attn` / `.norm` / `.out_proj` outputs read as `core_out`,
//! `gated_norm_out`, `out_proj` beside the layers' outputs, joined over the request's two prefill
//! chunks and judged against a transformers capture of the whole request holding the same ops;
//! a planted bug in layer 2's gated norm named at that op.

use crate::common;

use std::path::PathBuf;

fn fx(rel: &str) -> PathBuf {
    common::repo_root()
        .join("tests/fixtures/sglang_ops")
        .join(rel)
}

/// The `input_ids` file of pass 0 of a dumper folder (the pass the request begins in).
fn first_pass(folder: &str) -> PathBuf {
    let dir = fx(folder).join("dump_20261201_120000_000000");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .find(|p| {
            let f = p.file_name().expect("name").to_string_lossy().into_owned();
            f.starts_with("step=0___") && f.contains("___name=input_ids___")
        })
        .unwrap_or_else(|| panic!("no input_ids of step 0 in {}", dir.display()))
}

fn model() -> String {
    common::golden_model_dir("qwen3_5_tiny")
        .display()
        .to_string()
}

/// The rows both sides hold, in forward order: each GDN layer's ops before its output.
const ROWS: [&str; 9] = [
    "layers.1.core_out",
    "layers.1.gated_norm_out",
    "layers.1.out_proj",
    "layers.1",
    "layers.2.core_out",
    "layers.2.gated_norm_out",
    "layers.2.out_proj",
    "layers.2",
    "layers.3",
];

/// Honest: the two chunks joined into the request's 24 positions, every op row and layer row
/// within the bf16 floor, exit 0; the reading names the modules read as ops.
#[test]
fn all_modules_dump_gets_op_rows() {
    let (code, r, err) = common::compare_json(
        &first_pass("dumper"),
        &fx("eval/request.safetensors"),
        &["--model", &model()],
    );
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    assert_eq!(common::row_names(&r), ROWS);
    for t in r["tensors"].as_array().expect("tensors") {
        assert_eq!(t["verdict"], "ok", "{t}");
    }
    assert_eq!(r["inputs"]["tokens"], 24, "{}", r["inputs"]);
    let n = common::notes(&r);
    assert!(
        n.contains(
            "ops from the all-modules dump (`linear_attn.attn` = core_out, `linear_attn.norm` = \
             gated_norm_out, `linear_attn.out_proj` = out_proj): layers.1.core_out"
        ),
        "{n}"
    );
    assert!(
        n.contains("step=0 positions 0–11, step=1 positions 12–23"),
        "{n}"
    );
}

/// Planted: layer 2's gated norm gates with σ(z) instead of SiLU(z). Layer 2's core_out (computed
/// before it) is ok; the first divergent row is `layers.2.gated_norm_out`, named in the headline
/// with the op it is, exit 1.
#[test]
fn planted_norm_bug_named_at_its_op() {
    let (code, r, err) = common::compare_json(
        &first_pass("dumper_norm_bug"),
        &fx("eval/request.safetensors"),
        &["--model", &model()],
    );
    assert_eq!(code, 1, "{}\n{err}", r["summary"]);
    assert_eq!(
        r["first_divergent"], "layers.2.gated_norm_out",
        "{}",
        r["summary"]
    );
    let verdict = |name: &str| {
        r["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["verdict"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("no row {name}"))
    };
    for ok in ["layers.1.core_out", "layers.1", "layers.2.core_out"] {
        assert_eq!(verdict(ok), "ok", "{ok}: {}", r["summary"]);
    }
    assert_eq!(verdict("layers.2.gated_norm_out"), "mismatch");
    let summary = r["summary"].to_string();
    assert!(
        summary.contains("part at layers.2.gated_norm_out (in the gated norm of layer 2)"),
        "{summary}"
    );
}
