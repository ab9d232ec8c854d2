//! Hostile names at every sink: file names and fingerprint values with terminal escapes,
//! newlines, fences and HTML in the table, markdown, SVG and error lines; names that are not
//! UTF-8; stdout on a full device and on a closed pipe.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::craft::{H, T, i64_bytes, st_file, values};
use super::harness::{args, fixture, refused, s};
use crate::common;

/// `md` without its code spans (whose content markdown shows verbatim, HTML included), with
/// backslash-escaped characters dropped too: what is left is what markdown interprets.
fn outside_code_spans(md: &str) -> String {
    let chars: Vec<char> = md.chars().collect();
    let run = |at: usize| chars[at..].iter().take_while(|&&c| c == '`').count();
    let (mut out, mut i) = (String::new(), 0);
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '`' => {
                let n = run(i);
                let mut j = i + n;
                while j < chars.len() && !(chars[j] == '`' && run(j) == n) {
                    j += if chars[j] == '`' { run(j) } else { 1 };
                }
                i = j + n;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The bytes in `text` a terminal or an XML parser would act on.
fn control_bytes(text: &[u8]) -> Vec<u8> {
    text.iter()
        .copied()
        .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
        .collect()
}

/// Two captures whose file names and fingerprint values hold ESC, newlines, fences, HTML and a
/// 5 MB string.
fn hostile_pair(d: &Path) -> (PathBuf, PathBuf) {
    // File names and fingerprint values with ESC, newlines, fences, HTML and a 5 MB string.
    let hostile = "a\x1b[31m\n```<img src=x onerror=alert(1)>|`x`";
    let fp = |tool: &str| {
        serde_json::json!({
            "format": "hsdiff.dump/v1",
            "source": "hsdiff",
            "tool_version": tool,
            "implementation": "</details><script>alert(1)</script>\n```",
            "cpu": "x".repeat(5_000_000),
        })
        .to_string()
    };
    let mut tensors = Vec::new();
    use safetensors::Dtype as D;
    tensors.push((
        "input_ids",
        D::I64,
        vec![1, T],
        i64_bytes(&[3, 1, 4, 1, 5, 9]),
    ));
    tensors.push(("layers.0", D::F32, vec![1, T, H], values(T * H, 7)));
    let a = d.join(format!("{hostile}.safetensors"));
    std::fs::write(&a, st_file(&tensors, Some(&fp("\x1b]0;owned\x07")))).expect("write");
    tensors[1].3 = values(T * H, 8);
    let b = d.join("b<script>.safetensors");
    std::fs::write(&b, st_file(&tensors, Some(&fp("</details>")))).expect("write");
    (a, b)
}

/// `compare A B --format FORMAT EXTRA…` of the hostile pair: flagged, no raw control bytes,
/// long values shortened, no escape on stderr. Returns stdout.
fn render(a: &Path, b: &Path, format: &str, extra: &[String]) -> String {
    let mut args = vec![
        "compare".to_string(),
        s(a),
        s(b),
        "--format".into(),
        format.into(),
    ];
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(&args)
        .output()
        .expect("runs");
    let out = &o.stdout;
    assert!(
        o.status.code() == Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(control_bytes(out).is_empty(), "{format}: raw control bytes");
    assert!(
        out.len() < 200_000,
        "{format}: {} bytes (long values not shortened)",
        out.len()
    );
    for line in String::from_utf8_lossy(&o.stderr).lines() {
        assert!(!line.contains('\x1b'), "stderr: {line:?}");
    }
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn hostile_names_are_escaped_in_the_table_and_the_plot() {
    let dir = common::tempdir();
    let (a, b) = hostile_pair(dir.path());
    let plot = dir.path().join("p.svg");
    let text = render(&a, &b, "table", &["--plot".to_string(), s(&plot)]);
    assert!(text.contains("\\x1b[31m\\n```"), "{text}");
    let svg = std::fs::read(&plot).expect("plot written");
    assert!(
        control_bytes(&svg).is_empty(),
        "SVG holds bytes XML forbids"
    );
    let svg = String::from_utf8_lossy(&svg);
    assert!(
        !svg.contains("<img") && !svg.contains("<script"),
        "SVG: raw markup"
    );
}

#[test]
fn hostile_names_are_escaped_in_markdown() {
    let dir = common::tempdir();
    let (a, b) = hostile_pair(dir.path());
    let text = render(&a, &b, "markdown", &[]);
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("hsdiff compare "))
        .map(outside_code_spans)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(body.matches("<details>").count(), 1, "{body}");
    assert_eq!(body.matches("</details>").count(), 1, "{body}");
    for bad in ["<img", "<script", "</script"] {
        assert!(!body.contains(bad), "markdown: raw `{bad}`\n{body}");
    }
    // The only fence lines are the reproduce block's two.
    let fences: Vec<&str> = text.lines().filter(|l| l.starts_with("```")).collect();
    assert_eq!(fences.len(), 2, "{fences:?}");
    assert!(
        fences[0].len() >= 4,
        "the fence outlasts the ``` in the command: {fences:?}"
    );
}

// One-line errors stay one line.
hostile!(a_newline_in_a_missing_files_name_stays_one_line, |d| {
    let (_, b) = hostile_pair(d);
    let missing = d.join("no\nsuch\x1b[2J.pt");
    refused(
        args(&["compare", &s(&missing), &s(&b)]),
        &["no\\nsuch\\x1b[2J.pt"],
    )
});

#[test]
fn a_name_that_is_not_utf8_is_quoted_in_the_reproduce_line() {
    use std::os::unix::ffi::OsStrExt;
    let dir = common::tempdir();
    let d = dir.path();
    let a = d.join(std::ffi::OsStr::from_bytes(b"caf\xe9-\xff.safetensors"));
    std::fs::copy(fixture("dump_f32.safetensors"), &a).expect("copy");
    let b = fixture("dump_f32.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--format", "markdown"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("$'") && text.contains("\\xe9"),
        "the reproduce line: {text}"
    );
}

/// stdout on a full device: one error line, exit 2.
#[test]
fn stdout_on_a_full_device_is_one_error_line() {
    let b = fixture("dump_f32.safetensors");
    let full = std::fs::File::create("/dev/full").expect("/dev/full");
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(["compare"])
        .arg(&b)
        .arg(&b)
        .stdout(full)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("hsdiff: error: stdout") && !err.contains("internal error"),
        "{err}"
    );
}

/// Runs `hsdiff ARGS` from the checkout's root with stdout `to`; (exit code, stderr).
fn run_with_stdout(list: &[&str], to: std::process::Stdio) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(list)
        .current_dir(common::repo_root())
        .stdout(to)
        .output()
        .expect("runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// stdout on a pipe whose reader left (`hsdiff … | head -1`), for every command that prints:
/// a quiet end — no error line, the exit code the same run has with its output read.
#[test]
fn stdout_on_a_closed_pipe_is_a_quiet_exit() {
    let golden = "golden/states/qwen3_5_tiny/fibonacci.f64.safetensors";
    let (a, b) = (
        "tests/fixtures/compare/dump_f32.safetensors",
        "tests/fixtures/compare/dump_perturbed.safetensors",
    );
    let (da, db) = (
        "tests/fixtures/moe_dataset/train",
        "tests/fixtures/moe_dataset/eval",
    );
    let live = [
        "--a",
        "fused",
        "--b",
        "reference",
        "--prompt",
        "fizzbuzz",
        "--dtype",
        "f32",
    ];
    let commands: Vec<Vec<&str>> = vec![
        vec!["prompts"],
        live.to_vec(),
        vec!["compare", a, b],
        vec!["compare", da, db],
        vec!["paths", "--prompt", "fizzbuzz", "--dtype", "f32"],
        vec!["check", "--golden", golden],
        vec!["env"],
        vec!["bench", "--help"],
    ];
    for list in commands {
        let (read, _) = run_with_stdout(&list, std::process::Stdio::null());
        // The read end is closed before the spawn: closed after it, a child that another
        // test's thread forks in between holds it until its exec, and the write may succeed.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let (code, err) = run_with_stdout(&list, writer.into());
        assert_eq!(code, read, "{list:?}: {err}");
        assert!(
            !err.contains("error") && !err.contains("Broken pipe"),
            "{list:?}: {err}"
        );
    }
}

/// A name with ESC, a newline, HTML and a table cell's end.
const HOSTILE_NAME: &str = "x\x1b[31m\n<b>|";

/// `hsdiff ARGS --format FORMAT` run from `cwd`: no raw control bytes on stdout, no ESC on
/// stderr, and in markdown no `<b>` outside code spans. Returns stdout.
fn safe_output(list: &[String], format: &str) -> String {
    let mut list = list.to_vec();
    list.extend(["--format".to_string(), format.to_string()]);
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(&list)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{list:?}: {err}");
    assert!(
        control_bytes(&o.stdout).is_empty(),
        "{format}: raw control bytes"
    );
    assert!(!err.contains('\x1b'), "stderr: {err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if format == "markdown" {
        assert!(!outside_code_spans(&out).contains("<b>"), "{out}");
    }
    out
}

/// Datasets given as folders and as globs whose folder and file names are hostile.
#[test]
fn hostile_names_in_a_dataset_are_escaped_at_every_sink() {
    let dir = common::tempdir();
    let (a, b) = (
        dir.path().join(format!("A{HOSTILE_NAME}")),
        dir.path().join(format!("B{HOSTILE_NAME}")),
    );
    for (side, seed) in [(&a, 7), (&b, 8)] {
        std::fs::create_dir_all(side).expect("mkdir");
        let file = side.join(format!("data_0{HOSTILE_NAME}.safetensors"));
        std::fs::write(file, super::craft::capture(seed, Vec::new())).expect("write");
    }
    let glob = |p: &Path| format!("{}/data_*.safetensors", s(p));
    for (sa, sb) in [(s(&a), s(&b)), (glob(&a), glob(&b))] {
        let list = vec!["compare".to_string(), sa, sb];
        let text = safe_output(&list, "table");
        assert!(text.contains("\\x1b[31m\\n"), "{text}");
        safe_output(&list, "markdown");
    }
}

/// `check --golden` of a file, and a dataset calibrated by a model folder, whose names are
/// hostile.
#[test]
fn hostile_names_in_check_and_a_model_folder_are_escaped() {
    let dir = common::tempdir();
    let golden = dir
        .path()
        .join(format!("fib{HOSTILE_NAME}.f64.safetensors"));
    std::fs::copy(
        common::repo_root().join("golden/states/qwen3_5_tiny/fibonacci.f64.safetensors"),
        &golden,
    )
    .expect("copy");
    let list = vec!["check".to_string(), "--golden".to_string(), s(&golden)];
    for format in ["table", "markdown"] {
        safe_output(&list, format);
    }
    let model = dir.path().join(format!("m{HOSTILE_NAME}"));
    common::copy_dir(&common::golden_model_dir("qwen3_5_tiny"), &model);
    let pipes = common::repo_root().join("tests/fixtures/pipelines/qwen3_5_tiny");
    let list = vec![
        "compare".to_string(),
        s(&pipes.join("specforge_dflash")),
        s(&pipes.join("eval")),
        "--model".to_string(),
        s(&model),
        "--draft-config".to_string(),
        s(&pipes.join("draft_config.json")),
    ];
    for format in ["table", "markdown"] {
        safe_output(&list, format);
    }
}
