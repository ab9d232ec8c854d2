//! torch.save pickles that lie, nest, double or hold what is not a tensor, and the pickle limits.

use std::path::Path;

use super::craft::{good_torch, pk, torch_file, values};
use super::harness::{Case, args, compare_bad, refused, s, write};

/// A float tensor in storage `key`, offset 0.
fn t(key: &str, shape: &[i64], stride: &[i64]) -> Vec<u8> {
    pk::tensor(key, "FloatStorage", 0, shape, stride)
}

/// Storage "0": 32 floats.
fn data0() -> Vec<(&'static str, Vec<u8>)> {
    vec![("0", values(32, 3))]
}

/// A torch.save archive of `pickle` and `storages` as `d/file`, refused with `needles`.
fn bad(
    d: &Path,
    file: &str,
    pickle: &[u8],
    storages: &[(&str, Vec<u8>)],
    needles: &[&str],
) -> Case {
    compare_bad(&write(d, file, &torch_file(pickle, storages)), needles)
}

// A million lists: refused by the depth cap or, first, the object cap (both bound it).
hostile!(pickle_nested_10_pow_6_deep, |d| {
    let mut deep = vec![0x80, 2];
    deep.extend(std::iter::repeat_n(b']', 1_000_000));
    deep.extend(std::iter::repeat_n(b'a', 999_999));
    deep.push(b'.');
    bad(d, "pickle0.pt", &deep, &[], &["--limit pickle-"])
});

hostile!(pickle_memo_doubling, |d| {
    let mut doubling = vec![0x80, 2, b']', b'K', 0, b'a', b'q', 0];
    for _ in 0..60 {
        doubling.extend([
            b']', b'(', b'h', 0, b'h', 0, b'h', 0, b'h', 0, b'e', b'q', 0,
        ]);
    }
    doubling.push(b'.');
    bad(d, "pickle1.pt", &doubling, &[], &["pickle-objects"])
});

hostile!(pickle_custom_object, |d| {
    let p = pk::file(pk::dict(&[(
        "layers.0",
        [pk::global("mymod", "Thing"), vec![b')', b'R']].concat(),
    )]));
    bad(d, "pickle2.pt", &p, &data0(), &["layers.0", "mymod.Thing"])
});

hostile!(pickle_a_bare_string, |d| {
    bad(
        d,
        "pickle3.pt",
        &pk::file(pk::str("hello")),
        &[],
        &["a string"],
    )
});

hostile!(pickle_storage_missing, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("9", &[1, 4, 8], &[32, 8, 1]))]));
    bad(d, "pickle4.pt", &p, &data0(), &["layers.0", "missing"])
});

hostile!(pickle_storage_too_short, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("0", &[1, 40, 8], &[320, 8, 1]))]));
    bad(d, "pickle5.pt", &p, &data0(), &["layers.0"])
});

hostile!(pickle_offset_past_storage, |d| {
    let p = pk::file(pk::dict(&[(
        "layers.0",
        pk::tensor("0", "FloatStorage", 1 << 40, &[1, 4, 8], &[32, 8, 1]),
    )]));
    bad(d, "pickle6.pt", &p, &data0(), &["layers.0"])
});

hostile!(pickle_huge_shape, |d| {
    let p = pk::file(pk::dict(&[(
        "layers.0",
        t("0", &[1 << 40, 1 << 40, 1 << 40], &[1 << 40, 1 << 40, 1]),
    )]));
    bad(d, "pickle7.pt", &p, &data0(), &["layers.0"])
});

hostile!(pickle_negative_size, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("0", &[1, -4, 8], &[32, 8, 1]))]));
    bad(d, "pickle8.pt", &p, &data0(), &["layers.0", "bad size"])
});

hostile!(pickle_non_contiguous_view, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 4], &[32, 8, 1]))]));
    bad(d, "pickle9.pt", &p, &data0(), &["layers.0", "contiguous"])
});

hostile!(pickle_stride_rank_differs, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 8], &[8, 1]))]));
    bad(d, "pickle10.pt", &p, &data0(), &["layers.0", "stride"])
});

hostile!(pickle_unknown_storage, |d| {
    let p = pk::file(pk::dict(&[(
        "layers.0",
        pk::tensor("0", "ComplexFloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
    )]));
    let needles = ["layers.0", "ComplexFloatStorage"];
    bad(d, "pickle11.pt", &p, &data0(), &needles)
});

hostile!(pickle_opcode_junk, |d| {
    bad(d, "pickle12.pt", &[0x80, 2, 0xFF, b'.'], &[], &["opcode"])
});

hostile!(pickle_truncated, |d| {
    let p = pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 8], &[32, 8, 1]))]))[..40].to_vec();
    bad(d, "pickle13.pt", &p, &data0(), &["truncated"])
});

hostile!(pickle_memo_never_stored, |d| {
    bad(d, "pickle14.pt", &[0x80, 2, b'h', 9, b'.'], &[], &["memo"])
});

hostile!(pickle_empty_stack, |d| {
    bad(
        d,
        "pickle15.pt",
        &[0x80, 2, b'0', b'.'],
        &[],
        &["empty stack"],
    )
});

hostile!(pickle_no_stop, |d| {
    bad(d, "pickle16.pt", &[0x80, 2, b'}'], &[], &["truncated"])
});

hostile!(pickle_protocol_9, |d| {
    bad(d, "pickle17.pt", &[0x80, 9, b'}', b'.'], &[], &["protocol"])
});

hostile!(pickle_bad_key_type, |d| {
    let p = pk::file(
        [
            vec![b'}', b'('],
            pk::tuple(&[1]),
            t("0", &[1, 4, 8], &[32, 8, 1]),
            vec![b'u'],
        ]
        .concat(),
    );
    bad(d, "pickle18.pt", &p, &data0(), &["key"])
});

hostile!(pickle_string_claims_4_gb, |d| {
    let p = [0x80, 2, b'X', 0xFF, 0xFF, 0xFF, 0xFF, b'a', b'.'];
    bad(d, "pickle19.pt", &p, &[], &["truncated"])
});

hostile!(pickle_integer_of_200_bytes, |d| {
    let p = [vec![0x80, 2, 0x8a, 200], vec![1; 200], vec![b'.']].concat();
    bad(d, "pickle20.pt", &p, &[], &["integer"])
});

/// Scalar metadata next to the tensors is not refused, and not skipped silently: it is left out
/// and listed (the report's notes and stderr carry the list).
#[test]
fn pickle_scalar_metadata_is_left_out_and_listed() {
    let dir = crate::common::tempdir();
    let metadata = pk::file(pk::dict(&[
        ("layers.0", t("0", &[1, 4, 8], &[32, 8, 1])),
        ("step", pk::int(5)),
        ("note", pk::str("hi")),
    ]));
    let p = write(dir.path(), "metadata.pt", &torch_file(&metadata, &data0()));
    let src = hsdiff::formats::FileSource::open(&p, None).expect("metadata dict opens");
    assert_eq!(src.names(), vec!["layers.0".to_string()]);
    let listed = src.conventions.join(" | ");
    for needle in [
        "not tensors, left out",
        "`step` (a number)",
        "`note` (a string)",
    ] {
        assert!(listed.contains(needle), "`{needle}` not in {listed:?}");
    }
}

/// A pickle nested 2040 deep (under the deepest depth limit accepted, 2048) beside a good file.
fn deep_and_good(d: &Path) -> (String, String) {
    let n = 2040;
    let mut p = vec![0x80, 2];
    p.extend(std::iter::repeat_n(b'(', n));
    p.extend([b'K', 0]);
    p.extend(std::iter::repeat_n(b'l', n));
    p.push(b'.');
    let deep = write(d, "deep.pt", &torch_file(&p, &[]));
    let good = write(d, "good.pt", &good_torch(1));
    (s(&deep), s(&good))
}

hostile!(pickle_depth_limit_of_a_million, |d| {
    let (deep, good) = deep_and_good(d);
    refused(
        args(&["compare", &deep, &good, "--limit", "pickle-depth=1000000"]),
        &["pickle-depth", "2048"],
    )
});

hostile!(pickle_2040_deep_at_the_deepest_limit, |d| {
    let (deep, good) = deep_and_good(d);
    refused(
        args(&["compare", &deep, &good, "--limit", "pickle-depth=2048"]),
        &["deep.pt", "not a tensor"],
    )
});

hostile!(pickle_2040_deep_under_the_default_limit, |d| {
    let (deep, good) = deep_and_good(d);
    refused(args(&["compare", &deep, &good]), &["pickle-depth"])
});
