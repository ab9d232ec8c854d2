//! A dataset side's folder holding more than samples: links followed by the stated rule (to a
//! file or folder, once per folder), links to nothing, link loops, FIFOs (never opened), samples
//! deeper than the folders searched — each a sample or named in the report with why it was not
//! read; ids unique (`0/data_0` and `1/data_0`) and distinguishable (names that are not
//! UTF-8); a literal path that exists is never a glob; a glob of many `*` finishes at once.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::craft::capture;
use super::harness::{Case, Expect, args, expect, note_with, refused, report, s};

/// A capture at `dir/rel` (folders made), its values drawn from `seed`.
fn sample(dir: &Path, rel: &str, seed: u64) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(&p, capture(seed, Vec::new())).expect("write sample");
    p
}

/// Sides `d/A` and `d/B` holding the same samples `rels`.
fn twin_sides(d: &Path, rels: &[&str]) -> (PathBuf, PathBuf) {
    let (a, b) = (d.join("A"), d.join("B"));
    for (k, rel) in rels.iter().enumerate() {
        sample(&a, rel, 10 + k as u64);
        sample(&b, rel, 10 + k as u64);
    }
    (a, b)
}

/// `compare A B --format json --out d/r.json`: the samples agree (exit 0).
fn compare_json(d: &Path, a: &Path, b: &Path) -> Case {
    let out = d.join("r.json");
    expect(
        args(&[
            "compare",
            &s(a),
            &s(b),
            "--format",
            "json",
            "--out",
            &s(&out),
        ]),
        Expect::Clean,
    )
}

/// The dataset report `d/r.json`.
fn sample_ids(r: &serde_json::Value) -> Vec<String> {
    r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_string())
        .collect()
}

hostile!(
    dataset_rows_folder_that_is_a_link_is_followed,
    |d| {
        let (a, b) = twin_sides(
            d,
            &["rows_0/data_0.safetensors", "rows_1/data_1.safetensors"],
        );
        // A's rows_1 is a link to a folder outside the side.
        let elsewhere = d.join("elsewhere");
        std::fs::rename(a.join("rows_1"), &elsewhere).expect("move");
        std::os::unix::fs::symlink(&elsewhere, a.join("rows_1")).expect("link");
        compare_json(d, &a, &b)
    },
    then | d | {
        assert_eq!(sample_ids(&report(d)), ["0", "1"]);
    }
);

hostile!(
    dataset_link_to_nothing_is_named,
    |d| {
        let (a, b) = twin_sides(d, &["data_0.safetensors"]);
        std::os::unix::fs::symlink(d.join("gone.safetensors"), a.join("data_1.safetensors"))
            .expect("link");
        compare_json(d, &a, &b)
    },
    then | d | {
        note_with(
            &report(d),
            &[
                "A: 1 entry not read",
                "symbolic links to nothing",
                "data_1.safetensors",
            ],
        );
    }
);

hostile!(
    dataset_link_loops_are_named_and_read_once,
    |d| {
        let (a, b) = twin_sides(d, &["rows_0/data_0.safetensors"]);
        // A link back to the side's own folder, and two links naming each other.
        std::os::unix::fs::symlink(&a, a.join("rows_0/back")).expect("link");
        std::os::unix::fs::symlink(a.join("l2"), a.join("l1")).expect("link");
        std::os::unix::fs::symlink(a.join("l1"), a.join("l2")).expect("link");
        compare_json(d, &a, &b)
    },
    then | d | {
        let r = report(d);
        assert_eq!(sample_ids(&r), ["0"]);
        note_with(&r, &["links to a folder searched already", "rows_0/back"]);
        note_with(&r, &["2 entries not read, symbolic link loops", "l1", "l2"]);
    }
);

hostile!(
    dataset_fifo_is_named_never_opened,
    |d| {
        let (a, b) = twin_sides(d, &["data_0.safetensors"]);
        super::harness::fifo(&a, "data_1.safetensors");
        compare_json(d, &a, &b)
    },
    then | d | {
        note_with(&report(d), &["FIFOs (never opened", "data_1.safetensors"]);
    }
);

hostile!(
    dataset_sample_deeper_than_searched_is_named,
    |d| {
        let deep = "1/2/3/4/5/6/7/8/9/data_9.safetensors";
        let (a, b) = twin_sides(d, &["data_0.safetensors", deep]);
        compare_json(d, &a, &b)
    },
    then | d | {
        let r = report(d);
        assert_eq!(sample_ids(&r), ["0"]);
        note_with(
            &r,
            &[
                "folders deeper than the 8 levels searched",
                "1/2/3/4/5/6/7/8/9",
            ],
        );
    }
);

hostile!(
    dataset_ids_shared_by_two_folders_are_told_apart,
    |d| {
        let (a, b) = twin_sides(d, &["0/data_0.safetensors", "1/data_0.safetensors"]);
        compare_json(d, &a, &b)
    },
    then | d | {
        assert_eq!(sample_ids(&report(d)), ["0/0", "1/0"]);
    }
);

hostile!(
    dataset_names_that_are_not_utf8_stay_two_ids,
    |d| {
        let (a, b) = (d.join("A"), d.join("B"));
        for side in [&a, &b] {
            std::fs::create_dir_all(side).expect("mkdir");
            for (k, byte) in [0xfeu8, 0xff].into_iter().enumerate() {
                let mut name = b"data_".to_vec();
                name.push(byte);
                name.extend_from_slice(b".safetensors");
                let p = side.join(std::ffi::OsStr::from_bytes(&name));
                std::fs::write(p, capture(20 + k as u64, Vec::new())).expect("write");
            }
        }
        compare_json(d, &a, &b)
    },
    then | d | {
        let mut ids = sample_ids(&report(d));
        ids.sort();
        assert_eq!(ids, ["\\xfe", "\\xff"]);
    }
);

hostile!(
    literal_file_named_like_a_glob_is_that_file,
    |d| {
        // `q?.safetensors` exists: it is one file, not a pattern matching `q1.safetensors` too.
        let literal = sample(d, "q?.safetensors", 30);
        sample(d, "q1.safetensors", 31);
        let other = sample(d, "other.safetensors", 30);
        let out = d.join("r.json");
        expect(
            args(&[
                "compare",
                &s(&literal),
                &s(&other),
                "--format",
                "json",
                "--out",
                &s(&out),
            ]),
            Expect::Clean,
        )
    },
    then | d | {
        assert_eq!(report(d)["schema"], "hsdiff.report/v1");
    }
);

hostile!(glob_of_many_stars_against_a_long_name_finishes, |d| {
    // 14 `*` that cannot match a 205-byte name: exponential for a backtracking matcher.
    sample(d, &format!("{}.safetensors", "a".repeat(193)), 40);
    let pattern = format!("{}/{}*x.safetensors", s(d), "*a".repeat(14));
    let other = format!("{}/*b*.safetensors", s(d));
    refused(
        args(&["compare", &pattern, &other]),
        &["no capture files found"],
    )
});

hostile!(dataset_calibrate_with_no_floor_is_refused, |_d| {
    let pipes = super::harness::fixture("../pipelines/qwen3_5_tiny");
    let model = crate::common::golden_model_dir("qwen3_5_tiny");
    refused(
        args(&[
            "compare",
            &s(&pipes.join("specforge_dflash")),
            &s(&pipes.join("eval")),
            "--draft-config",
            &s(&pipes.join("draft_config.json")),
            "--model",
            &s(&model),
            "--calibrate",
            "2",
            "--no-floor",
        ]),
        &["--calibrate", "--no-floor"],
    )
});
