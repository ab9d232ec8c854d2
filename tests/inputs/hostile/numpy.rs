//! numpy files whose header lies or is not numpy's, npz archives with bad entries, a file of no
//! known format, and empty stacks of more layers than the `layers` limit.

use std::path::Path;

use super::craft::{npy, values, zip};
use super::harness::{Case, args, compare_bad, refused, s, write};

/// The npy header numpy writes for f32 values of `shape`.
fn f4(shape: &str) -> String {
    format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}")
}

/// `bytes` as `d/npyI/layers.0.npy` (named as hsdiff names a layer, so that only the content is
/// wrong), refused with `needles`.
fn bad_npy(d: &Path, i: usize, bytes: &[u8], needles: &[&str]) -> Case {
    let sub = d.join(format!("npy{i}"));
    std::fs::create_dir(&sub).expect("mkdir");
    compare_bad(&write(&sub, "layers.0.npy", bytes), needles)
}

hostile!(npy_truncated_data, |d| {
    let b = npy(&f4("(1, 4, 8)"), &values(10, 1));
    bad_npy(d, 0, &b, &["truncated"])
});

hostile!(npy_shape_overflows, |d| {
    let b = npy(&f4("(4294967296, 4294967296, 64)"), &values(8, 1));
    bad_npy(d, 1, &b, &["shape"])
});

hostile!(npy_huge_shape, |d| {
    let b = npy(&f4("(1, 1099511627776, 1)"), &values(8, 1));
    bad_npy(d, 2, &b, &["truncated"])
});

hostile!(npy_complex, |d| {
    let header = "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 2), }";
    bad_npy(d, 3, &npy(header, &values(4, 1)), &["dtype"])
});

hostile!(npy_big_endian, |d| {
    let header = "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2), }";
    bad_npy(d, 4, &npy(header, &values(2, 1)), &["big-endian"])
});

hostile!(npy_no_shape, |d| {
    let header = "{'descr': '<f4', 'fortran_order': False, }";
    bad_npy(d, 5, &npy(header, &values(2, 1)), &["shape"])
});

hostile!(npy_no_descr, |d| {
    let header = "{'fortran_order': False, 'shape': (1, 2), }";
    bad_npy(d, 6, &npy(header, &values(2, 1)), &["dtype"])
});

hostile!(npy_version_7, |d| {
    let mut b = npy(&f4("(1, 2)"), &values(2, 1));
    b[6] = 7;
    bad_npy(d, 7, &b, &["version"])
});

hostile!(npy_header_past_end, |d| {
    let mut b = npy(&f4("(1, 2)"), &values(2, 1));
    b[8] = 0xFF;
    b[9] = 0xFF;
    bad_npy(d, 8, &b, &["header"])
});

hostile!(npy_v2_header_of_4_gb, |d| {
    let mut b = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
    b.extend(b"{'descr'");
    bad_npy(d, 9, &b, &["header"])
});

hostile!(npy_header_not_text, |d| {
    let mut b = npy(&f4("(1, 2)"), &values(2, 1));
    b[12] = 0xFF;
    bad_npy(d, 10, &b, &["text"])
});

hostile!(npy_int16_without_hint, |d| {
    let header = "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2, 2), }";
    bad_npy(d, 11, &npy(header, &values(2, 1)), &["dtype-hint"])
});

hostile!(npy_ints, |d| {
    let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 2), }";
    bad_npy(d, 12, &npy(header, &values(4, 1)), &["not floating point"])
});

hostile!(npy_only_magic, |d| { bad_npy(d, 13, b"\x93NUMPY", &[]) });

/// A good npy entry: [1, 4, 8] f32.
fn good_npy() -> Vec<u8> {
    npy(&f4("(1, 4, 8)"), &values(32, 1))
}

/// `bytes` as `d/archI.npz`, refused with `needles`.
fn bad_npz(d: &Path, i: usize, bytes: &[u8], needles: &[&str]) -> Case {
    compare_bad(&write(d, &format!("arch{i}.npz"), bytes), needles)
}

/// An npz of the good entry whose directory says it is deflated.
fn claimed_deflate() -> (Vec<u8>, usize) {
    let mut b = zip(&[("layers.0.npy", &good_npy())]);
    let cd = u32::from_le_bytes(b[b.len() - 6..b.len() - 2].try_into().unwrap()) as usize;
    b[cd + 10] = 8;
    (b, cd)
}

hostile!(npz_entry_truncated, |d| {
    let good = good_npy();
    let b = zip(&[("layers.0.npy", &good[..good.len() - 5])]);
    bad_npz(d, 0, &b, &["layers.0"])
});

hostile!(npz_entry_garbage, |d| {
    let b = zip(&[("layers.0.npy", b"garbage")]);
    bad_npz(d, 1, &b, &["layers.0"])
});

hostile!(npz_lying_shape, |d| {
    let entry = npy(&f4("(1, 99999999, 99999999)"), &values(4, 1));
    bad_npz(d, 2, &zip(&[("layers.0.npy", &entry)]), &["layers.0"])
});

hostile!(npz_deflate_bomb_claim, |d| {
    let (mut b, cd) = claimed_deflate();
    b[cd + 24..cd + 28].copy_from_slice(&u32::MAX.to_le_bytes());
    bad_npz(d, 3, &b, &["deflate"])
});

hostile!(npz_bad_deflate_data, |d| {
    let (b, _) = claimed_deflate();
    bad_npz(d, 4, &b, &["layers.0"])
});

hostile!(zip_of_neither_torch_nor_numpy, |d| {
    let b = zip(&[("readme.txt", b"hello")]);
    bad_npz(d, 5, &b, &["neither"])
});

hostile!(unknown_format, |d| {
    let p = write(
        d,
        "garbage.bin",
        b"just some text, not a tensor file at all",
    );
    compare_bad(&p, &["unrecognised format"])
});

// A stack of hidden states with empty states (`[10¹², 0, 4]`, found by the numpy fuzz target as
// `[90158, 0, 4]`): the file's size cannot bound the number of layers, so the `layers` limit
// does — refused at once, never split into 10¹² entries.

/// `compare X X` for an npy header of `shape` with no data, as `d/file`.
fn empty_stack(d: &Path, file: &str, shape: &str) -> Vec<String> {
    let x = s(&write(d, file, &npy(&f4(&format!("({shape})")), &[])));
    args(&["compare", &x, &x])
}

hostile!(npy_an_empty_stack_of_10_pow_12_layers, |d| {
    refused(
        empty_stack(d, "huge.npy", "1000000000000, 0, 4"),
        &[
            "huge.npy",
            "number of layers is 999999999999",
            "--limit layers",
        ],
    )
});

hostile!(npy_the_fuzzers_empty_stack_of_90158_layers, |d| {
    refused(
        empty_stack(d, "fuzzed.npy", "90158, 0, 4"),
        &["fuzzed.npy", "number of layers is 90157", "--limit layers"],
    )
});
