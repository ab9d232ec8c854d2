//! Files whose fields lie about what they hold (tests/fixtures/readers_lie/make.py: committed
//! transformers-made fixtures saved again by torch with one field changed): SGLang tensor-parallel
//! meta (tp_size 2⁴⁰ / 2⁶², a rank past tp_size, whole copies declared partial sums), `seq_lens`
//! against the pass, router expert ids against the model, the "identical" headline against the
//! router data, pipeline files whose ids or shapes disagree with their tool (float or negative
//! `input_ids`, 4-D hidden states, speculators `token_ids` one short), and the `.ckpt.gz`
//! inflate bound.

use std::io::Write;
use std::path::PathBuf;

use super::harness::{Expect, args, expect, refused, refused_after_notes, s, write};
use crate::common::{golden_model_dir, hsdiff, repo_root, stderr_of, stdout_of};

fn lie(rel: &str) -> PathBuf {
    repo_root().join("tests/fixtures/readers_lie").join(rel)
}

/// The dumper folder of a case (`sglang/<case>` or `sglang_seq_lens/<case>`).
fn dump(rel: &str) -> String {
    s(&lie(rel).join("dump_20261201_120000_000000"))
}

fn eval_prompt_0() -> String {
    s(&repo_root().join("tests/fixtures/pipelines/qwen3_5_tiny/eval/prompt_0.safetensors"))
}

fn moe_sample(side: &str) -> String {
    s(&repo_root()
        .join("tests/fixtures/moe_dataset")
        .join(side)
        .join("sample_00.pt"))
}

fn moe_model() -> String {
    s(&golden_model_dir("qwen3_next_moe_tiny"))
}

hostile!(sglang_tp_size_2_pow_40_refused, |_d| {
    refused(
        args(&["compare", &dump("sglang/tp_size_2e40"), &eval_prompt_0()]),
        &["layers.1.output.0", "tp_size 1099511627776"],
    )
});

hostile!(sglang_tp_size_2_pow_62_refused, |_d| {
    refused(
        args(&["compare", &dump("sglang/tp_size_2e62"), &eval_prompt_0()]),
        &["layers.1.output.0", "tp_size 4611686018427387904"],
    )
});

hostile!(sglang_rank_5_of_tp_size_2_refused, |_d| {
    refused(
        args(&["compare", &dump("sglang/rank_5_of_2"), &eval_prompt_0()]),
        &[
            "layers.1.output.1",
            "rank 1's file",
            "tp_rank 5 of tp_size 2",
        ],
    )
});

hostile!(sglang_whole_copies_declared_partial_refused, |_d| {
    refused(
        args(&["compare", &dump("sglang/partial_copies"), &eval_prompt_0()]),
        &[
            "layers.1.output.0",
            "declared `tp:partial`",
            "equal bit for bit",
            "2× its value",
            "SGLang #28925",
        ],
    )
});

hostile!(sglang_honest_partial_sums_joined, |_d| {
    expect(
        args(&[
            "compare",
            &dump("sglang/partial_honest"),
            &eval_prompt_0(),
            "--no-floor",
        ]),
        Expect::Clean,
    )
});

hostile!(sglang_seq_lens_of_the_pass_accepted, |_d| {
    expect(
        args(&[
            "compare",
            &dump("sglang_seq_lens/seq_lens_10"),
            &eval_prompt_0(),
            "--no-floor",
        ]),
        Expect::Clean,
    )
});

hostile!(sglang_seq_lens_0_refused, |_d| {
    refused(
        args(&[
            "compare",
            &dump("sglang_seq_lens/seq_lens_0"),
            &eval_prompt_0(),
        ]),
        &["seq_lens", "holds the length 0"],
    )
});

hostile!(sglang_seq_lens_999_of_10_tokens_refused, |_d| {
    refused(
        args(&[
            "compare",
            &dump("sglang_seq_lens/seq_lens_999"),
            &eval_prompt_0(),
        ]),
        &["seq_lens", "counts 999 tokens, the pass holds 10"],
    )
});

/// With `--model` the run says which model it calibrates with before reading the sides, so the
/// refusal is the last stderr line, not the only one.
#[test]
fn router_id_8_of_8_experts_refused_with_the_model() {
    let bad = s(&lie("router/id_8.pt"));
    let eval = moe_sample("eval_router");
    let model = moe_model();
    let out = hsdiff(&["compare", &bad, &eval, "--model", &model], &repo_root());
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    let last = err.lines().last().unwrap_or_default();
    for needle in [
        "hsdiff: error: ",
        "id_8.pt",
        "router.3.topk_ids",
        "layer 3, token 5",
        "expert id 8",
        "num_experts of --model's config.json",
    ] {
        assert!(last.contains(needle), "{needle}: {err}");
    }
}

hostile!(router_ids_within_the_models_experts_accepted, |_d| {
    expect(
        args(&[
            "compare",
            &moe_sample("train_router"),
            &moe_sample("eval_router"),
            "--model",
            &moe_model(),
        ]),
        Expect::Clean,
    )
});

/// The headline of `compare a b`, with its exit code.
fn headline(a: &str, b: &str) -> (Option<i32>, String) {
    let out = hsdiff(&["compare", a, b], &repo_root());
    let text = stdout_of(&out);
    let first = text
        .lines()
        .find(|l| {
            ["benign:", "uncalibrated:", "drift:", "mismatch:"]
                .iter()
                .any(|w| l.trim_start().starts_with(w))
        })
        .unwrap_or_else(|| panic!("no headline in\n{text}\n{}", stderr_of(&out)))
        .to_string();
    (out.status.code(), first)
}

#[test]
fn identical_captures_are_identical_router_data_included() {
    let a = moe_sample("train_router");
    let (code, line) = headline(&a, &a);
    assert_eq!(code, Some(0), "{line}");
    assert!(line.contains("are identical (bit for bit)"), "{line}");
    let logits = s(&lie("router/logits.pt"));
    let (code, line) = headline(&logits, &logits);
    assert_eq!(code, Some(0), "{line}");
    assert!(line.contains("are identical (bit for bit)"), "{line}");
}

#[test]
fn other_router_data_is_never_identical() {
    let a = moe_sample("train_router");
    for (b, a, why) in [
        (
            lie("router/other_routing.pt"),
            a.clone(),
            "`router.3.topk_ids` differs",
        ),
        (
            lie("router/no_router.pt"),
            a.clone(),
            "`router.0.topk_ids` is on A only",
        ),
        (
            lie("router/nan_logits.pt"),
            s(&lie("router/logits.pt")),
            "`router.2.logits` holds NaN on B",
        ),
    ] {
        let (_, line) = headline(&a, &s(&b));
        assert!(!line.contains("identical"), "{line}");
        assert!(line.contains("but not their router data"), "{line}");
        assert!(line.contains(why), "{why}: {line}");
    }
}

fn pipeline_fixture(rel: &str) -> String {
    s(&repo_root()
        .join("tests/fixtures/pipelines/qwen3_5_tiny")
        .join(rel))
}

hostile!(a_batched_ckpt_gz_reads_as_its_ckpt, |_d| {
    expect(
        args(&[
            "compare",
            &s(&lie("pipelines/dflash_batch.ckpt.gz")),
            &pipeline_fixture("specforge_dflash_batch/batch.ckpt"),
            "--draft-config",
            &pipeline_fixture("draft_config.json"),
        ]),
        Expect::Clean,
    )
});

hostile!(a_4d_dflash_hidden_states_named_by_shape, |_d| {
    refused(
        args(&[
            "compare",
            &s(&lie("pipelines/dflash_4d.ckpt")),
            &pipeline_fixture("specforge_dflash/rows_0-5000/data_0.ckpt"),
            "--layer-ids",
            "1,2,4,5,6",
        ]),
        &[
            "dflash_4d.ckpt",
            "specforge-dflash",
            "`hidden_states` has shape [1, 1, 10, 320]",
            "writes [1, T, k·H]",
        ],
    )
});

hostile!(a_4d_eagle3_hidden_state_named_by_shape, |_d| {
    refused(
        args(&[
            "compare",
            &s(&lie("pipelines/eagle3_4d.ckpt")),
            &pipeline_fixture("specforge_eagle3/rows_0-5000/data_0.ckpt"),
            "--layer-ids",
            "1,2,4",
        ]),
        &[
            "eagle3_4d.ckpt",
            "specforge-eagle3",
            "`hidden_state` has shape [1, 1, 10, 64]",
            "writes [1, T, H]",
        ],
    )
});

hostile!(speculators_token_ids_one_short_refused, |_d| {
    refused(
        args(&[
            "compare",
            &s(&lie("pipelines/hs_0_short_ids.safetensors")),
            &pipeline_fixture("speculators/hs_0.safetensors"),
        ]),
        &[
            "hs_0_short_ids.safetensors",
            "`hidden_states` holds 10 states for 9 token ids",
        ],
    )
});

hostile!(ge_data_float_input_ids_named, |_d| {
    refused_after_notes(
        args(&[
            "compare",
            &s(&lie("pipelines/ge_data_float_ids.ckpt")),
            &pipeline_fixture("ge_data/0/data_0.ckpt"),
        ]),
        &[
            "ge_data_float_ids.ckpt",
            "tensor `input_ids`",
            "must be integer token ids",
        ],
    )
});

hostile!(ge_data_negative_input_id_named, |_d| {
    refused_after_notes(
        args(&[
            "compare",
            &s(&lie("pipelines/ge_data_negative_ids.ckpt")),
            &pipeline_fixture("ge_data/0/data_0.ckpt"),
        ]),
        &[
            "ge_data_negative_ids.ckpt",
            "tensor `input_ids`",
            "token id -1 out of range",
        ],
    )
});

hostile!(layer_ids_for_ge_data_refused, |_d| {
    let ge = pipeline_fixture("ge_data/0/data_0.ckpt");
    refused(
        args(&["compare", &ge, &ge, "--layer-ids", "1,2"]),
        &[
            "data_0.ckpt",
            "eagle-ge-data",
            "--layer-ids names layers",
            "one state",
        ],
    )
});

hostile!(ge_data_without_layer_ids_read, |_d| {
    let ge = pipeline_fixture("ge_data/0/data_0.ckpt");
    expect(args(&["compare", &ge, &ge]), Expect::Clean)
});

/// A gzip stream of `n` zero bytes, as `gzip` would write it.
fn gzip_of_zeros(n: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let block = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len());
        enc.write_all(&block[..k]).expect("deflate");
        left -= k;
    }
    enc.finish().expect("deflate")
}

hostile!(a_gzip_bomb_refused_at_the_inflate_limit, |d| {
    let bomb: PathBuf = write(d, "data_0.ckpt.gz", &gzip_of_zeros(64 << 20));
    refused(
        args(&[
            "compare",
            &s(&bomb),
            &eval_prompt_0(),
            "--limit",
            "inflated-bytes=16000000",
        ]),
        &[
            "data_0.ckpt.gz",
            "runs past 16000000 bytes",
            "--limit inflated-bytes=N",
        ],
    )
});

// A layer one position short on both sides of a MoE compare: the shape error names the side
// and the model's f64 truth whose shape it is, never "side B" for the truth.
hostile!(a_layer_shorter_than_the_truth_names_the_truth, |_d| {
    let short = s(&lie("router/short_layer.pt"));
    refused_after_notes(
        args(&["compare", &short, &short, "--model", &moe_model()]),
        &["`layers.5` has shape [1, 31, 64] in side A but [1, 32, 64] in the model's f64 truth"],
    )
});
