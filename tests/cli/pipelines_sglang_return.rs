//! SGLang's `return_hidden_states=True` output (`tests/fixtures/sglang_return/`, written by its
//! `make.py` as SGLang's `/generate` returns it, from transformers forwards of golden/qwen3_5_tiny
//! run as the engine runs them): the honest request's states after the final norm judged against
//! a transformers capture of `input_ids + output_ids[:-1]`; the two failures of SGLang under
//! speculative decoding (sgl-project/sglang#26163) — too few states, states of the wrong request
//! — named and refused, exit 2, never compared.

use crate::common;

use std::path::PathBuf;

fn fx(rel: &str) -> PathBuf {
    common::repo_root()
        .join("tests/fixtures/sglang_return")
        .join(rel)
}

fn model() -> String {
    common::golden_model_dir("qwen3_5_tiny")
        .display()
        .to_string()
}

/// 14 prompt tokens and 6 generated: 19 rows (the prefill's 14, then 5 decode steps), each
/// within bf16's floor of the capture of the same 19 tokens.
#[test]
fn honest_response_compared_as_final_norm() {
    let (code, r, err) = common::compare_json(
        &fx("honest.json"),
        &fx("eval/request_0.safetensors"),
        &["--model", &model()],
    );
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    assert_eq!(common::row_names(&r), ["final_norm"]);
    let t = &r["tensors"][0];
    assert_eq!(t["verdict"], "ok", "{t}");
    let x = t["ratio_to_floor"].as_f64().expect("calibrated");
    assert!(x < 2.0, "{x}× the floor");
    assert_eq!(r["inputs"]["tokens"], 19, "{}", r["inputs"]);
    let n = common::notes(&r);
    assert!(
        n.contains("final_norm = the prefill's 14 rows + one row per decode step (5)"),
        "{n}"
    );
    assert!(n.contains("exact bf16 numbers"), "{n}");
}

/// One state per verify step (verify steps of 3 and 2 tokens kept 2 rows for 5): refused, the
/// counts and the engine's known failure named.
/// `file` compared with the eval side's request 0 under `--model`: exit 2, its stderr.
fn refused_against_request_0(file: &std::path::Path) -> String {
    let out = common::compare_output(
        file,
        &fx("eval/request_0.safetensors"),
        &["--model", &model()],
    );
    let err = common::stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

#[test]
fn too_few_states_under_speculative_decoding_refused() {
    let err = refused_against_request_0(&fx("spec_short.json"));
    assert!(
        err.contains(
            "request 0's `meta_info.hidden_states` holds 16 rows (prefill 14 + 2 decode) for 19 \
             tokens fed (prompt_tokens 14 + completion_tokens 6 − 1): too few"
        ),
        "{err}"
    );
    assert!(err.contains("sgl-project/sglang#26163"), "{err}");
    assert!(err.contains("spec_short.json"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A batch of two whose states were swapped: each request's counts are the other's — named as
/// states of the wrong request, the file refused whole.
#[test]
fn states_of_another_request_refused() {
    let err = refused_against_request_0(&fx("spec_swapped.json"));
    assert!(
        err.contains(
            "request 0's `meta_info.hidden_states` holds 28 rows (prefill 23 + 5 decode): \
             request 1's count, 28 tokens fed (prompt_tokens 23 + completion_tokens 6 − 1), not \
             its own 19 tokens fed"
        ),
        "{err}"
    );
    assert!(
        err.contains("assigned to the wrong request of the batch"),
        "{err}"
    );
}

/// A non-finite state (Python's json writes `NaN`, which JSON has not) is refused, never read.
#[test]
fn nan_state_refused() {
    let dir = common::tempdir();
    let text = std::fs::read_to_string(fx("honest.json")).expect("honest.json");
    let at = text.find("\"hidden_states\": [[[").expect("prefill rows") + 20;
    let end = at + text[at..].find(',').expect("first value");
    let bad = dir.path().join("nan.json");
    std::fs::write(&bad, format!("{}NaN{}", &text[..at], &text[end..])).expect("write");
    let out = common::compare_output(&bad, &fx("eval/request_0.safetensors"), &[]);
    let err = common::stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("NaN or Infinity"), "{err}");
}

/// A batch's response is a dataset of its requests, each paired by its token ids with the
/// capture of the same request.
#[test]
fn batch_response_paired_request_by_request() {
    let (code, r, err) = common::compare_json(
        &fx("honest_batch.json"),
        &fx("eval"),
        &["--model", &model()],
    );
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    for (id, with) in [
        ("honest_batch.json#0", "request_0"),
        ("honest_batch.json#1", "request_1"),
    ] {
        let s = common::dataset_sample(&r, id);
        assert_eq!(s["verdict"], "ok", "{s}");
        assert!(s.to_string().contains(with), "{s}");
    }
}
