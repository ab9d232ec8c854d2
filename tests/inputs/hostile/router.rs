//! Router ids that cannot be right: negative or huge ids, another k, rows for other tokens —
//! against the other side and against what the file itself records (the fingerprint's expert
//! count and experts per token, the width and rows of the router logits, the rows of the
//! margins); each refused by name in one line. A layer all NaN on one side shows its counts.

use std::path::{Path, PathBuf};
use std::process::Command;

use safetensors::Dtype as D;

use super::craft::{H, T, capture, capture_with, ids_for, router, values};
use super::harness::{Expect, args, expect, refused, s, write};

/// `d/base.safetensors`: a capture whose router ids, from `ids_for(T, 2)`, choose experts 0..=3.
fn base(d: &Path) -> PathBuf {
    write(
        d,
        "base.safetensors",
        &capture(1, vec![router(&ids_for(T, 2), 2)]),
    )
}

/// The base capture as `d/name` with `extra` tensors replacing or added to its own.
fn side(d: &Path, name: &str, extra: Vec<(&'static str, D, Vec<usize>, Vec<u8>)>) -> PathBuf {
    write(d, name, &capture(1, extra))
}

fn cmp(x: &Path, y: &Path) -> Vec<String> {
    args(&["compare", &s(x), &s(y)])
}

hostile!(router_id_minus_7, |d| {
    let negative = side(
        d,
        "neg.safetensors",
        vec![router(&[0, 1, 1, 2, -7, 0, 0, 1, 1, 2, 2, 0], 2)],
    );
    refused(cmp(&negative, &base(d)), &["router.1.topk_ids", "-7"])
});

hostile!(router_id_10_pow_15, |d| {
    let huge = side(
        d,
        "huge.safetensors",
        vec![router(
            &[0, 1, 1, 2, 1_000_000_000_000_000, 0, 0, 1, 1, 2, 2, 0],
            2,
        )],
    );
    let needles = ["router.1.topk_ids", "1000000000000000"];
    refused(cmp(&huge, &base(d)), &needles)
});

hostile!(router_k_3_against_2, |d| {
    let k3 = side(d, "k3.safetensors", vec![router(&ids_for(T, 3), 3)]);
    refused(cmp(&k3, &base(d)), &["router.1.topk_ids", "3", "2"])
});

hostile!(router_rows_for_4_of_6_tokens, |d| {
    let short = side(d, "short.safetensors", vec![router(&ids_for(T - 2, 2), 2)]);
    refused(cmp(&short, &base(d)), &["router.1.topk_ids", "4", "6"])
});

hostile!(router_ids_that_agree, |d| {
    let base = base(d);
    expect(cmp(&base, &base), Expect::Clean)
});

/// The base capture with layers.1 all NaN.
fn all_nan(d: &Path) -> PathBuf {
    side(
        d,
        "nan.safetensors",
        vec![
            router(&ids_for(T, 2), 2),
            (
                "layers.1",
                D::F32,
                vec![1, T, H],
                f32::NAN.to_le_bytes().repeat(T * H),
            ),
        ],
    )
}

hostile!(a_layer_all_nan_on_one_side_is_flagged, |d| {
    expect(cmp(&base(d), &all_nan(d)), Expect::Flagged)
});

/// The NaN row shows its counts, never a statistic that reads as agreement.
#[test]
fn a_layer_all_nan_shows_its_counts() {
    let dir = crate::common::tempdir();
    let d = dir.path();
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(cmp(&base(d), &all_nan(d)))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with('│') && l.contains("layers.1 "))
        .expect("the layers.1 row");
    assert!(row.contains("NaN/Inf: A 0, B 48"), "{row}");
    assert!(!row.contains("1.000000") && !row.contains("┆ 0 "), "{row}");
}

/// The fingerprint of a file: `experts` experts, `per_token` chosen per token.
fn fp(experts: usize, per_token: usize) -> String {
    format!(
        r#"{{"format":"hsdiff.dump/v1","source":"pytorch","num_experts":{experts},"num_experts_per_tok":{per_token}}}"#
    )
}

/// `router.1.logits` [1, rows, width].
fn logits(rows: usize, width: usize) -> (&'static str, D, Vec<usize>, Vec<u8>) {
    (
        "router.1.logits",
        D::F32,
        vec![1, rows, width],
        values(rows * width, 7),
    )
}

/// `router.1.margin` [1, rows].
fn margin(rows: usize) -> (&'static str, D, Vec<usize>, Vec<u8>) {
    ("router.1.margin", D::F32, vec![1, rows], values(rows, 9))
}

/// The base ids with `extra` tensors and fingerprint `meta`, as `d/name`.
fn recorded(
    d: &Path,
    name: &str,
    extra: Vec<(&'static str, D, Vec<usize>, Vec<u8>)>,
    meta: Option<String>,
) -> PathBuf {
    let mut tensors = vec![router(&ids_for(T, 2), 2)];
    tensors.extend(extra);
    write(d, name, &capture_with(1, tensors, meta.as_deref()))
}

hostile!(router_ids_within_the_recorded_counts, |d| {
    let extra = vec![logits(T, 4), margin(T)];
    let ok = recorded(d, "ok.safetensors", extra, Some(fp(4, 2)));
    expect(cmp(&ok, &base(d)), Expect::Clean)
});

hostile!(router_id_not_below_the_fingerprints_num_experts, |d| {
    let over_count = recorded(d, "count.safetensors", vec![], Some(fp(3, 2)));
    refused(
        cmp(&over_count, &base(d)),
        &[
            "router.1.topk_ids",
            "expert id 3",
            "below 3, the fingerprint's num_experts",
        ],
    )
});

hostile!(router_k_against_the_fingerprints_num_experts_per_tok, |d| {
    let other_k = recorded(d, "k.safetensors", vec![], Some(fp(8, 3)));
    refused(
        cmp(&other_k, &base(d)),
        &[
            "router.1.topk_ids",
            "2 experts per token",
            "num_experts_per_tok is 3",
        ],
    )
});

hostile!(router_id_not_below_the_router_logits_width, |d| {
    let narrow_logits = recorded(d, "narrow.safetensors", vec![logits(T, 3)], None);
    refused(
        cmp(&base(d), &narrow_logits),
        &[
            "router.1.topk_ids",
            "expert id 3",
            "router.1.logits` [1, 6, 3]",
        ],
    )
});

hostile!(router_logits_for_another_number_of_tokens, |d| {
    let short_logits = recorded(d, "short_logits.safetensors", vec![logits(T - 1, 8)], None);
    refused(
        cmp(&short_logits, &base(d)),
        &[
            "router.1.topk_ids",
            "6 rows",
            "router.1.logits` [1, 5, 8] has 5",
        ],
    )
});

hostile!(router_margins_for_another_number_of_tokens, |d| {
    let short_margin = recorded(d, "short_margin.safetensors", vec![margin(T - 2)], None);
    refused(
        cmp(&short_margin, &base(d)),
        &["router.1.topk_ids", "6 rows", "router.1.margin` has 4"],
    )
});

hostile!(router_two_expert_counts_in_one_file, |d| {
    let two_counts = recorded(d, "two.safetensors", vec![logits(T, 6)], Some(fp(8, 2)));
    refused(
        cmp(&two_counts, &base(d)),
        &[
            "two expert counts",
            "8 (the fingerprint's num_experts)",
            "6 (",
        ],
    )
});
