//! A checkpoint holding NaN where the forward reads it: the headline names the NaN as the
//! cause, not "N of N paths depart". Where the run never reads it (an embedding row of a token
//! not in the input), a note names the tensor and the element.

use std::path::Path;

use super::harness::{Case, Expect, args, expect, s};
use crate::common::{self, Edit};

/// A copy of the tiny Qwen3.5 at `d/model` whose layer 4 `A_log` holds NaN at head 0.
fn nan_a_log(d: &Path) -> std::path::PathBuf {
    with_nan(d, "model.language_model.layers.4.linear_attn.A_log", 0)
}

/// A copy of the tiny Qwen3.5 at `d/model` whose bf16 tensor `name` holds NaN at flat index
/// `at`.
fn with_nan(d: &Path, name: &str, at: usize) -> std::path::PathBuf {
    let dir = d.join("model");
    common::copy_dir(&common::golden_model_dir("qwen3_5_tiny"), &dir);
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).expect("read checkpoint");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).expect("A_log");
    assert_eq!(
        t.dtype(),
        safetensors::Dtype::BF16,
        "the fixture's {name} is bf16"
    );
    let mut data = t.data().to_vec();
    data[2 * at..2 * at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes());
    common::rewrite_safetensors(&file, |n| {
        if n == name {
            Edit::Bytes(data.clone())
        } else {
            Edit::Keep
        }
    });
    dir
}

hostile!(
    paths_on_a_nan_a_log_name_the_nan,
    |d| {
        let model = nan_a_log(d);
        expect(
            args(&[
                "paths",
                "--model",
                &s(&model),
                "--paths",
                "decode,chunked-prefill",
                "--format",
                "json",
                "--out",
                &s(&d.join("r.json")),
            ]),
            Expect::Flagged,
        )
    },
    then |d: &Path| {
        let text = std::fs::read_to_string(d.join("r.json")).expect("report written");
        let r: serde_json::Value = serde_json::from_str(&text).expect("json");
        let headline = r["summary"].as_str().unwrap_or_default();
        assert!(
            headline.contains("NaN/Inf from `layers.4`") && headline.contains("non-finite"),
            "headline does not name the NaN: {headline}"
        );
    }
);

/// Embedding row 300, channel 5 of the tiny model (64 channels).
const EMBED: &str = "model.language_model.embed_tokens.weight";
const ROW_300_CH_5: usize = 300 * 64 + 5;

/// The note that names the stored NaN.
fn names_the_stored_nan(d: &Path) {
    let text = std::fs::read_to_string(d.join("r.json")).expect("report written");
    let r: serde_json::Value = serde_json::from_str(&text).expect("json");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("1 NaN in `model.language_model.embed_tokens.weight` (first at [300, 5]"),
        "no note names the stored NaN: {notes}"
    );
}

/// A live run, reference against chunked, on `tokens` of the tiny model with NaN at embedding
/// row 300, channel 5, its JSON report in `d/r.json`.
fn live_run_on_a_nan_row(d: &Path, tokens: &str, outcome: Expect) -> Case {
    let model = with_nan(d, EMBED, ROW_300_CH_5);
    expect(
        args(&[
            "--model",
            &s(&model),
            "--tokens",
            tokens,
            "--a",
            "reference",
            "--b",
            "chunked",
            "--format",
            "json",
            "--out",
            &s(&d.join("r.json")),
        ]),
        outcome,
    )
}

hostile!(
    a_nan_in_an_embedding_row_the_input_never_reads_is_named_in_a_note,
    |d| { live_run_on_a_nan_row(d, "1,2,3,4", Expect::Clean) },
    then names_the_stored_nan
);

hostile!(
    the_same_nan_read_by_the_input_is_flagged_and_named,
    |d| { live_run_on_a_nan_row(d, "1,300,3,4", Expect::Flagged) },
    then names_the_stored_nan
);
