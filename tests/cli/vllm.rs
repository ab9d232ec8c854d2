//! vLLM as served, on files tests/fixtures/vllm/make.py writes the way vLLM hands states out:
//! decoder layers' (hidden, residual) pairs summed in their dtype as the next fused add-RMSNorm
//! does, the aux hidden states' ids counted from idx + 1 (an off-by-one planted and named), and
//! token ids with the repeats vllm-project/vllm#56417 produced named, never compared.

use std::path::PathBuf;

use crate::common::{
    compare_json, golden_model_dir, hsdiff, notes, repo_root, row_names, stderr_of,
};

fn fixture(name: &str) -> String {
    repo_root()
        .join("tests/fixtures/vllm")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn model() -> String {
    golden_model_dir("qwen3_5_tiny")
        .to_string_lossy()
        .into_owned()
}

/// `compare FILE transformers.bf16.pt --model M EXTRA… --format json` of the fixtures.
fn against_transformers(file: &str, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let model = model();
    let mut args = vec!["--model", model.as_str()];
    args.extend_from_slice(extra);
    compare_json(
        &PathBuf::from(fixture(file)),
        &PathBuf::from(fixture("transformers.bf16.pt")),
        &args,
    )
}

/// `compare FILE transformers.bf16.pt EXTRA…` of the fixtures, refused (exit 2): its stderr.
fn refused_against_transformers(file: &str, extra: &[&str]) -> String {
    let (a, b) = (fixture(file), fixture("transformers.bf16.pt"));
    let mut args = vec!["compare", a.as_str(), b.as_str()];
    args.extend_from_slice(extra);
    let out = hsdiff(&args, &repo_root());
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{file}: {err}");
    err
}

/// The names of the report's layer rows, in order.
fn layer_rows(r: &serde_json::Value) -> Vec<String> {
    row_names(r)
        .into_iter()
        .filter(|n| n.starts_with("layers."))
        .collect()
}

/// The largest |Δ| of the report's layer rows.
fn largest_layer_diff(r: &serde_json::Value) -> f64 {
    r["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("layers.")))
        .map(|t| t["max_abs"].as_f64().expect("max_abs"))
        .fold(0.0, f64::max)
}

/// vLLM's pairs, saved as a plain hook saves the tuple, are transformers' layer outputs bit for
/// bit once summed in bf16 (an f32 sum is not: the generator checks both).
#[test]
fn pairs_sum_in_bf16_to_the_transformers_capture() {
    for pairs in [
        "pairs.bf16.pt",
        "pairs.bf16.safetensors",
        "pairs_by_index.bf16.pt",
    ] {
        let (code, r, err) = against_transformers(pairs, &[]);
        assert_eq!(code, 0, "{pairs}: {} {err}", r["summary"]);
        let n = notes(&r);
        assert!(
            n.contains("A: vLLM (hidden, residual) pairs summed in bf16 as vLLM's next fused add-RMSNorm does"),
            "{pairs}: {n}"
        );
        assert!(n.contains("8 layers"), "{pairs}: {n}");
        let rows = layer_rows(&r);
        assert_eq!(rows.len(), 8, "{pairs}: {rows:?}");
        assert_eq!(largest_layer_diff(&r), 0.0, "{pairs}: {}", r["tensors"]);
    }
}

/// A pair whose halves differ in dtype, or that lacks its residual, is refused naming the layer.
#[test]
fn broken_pairs_are_refused_naming_the_layer() {
    for (file, what) in [
        (
            "pairs_mixed.pt",
            "`model.layers.2`: is vLLM's (hidden, residual) pair, but its halves differ",
        ),
        (
            "pairs_half.safetensors",
            "`model.layers.3`: holds the hidden half of vLLM's (hidden, residual) pair but no residual",
        ),
    ] {
        let err = refused_against_transformers(file, &[]);
        assert!(err.contains(what), "{file}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{file}: {err}");
    }
}

/// The connector's file with its drafter's ids (vLLM's convention: id N = output of layer
/// N − 1) is benign against transformers' capture of the same run, and the note says which
/// convention was read and that the truth agrees.
#[test]
fn aux_states_in_vllm_ids_are_benign() {
    let draft = fixture("draft.json");
    let (code, r, err) = against_transformers("aux/req-0.safetensors", &["--draft-config", &draft]);
    assert_eq!(code, 0, "{} {err}", r["summary"]);
    let n = notes(&r);
    assert!(
        n.contains("A: layer ids 2,4,5 read in vLLM's convention (id N = hidden_states[N]"),
        "{n}"
    );
    assert_eq!(layer_rows(&r), ["layers.1", "layers.3", "layers.4"]);
    assert_eq!(largest_layer_diff(&r), 0.0, "{}", r["tensors"]);
}

/// The planted off-by-one: under ids 2,4,5 the states of ids 3,5,6. Named with the ids that
/// fit, and the comparison diverges (exit 1): the fix is --layer-ids, which then reads benign.
#[test]
fn an_off_by_one_in_aux_ids_is_named() {
    let draft = fixture("draft.json");
    let shifted = "aux_shifted/req-0.safetensors";
    let (code, r, err) = against_transformers(shifted, &["--draft-config", &draft]);
    assert_eq!(code, 1, "{} {err}", r["summary"]);
    let n = notes(&r);
    // Named as a slip of the declared ids (commands::compare::layer_id_slip), with the fix.
    assert!(
        n.contains("A: layer ids declared 2,4,5 but the states are those of ids 3,5,6"),
        "{n}"
    );
    assert!(n.contains("pass --layer-ids-a 3,5,6"), "{n}");
    let (code, r, err) = against_transformers(shifted, &["--layer-ids", "3,5,6"]);
    assert_eq!(code, 0, "{} {err}", r["summary"]);
    assert!(notes(&r).contains("A: layer ids 3,5,6 read in vLLM's convention"));
}

/// vllm-project/vllm#56417: the served sequence repeated tokens; the capture is of other
/// inputs, so it is refused (exit 2) with the failure named, never compared.
#[test]
fn repeated_tokens_name_the_extract_hidden_states_bug() {
    let err = refused_against_transformers("repeated/req-0.safetensors", &["--layer-ids", "2,4,5"]);
    assert!(
        err.contains("A's are the other's with 2 tokens repeated in place (positions 7, 13 of A)"),
        "{err}"
    );
    assert!(err.contains("vllm-project/vllm#56417"), "{err}");
}

/// States and token ids of one request that do not add up are refused, never compared.
#[test]
fn states_that_do_not_add_up_to_the_ids_are_refused() {
    let err =
        refused_against_transformers("one_state/req-0.safetensors", &["--layer-ids", "2,4,5"]);
    assert!(
        err.contains("`hidden_states` holds 1 states for 39 token ids (one position's state"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
