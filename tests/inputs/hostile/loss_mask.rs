//! A SpecForge DFlash sample whose `loss_mask` is 0 at every position (made by
//! tests/fixtures/pipelines/make.py): no position is trained on, so nothing is compared at
//! trained positions — said in the pair's notes and in a dataset's rows, never shown as "—"
//! or "ok".

use std::path::{Path, PathBuf};

use super::harness::{Case, Expect, args, expect, note_with, report, s};

fn pipes() -> PathBuf {
    crate::common::repo_root().join("tests/fixtures/pipelines/qwen3_5_tiny")
}

/// `compare A B` of DFlash captures against the tiny model, the JSON report at `d/r.json`.
fn compare_dflash(d: &Path, a: &Path, b: &Path, expected: Expect) -> Case {
    let model = crate::common::golden_model_dir("qwen3_5_tiny");
    expect(
        args(&[
            "compare",
            &s(a),
            &s(b),
            "--draft-config",
            &s(&pipes().join("draft_config.json")),
            "--model",
            &s(&model),
            "--format",
            "json",
            "--out",
            &s(&d.join("r.json")),
        ]),
        expected,
    )
}

fn untrained(i: usize) -> PathBuf {
    pipes().join(format!(
        "specforge_dflash_untrained/rows_0-5000/data_{i}.ckpt"
    ))
}

fn masked(i: usize) -> PathBuf {
    pipes().join(format!("specforge_dflash/rows_0-5000/data_{i}.ckpt"))
}

/// The pair's notes say that none of `tokens` positions is trained on.
fn says_none_trained(d: &Path, tokens: usize) {
    let needle = format!("trained positions (loss_mask): none of {tokens}");
    note_with(&report(d), &[&needle, "no position is trained on"]);
}

hostile!(
    untrained_honest_sample_is_clean_and_says_nothing_is_trained,
    |d| { compare_dflash(d, &untrained(0), &masked(0), Expect::Clean) },
    then |d: &Path| says_none_trained(d, 10)
);

hostile!(
    untrained_planted_sample_is_flagged_and_says_nothing_is_trained,
    |d| { compare_dflash(d, &untrained(1), &masked(1), Expect::Flagged) },
    then |d: &Path| says_none_trained(d, 13)
);

hostile!(
    untrained_dataset_names_its_samples,
    |d| {
        let a = pipes().join("specforge_dflash_untrained");
        let b = d.join("B");
        std::fs::create_dir_all(b.join("rows_0-5000")).expect("mkdir");
        for i in 0..2 {
            std::fs::copy(masked(i), b.join(format!("rows_0-5000/data_{i}.ckpt"))).expect("copy");
        }
        compare_dflash(d, &a, &b, Expect::Flagged)
    },
    then |d: &Path| {
        let r = report(d);
        let samples = r["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), 2);
        assert!(samples.iter().all(|s| s["untrained"] == true), "{samples:?}");
        let notes = r["sample_notes"].as_array().expect("sample notes");
        assert!(
            notes.iter().any(|n| n
                .as_str()
                .is_some_and(|n| n.contains("loss_mask is 0 at every position in 2 sample(s)"))),
            "{notes:?}"
        );
    }
);
