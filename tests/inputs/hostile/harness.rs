//! How one hostile case runs and what it must show: the built binary under a memory cap and a
//! timeout, the exit code, the one error line and its needles, nothing written on a refusal.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{copy_dir, golden_model_dir, repo_root};

/// Address-space cap for each run: the tiny models need well under this; an input that drives
/// an allocation from a size it claims would blow through it.
pub const MEMORY_CAP: &str = "--as=3221225472";
/// Seconds before a run counts as a hang (debug build, tiny model).
const TIMEOUT_S: &str = "120";

pub enum Expect {
    /// Exit 2, one line, containing every needle.
    Refused(Vec<String>),
    /// Exit 2 after what the run said of its sides (`hsdiff: A (…): …` lines): the last stderr
    /// line the error, containing every needle.
    RefusedAfterNotes(Vec<String>),
    /// Exit 1: a divergence flagged.
    Flagged,
    /// Exit 0.
    Clean,
}

/// One run of the binary and the outcome it must have.
pub struct Case {
    args: Vec<String>,
    expect: Expect,
    /// An output path the command was given: after a refusal it holds what it held before
    /// (nothing, or the same bytes).
    out: Option<PathBuf>,
    /// Environment variables set for the run.
    env: Vec<(&'static str, String)>,
}

/// A case that must be refused: exit 2, one error line holding every needle.
pub fn refused(args: Vec<String>, needles: &[&str]) -> Case {
    expect(
        args,
        Expect::Refused(needles.iter().map(|s| s.to_string()).collect()),
    )
}

/// A case refused after the run said what it read of each side: exit 2, the last stderr line
/// the one error line, holding every needle.
pub fn refused_after_notes(args: Vec<String>, needles: &[&str]) -> Case {
    expect(
        args,
        Expect::RefusedAfterNotes(needles.iter().map(|s| s.to_string()).collect()),
    )
}

/// A case that runs and must end with `expect` (not a refusal).
pub fn expect(args: Vec<String>, expect: Expect) -> Case {
    Case {
        args,
        expect,
        out: None,
        env: Vec::new(),
    }
}

impl Case {
    /// The output target the command was given, checked to be untouched after a refusal.
    pub fn writing(mut self, out: PathBuf) -> Case {
        self.out = Some(out);
        self
    }

    /// An environment variable set for the run.
    pub fn with_env(mut self, name: &'static str, value: &str) -> Case {
        self.env.push((name, value.to_string()));
        self
    }

    /// Runs the case; a failure panics with the arguments and how it failed.
    pub fn assert_holds(&self) {
        if let Err(e) = self.run() {
            panic!("{:?}\n{e}", self.args);
        }
    }

    /// Runs the case; an Err describes how it failed.
    fn run(&self) -> Result<(), String> {
        // What the output target held before (None: nothing), to tell a refusal that wrote nothing.
        let before = self.out.as_ref().map(|p| std::fs::read(p).ok());
        let o = Command::new("prlimit")
            .arg(MEMORY_CAP)
            .args(["--", "timeout", "-s", "KILL", TIMEOUT_S])
            .arg(env!("CARGO_BIN_EXE_hsdiff"))
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .map_err(|e| format!("cannot run: {e}"))?;
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let ctx = format!(
            "exit {:?}\n--- stderr ---\n{err}--- stdout (first 300) ---\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout)
                .chars()
                .take(300)
                .collect::<String>()
        );
        let code = o.status.code();
        if code.is_none() || code == Some(137) || code == Some(124) {
            return Err(format!("killed (hang, abort or memory)\n{ctx}"));
        }
        survived(&err).map_err(|e| format!("{e}\n{ctx}"))?;
        self.no_temp_left().map_err(|e| format!("{e}\n{ctx}"))?;
        match &self.expect {
            Expect::Refused(needles) => {
                if code != Some(2) {
                    return Err(format!("expected exit 2\n{ctx}"));
                }
                one_error_line(&err, needles).map_err(|e| format!("{e}\n{ctx}"))?;
                if !o.stdout.is_empty() {
                    return Err(format!("stdout not empty\n{ctx}"));
                }
                if let (Some(out), Some(before)) = (&self.out, &before)
                    && std::fs::symlink_metadata(out).is_ok_and(|m| m.is_file())
                    && std::fs::read(out).ok() != *before
                {
                    return Err(format!(
                        "output {} written despite the error\n{ctx}",
                        out.display()
                    ));
                }
            }
            Expect::RefusedAfterNotes(needles) => {
                if code != Some(2) {
                    return Err(format!("expected exit 2\n{ctx}"));
                }
                let (notes, last) = err.trim_end().rsplit_once('\n').unwrap_or(("", &err));
                if let Some(other) = notes.lines().find(|l| !l.starts_with("hsdiff: ")) {
                    return Err(format!("a stderr line that is no note: {other}\n{ctx}"));
                }
                one_error_line(last, needles).map_err(|e| format!("{e}\n{ctx}"))?;
                if !o.stdout.is_empty() {
                    return Err(format!("stdout not empty\n{ctx}"));
                }
            }
            Expect::Flagged if code != Some(1) => return Err(format!("expected exit 1\n{ctx}")),
            Expect::Clean if code != Some(0) => return Err(format!("expected exit 0\n{ctx}")),
            _ => {}
        }
        Ok(())
    }

    /// No `.hsdiff-` temporary beside the output target.
    fn no_temp_left(&self) -> Result<(), String> {
        if let Some(out) = &self.out
            && let Some(dir) = out.parent()
            && let Ok(list) = std::fs::read_dir(dir)
        {
            for e in list.flatten() {
                if e.file_name().to_string_lossy().contains(".hsdiff-") {
                    return Err(format!("temp file left: {:?}", e.path()));
                }
            }
        }
        Ok(())
    }
}

/// Stderr shows no panic, abort or internal error.
fn survived(err: &str) -> Result<(), String> {
    for bad in [
        "panicked",
        "thread '",
        "RUST_BACKTRACE",
        "memory allocation of",
        "stack overflow",
        "internal error",
    ] {
        if err.contains(bad) {
            return Err(format!("`{bad}` on stderr"));
        }
    }
    Ok(())
}

/// Stderr is one `hsdiff: error: ` line holding every needle, in words (no Rust debug text).
fn one_error_line(err: &str, needles: &[String]) -> Result<(), String> {
    let lines: Vec<&str> = err.lines().collect();
    if lines.len() != 1 {
        return Err("expected one stderr line".into());
    }
    let line = lines[0];
    if !line.starts_with("hsdiff: error: ") {
        return Err("no `hsdiff: error: ` prefix".into());
    }
    for n in needles {
        if !line.contains(n.as_str()) {
            return Err(format!("error line lacks `{n}`"));
        }
    }
    for debug in ["Error(", "Some(", "None)", "Os {", "kind:", "(os error"] {
        if line.contains(debug) {
            return Err(format!("debug text `{debug}` in the message"));
        }
    }
    Ok(())
}

pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A committed fixture of tests/fixtures/compare.
pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/compare").join(name)
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write case file");
    p
}

/// A FIFO `dir/name` that nobody reads or writes.
pub fn fifo(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let made = Command::new("mkfifo").arg(&p).status().expect("mkfifo");
    assert!(made.success());
    p
}

/// `compare FILE <good fixture>`: FILE must be refused, named in the message.
pub fn compare_bad(file: &Path, needles: &[&str]) -> Case {
    let mut n = vec![s(file)];
    n.extend(needles.iter().map(|x| x.to_string()));
    let needles: Vec<&str> = n.iter().map(String::as_str).collect();
    refused(
        args(&["compare", &s(file), &s(&fixture("dump_f32.safetensors"))]),
        &needles,
    )
}

/// A copy of the golden tiny Qwen3.5 folder at `d/tag` whose config.json is edited.
pub fn model_with(d: &Path, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = d.join(tag);
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &dir);
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    edit(&mut cfg);
    std::fs::write(&path, serde_json::to_vec(&cfg).expect("json")).expect("write config");
    dir
}

/// `dump --out d/out-TAG.safetensors` of `model` with `extra`, refused with `needles`; `--model`,
/// `--backend reference` and `--tokens 1,2,3,4,5` are added unless `extra` gives its own.
pub fn dump_case(tag: &str, d: &Path, model: &Path, extra: &[&str], needles: &[&str]) -> Case {
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let out = d.join(format!("out-{tag}.safetensors"));
    let mut a = args(&["dump", "--out", &s(&out)]);
    let has = |flag: &str| extra.contains(&flag);
    if !has("--model") {
        a.extend(args(&["--model", &s(model)]));
    }
    if !has("--backend") {
        a.extend(args(&["--backend", "reference"]));
    }
    if !has("--tokens") && !has("--prompt") {
        a.extend(args(&["--tokens", "1,2,3,4,5"]));
    }
    a.extend(args(extra));
    refused(a, needles).writing(out)
}

/// The JSON report a case wrote to `d/r.json`.
pub fn report(d: &Path) -> serde_json::Value {
    let text = std::fs::read(d.join("r.json")).expect("report written");
    serde_json::from_slice(&text).expect("json")
}

/// Asserts that one of the report's notes holds every one of `needles`.
pub fn note_with(r: &serde_json::Value, needles: &[&str]) {
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes.iter().any(|n| needles.iter().all(|x| n.contains(x))),
        "no note with {needles:?}: {notes:#?}"
    );
}
