//! Nothing is resolved silently: two entries that read as one layer, a key pickled twice,
//! tensors with nothing to compare, a golden folder without its states.

use std::path::{Path, PathBuf};

use safetensors::Dtype as D;

use super::craft::{H, T, i64_bytes, npy, pk, st_file, torch_file, values, zip};
use super::harness::{Expect, args, expect, refused, s, write};
use crate::common;

/// An npy entry [1, 4, 8] f32 of `data`.
fn entry(data: &[u8]) -> Vec<u8> {
    npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
        data,
    )
}

/// `d/clash.npz` with `h.1` and `blocks.1` (both read as layers.1) and `d/one.npz` with
/// `layers.1` equal to `h.1`.
fn clash_and_one(d: &Path) -> (PathBuf, PathBuf) {
    let data = values(32, 5);
    let clash = write(
        d,
        "clash.npz",
        &zip(&[
            ("h.1.npy", &entry(&data)),
            ("blocks.1.npy", &entry(&values(32, 6))),
        ]),
    );
    let one = write(d, "one.npz", &zip(&[("layers.1.npy", &entry(&data))]));
    (clash, one)
}

fn cmp(x: &Path, y: &Path) -> Vec<String> {
    args(&["compare", &s(x), &s(y)])
}

hostile!(two_entries_read_as_layers_1_are_refused, |d| {
    let (clash, one) = clash_and_one(d);
    refused(cmp(&clash, &one), &["h.1", "blocks.1", "--map"])
});

hostile!(map_picks_one_of_the_clashing_entries, |d| {
    let (clash, one) = clash_and_one(d);
    expect(
        [cmp(&clash, &one), args(&["--map", "h.1=layers.1"])].concat(),
        Expect::Clean,
    )
});

// A dict pickled with `layers.0` twice: torch.load keeps the last.
hostile!(a_key_pickled_twice_reads_the_last, |d| {
    let p = pk::file(pk::dict(&[
        (
            "layers.0",
            pk::tensor("0", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
        (
            "layers.0",
            pk::tensor("1", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
    ]));
    let twice = write(
        d,
        "twice.pt",
        &torch_file(&p, &[("0", values(32, 1)), ("1", values(32, 2))]),
    );
    let p = pk::file(pk::dict(&[(
        "layers.0",
        pk::tensor("0", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
    )]));
    let last = write(d, "last.pt", &torch_file(&p, &[("0", values(32, 2))]));
    expect(cmp(&twice, &last), Expect::Clean)
});

/// A capture of T tokens whose layers.0 is [1, T, 0].
fn empty_h(d: &Path, name: &str) -> PathBuf {
    write(
        d,
        name,
        &st_file(
            &[
                (
                    "input_ids",
                    D::I64,
                    vec![1, T],
                    i64_bytes(&[3, 1, 4, 1, 5, 9]),
                ),
                ("layers.0", D::F32, vec![1, T, 0], Vec::new()),
            ],
            None,
        ),
    )
}

/// A capture of no tokens.
fn no_tokens(d: &Path, name: &str) -> PathBuf {
    write(
        d,
        name,
        &st_file(
            &[
                ("input_ids", D::I64, vec![1, 0], Vec::new()),
                ("layers.0", D::F32, vec![1, 0, H], Vec::new()),
            ],
            None,
        ),
    )
}

hostile!(shapes_t_by_0_have_nothing_to_compare, |d| {
    let (e1, e2) = (empty_h(d, "e1.safetensors"), empty_h(d, "e2.safetensors"));
    refused(cmp(&e1, &e2), &["nothing to compare"])
});

hostile!(zero_tokens_have_nothing_to_compare, |d| {
    let (z1, z2) = (
        no_tokens(d, "z1.safetensors"),
        no_tokens(d, "z2.safetensors"),
    );
    refused(cmp(&z1, &z2), &["nothing to compare", "0 tokens"])
});

#[test]
fn a_hollow_golden_fails_selftest() {
    let dir = common::tempdir();
    let golden = dir.path().join("golden/qwen3_5_tiny");
    std::fs::create_dir_all(&golden).expect("mkdir");
    std::fs::write(
        golden.join("fizzbuzz.f64.safetensors"),
        st_file(
            &[(
                "input_ids",
                safetensors::Dtype::I64,
                vec![1, 3],
                i64_bytes(&[1, 2, 3]),
            )],
            None,
        ),
    )
    .expect("write");
    let o = common::hsdiff(
        &[
            "selftest",
            "--quick",
            "--golden",
            &s(&dir.path().join("golden")),
        ],
        dir.path(),
    );
    let out = common::stdout_of(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", common::stderr_of(&o));
    assert!(
        out.contains("lacks the golden state(s) embed, layers.0"),
        "{out}"
    );
}
