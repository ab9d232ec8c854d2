//! A verdict is a promise (issue 19): never benign on a real bug, never a mismatch on honest
//! rounding — on captures made the way the brief's team made them (tests/fixtures/team/, written
//! by tests/fixtures/team/make.py from transformers: hooks on layers 1, 3, 5, `torch.save` by
//! index, with and without `input_ids`, f32 / bf16 / stored wide, dense and MoE, bugs planted in
//! transformers' torch fallback). One test per row of the table, and the honest pairs
//! that must stay benign.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{self, golden_model_dir, repo_root};

fn team(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/team").join(name)
}

fn model(name: &str) -> String {
    golden_model_dir(name).display().to_string()
}

const DENSE: &str = "qwen3_5_tiny";
const MOE: &str = "qwen3_next_moe_tiny";

/// A compare run: its exit code, its JSON report if it printed one, its stderr.
struct Outcome {
    code: i32,
    report: Option<Value>,
    stderr: String,
}

impl Outcome {
    fn report(&self) -> &Value {
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report; stderr: {}", self.stderr))
    }
    fn summary(&self) -> &str {
        self.report()["summary"].as_str().expect("summary")
    }
    fn row(&self, name: &str) -> &Value {
        self.report()["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no row {name}; summary: {}", self.summary()))
    }
    fn row_names(&self) -> Vec<String> {
        common::row_names(self.report())
    }
    fn notes(&self) -> String {
        common::notes(self.report())
    }
}

/// `hsdiff compare A B --format json EXTRA…`, a refusal included.
fn compare(a: &Path, b: &Path, extra: &[&str]) -> Outcome {
    let out = common::compare_output(a, b, extra);
    Outcome {
        code: out.status.code().expect("exit code"),
        report: serde_json::from_slice(&out.stdout).ok(),
        stderr: common::stderr_of(&out),
    }
}

fn with_model(name: &str) -> Vec<String> {
    vec!["--model".to_string(), model(name)]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// Row 1: the MoE model, bf16, q/k L2 norm skipped in every linear-attention layer. Before: benign,
// exit 0, "0.0× the bf16 floor (133 routing flips at near-ties set aside)": every token was set
// aside because the truth has near-ties somewhere and the files carry no router ids.
#[test]
fn a_skipped_qk_l2_norm_on_the_moe_model_is_a_mismatch_at_layer_1() {
    for (honest, bug) in [
        ("moe.bf16.ids.pt", "moe.bf16_no_qk_l2norm.ids.pt"),
        (
            "moe.bf16_router.ids.pt",
            "moe.bf16_no_qk_l2norm_router.ids.pt",
        ),
    ] {
        let o = compare(&team(honest), &team(bug), &args(&with_model(MOE)));
        assert_eq!(o.code, 1, "{honest} vs {bug}: {}", o.summary());
        assert!(
            o.summary().starts_with("mismatch: ") && o.summary().contains("part at layers.1"),
            "{}",
            o.summary()
        );
        assert_eq!(o.row("layers.1")["verdict"], "mismatch");
    }
    // Without router ids the headline says the routing was recovered from the states.
    let o = compare(
        &team("moe.bf16.ids.pt"),
        &team("moe.bf16_no_qk_l2norm.ids.pt"),
        &args(&with_model(MOE)),
    );
    assert!(
        o.summary()
            .contains("the routing was recovered from the states"),
        "{}",
        o.summary()
    );
}

// Row 2: --model pointing at another model. Before: benign, "equally close to the f64 truth".
#[test]
fn files_of_another_model_are_refused_with_the_evidence() {
    for (files, wrong) in [("moe", DENSE), ("dense", MOE)] {
        let o = compare(
            &team(&format!("{files}.bf16.ids.pt")),
            &team(&format!("{files}.f32.ids.pt")),
            &args(&with_model(wrong)),
        );
        assert_eq!(o.code, 2, "{files} files, --model {wrong}: {}", o.stderr);
        assert!(o.report.is_none());
        assert!(
            o.stderr.contains("neither file matches this model")
                && o.stderr.contains("A is")
                && o.stderr.contains("B is")
                && o.stderr.contains("at layers.1"),
            "{}",
            o.stderr
        );
    }
}

// Row 3: an f32 run whose decay g was rounded to bf16 before the kernel, no model. Before:
// "nothing exceeds what f32 rounding can produce", exit 0 even with --fail-on drift.
#[test]
fn g_rounded_to_bf16_in_an_f32_run_is_flagged_without_a_model() {
    for m in ["dense", "moe"] {
        let o = compare(
            &team(&format!("{m}.f32.ids.pt")),
            &team(&format!("{m}.f32_g_bf16.ids.pt")),
            &["--fail-on", "drift"],
        );
        assert_eq!(o.code, 1, "{m}: {}", o.summary());
        assert!(
            o.summary().starts_with("uncalibrated")
                || o.summary().starts_with("mismatch")
                || o.summary().starts_with("drift"),
            "{}",
            o.summary()
        );
        assert_ne!(o.row("layers.1")["verdict"], "ok", "{}", o.summary());
    }
}

// Row 4: transformers' honest bf16 capture saved with .float() / .double(), against the f32 run,
// with the model. Before: mismatch "13840× the f32 floor", exit 1.
#[test]
fn a_bf16_run_stored_wide_is_judged_as_bf16() {
    for (m, wide) in [
        ("dense", "dense.bf16_as_f32.ids.pt"),
        ("dense", "dense.bf16_as_f64.ids.pt"),
        ("moe", "moe.bf16_as_f32.ids.pt"),
    ] {
        let name = if m == "dense" { DENSE } else { MOE };
        let o = compare(
            &team(wide),
            &team(&format!("{m}.f32.ids.pt")),
            &args(&with_model(name)),
        );
        assert_eq!(o.code, 0, "{wide}: {}", o.summary());
        assert!(o.summary().starts_with("benign: "), "{}", o.summary());
        assert!(
            o.notes().contains("every value is bf16-exact"),
            "{}",
            o.notes()
        );
        assert_eq!(o.report()["thresholds"]["dtype"], "bf16");
        assert!(o.stderr.contains("bf16-exact"), "{}", o.stderr);
    }
    // --dtype-hint overrides: read as f32, the same pair is far beyond the f32 floor.
    let o = compare(
        &team("dense.bf16_as_f32.ids.pt"),
        &team("dense.f32.ids.pt"),
        &["--model", &model(DENSE), "--dtype-hint", "f32"],
    );
    assert_eq!(o.code, 1, "{}", o.summary());
}

// Row 5: the team's own format (no input_ids) with --model. Before: never calibrated, the
// headline said "pass --model DIR" although it was passed, and compare had no --tokens.
#[test]
fn files_without_token_ids_say_what_is_missing_and_take_tokens_or_a_prompt() {
    let (a, b) = (team("dense.bf16.pt"), team("dense.f32.pt"));
    let o = compare(&a, &b, &args(&with_model(DENSE)));
    assert_eq!(o.code, 0, "{}", o.summary());
    assert!(o.summary().starts_with("uncalibrated: "), "{}", o.summary());
    assert!(!o.summary().contains("pass --model"), "{}", o.summary());
    assert!(
        o.summary().contains("--tokens") && o.summary().contains("--prompt"),
        "{}",
        o.summary()
    );
    let prompt = format!("@{}", team("prompt.txt").display());
    let o = compare(&a, &b, &["--model", &model(DENSE), "--prompt", &prompt]);
    assert_eq!(o.code, 0, "{}", o.summary());
    assert!(o.summary().starts_with("benign: "), "{}", o.summary());
    assert!(o.row("layers.1")["floor"].as_f64().is_some());
    // The same ids as a list, and from a file.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(team("MANIFEST.json")).expect("manifest"))
            .expect("json");
    let ids: Vec<String> = manifest["prompt_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.to_string())
        .collect();
    let o = compare(
        &a,
        &b,
        &["--model", &model(DENSE), "--tokens", &ids.join(",")],
    );
    assert!(o.summary().starts_with("benign: "), "{}", o.summary());
    let file = std::env::temp_dir().join(format!("hsdiff-verdicts-ids-{}.txt", std::process::id()));
    std::fs::write(&file, format!("[{}]\n", ids.join(", "))).expect("write ids");
    let o = compare(
        &a,
        &b,
        &[
            "--model",
            &model(DENSE),
            "--tokens",
            &format!("@{}", file.display()),
        ],
    );
    std::fs::remove_file(&file).ok();
    assert!(o.summary().starts_with("benign: "), "{}", o.summary());
    let o = compare(&a, &b, &["--model", &model(DENSE), "--tokens", "1,2,3"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("holds 32 tokens") && o.stderr.contains("--tokens (3 ids)"),
        "{}",
        o.stderr
    );
    let o = compare(&a, &b, &["--prompt", &prompt]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("--prompt") && o.stderr.contains("--model"),
        "{}",
        o.stderr
    );
}

// Row 6: two bit-identical captures (the causal-LM class's layers vs AutoModel's). Before:
// "0.0× the floor".
#[test]
fn bit_identical_captures_are_called_identical() {
    for m in ["dense", "moe"] {
        let (a, b) = (
            team(&format!("{m}.bf16.ids.pt")),
            team(&format!("{m}.bf16_automodel.ids.pt")),
        );
        for extra in [vec![], with_model(if m == "dense" { DENSE } else { MOE })] {
            let o = compare(&a, &b, &args(&extra));
            assert_eq!(o.code, 0);
            assert!(
                o.summary().contains("identical (bit for bit)"),
                "{m} {extra:?}: {}",
                o.summary()
            );
        }
    }
}

// Row 7: hidden_states[i] on one side, hooks on layers[i] on the other, --model given. Before:
// both read correctly, then exit 2 "no tensor in common … use --map".
#[test]
fn hidden_states_indices_against_layer_hooks_get_a_verdict_per_layer() {
    let o = compare(
        &team("dense.f32.ids.pt"),
        &team("dense.f32_hidden_states.ids.pt"),
        &args(&with_model(DENSE)),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.summary().contains("different layers"), "{}", o.summary());
    let rows = o.row_names();
    for name in [
        "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5",
    ] {
        assert!(rows.contains(&name.to_string()), "{rows:?}");
    }
}

// Row 8: output_hidden_states saved with np.savez(layer_0=…, …, layer_8=…): the last entry is
// after the final norm. Before: mismatch at layers.7, "270973× the f32 floor".
#[test]
fn the_last_layer_n_entry_is_read_against_the_truth() {
    for npz in ["dense.f32_layer_N.npz", "dense.f32_arr_N.npz"] {
        let o = compare(
            &team(npz),
            &team("dense.f32_all_layers.ids.pt"),
            &args(&with_model(DENSE)),
        );
        assert_eq!(
            o.code,
            0,
            "{npz}: {} {}",
            o.stderr,
            o.report.as_ref().map_or("", |_| o.summary())
        );
        assert!(o.summary().starts_with("benign: "), "{}", o.summary());
    }
}

// Honest pairs stay benign: transformers' own bf16 / f32 captures, chunk size 16 against 64,
// dense and MoE, with and without the model.
#[test]
fn honest_team_captures_stay_benign() {
    let pairs = [
        ("dense.bf16.ids.pt", "dense.f32.ids.pt", DENSE),
        ("moe.bf16.ids.pt", "moe.f32.ids.pt", MOE),
        ("moe.bf16_router.ids.pt", "moe.f32.ids.pt", MOE),
        ("dense.f32_chunk16.ids.pt", "dense.f32.ids.pt", DENSE),
        ("moe.f32_chunk16.ids.pt", "moe.f32.ids.pt", MOE),
        ("dense.bf16_chunk16.ids.pt", "dense.bf16.ids.pt", DENSE),
        ("moe.bf16_chunk16.ids.pt", "moe.bf16.ids.pt", MOE),
    ];
    for (a, b, m) in pairs {
        for extra in [vec![], with_model(m)] {
            let o = compare(&team(a), &team(b), &args(&extra));
            assert_eq!(o.code, 0, "{a} vs {b} {extra:?}: {}", o.summary());
            let s = o.summary();
            assert!(
                s.starts_with("benign: ") || s.starts_with("uncalibrated: "),
                "{s}"
            );
            // --fail-on drift too: honest rounding is never drift.
            let mut drift = args(&extra);
            drift.extend(["--fail-on", "drift"]);
            let o = compare(&team(a), &team(b), &drift);
            assert_eq!(
                o.code,
                0,
                "{a} vs {b} {extra:?} --fail-on drift: {}",
                o.summary()
            );
        }
    }
}
