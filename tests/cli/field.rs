//! What users meet in the field, on captures made by plain transformers + forward hooks
//! (tests/fixtures/field/make.py): where the first NaN and the first f16 overflow sit, and logits
//! that differ by a per-position constant (softmax-equal) against a real logit bug.

use std::path::PathBuf;

use crate::common::{compare_json, repo_root};

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/field").join(name)
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(fixture("MANIFEST.json")).expect("read MANIFEST.json");
    serde_json::from_str(&text).expect("MANIFEST.json is JSON")
}

/// The `{tensor, token, channel}` of a first-value entry.
fn place(v: &serde_json::Value) -> (String, u64, u64) {
    (
        v["tensor"].as_str().expect("tensor").to_string(),
        v["token"].as_u64().expect("token"),
        v["channel"].as_u64().expect("channel"),
    )
}

fn planted(what: &str) -> (String, u64, u64) {
    let m = &manifest()[what];
    (
        format!("layers.{}", m["layer"]),
        m["token"].as_u64().expect("token"),
        m["channel"].as_u64().expect("channel"),
    )
}

#[test]
fn the_first_nan_is_located_where_it_was_planted() {
    let (code, r, err) = compare_json(&fixture("honest.f32.pt"), &fixture("nan.f32.pt"), &[]);
    assert_eq!(code, 1, "{err}");
    let first = &r["first_non_finite"];
    assert!(first["a"].is_null(), "A is finite everywhere: {first}");
    assert_eq!(place(&first["b"]), planted("nan"));
    assert_eq!(first["b"]["value"], "NaN");
    // Later layers carry the NaN to many elements; the headline names the first.
    let (tensor, token, channel) = planted("nan");
    let headline = r["summary"].as_str().expect("summary");
    assert!(
        headline.contains(&format!(
            "first non-finite value: B NaN at {tensor} (token {token}, channel {channel})"
        )),
        "{headline}"
    );
    // An f32 comparison has no narrow type whose range could be exceeded.
    assert!(r["first_overflow"].is_null(), "{}", r["first_overflow"]);
}

#[test]
fn an_f16_overflow_is_located_on_both_sides() {
    let (code, r, err) = compare_json(
        &fixture("overflow.f32.pt"),
        &fixture("overflow.f16.pt"),
        &[],
    );
    assert_eq!(code, 1, "{err}");
    let over = &r["first_overflow"];
    assert_eq!(over["dtype"], "f16", "{over}");
    assert_eq!(over["limit"], 65504.0);
    // A kept the planted value in f32; B's f16 run turned it into +Inf at the same element.
    assert_eq!(place(&over["a"]), planted("overflow"));
    assert_eq!(over["a"]["value"], "1e5");
    assert_eq!(place(&over["b"]), planted("overflow"));
    assert_eq!(over["b"]["value"], "+Inf");
    assert_eq!(place(&r["first_non_finite"]["b"]), planted("overflow"));
    assert!(r["first_non_finite"]["a"].is_null());
    let headline = r["summary"].as_str().expect("summary");
    let (tensor, token, channel) = planted("overflow");
    assert!(
        headline.contains(&format!(
            "first value past f16's range: A 1e5 at {tensor} (token {token}, channel {channel})"
        )),
        "{headline}"
    );
    // B's +Inf is its first non-finite value, said once.
    assert_eq!(headline.matches("+Inf").count(), 1, "{headline}");
}

#[test]
fn finite_captures_report_no_first_values() {
    let (code, r, err) = compare_json(&fixture("honest.f32.pt"), &fixture("honest.f32.pt"), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(r["first_non_finite"]["a"].is_null() && r["first_non_finite"]["b"].is_null());
    assert!(!r["summary"].as_str().unwrap().contains("first non-finite"));
}

#[test]
fn logits_offset_by_a_per_position_constant_are_softmax_equal() {
    let model = repo_root().join("golden/qwen3_5_tiny");
    for extra in [vec![], vec!["--model", model.to_str().unwrap()]] {
        let (code, r, err) = compare_json(
            &fixture("logits_honest.pt"),
            &fixture("logits_offset.pt"),
            &extra,
        );
        assert_eq!(code, 0, "{extra:?}: {err}");
        let headline = r["summary"].as_str().expect("summary");
        assert!(
            headline.contains("logits differ by a per-position constant")
                && headline.contains("softmax-equal"),
            "{headline}"
        );
        let row = &r["tensors"][0];
        assert_eq!(row["name"], "logits");
        assert_eq!(row["verdict"], "ok", "{row}");
        // What is left after the constant is f32 rounding of values ~100 in magnitude.
        assert!(row["rel_l2"].as_f64().unwrap() < 1e-5, "{row}");
        assert_eq!(r["logits"]["top1_flips"], 0);
    }
}

#[test]
fn a_real_logit_difference_is_no_offset_and_stays_a_mismatch() {
    let (code, r, err) = compare_json(&fixture("logits_honest.pt"), &fixture("logits_bug.pt"), &[]);
    assert_eq!(code, 1, "{err}");
    let headline = r["summary"].as_str().expect("summary");
    assert!(headline.starts_with("mismatch"), "{headline}");
    assert!(!headline.contains("per-position constant"), "{headline}");
    assert!(r["logits"]["top1_flips_decided"].as_u64().unwrap() > 0);
}
