//! Verdicts that never hide a difference, on captures made by plain transformers + forward hooks
//! (tests/fixtures/findings/make.py): a dataset pair left out for its token ids is a finding,
//! and says how the ids differ; NaN evidence is named before any judgement of the model; a side
//! far from the `--model` truth at every layer is no run of that model, whatever its floor.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{compare_json, golden_model_dir, repo_root, tempdir};

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/findings").join(name)
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(fixture("MANIFEST.json")).expect("read MANIFEST.json");
    serde_json::from_str(&text).expect("MANIFEST.json is JSON")
}

fn dense() -> String {
    golden_model_dir("qwen3_5_tiny").display().to_string()
}

/// Exit code, stderr of `hsdiff compare A B EXTRA…` when it writes no report.
fn compare_fails(a: &Path, b: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .arg("compare")
        .arg(a)
        .arg(b)
        .args(extra)
        .output()
        .expect("run hsdiff");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn summary(r: &serde_json::Value) -> &str {
    r["summary"].as_str().expect("summary")
}

#[test]
fn an_honest_dataset_pairs_every_sample_and_passes() {
    let (code, r, err) = compare_json(&fixture("tokens/a"), &fixture("tokens/b"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["samples"].as_array().expect("samples").len(), 3);
    assert!(r["token_mismatches"].as_array().expect("list").is_empty());
    let s = summary(&r);
    assert!(
        s.starts_with("uncalibrated: all 3 compared samples within the depth-scaled band"),
        "{s}"
    );
    assert!(s.contains("pass --model DIR"), "{s}");
    // With the model, the floor judges them.
    let (code, r, err) = compare_json(
        &fixture("tokens/a"),
        &fixture("tokens/b"),
        &["--model", &dense()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        summary(&r).starts_with("ok: all 3 compared samples within"),
        "{}",
        summary(&r)
    );
}

#[test]
fn one_sample_with_a_leading_bos_fails_the_run_and_says_so() {
    let (code, r, err) = compare_json(&fixture("tokens/a"), &fixture("tokens/b_bos"), &[]);
    assert_eq!(code, 1, "a tokenisation difference is a finding: {err}");
    let left = r["token_mismatches"].as_array().expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["id"], "s1");
    let bos = manifest()["bos"].as_u64().expect("bos");
    let why = left[0]["why"].as_str().expect("why");
    assert!(
        why.starts_with(&format!("B starts with 1 token(s) A lacks (id {bos}")),
        "{why}"
    );
    let s = summary(&r);
    assert!(
        s.starts_with("token ids differ in 1 of 3 pairs, left out (s1: B starts with 1 token(s)"),
        "{s}"
    );
    // The compared samples are judged as before.
    assert!(s.contains("uncalibrated: all 2 compared samples"), "{s}");
}

#[test]
fn allow_token_mismatch_lists_the_pair_and_exits_as_the_rest() {
    let (code, r, err) = compare_json(
        &fixture("tokens/a"),
        &fixture("tokens/b_bos"),
        &["--allow-token-mismatch"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["token_mismatches_allowed"], true);
    let s = summary(&r);
    assert!(s.starts_with("uncalibrated: all 2 compared samples"), "{s}");
    assert!(
        s.contains("1 pair(s) left out, token ids differ (s1), allowed by --allow-token-mismatch"),
        "{s}"
    );
    // Two files are one pair: the flag has nothing to allow there.
    let (code, err) = compare_fails(
        &fixture("tokens/a/s0.pt"),
        &fixture("tokens/b/s0.pt"),
        &["--allow-token-mismatch"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--allow-token-mismatch: applies to datasets"),
        "{err}"
    );
}

#[test]
fn every_sample_with_a_leading_bos_is_said_once() {
    let (code, r, err) = compare_json(&fixture("tokens/a"), &fixture("tokens/b_all_bos"), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(r["samples"].as_array().expect("samples").is_empty());
    let bos = manifest()["bos"].as_u64().expect("bos");
    let s = summary(&r);
    assert!(
        s.starts_with(&format!(
            "nothing compared: token ids differ in all 3 pairs of equal ids (every one the same \
             way: B starts with 1 token(s) A lacks (id {bos}"
        )),
        "{s}"
    );
    assert!(!s.contains("neither their ids"), "{s}");
}

#[test]
fn other_ids_name_the_position() {
    let (code, r, err) = compare_json(&fixture("tokens/a"), &fixture("tokens/b_other"), &[]);
    assert_eq!(code, 1, "{err}");
    let m = &manifest()["other"];
    let p = m["position"].as_u64().expect("position");
    let left = r["token_mismatches"].as_array().expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["id"], m["sample"]);
    let why = left[0]["why"].as_str().expect("why");
    assert!(
        why.starts_with(&format!("other ids from position {p} (A ")),
        "{why}"
    );
    assert!(why.contains("1 of the"), "{why}");
}

#[test]
fn a_single_pair_with_a_leading_bos_says_how_the_ids_differ() {
    let (code, err) = compare_fails(
        &fixture("tokens/a/s1.pt"),
        &fixture("tokens/b_all_bos/s1.pt"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            ": B starts with 1 token(s) A lacks (id 0: a BOS on one side only?), the rest equal"
        ),
        "{err}"
    );
}

#[test]
fn nan_everywhere_is_named_not_blamed_on_the_model() {
    let m = dense();
    let (code, r, err) = compare_json(&fixture("nan/a.pt"), &fixture("nan/b.pt"), &["--model", &m]);
    assert_eq!(code, 1, "non-finite evidence is a finding: {err}");
    assert_ne!(r["verdict"], "ok");
    let s = summary(&r);
    assert!(s.contains("first non-finite value: A NaN"), "{s}");
    assert!(!err.contains("neither file matches"), "{err}");
    // The honest twin of the same prompt passes with the same model.
    let (code, r, err) = compare_json(
        &fixture("tokens/a/s0.pt"),
        &fixture("tokens/b/s0.pt"),
        &["--model", &m],
    );
    assert_eq!(code, 0, "{err}");
    assert!(r["first_non_finite"]["a"].is_null());
}

#[test]
fn a_model_far_from_both_sides_at_every_layer_is_refused_whatever_its_floor() {
    let (a, b) = (fixture("plaus/a.bf16.pt"), fixture("plaus/b.bf16.pt"));
    // The dense model the files were captured from: the comparison runs.
    let (code, _, err) = compare_json(&a, &b, &["--model", &dense()]);
    assert_ne!(code, 2, "{err}");
    // The MoE model of the same width: neither side is a run of it.
    let moe = golden_model_dir("qwen3_next_moe_tiny")
        .display()
        .to_string();
    let (code, err) = compare_fails(&a, &b, &["--model", &moe]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("neither file matches this model (--model {moe})")),
        "{err}"
    );
    assert!(
        err.contains("A is far from its truth at every one of its"),
        "{err}"
    );
    assert!(
        err.contains("B is far from its truth at every one of its"),
        "{err}"
    );
    // Neither reading of the bare indices fits that truth, so neither was chosen.
    assert!(
        err.contains("neither reading of index N fits the f64 truth"),
        "{err}"
    );
}

/// Bit-identical copies (and two honest runs) of the dense model compared with its FP8 copy's
/// folder — other weights, the same width, close enough to pass plausibility's absolute rule:
/// the verdict stands (exit 0), but the headline says neither side is a correct run of that
/// model, as both are beyond twice their floor from its truth at every layer. With the model
/// they were captured from it says nothing of the kind.
#[test]
fn identical_files_with_a_model_that_fits_neither_say_so() {
    let (a, b) = (fixture("plaus/a.bf16.pt"), fixture("plaus/b.bf16.pt"));
    let fp8 = golden_model_dir("qwen3_5_tiny_fp8").display().to_string();
    let warning = "but neither side is a correct run of this model: both are more than 2× their \
                   rounding floor from its f64 truth at every one of the 8 layers";
    for (x, y, model, warned) in [
        (&a, &a, &fp8, true),
        (&a, &b, &fp8, true),
        (&a, &a, &dense(), false),
        (&a, &b, &dense(), false),
    ] {
        let (code, r, err) = compare_json(x, y, &["--model", model]);
        assert_eq!(code, 0, "{err}");
        let text = summary(&r);
        assert!(text.starts_with("benign: "), "{text}");
        assert_eq!(text.contains(warning), warned, "{model}: {text}");
        if x == y {
            assert!(text.contains("are identical (bit for bit)"), "{text}");
        }
    }
}

/// `compare` of a DFlash dump declaring ids 1,2,4,5,6 against the eval box's capture of every
/// layer, with the truth.
fn slip(which: &str) -> (i32, serde_json::Value, String) {
    compare_json(
        &fixture(&format!("slip/{which}/rows_0-5000/data_0.ckpt")),
        &fixture("tokens/b/s0.pt"),
        &["--layer-ids-a", "1,2,4,5,6", "--model", &dense()],
    )
}

#[test]
fn declared_layer_ids_that_fit_pass() {
    let (code, r, err) = slip("honest");
    assert_eq!(code, 0, "{err}");
    assert!(
        !summary(&r).contains("layer ids declared"),
        "{}",
        summary(&r)
    );
    // The ids were measured, and the note says how well they fit.
    assert!(
        r["notes"].to_string().contains(
            "A: layer ids 1,2,4,5,6 fit the f64 truth as declared (specforge-dflash, id N = \
             output of layer N: median rel L2 "
        ),
        "{}",
        r["notes"]
    );
}

#[test]
fn declared_layer_ids_off_by_one_are_the_headline() {
    for (which, found) in [("minus", "0,1,3,4,5"), ("plus", "2,3,5,6,7")] {
        let (code, r, err) = slip(which);
        assert_eq!(code, 1, "{which}: {err}");
        let s = summary(&r);
        assert!(
            s.starts_with(&format!(
                "mismatch: A: layer ids declared 1,2,4,5,6 but the states are those of ids {found}"
            )),
            "{which}: {s}"
        );
        assert!(s.contains(&format!("pass --layer-ids-a {found}")), "{s}");
        // One id earlier is how a capture counting "id N = hidden_states[N]" stores them.
        assert_eq!(
            s.contains("one layer earlier, as a capture counting \"id N = hidden_states[N]\""),
            which == "minus",
            "{which}: {s}"
        );
        // The layers the states are were compared: each row within the floor, and no --shift
        // proposed between the sides.
        for t in r["tensors"].as_array().expect("tensors") {
            assert_eq!(t["verdict"], "ok", "{which}: {t}");
        }
        assert!(!err.contains("--shift"), "{which}: {err}");
        assert!(!s.contains("--shift"), "{which}: {s}");
    }
}

#[test]
fn a_layer_id_slip_in_a_dataset_is_its_headline() {
    // The DFlash dump folder of the slipped ids as a dataset, against the eval box's capture of
    // the same prompt (paired by token ids).
    let eval = tempdir();
    std::fs::copy(fixture("tokens/b/s0.pt"), eval.path().join("s0.pt")).expect("copy");
    let (code, r, err) = compare_json(
        &fixture("slip/minus"),
        eval.path(),
        &["--layer-ids-a", "1,2,4,5,6", "--model", &dense()],
    );
    assert_eq!(code, 1, "{err}");
    let s = summary(&r);
    assert!(
        s.starts_with(
            "mismatch: A: layer ids declared 1,2,4,5,6 but the states are those of ids 0,1,3,4,5"
        ),
        "{s}"
    );
    assert!(
        s.contains("pass --layer-ids-a 0,1,3,4,5 (in 1 of 1 samples: "),
        "{s}"
    );
    let sample = &r["samples"][0];
    assert_eq!(
        sample["layer_id_slips"].as_array().map(Vec::len),
        Some(1),
        "{sample}"
    );
    // The honest dump's dataset says no slip.
    let (code, r, err) = compare_json(
        &fixture("slip/honest"),
        eval.path(),
        &["--layer-ids-a", "1,2,4,5,6", "--model", &dense()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !summary(&r).contains("layer ids declared"),
        "{}",
        summary(&r)
    );
    assert!(r["samples"][0].get("layer_id_slips").is_none(), "{r}");
}

#[test]
fn a_masked_hook_batch_is_read_as_its_samples_and_pairs_with_each_alone() {
    let lengths: Vec<u64> = manifest()["batch_ids"]
        .as_array()
        .expect("batch_ids")
        .iter()
        .map(|ids| ids.as_array().expect("ids").len() as u64)
        .collect();
    for batch in ["left.pt", "right.pt"] {
        let (code, r, err) = compare_json(
            &fixture(&format!("batch/{batch}")),
            &fixture("batch/alone"),
            &["--model", &dense()],
        );
        assert_eq!(code, 0, "{batch}: {err}");
        let samples = r["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), 2, "{batch}: {}", summary(&r));
        for (k, s) in samples.iter().enumerate() {
            assert_eq!(s["paired_by"], "token ids", "{batch}");
            assert_eq!(s["id_b"], format!("s{k}"), "{batch}");
            // Only the real positions were compared.
            assert_eq!(s["positions"].as_u64(), Some(lengths[k]), "{batch}");
        }
        assert!(
            summary(&r).starts_with("ok: all 2 compared samples"),
            "{}",
            summary(&r)
        );
    }
}

#[test]
fn a_batch_run_without_its_mask_is_flagged() {
    let (code, r, err) = compare_json(
        &fixture("batch/nomask.pt"),
        &fixture("batch/alone"),
        &["--model", &dense()],
    );
    assert_eq!(code, 1, "{err}");
    let flagged: Vec<&str> = r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter(|s| s["verdict"] != "ok")
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    // The shorter prompt was padded: the padding leaked into its real positions.
    let lengths: Vec<usize> = manifest()["batch_ids"]
        .as_array()
        .expect("batch_ids")
        .iter()
        .map(|ids| ids.as_array().expect("ids").len())
        .collect();
    let padded = if lengths[0] < lengths[1] {
        "nomask#0"
    } else {
        "nomask#1"
    };
    assert_eq!(flagged, [padded], "{}", summary(&r));
}

#[test]
fn hooks_that_never_fired_are_named() {
    // Hooks on the vision blocks of the VL model, on a text prompt: the file holds the ids alone.
    let (code, err) = compare_fails(
        &fixture("tokens/a/s0.pt"),
        &fixture("hooks/vision_blocks.pt"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("side B holds no hidden state (only input_ids): were its hooks ever called?"),
        "{err}"
    );
    assert!(!err.contains("--map"), "{err}");
}

/// The finding of `shift/`'s files: A holds one position before B's first.
const A_LATER: &str = "A's states are B's one token later (A[t + 1] is B[t]) — a BOS B lacks, or \
                       B's dropped first token: the captures are of inputs shifted by one position";

/// A pipeline that dropped the first token's row, its file without ids: the lengths differ by
/// one and the states show why (exit 2: nothing can be compared row for row).
#[test]
fn a_dropped_first_token_is_named_from_the_states() {
    let (code, err) = compare_fails(
        &fixture("tokens/a/s1.pt"),
        &fixture("shift/dropped.pt"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`layers.0` has shape [1, 27, 64]"), "{err}");
    assert!(err.contains(A_LATER), "{err}");
    assert!(
        err.contains("A[t + 1] matches B[t]: median rel L2 "),
        "{err}"
    );
}

/// States stored one position later than their ids (aligned to next-token labels) against an
/// honest capture of the same ids: the ids agree, the states show the shift, which leads the
/// headline of a mismatch, with or without the model; two honest runs show none.
#[test]
fn states_one_token_later_than_their_ids_lead_the_headline() {
    let (a, b) = (fixture("shift/short.pt"), fixture("shift/labels.pt"));
    for extra in [vec![], vec!["--model".to_string(), dense()]] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (code, r, err) = compare_json(&a, &b, &extra);
        assert_eq!(code, 1, "{err}");
        let text = summary(&r);
        assert!(
            text.starts_with(&format!("mismatch: {A_LATER}; ")),
            "{text}"
        );
    }
    let honest = (fixture("tokens/a/s1.pt"), fixture("tokens/b/s1.pt"));
    let (code, r, err) = compare_json(&honest.0, &honest.1, &["--model", &dense()]);
    assert_eq!(code, 0, "{err}");
    assert!(!summary(&r).contains("one token later"), "{}", summary(&r));
}

/// In a dataset the shifted pair is flagged and the headline names it with its sample.
#[test]
fn a_token_shift_in_a_dataset_is_its_headline() {
    let (a, b) = (tempdir(), tempdir());
    for (dir, s0, s1) in [
        (&a, "tokens/a/s0.pt", "shift/short.pt"),
        (&b, "tokens/b/s0.pt", "shift/labels.pt"),
    ] {
        std::fs::copy(fixture(s0), dir.path().join("s0.pt")).expect("copy");
        std::fs::copy(fixture(s1), dir.path().join("s1.pt")).expect("copy");
    }
    let (code, r, err) = compare_json(a.path(), b.path(), &["--model", &dense()]);
    assert_eq!(code, 1, "{err}");
    let text = summary(&r);
    assert!(
        text.starts_with(&format!("mismatch: {A_LATER} (in 1 of 2 samples: s1); ")),
        "{text}"
    );
}

/// A dataset with an all-NaN pair: its headline names the NaN where a bound would stand — never
/// "(0.0× the floor)" or "(rel L2 0.00e0)", which the finite elements alone (none) would give.
#[test]
fn a_nan_sample_is_the_dataset_headline_as_nan() {
    let (a, b) = (tempdir(), tempdir());
    for (dir, s0, s1) in [
        (&a, "tokens/a/s0.pt", "nan/a.pt"),
        (&b, "tokens/b/s0.pt", "nan/b.pt"),
    ] {
        std::fs::copy(fixture(s0), dir.path().join("s0.pt")).expect("copy");
        std::fs::copy(fixture(s1), dir.path().join("s1.pt")).expect("copy");
    }
    for extra in [vec![], vec!["--model".to_string(), dense()]] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (code, r, err) = compare_json(a.path(), b.path(), &extra);
        assert_eq!(code, 1, "{err}");
        let text = summary(&r);
        assert!(
            text.starts_with(
                "mismatch: 1 of 2 compared samples flagged — worst sample s1: mismatch from \
                 layers.0 (NaN/Inf values: no distance is measured)"
            ),
            "{text}"
        );
        // The per-layer table never reads the NaN pair as agreement: its rows are NaN, the
        // worst sample, in the sample's own figures and in every quantile they reach.
        let s1 = &r["samples"][1];
        assert_eq!(s1["id"], "s1", "{s1}");
        assert_eq!(s1["rows"]["layers.0"]["rel_l2"], "NaN", "{s1}");
        for l in r["layers"].as_array().expect("layers") {
            assert_eq!(l["worst_sample"], "s1", "{l}");
            assert_eq!(l["max"], "NaN", "{l}");
            // Two samples: the median is the mean of both, NaN.
            assert_eq!(l["median"], "NaN", "{l}");
        }
    }
}
