//! `hsdiff compare A B --model M` opens each file it compares once — the opening that tells a
//! file holds one sample is the one compared — and reads the model's config.json once, a
//! dataset's too: the files' `openat` calls counted under strace, where strace is installed and
//! may trace. A dataset whose names pair is read pair by pair, each file once; where a later pair
//! is not what pairing by name takes it for, that is given up for pairing by token ids.

use std::path::Path;
use std::process::Command;

use crate::common;

/// The `openat` lines of `hsdiff ARGS` run from the repository root, or None (the test then
/// has nothing to count) when strace is missing or may not trace here.
fn traced_opens(args: &[&str]) -> Option<String> {
    let dir = common::tempdir();
    let log = dir.path().join("openat.log");
    let run = Command::new("strace")
        .args(["-f", "-e", "trace=openat", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_hsdiff"))
        .args(args)
        .current_dir(common::repo_root())
        .output();
    let trace = std::fs::read_to_string(&log).unwrap_or_default();
    match run {
        Ok(out) if !trace.is_empty() => {
            let code = out.status.code();
            assert!(
                matches!(code, Some(0 | 1)),
                "hsdiff {args:?} under strace: exit {code:?}\n{}",
                common::stderr_of(&out)
            );
            Some(trace)
        }
        _ => {
            eprintln!("strace is not installed or may not trace here: nothing to count");
            None
        }
    }
}

/// How many times the trace opens `path` (as given, or the same file under a folder).
fn opens_of(trace: &str, path: &Path) -> usize {
    let quoted = format!("\"{}\"", path.display());
    let suffix = format!("/{}\"", path.display());
    trace
        .lines()
        .filter(|l| l.contains("openat(") && (l.contains(&quoted) || l.contains(&suffix)))
        .count()
}

/// Asserts that `path` is opened `want` times in `trace`.
fn assert_opened(trace: &str, path: &str, want: usize) {
    let n = opens_of(trace, Path::new(path));
    assert_eq!(n, want, "{path} opened {n} times, not {want}:\n{trace}");
}

#[test]
fn compare_of_two_files_opens_each_file_and_config_json_once() {
    let (a, b) = (
        "tests/fixtures/team/dense.bf16.ids.pt",
        "tests/fixtures/team/dense.f32.ids.pt",
    );
    let args = ["compare", a, b, "--model", "golden/qwen3_5_tiny"];
    let Some(trace) = traced_opens(&args) else {
        return;
    };
    for path in [a, b, "golden/qwen3_5_tiny/config.json"] {
        assert_opened(&trace, path, 1);
    }
}

/// A dataset of three pairs (and a sample of B's left unpaired, so that the names do not pair
/// one to one): config.json read once for the whole run. Each sample is opened by discovery
/// (its id and token ids, which pair the samples before any pair is read) and once more by its
/// pair, never more.
#[test]
fn compare_of_two_datasets_reads_config_json_once() {
    let dir = "tests/fixtures/pipelines/qwen3_5_tiny";
    let (a, b) = (format!("{dir}/speculators"), format!("{dir}/eval"));
    let args = ["compare", &a, &b, "--model", "golden/qwen3_5_tiny"];
    let Some(trace) = traced_opens(&args) else {
        return;
    };
    assert_opened(&trace, "golden/qwen3_5_tiny/config.json", 1);
    for i in 0..3 {
        for path in [
            format!("{a}/hs_{i}.safetensors"),
            format!("{b}/prompt_{i}.safetensors"),
        ] {
            let n = opens_of(&trace, Path::new(&path));
            assert!((1..=2).contains(&n), "{path} opened {n} times:\n{trace}");
        }
    }
}

/// A dataset whose names pair one to one: each sample file is opened once, by its pair, and
/// config.json once.
#[test]
fn compare_of_two_datasets_paired_by_name_opens_each_file_once() {
    let dir = "tests/fixtures/findings/tokens";
    let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
    let args = ["compare", &a, &b, "--model", "golden/qwen3_5_tiny"];
    let Some(trace) = traced_opens(&args) else {
        return;
    };
    let config = "golden/qwen3_5_tiny/config.json".to_string();
    for path in (0..3)
        .flat_map(|i| [format!("{a}/s{i}.pt"), format!("{b}/s{i}.pt")])
        .chain([config])
    {
        assert_opened(&trace, &path, 1);
    }
}

/// Names that pair one to one, the last pair's token ids differing: the pairs that agree are
/// opened once; the one left out is opened by its pair, which finds the ids differ, and once
/// more to say how they do. (With `--model`, which calibrates every pair: without it, a worker
/// asks the kernel to read ahead the files of the pair after next, which opens them.)
#[test]
fn a_pair_by_name_left_out_for_its_token_ids_is_read_again_only_to_say_how() {
    let dir = "tests/fixtures/findings/tokens";
    let (a, b) = (format!("{dir}/a"), format!("{dir}/b_other"));
    let args = ["compare", &a, &b, "--model", "golden/qwen3_5_tiny"];
    let Some(trace) = traced_opens(&args) else {
        return;
    };
    for i in 0..3 {
        for path in [format!("{a}/s{i}.pt"), format!("{b}/s{i}.pt")] {
            assert_opened(&trace, &path, if i == 2 { 2 } else { 1 });
        }
    }
}

/// Names that pair one to one, the last file of B read otherwise than B's first (another
/// layout): pairing by name gives up at that pair, says so, and the dataset is paired by its
/// token ids as if by name had not been tried — both of B's readings listed, the other layout's
/// sample left out for its token ids, the two others compared.
#[test]
fn a_later_pair_read_otherwise_gives_pairing_by_name_up() {
    let dir = common::tempdir();
    let tokens = common::repo_root().join("tests/fixtures/findings/tokens");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for side in [&a, &b] {
        std::fs::create_dir(side).expect("side folder");
    }
    for i in 0..3 {
        let name = format!("s{i}.pt");
        std::fs::copy(tokens.join("a").join(&name), a.join(&name)).expect("copy A");
    }
    for i in 0..2 {
        let name = format!("s{i}.pt");
        std::fs::copy(tokens.join("b").join(&name), b.join(&name)).expect("copy B");
    }
    let other = common::repo_root().join("tests/fixtures/team/dense.f32.ids.pt");
    std::fs::copy(other, b.join("s2.pt")).expect("copy B's other layout");
    let out = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .arg("compare")
        .args([&a, &b])
        .args(["--format", "json"])
        .output()
        .expect("run hsdiff");
    let err = common::stderr_of(&out);
    assert!(
        err.contains(
            "hsdiff: s2: B's file is read otherwise than B's first file: pairing every \
             sample by its token ids instead (each file read again)"
        ),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a report");
    assert_eq!(
        report["formats_b"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    assert_eq!(report["samples"].as_array().map(Vec::len), Some(2));
    assert_eq!(report["token_mismatches"][0]["id"], "s2");
    assert_eq!(report["pairs_total"], 2);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a pair left out for its token ids: {err}"
    );
}
