//! Safetensors files that are cut short or whose header lies: sizes, offsets, dtypes, shapes and
//! the `hsdiff` metadata.

use std::path::Path;

use super::craft::{safetensors, values};
use super::harness::{Case, compare_bad, fixture, write};

/// The committed f32 dump cut to `at(its length)` bytes.
fn cut_dump(d: &Path, file: &str, at: impl FnOnce(usize) -> usize) -> Case {
    let dump = std::fs::read(fixture("dump_f32.safetensors")).expect("fixture");
    let p = write(d, file, &dump[..at(dump.len())]);
    compare_bad(&p, &[])
}

hostile!(safetensors_cut_at_1_byte, |d| {
    cut_dump(d, "cut0.safetensors", |_| 1)
});
hostile!(safetensors_cut_at_7_bytes, |d| {
    cut_dump(d, "cut1.safetensors", |_| 7)
});
hostile!(safetensors_cut_at_8_bytes, |d| {
    cut_dump(d, "cut2.safetensors", |_| 8)
});
hostile!(safetensors_cut_at_9_bytes, |d| {
    cut_dump(d, "cut3.safetensors", |_| 9)
});
hostile!(safetensors_cut_at_50_bytes, |d| {
    cut_dump(d, "cut4.safetensors", |_| 50)
});
hostile!(safetensors_cut_at_200_bytes, |d| {
    cut_dump(d, "cut5.safetensors", |_| 200)
});
hostile!(safetensors_cut_at_1000_bytes, |d| {
    cut_dump(d, "cut6.safetensors", |_| 1000)
});
hostile!(safetensors_cut_at_a_third, |d| {
    cut_dump(d, "cut7.safetensors", |n| n / 3)
});
hostile!(safetensors_cut_at_half, |d| {
    cut_dump(d, "cut8.safetensors", |n| n / 2)
});
hostile!(safetensors_cut_one_byte_short, |d| {
    cut_dump(d, "cut9.safetensors", |n| n - 1)
});

/// `bytes` as `d/file`, refused by compare with `needles`.
fn bad(d: &Path, file: &str, bytes: &[u8], needles: &[&str]) -> Case {
    compare_bad(&write(d, file, bytes), needles)
}

hostile!(safetensors_header_2_pow_40, |d| {
    let mut b = (1u64 << 40).to_le_bytes().to_vec();
    b.extend(b"{}");
    bad(d, "header_2^40.safetensors", &b, &["header"])
});

hostile!(safetensors_header_u64_max, |d| {
    let mut b = u64::MAX.to_le_bytes().to_vec();
    b.extend(b"{}");
    bad(d, "header_u64_max.safetensors", &b, &["header"])
});

hostile!(safetensors_header_not_json, |d| {
    let b = safetensors("{not json", b"");
    bad(d, "header_not_json.safetensors", &b, &["header"])
});

hostile!(safetensors_header_an_array, |d| {
    let b = safetensors("[1,2,3]", b"");
    bad(d, "header_array.safetensors", &b, &["header"])
});

hostile!(safetensors_header_not_utf8, |d| {
    let b: Vec<u8> = safetensors("{\"\u{fffd}\":1}", b"")
        .iter()
        .map(|&c| if c == 0xEF { 0xFF } else { c })
        .collect();
    bad(d, "header_not_utf8.safetensors", &b, &["header"])
});

hostile!(safetensors_duplicate_names, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}}"#,
        &values(4, 1),
    );
    bad(d, "duplicate_names.safetensors", &b, &["layers.0", "twice"])
});

hostile!(safetensors_unknown_dtype, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"Q9","shape":[1,2],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    bad(d, "unknown_dtype.safetensors", &b, &["header"])
});

hostile!(safetensors_shape_overflows, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    bad(d, "shape_overflows.safetensors", &b, &[])
});

hostile!(safetensors_offsets_past_end, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8000]}}"#,
        &values(2, 1),
    );
    bad(d, "offsets_past_end.safetensors", &b, &[])
});

hostile!(safetensors_offsets_overlap, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"layers.1":{"dtype":"F32","shape":[1,2],"data_offsets":[4,12]}}"#,
        &values(3, 1),
    );
    bad(d, "offsets_overlap.safetensors", &b, &[])
});

hostile!(safetensors_offsets_reversed, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[8,0]}}"#,
        &values(2, 1),
    );
    bad(d, "offsets_reversed.safetensors", &b, &[])
});

hostile!(safetensors_negative_offset, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[-8,0]}}"#,
        &values(2, 1),
    );
    bad(d, "negative_offset.safetensors", &b, &["header"])
});

hostile!(safetensors_size_mismatch, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[1,3],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    bad(d, "size_mismatch.safetensors", &b, &[])
});

hostile!(safetensors_metadata_not_json, |d| {
    let b = safetensors(
        r#"{"__metadata__":{"hsdiff":"{oops"},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    bad(d, "metadata_not_json.safetensors", &b, &["hsdiff"])
});

hostile!(safetensors_metadata_not_strings, |d| {
    let b = safetensors(
        r#"{"__metadata__":{"hsdiff":5},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    bad(d, "metadata_not_strings.safetensors", &b, &["header"])
});

hostile!(safetensors_integer_hidden_state, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]}}"#,
        &values(2, 1),
    );
    let needles = ["layers.0", "not floating point"];
    bad(d, "integer_hidden_state.safetensors", &b, &needles)
});

hostile!(safetensors_batch_of_two, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[2,1,2],"data_offsets":[0,16]}}"#,
        &values(4, 1),
    );
    bad(d, "batch_of_two.safetensors", &b, &["layers.0", "batch"])
});

hostile!(safetensors_1_d_hidden_state, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &values(4, 1),
    );
    bad(
        d,
        "1-D_hidden_state.safetensors",
        &b,
        &["layers.0", "[1, T, D]"],
    )
});

hostile!(safetensors_0_d_hidden_state, |d| {
    let b = safetensors(
        r#"{"layers.0":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}"#,
        &values(1, 1),
    );
    bad(
        d,
        "0-D_hidden_state.safetensors",
        &b,
        &["layers.0", "[1, T, D]"],
    )
});

hostile!(safetensors_empty_file, |d| {
    bad(d, "empty_file.safetensors", &[], &["empty"])
});

hostile!(safetensors_seven_bytes, |d| {
    bad(d, "seven_bytes.safetensors", &[1, 2, 3, 4, 5, 6, 7], &[])
});
