//! A checkpoint holding NaN where the forward reads it: the headline names the NaN as the
//! cause, not "N of N paths depart".

use std::path::Path;

use super::harness::{Expect, args, expect, s};
use crate::common::{self, Edit};

/// A copy of the tiny Qwen3.5 at `d/model` whose layer 4 `A_log` holds NaN at head 0.
fn nan_a_log(d: &Path) -> std::path::PathBuf {
    let dir = d.join("model");
    common::copy_dir(&common::golden_model_dir("qwen3_5_tiny"), &dir);
    let name = "model.language_model.layers.4.linear_attn.A_log";
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).expect("read checkpoint");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let t = st.tensor(name).expect("A_log");
    assert_eq!(
        t.dtype(),
        safetensors::Dtype::BF16,
        "the fixture's A_log is bf16"
    );
    let mut data = t.data().to_vec();
    data[..2].copy_from_slice(&0x7fc0u16.to_le_bytes());
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
