//! Sizes that would abort a run if taken at their word: a tokenizer padding to 10⁹, bench shapes,
//! lengths and thread counts, a decode past `u64::MAX`, a thread pool of 100 000 — each runs or
//! is refused in one line, never aborts.

use std::path::Path;

use super::craft::good_torch;
use super::harness::{Case, Expect, args, expect, refused, s, write};
use crate::common::{copy_dir, golden_model_dir};

/// A copy of the golden dense model whose tokenizer pads to 10⁹ tokens and truncates to 2.
fn padded_model(d: &Path) -> String {
    let model = d.join("padded");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    let tok_path = model.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tok_path).expect("tokenizer")).expect("json");
    tok["padding"] = serde_json::json!({
        "strategy": {"Fixed": 1_000_000_000u64}, "direction": "Right", "pad_to_multiple_of": null,
        "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"
    });
    tok["truncation"] = serde_json::json!({
        "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
    });
    std::fs::write(&tok_path, serde_json::to_vec(&tok).expect("json")).expect("write");
    s(&model)
}

hostile!(
    tokenizer_with_fixed_padding_of_10_pow_9_and_truncation_to_2,
    |d| {
        let sm = padded_model(d);
        expect(
            args(&[
                "dump",
                "--model",
                &sm,
                "--prompt",
                "def f(x): return x",
                "--out",
                &s(&d.join("t.safetensors")),
            ]),
            Expect::Clean,
        )
    }
);

/// `bench core FLAG VALUE --backends reference`, refused naming `needle`.
fn bench_core(flag: &str, value: &str, needle: &str) -> Case {
    refused(
        args(&["bench", "core", flag, value, "--backends", "reference"]),
        &[needle],
    )
}

hostile!(bench_core_head_dim_10_pow_6, |_d| {
    bench_core("--head-dim", "1000000", "--head-dim")
});

hostile!(bench_core_lengths_u64_max, |_d| {
    bench_core("--lengths", "18446744073709551615", "--lengths")
});

hostile!(bench_core_threads_10_pow_6, |_d| {
    bench_core("--threads", "1000000", "--threads")
});

hostile!(bench_forward_seq_10_pow_8, |d| {
    let sm = padded_model(d);
    refused(
        args(&[
            "bench",
            "forward",
            "--model",
            &sm,
            "--seq",
            "100000000",
            "--backends",
            "reference",
        ]),
        &["--seq", "--limit tokens"],
    )
});

hostile!(dump_decode_from_u64_max, |d| {
    let sm = padded_model(d);
    refused(
        args(&[
            "dump",
            "--model",
            &sm,
            "--tokens",
            "1,2,3",
            "--out",
            &s(&d.join("x.safetensors")),
            "--decode-from",
            "18446744073709551615",
            "--decode-steps",
            "2",
        ]),
        &["--decode-from", "--decode-steps"],
    )
});

hostile!(rayon_num_threads_100000, |d| {
    let good = s(&write(d, "good.pt", &good_torch(1)));
    refused(
        args(&["compare", &good, &good]),
        &["RAYON_NUM_THREADS", "100000"],
    )
    .with_env("RAYON_NUM_THREADS", "100000")
});
