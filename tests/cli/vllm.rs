//! vLLM as served, on files tests/fixtures/vllm/make.py writes the way vLLM hands states out:
//! decoder layers' (hidden, residual) pairs summed in their dtype as the next fused add-RMSNorm
//! does, the aux hidden states' ids counted from idx + 1 (off-by-ones planted: the headline), and
//! token ids with the repeats vllm-project/vllm#56417 produced named, never compared.

use std::path::PathBuf;

use crate::common::{
    compare_json, golden_model_dir, hsdiff, notes, repo_root, row_names, stderr_of, tempdir,
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

/// `compare FILE transformers.bf16.pt EXTRA…` whose headline leads with A's slip from the
/// `declared` ids to the `found` ones, exit 1: the report and its headline.
fn slip_against_transformers(
    file: &str,
    extra: &[&str],
    (declared, found): (&str, &str),
) -> (serde_json::Value, String) {
    let (code, r, err) = against_transformers(file, extra);
    assert_eq!(code, 1, "{} {err}", r["summary"]);
    let s = summary(&r).to_string();
    let lead = format!(
        "mismatch: A: layer ids declared {declared} but the states are those of ids {found}"
    );
    assert!(s.starts_with(&lead), "{s}");
    (r, s)
}

/// `compare FILE transformers.bf16.pt --layer-ids IDS` (the ids a slip names): exit 0, and the
/// note says they fit the truth as declared.
fn corrected_ids_fit(file: &str, ids: &str) {
    let (code, r, err) = against_transformers(file, &["--layer-ids", ids]);
    assert_eq!(code, 0, "{} {err}", r["summary"]);
    let fit = format!("A: layer ids {ids} fit the f64 truth as declared");
    assert!(notes(&r).contains(&fit), "{}", notes(&r));
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

fn summary(r: &serde_json::Value) -> &str {
    r["summary"].as_str().expect("summary")
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
/// N − 1) is benign against transformers' capture of the same run, and the note says the ids
/// were measured against the truth and fit as declared.
#[test]
fn aux_states_in_vllm_ids_are_benign() {
    let draft = fixture("draft.json");
    let (code, r, err) = against_transformers("aux/req-0.safetensors", &["--draft-config", &draft]);
    assert_eq!(code, 0, "{} {err}", r["summary"]);
    assert!(
        !summary(&r).contains("layer ids declared"),
        "{}",
        r["summary"]
    );
    let n = notes(&r);
    assert!(
        n.contains(
            "A: layer ids 2,4,5 fit the f64 truth as declared (vllm-speculators, id N = \
             hidden_states[N]: median rel L2 "
        ),
        "{n}"
    );
    assert_eq!(layer_rows(&r), ["layers.1", "layers.3", "layers.4"]);
    assert_eq!(largest_layer_diff(&r), 0.0, "{}", r["tensors"]);
}

/// The planted off-by-one: under ids 2,4,5 the states of ids 3,5,6. It is the headline, as
/// any pipeline's slip is: the side, the ids that fit, why (a capture counting "id N = output
/// of layer N"), the fix, exit 1; the layers the states are are compared. With the ids that
/// fit, the file reads benign.
#[test]
fn an_off_by_one_in_aux_ids_is_the_headline() {
    let draft = fixture("draft.json");
    let shifted = "aux_shifted/req-0.safetensors";
    let (r, s) =
        slip_against_transformers(shifted, &["--draft-config", &draft], ("2,4,5", "3,5,6"));
    assert!(
        s.starts_with(
            "mismatch: A: layer ids declared 2,4,5 but the states are those of ids 3,5,6 \
             (vllm-speculators, id N = hidden_states[N]: "
        ),
        "{s}"
    );
    assert!(
        s.contains("one layer later, as a capture counting \"id N = output of layer N\""),
        "{s}"
    );
    assert!(s.contains("pass --layer-ids-a 3,5,6; "), "{s}");
    assert_eq!(layer_rows(&r), ["layers.2", "layers.4", "layers.5"]);
    assert_eq!(largest_layer_diff(&r), 0.0, "{}", r["tensors"]);
    // A truth that stops early (--layers) still measures the ids it holds under every shift,
    // and the slip still leads, with every id corrected.
    let (r, s) = slip_against_transformers(
        shifted,
        &["--draft-config", &draft, "--layers", "2"],
        ("2,4,5", "3,5,6"),
    );
    assert!(!s.contains("--shift"), "{s}");
    assert_eq!(layer_rows(&r), ["layers.2"]);
    corrected_ids_fit(shifted, "3,5,6");
}

/// vLLM's default ids (2,4,5,8 for 8 layers: the last one the last layer's output) over the
/// states a pre-hook takes, one id earlier: every id moves, the last state's too, so the
/// corrected list names all four, and reads benign.
#[test]
fn a_slip_of_the_default_ids_moves_the_last_state_too() {
    let file = "aux_inputs/req-0.safetensors";
    let (r, s) = slip_against_transformers(file, &[], ("2,4,5,8", "1,3,4,7"));
    assert!(s.contains("pass --layer-ids-a 1,3,4,7; "), "{s}");
    assert_eq!(
        layer_rows(&r),
        ["layers.0", "layers.2", "layers.3", "layers.6"]
    );
    corrected_ids_fit(file, "1,3,4,7");
}

/// The connector's folders as datasets against transformers' capture of the prompt: the
/// shifted one's headline leads with the slip and the sample it is in, that sample's
/// `layer_id_slips` holds it (exit 1); the honest one has none (exit 0).
#[test]
fn a_vllm_dataset_names_the_slip_and_its_samples() {
    let eval = tempdir();
    std::fs::copy(
        fixture("transformers.bf16.pt"),
        eval.path().join("req-0.pt"),
    )
    .expect("copy");
    let draft = fixture("draft.json");
    let model = model();
    let args = ["--draft-config", draft.as_str(), "--model", model.as_str()];
    let (code, r, err) = compare_json(&PathBuf::from(fixture("aux_shifted")), eval.path(), &args);
    assert_eq!(code, 1, "{} {err}", r["summary"]);
    let s = summary(&r);
    assert!(
        s.starts_with(
            "mismatch: A: layer ids declared 2,4,5 but the states are those of ids 3,5,6"
        ),
        "{s}"
    );
    assert!(
        s.contains("pass --layer-ids-a 3,5,6 (in 1 of 1 samples: req-0)"),
        "{s}"
    );
    // Read as its states are, the sample's rows agree: the slip alone flags it.
    assert!(
        s.contains("worst sample req-0: mismatch for the finding above alone (its rows at most"),
        "{s}"
    );
    let slips = &r["samples"][0]["layer_id_slips"];
    assert_eq!(slips.as_array().map(Vec::len), Some(1), "{slips}");
    let (code, r, err) = compare_json(&PathBuf::from(fixture("aux")), eval.path(), &args);
    assert_eq!(code, 0, "{} {err}", r["summary"]);
    assert!(
        !summary(&r).contains("layer ids declared"),
        "{}",
        r["summary"]
    );
    assert!(r["samples"][0].get("layer_id_slips").is_none(), "{r}");
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
