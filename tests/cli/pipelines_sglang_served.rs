//! SGLang as served (`tests/fixtures/sglang_served/`, emulated from SGLang's code by its
//! `make.py` from transformers forwards of golden/qwen3_5_tiny on each request's cache): a
//! request prefilled in three chunks and decoded, joined into one sample of all its positions
//! and judged against a transformers capture of the whole request; a second request whose first
//! 32 positions were served from the radix cache, judged on the positions both sides hold and
//! saying so; the planted bug (the linear-attention state not carried from one chunk to the
//! next) flagged at the first position after the first chunk boundary.

use crate::common;

use std::path::{Path, PathBuf};

fn fx(rel: &str) -> PathBuf {
    common::repo_root()
        .join("tests/fixtures/sglang_served")
        .join(rel)
}

/// The `input_ids` file of pass `step` of a dumper folder.
fn pass_file(folder: &str, step: usize) -> PathBuf {
    let dir = fx(folder).join("dump_20261201_120000_000000");
    let prefix = format!("step={step}___");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .find(|p| {
            let f = p.file_name().expect("name").to_string_lossy().into_owned();
            f.starts_with(&prefix) && f.contains("___name=input_ids___")
        })
        .unwrap_or_else(|| panic!("no input_ids of step {step} in {}", dir.display()))
}

fn model() -> String {
    common::golden_model_dir("qwen3_5_tiny")
        .display()
        .to_string()
}

const ROWS: [&str; 5] = ["layers.1", "layers.3", "layers.4", "layers.6", "final_norm"];

/// Request 0 — chunks at positions 0–15, 16–31, 32–39, then decode steps at 40, 41, 42 (the
/// last two batched with request 1's) — is one sample of 43 positions: calibrated against the
/// transformers capture of its whole sequence, every row ok, the joined passes named.
#[test]
fn chunked_prefill_and_decode_joined_into_one_request() {
    let a = pass_file("dumper", 0);
    let b = fx("eval/request_0.safetensors");
    let (code, r, err) = common::compare_json(&a, &b, &["--model", &model()]);
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    assert_eq!(common::row_names(&r), ROWS);
    for t in r["tensors"].as_array().expect("tensors") {
        assert_eq!(t["verdict"], "ok", "{t}");
        let x = t["ratio_to_floor"].as_f64().expect("calibrated");
        assert!(x < 2.0, "{}: {x}× the floor", t["name"]);
    }
    assert_eq!(r["inputs"]["tokens"], 43, "{}", r["inputs"]);
    let n = common::notes(&r);
    assert!(
        n.contains(
            "one request of 6 forward pass(es) joined by slot 0 and position (step=0 positions \
             0–15, step=1 positions 16–31, step=2 positions 32–39, step=3 position 40, step=5 \
             position 41, step=6 position 42)"
        ),
        "{n}"
    );
    assert!(!n.contains("prefix cache"), "{n}");
    assert!(n.contains("floor and truth measured"), "{n}");
}

/// Request 1 begins at position 32 (its first 32 tokens are request 0's, served from the prefix
/// cache): compared on positions 32–45, which both sides hold, the absent positions named, and
/// uncalibrated (the truth needs the sequence from position 0) — never compared against the
/// capture's positions 0–13.
#[test]
fn prefix_cache_hit_compared_on_the_positions_both_hold() {
    let a = pass_file("dumper", 4);
    let b = fx("eval/request_1.safetensors");
    let (code, r, err) = common::compare_json(&a, &b, &["--model", &model()]);
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    assert_eq!(common::row_names(&r), ROWS);
    for t in r["tensors"].as_array().expect("tensors") {
        assert_eq!(t["verdict"], "ok", "{t}");
    }
    assert_eq!(r["inputs"]["tokens"], 14, "{}", r["inputs"]);
    let n = common::notes(&r);
    assert!(
        n.contains(
            "A: positions 0–31 served from SGLang's prefix cache: not in the dump; B's positions \
             0–31 left out (the other side lacks them); compared on the positions 32–45 (14) \
             both sides hold"
        ),
        "{n}"
    );
    assert!(
        n.contains("uncalibrated: the positions compared start at 32"),
        "{n}"
    );
    assert!(err.contains("served from SGLang's prefix cache"), "{err}");
}

/// The planted bug: request 0's second and third chunks start from a zeroed conv / recurrent
/// state. Positions 0–15 (the first chunk) agree; from position 16 on every dumped layer
/// diverges — flagged, exit 1, at position 16.
#[test]
fn state_not_carried_between_chunks_flagged_after_the_boundary() {
    let a = pass_file("dumper_state_lost", 0);
    let b = fx("eval/request_0.safetensors");
    let (code, r, err) = common::compare_json(&a, &b, &["--model", &model()]);
    assert_eq!(code, 1, "{}\n{err}", r["summary"]);
    assert_eq!(r["first_divergent"], "layers.1", "{}", r["first_divergent"]);
    for t in r["tensors"].as_array().expect("tensors") {
        assert_eq!(t["verdict"], "mismatch", "{t}");
        let rel: Vec<f64> = t["per_token_rel"]
            .as_array()
            .expect("per-token rel L2")
            .iter()
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        assert_eq!(rel.len(), 43, "{}", t["name"]);
        // The first chunk's positions are the honest run's, bit for bit; every position after
        // the first boundary departs.
        assert!(
            rel[..16].iter().all(|&x| x == 0.0),
            "{}: {rel:?}",
            t["name"]
        );
        assert!(
            rel[16..].iter().all(|&x| x > 0.05),
            "{}: {rel:?}",
            t["name"]
        );
    }
}

/// A later pass of a request (its second chunk) is no sample of its own: refused in one line
/// naming the pass the request begins in.
#[test]
fn a_later_pass_of_a_request_refused() {
    let a = pass_file("dumper", 1);
    let b = fx("eval/request_0.safetensors");
    let o = common::hsdiff(
        &[
            "compare",
            a.to_str().expect("utf-8"),
            b.to_str().expect("utf-8"),
        ],
        Path::new(&common::repo_root()),
    );
    let err = common::stderr_of(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("step=1___"), "{err}");
    assert!(err.contains("continues a request begun in step 0"), "{err}");
}

/// The folder as a dataset: one sample per request (the passes it begins in, steps 0 and 4).
/// Request 0 pairs with its capture by token ids; request 1, whose ids are the last 14 of its
/// capture's (its first 32 positions served from the prefix cache), pairs with the one capture
/// ending in them and is compared on the positions both hold; a third capture, of another
/// request, is listed unpaired.
#[test]
fn a_served_folder_is_one_sample_per_request() {
    let b = common::tempdir();
    for f in ["request_0.safetensors", "request_1.safetensors"] {
        std::fs::copy(fx("eval").join(f), b.path().join(f)).expect("copy");
    }
    std::fs::copy(
        common::repo_root().join("tests/fixtures/sglang_ops/eval/request.safetensors"),
        b.path().join("request_other.safetensors"),
    )
    .expect("copy");
    let (code, r, err) = common::compare_json(&fx("dumper"), b.path(), &["--model", &model()]);
    assert_ne!(code, 2, "{}\n{err}", r["summary"]);
    let samples = r["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 2, "{}\n{err}", r["samples"]);
    let pairs: Vec<(&str, &str, &str, u64)> = samples
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap_or_default(),
                s["id_b"].as_str().unwrap_or_default(),
                s["verdict"].as_str().unwrap_or_default(),
                s["positions"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("step=0", "request_0", "ok", 43),
            ("step=4", "request_1", "ok", 14)
        ]
    );
    let unpaired = common::sample_ids(&r["unpaired_b"]);
    assert_eq!(unpaired, ["request_other"], "{}", r["unpaired_b"]);
    let n = common::notes(&r);
    assert!(
        n.contains(
            "1 pair(s) of a request served after a prefix-cache hit, paired by the token ids the \
             served side holds (the other side's from the same position on): step=4 ↔ request_1 \
             (from position 32)"
        ),
        "{n}"
    );
}

/// A prefix-hit request whose ids are the last ones of two captures (the capture of request 1
/// twice, under two names) pairs with neither: named, left unpaired, never guessed.
#[test]
fn a_prefix_hit_matching_two_captures_is_named_not_guessed() {
    let b = common::tempdir();
    std::fs::copy(
        fx("eval/request_0.safetensors"),
        b.path().join("request_0.safetensors"),
    )
    .expect("copy");
    for f in ["request_1.safetensors", "request_1_again.safetensors"] {
        std::fs::copy(fx("eval/request_1.safetensors"), b.path().join(f)).expect("copy");
    }
    let (code, r, err) = common::compare_json(&fx("dumper"), b.path(), &["--model", &model()]);
    assert_ne!(code, 2, "{err}");
    let samples = r["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 1, "{}", r["samples"]);
    assert_eq!(samples[0]["id_b"], "request_0", "{}", samples[0]);
    assert_eq!(common::sample_ids(&r["unpaired_a"]), ["step=4"]);
    let n = common::notes(&r);
    assert!(
        n.contains(
            "A's step=4 (served after a prefix-cache hit: positions 0–31 in no pass) holds the \
             last token ids of 2 samples of B (request_1, request_1_again): left unpaired, not \
             guessed between"
        ),
        "{n}"
    );
}
