//! Verdicts from nothing: captures that hold no evidence (tests/fixtures/readers_lie/make.py:
//! the ge_data fixture saved again by torch with one field changed) — hidden states zero at
//! every position, a zero position between real ones, a `loss_mask` that trains nothing, a side
//! whose every file fails, a dataset whose every pair fails — each a clear finding or refusal
//! naming the field, never "ok".

use std::path::{Path, PathBuf};

use super::harness::{Expect, args, expect, note_with, refused, refused_after_notes, report, s};
use crate::common::{hsdiff, repo_root, stderr_of, stdout_of};

fn lie(name: &str) -> PathBuf {
    repo_root()
        .join("tests/fixtures/readers_lie/pipelines")
        .join(name)
}

fn ge_data() -> PathBuf {
    repo_root().join("tests/fixtures/pipelines/qwen3_5_tiny/ge_data/0/data_0.ckpt")
}

/// A ge_data side `dir`, its samples `0/data_0.ckpt` … copies of `file`.
fn side_of(dir: &Path, file: &Path, samples: usize) -> PathBuf {
    for i in 0..samples {
        let sub = dir.join(i.to_string());
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::copy(file, sub.join("data_0.ckpt")).expect("copy sample");
    }
    dir.to_path_buf()
}

hostile!(states_zero_everywhere_on_both_sides_refused, |_d| {
    let zero = s(&lie("ge_data_zero_states.ckpt"));
    refused_after_notes(
        args(&["compare", &zero, &zero]),
        &[
            "ge_data_zero_states.ckpt",
            "every position is zero in every hidden state of both sides",
            "nothing to compare",
        ],
    )
});

hostile!(a_zero_position_between_real_ones_is_no_padding, |_d| {
    let mid = s(&lie("ge_data_zero_mid.ckpt"));
    refused_after_notes(
        args(&["compare", &mid, &mid]),
        &[
            "ge_data_zero_mid.ckpt",
            "position(s) 4 of 10 are zero",
            "not padding",
        ],
    )
});

hostile!(
    an_all_zero_loss_mask_says_nothing_is_trained,
    |d| {
        expect(
            args(&[
                "compare",
                &s(&lie("ge_data_zero_mask.ckpt")),
                &s(&ge_data()),
                "--format",
                "json",
                "--out",
                &s(&d.join("r.json")),
            ]),
            Expect::Clean,
        )
    },
    then |d: &Path| note_with(
        &report(d),
        &[
            "trained positions (loss_mask): none of 10",
            "no position is trained on",
        ]
    )
);

hostile!(a_side_whose_every_file_fails_names_the_field, |d| {
    let a = side_of(&d.join("A"), &lie("ge_data_float_ids.ckpt"), 2);
    let b = side_of(&d.join("B"), &ge_data(), 2);
    refused(
        args(&["compare", &s(&a), &s(&b)]),
        &[
            "0 samples; 2 file(s) could not be read, the first: ",
            "data_0.ckpt: tensor `input_ids`: must be integer token ids",
        ],
    )
});

/// Every pair of a dataset fails (hidden states zero everywhere): "nothing compared", exit 2,
/// each pair named with why — never "ok: all 0 compared samples".
#[test]
fn a_dataset_whose_every_pair_fails_is_nothing_compared() {
    let tmp = crate::common::tempdir();
    let zero = lie("ge_data_zero_states.ckpt");
    let a = side_of(&tmp.path().join("A"), &zero, 2);
    let b = side_of(&tmp.path().join("B"), &zero, 2);
    let out = hsdiff(&["compare", &s(&a), &s(&b)], &repo_root());
    let (text, err) = (stdout_of(&out), stderr_of(&out));
    assert_eq!(out.status.code(), Some(2), "{text}\n{err}");
    assert!(
        text.starts_with("nothing compared: 2 sample(s) could not be compared"),
        "{text}"
    );
    assert!(!text.contains("ok: "), "{text}");
    let failed = text
        .lines()
        .filter(|l| l.starts_with("could not be compared: "))
        .filter(|l| l.contains("every position is zero in every hidden state"))
        .count();
    assert_eq!(failed, 2, "{text}");
}

/// `dir/{id}/data_0.ckpt` for each `(id, file)`.
fn side_with(dir: &Path, files: &[(&str, &Path)]) -> PathBuf {
    for (id, file) in files {
        let sub = dir.join(id);
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::copy(file, sub.join("data_0.ckpt")).expect("copy sample");
    }
    dir.to_path_buf()
}

/// The "could not be compared" lines of a dataset run, and its exit code.
fn not_compared(a: &Path, b: &Path) -> (Option<i32>, Vec<String>, String) {
    let out = hsdiff(&["compare", &s(a), &s(b)], &repo_root());
    let text = stdout_of(&out);
    let lines = (text.lines())
        .filter(|l| l.starts_with("could not be compared: "))
        .map(str::to_string)
        .collect();
    (out.status.code(), lines, text)
}

/// A sample one side cannot read (token id −1) is listed with its id and both sides' files —
/// the other side's sample of that id is accounted for there, not "unpaired" — or with "none"
/// where the other side has no sample of that id; either side's file.
#[test]
fn a_sample_that_cannot_be_read_names_both_sides_files() {
    let tmp = crate::common::tempdir();
    let (good, bad) = (ge_data(), lie("ge_data_negative_ids.ckpt"));
    let a = side_with(&tmp.path().join("A"), &[("0", &bad), ("1", &good)]);
    let b = side_with(&tmp.path().join("B"), &[("0", &good), ("1", &good)]);
    for (x, y) in [(&a, &b), (&b, &a)] {
        let (code, lines, text) = not_compared(x, y);
        assert_eq!(code, Some(2), "{text}");
        let [line] = lines.as_slice() else {
            panic!("one sample not compared: {text}");
        };
        let (fa, fb) = (x.join("0/data_0.ckpt"), y.join("0/data_0.ckpt"));
        assert!(
            line.starts_with(&format!(
                "could not be compared: 0/0 ({} vs {}): ",
                s(&fa),
                s(&fb)
            )),
            "{line}"
        );
        assert!(line.contains("token id -1 out of range"), "{line}");
        assert!(!text.contains("unpaired"), "{text}");
    }
    let a = side_with(&tmp.path().join("C"), &[("0", &good), ("1", &bad)]);
    let b = side_with(&tmp.path().join("D"), &[("0", &good), ("2", &good)]);
    let (code, lines, text) = not_compared(&a, &b);
    assert_eq!(code, Some(2), "{text}");
    let expected = format!(
        "could not be compared: 1/0 ({} vs none in B): ",
        s(&a.join("1/data_0.ckpt"))
    );
    assert!(
        lines.len() == 1 && lines[0].starts_with(&expected),
        "{text}"
    );
}
