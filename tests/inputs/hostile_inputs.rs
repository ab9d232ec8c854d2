//! The bad-input matrix: crafted and corrupt files of every format, model folders with absurd or
//! inconsistent configs and shard indexes, hostile CLI values and output targets. Each case runs
//! the built binary under a memory cap (`prlimit --as`) and a timeout, and must
//!
//! - never panic, abort, hang, or run out of memory;
//! - when refused: exit 2 with exactly one stderr line `hsdiff: error: …` that names the problem
//!   (the case's needles), in words (no Rust debug text), and write nothing — no output file, no
//!   temp file left next to it;
//! - when the inputs are fine but differ: exit 1 (flagged); when they agree: exit 0.
//!
//! The cases are built here from the committed fixtures and golden models, so the matrix needs
//! no network and little disk.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{copy_dir, golden_model_dir, repo_root, tempdir};

/// Address-space cap for each run: the tiny models need well under this; an input that drives
/// an allocation from a size it claims would blow through it.
const MEMORY_CAP: &str = "--as=3221225472";
/// Seconds before a run counts as a hang (debug build, tiny model).
const TIMEOUT_S: &str = "120";

enum Expect {
    /// Exit 2, one line, containing every needle.
    Refused(Vec<String>),
    /// Exit 1: a divergence flagged.
    Flagged,
    /// Exit 0.
    Clean,
}

struct Case {
    name: String,
    args: Vec<String>,
    expect: Expect,
    /// An output path the command was given: after a refusal it holds what it held before
    /// (nothing, or the same bytes).
    out: Option<PathBuf>,
    /// Environment variables set for the run.
    env: Vec<(&'static str, String)>,
}

/// (name, data.pkl, storages, needles)
type PickleCase = (
    &'static str,
    Vec<u8>,
    Vec<(&'static str, Vec<u8>)>,
    &'static [&'static str],
);
/// (name, edit of config.json, needles)
type ConfigCase = (
    &'static str,
    Box<dyn FnOnce(&mut serde_json::Value)>,
    &'static [&'static str],
);
/// (name, arguments, needles, output path)
type ArgsCase = (
    &'static str,
    Vec<String>,
    &'static [&'static str],
    Option<PathBuf>,
);

fn refused(name: &str, args: Vec<String>, needles: &[&str]) -> Case {
    Case {
        name: name.to_string(),
        args,
        expect: Expect::Refused(needles.iter().map(|s| s.to_string()).collect()),
        out: None,
        env: Vec::new(),
    }
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Runs one case; an Err describes how it failed.
fn run(case: &Case) -> Result<(), String> {
    // What the output target held before (None: nothing), to tell a refusal that wrote nothing.
    let before = case.out.as_ref().map(|p| std::fs::read(p).ok());
    let o = Command::new("prlimit")
        .arg(MEMORY_CAP)
        .args(["--", "timeout", "-s", "KILL", TIMEOUT_S])
        .arg(env!("CARGO_BIN_EXE_hsdiff"))
        .args(&case.args)
        .envs(case.env.iter().map(|(k, v)| (k, v)))
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
    for bad in [
        "panicked",
        "thread '",
        "RUST_BACKTRACE",
        "memory allocation of",
        "stack overflow",
        "internal error",
    ] {
        if err.contains(bad) {
            return Err(format!("`{bad}` on stderr\n{ctx}"));
        }
    }
    if let Some(out) = &case.out
        && let Some(dir) = out.parent()
        && let Ok(list) = std::fs::read_dir(dir)
    {
        for e in list.flatten() {
            if e.file_name().to_string_lossy().contains(".hsdiff-") {
                return Err(format!("temp file left: {:?}\n{ctx}", e.path()));
            }
        }
    }
    match &case.expect {
        Expect::Refused(needles) => {
            if code != Some(2) {
                return Err(format!("expected exit 2\n{ctx}"));
            }
            let lines: Vec<&str> = err.lines().collect();
            if lines.len() != 1 {
                return Err(format!("expected one stderr line\n{ctx}"));
            }
            let line = lines[0];
            if !line.starts_with("hsdiff: error: ") {
                return Err(format!("no `hsdiff: error: ` prefix\n{ctx}"));
            }
            for n in needles {
                if !line.contains(n.as_str()) {
                    return Err(format!("error line lacks `{n}`\n{ctx}"));
                }
            }
            // Rust debug formatting leaking into a message.
            for debug in ["Error(", "Some(", "None)", "Os {", "kind:", "(os error"] {
                if line.contains(debug) {
                    return Err(format!("debug text `{debug}` in the message\n{ctx}"));
                }
            }
            if !o.stdout.is_empty() {
                return Err(format!("stdout not empty\n{ctx}"));
            }
            if let (Some(out), Some(before)) = (&case.out, &before)
                && std::fs::symlink_metadata(out).is_ok_and(|m| m.is_file())
                && std::fs::read(out).ok() != *before
            {
                return Err(format!(
                    "output {} written despite the error\n{ctx}",
                    out.display()
                ));
            }
        }
        Expect::Flagged if code != Some(1) => return Err(format!("expected exit 1\n{ctx}")),
        Expect::Clean if code != Some(0) => return Err(format!("expected exit 0\n{ctx}")),
        _ => {}
    }
    Ok(())
}

fn run_all(cases: Vec<Case>, at_least: usize) {
    assert!(cases.len() >= at_least, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = run(case) {
            failures.push(format!("[{}] {:?}\n{e}", case.name, case.args));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/compare").join(name)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write case file");
    p
}

/// `compare FILE <good fixture>`: FILE must be refused, named in the message.
fn compare_bad(name: &str, file: &Path, needles: &[&str]) -> Case {
    let mut n = vec![s(file)];
    n.extend(needles.iter().map(|x| x.to_string()));
    let needles: Vec<&str> = n.iter().map(String::as_str).collect();
    refused(
        name,
        args(&["compare", &s(file), &s(&fixture("dump_f32.safetensors"))]),
        &needles,
    )
}

// ---- crafted-file builders ---------------------------------------------------------------------

fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A zip archive of stored entries, as torch and np.savez write them (without zip64).
fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let mut local = b"PK\x03\x04".to_vec();
        local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        local.extend(crc.to_le_bytes());
        local.extend((data.len() as u32).to_le_bytes());
        local.extend((data.len() as u32).to_le_bytes());
        local.extend((name.len() as u16).to_le_bytes());
        local.extend(0u16.to_le_bytes());
        local.extend(name.as_bytes());
        out.extend(&local);
        out.extend(*data);
        let mut c = b"PK\x01\x02".to_vec();
        c.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(crc.to_le_bytes());
        c.extend((data.len() as u32).to_le_bytes());
        c.extend((data.len() as u32).to_le_bytes());
        c.extend((name.len() as u16).to_le_bytes());
        c.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(offset.to_le_bytes());
        c.extend(name.as_bytes());
        central.extend(c);
    }
    let cd_offset = out.len() as u32;
    out.extend(&central);
    out.extend(b"PK\x05\x06\0\0\0\0");
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend([0, 0]);
    out
}

/// Pickle opcodes for the values torch.save writes.
mod pk {
    pub fn str(s: &str) -> Vec<u8> {
        let mut b = vec![b'X'];
        b.extend((s.len() as u32).to_le_bytes());
        b.extend(s.as_bytes());
        b
    }
    pub fn int(i: i64) -> Vec<u8> {
        let mut b = vec![0x8a, 8];
        b.extend(i.to_le_bytes());
        b
    }
    pub fn tuple(items: &[i64]) -> Vec<u8> {
        let mut b = vec![b'('];
        for &i in items {
            b.extend(int(i));
        }
        b.push(b't');
        b
    }
    pub fn global(module: &str, name: &str) -> Vec<u8> {
        format!("c{module}\n{name}\n").into_bytes()
    }
    /// `_rebuild_tensor_v2(storage(key, class, numel), offset, shape, stride, False, OrderedDict())`
    pub fn tensor(key: &str, class: &str, offset: i64, shape: &[i64], stride: &[i64]) -> Vec<u8> {
        let numel = shape.iter().fold(1i64, |a, &d| a.wrapping_mul(d));
        let mut b = global("torch._utils", "_rebuild_tensor_v2");
        b.push(b'(');
        b.push(b'(');
        b.extend(str("storage"));
        b.extend(global("torch", class));
        b.extend(str(key));
        b.extend(str("cpu"));
        b.extend(int(numel));
        b.push(b't');
        b.push(b'Q');
        b.extend(int(offset));
        b.extend(tuple(shape));
        b.extend(tuple(stride));
        b.push(0x89);
        b.extend(global("collections", "OrderedDict"));
        b.push(b')');
        b.push(b'R');
        b.push(b't');
        b.push(b'R');
        b
    }
    pub fn dict(items: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![b'}', b'('];
        for (k, v) in items {
            b.extend(str(k));
            b.extend(v);
        }
        b.push(b'u');
        b
    }
    pub fn file(obj: Vec<u8>) -> Vec<u8> {
        let mut b = vec![0x80, 2];
        b.extend(obj);
        b.push(b'.');
        b
    }
}

/// A torch.save archive: `pickle` as `archive/data.pkl` plus storages `archive/data/{key}`.
fn torch_file(pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let names: Vec<String> = storages
        .iter()
        .map(|(k, _)| format!("archive/data/{k}"))
        .collect();
    let mut entries: Vec<(&str, &[u8])> = vec![("archive/data.pkl", pickle)];
    for (n, (_, d)) in names.iter().zip(storages) {
        entries.push((n.as_str(), d.as_slice()));
    }
    entries.push(("archive/version", b"3\n"));
    zip(&entries)
}

/// f32 values of a seeded pseudo-random sequence (no zeros, no constants).
fn values(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
        out.extend(v.to_le_bytes());
    }
    out
}

/// A good torch.save file: {"layers.0": [1, 4, 8] f32, "layers.1": [1, 4, 8] f32}.
fn good_torch(seed: u64) -> Vec<u8> {
    let p = pk::file(pk::dict(&[
        (
            "layers.0",
            pk::tensor("0", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
        (
            "layers.1",
            pk::tensor("1", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
    ]));
    torch_file(&p, &[("0", values(32, seed)), ("1", values(32, seed + 1))])
}

fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut text = header.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((text.len() as u16).to_le_bytes());
    b.extend(text.as_bytes());
    b.extend(data);
    b
}

// ---- file formats ------------------------------------------------------------------------------

#[test]
fn corrupt_and_lying_files_are_refused() {
    let dir = tempdir();
    let d = dir.path();
    let mut cases = Vec::new();

    // safetensors: truncations of a real dump at many points.
    let dump = std::fs::read(fixture("dump_f32.safetensors")).expect("fixture");
    for (i, cut) in [
        1usize,
        7,
        8,
        9,
        50,
        200,
        1000,
        dump.len() / 3,
        dump.len() / 2,
        dump.len() - 1,
    ]
    .into_iter()
    .enumerate()
    {
        let p = write(d, &format!("cut{i}.safetensors"), &dump[..cut]);
        cases.push(compare_bad(&format!("safetensors cut at {cut}"), &p, &[]));
    }
    let st_cases: &[(&str, Vec<u8>, &[&str])] = &[
        (
            "header 2^40",
            {
                let mut b = (1u64 << 40).to_le_bytes().to_vec();
                b.extend(b"{}");
                b
            },
            &["header"],
        ),
        (
            "header u64 max",
            {
                let mut b = u64::MAX.to_le_bytes().to_vec();
                b.extend(b"{}");
                b
            },
            &["header"],
        ),
        (
            "header not json",
            safetensors("{not json", b""),
            &["header"],
        ),
        ("header array", safetensors("[1,2,3]", b""), &["header"]),
        (
            "header not utf8",
            safetensors("{\"\u{fffd}\":1}", b"")
                .iter()
                .map(|&c| if c == 0xEF { 0xFF } else { c })
                .collect(),
            &["header"],
        ),
        (
            "duplicate names",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}}"#,
                &values(4, 1),
            ),
            &["layers.0", "twice"],
        ),
        (
            "unknown dtype",
            safetensors(
                r#"{"layers.0":{"dtype":"Q9","shape":[1,2],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &["header"],
        ),
        (
            "shape overflows",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &[],
        ),
        (
            "offsets past end",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8000]}}"#,
                &values(2, 1),
            ),
            &[],
        ),
        (
            "offsets overlap",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"layers.1":{"dtype":"F32","shape":[1,2],"data_offsets":[4,12]}}"#,
                &values(3, 1),
            ),
            &[],
        ),
        (
            "offsets reversed",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[8,0]}}"#,
                &values(2, 1),
            ),
            &[],
        ),
        (
            "negative offset",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[-8,0]}}"#,
                &values(2, 1),
            ),
            &["header"],
        ),
        (
            "size mismatch",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[1,3],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &[],
        ),
        (
            "metadata not json",
            safetensors(
                r#"{"__metadata__":{"hsdiff":"{oops"},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &["hsdiff"],
        ),
        (
            "metadata not strings",
            safetensors(
                r#"{"__metadata__":{"hsdiff":5},"layers.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &["header"],
        ),
        (
            "integer hidden state",
            safetensors(
                r#"{"layers.0":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]}}"#,
                &values(2, 1),
            ),
            &["layers.0", "not floating point"],
        ),
        (
            "batch of two",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[2,1,2],"data_offsets":[0,16]}}"#,
                &values(4, 1),
            ),
            &["layers.0", "batch"],
        ),
        (
            "1-D hidden state",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
                &values(4, 1),
            ),
            &["layers.0", "[1, T, D]"],
        ),
        (
            "0-D hidden state",
            safetensors(
                r#"{"layers.0":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}"#,
                &values(1, 1),
            ),
            &["layers.0", "[1, T, D]"],
        ),
        ("empty file", Vec::new(), &["empty"]),
        ("seven bytes", vec![1, 2, 3, 4, 5, 6, 7], &[]),
    ];
    for (name, bytes, needles) in st_cases {
        let p = write(d, &format!("{}.safetensors", name.replace(' ', "_")), bytes);
        cases.push(compare_bad(name, &p, needles));
    }

    // torch.save: truncations of a good archive, and archives that lie.
    let good = good_torch(7);
    for (i, cut) in [
        4usize,
        30,
        100,
        good.len() / 2,
        good.len() - 60,
        good.len() - 22,
        good.len() - 1,
    ]
    .into_iter()
    .enumerate()
    {
        let p = write(d, &format!("cut{i}.pt"), &good[..cut]);
        cases.push(compare_bad(&format!("torch cut at {cut}"), &p, &[]));
    }
    let eocd = good.len() - 22;
    let patch = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    let cd_offset = u32::from_le_bytes(good[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
    let zip_cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "entry count huge",
            patch(eocd + 8, &[0xFE, 0xFF, 0xFE, 0xFF]),
            &["entries"],
        ),
        (
            "directory past end",
            patch(eocd + 16, &(good.len() as u32 * 2).to_le_bytes()),
            &["directory"],
        ),
        (
            "directory size huge",
            patch(eocd + 12, &u32::MAX.to_le_bytes()),
            &[],
        ),
        (
            "zip64 marker without locator",
            patch(eocd + 16, &u32::MAX.to_le_bytes()),
            &["zip64"],
        ),
        (
            "size claims 2^32-2",
            patch(cd_offset + 24, &0xFFFF_FFFEu32.to_le_bytes()),
            &["data.pkl"],
        ),
        (
            "compressed size lies",
            patch(cd_offset + 20, &0xFFFF_FFF0u32.to_le_bytes()),
            &["data.pkl"],
        ),
        (
            "method 99",
            patch(cd_offset + 10, &[99, 0]),
            &["compression method"],
        ),
        (
            "deflate size bomb",
            {
                let mut b = patch(cd_offset + 10, &[8, 0]);
                b[cd_offset + 24..cd_offset + 28].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
                b
            },
            &["deflate"],
        ),
        ("encrypted", patch(cd_offset + 8, &[1, 0]), &["encrypted"]),
        (
            "local header offset wrong",
            patch(cd_offset + 42, &7u32.to_le_bytes()),
            &["local header"],
        ),
        (
            "directory signature broken",
            patch(cd_offset, b"XX"),
            &["signature"],
        ),
        ("split archive", patch(eocd + 4, &[1, 0]), &["multi-disk"]),
    ];
    for (name, bytes, needles) in zip_cases {
        let p = write(d, &format!("{}.pt", name.replace(' ', "_")), &bytes);
        cases.push(compare_bad(name, &p, needles));
    }
    let dup = zip(&[
        ("archive/data.pkl", b"\x80\x02}."),
        ("archive/data.pkl", b"\x80\x02}."),
    ]);
    cases.push(compare_bad(
        "duplicate entry",
        &write(d, "dup.pt", &dup),
        &["twice"],
    ));

    // torch.save: pickles that lie, nest, double or hold what is not a tensor.
    let t = |key: &str, shape: &[i64], stride: &[i64]| {
        pk::tensor(key, "FloatStorage", 0, shape, stride)
    };
    let data0 = || vec![("0", values(32, 3))];
    let mut deep = vec![0x80, 2];
    deep.extend(std::iter::repeat_n(b']', 1_000_000));
    deep.extend(std::iter::repeat_n(b'a', 999_999));
    deep.push(b'.');
    let mut doubling = vec![0x80, 2, b']', b'K', 0, b'a', b'q', 0];
    for _ in 0..60 {
        doubling.extend([
            b']', b'(', b'h', 0, b'h', 0, b'h', 0, b'h', 0, b'e', b'q', 0,
        ]);
    }
    doubling.push(b'.');
    let pickle_cases: Vec<PickleCase> = vec![
        // A million lists: refused by the depth cap or, first, the object cap (both bound it).
        ("nested 10^6 deep", deep, vec![], &["--limit pickle-"]),
        ("memo doubling", doubling, vec![], &["pickle-objects"]),
        (
            "custom object",
            pk::file(pk::dict(&[(
                "layers.0",
                [pk::global("mymod", "Thing"), vec![b')', b'R']].concat(),
            )])),
            data0(),
            &["layers.0", "mymod.Thing"],
        ),
        (
            "a bare string",
            pk::file(pk::str("hello")),
            vec![],
            &["a string"],
        ),
        (
            "storage missing",
            pk::file(pk::dict(&[("layers.0", t("9", &[1, 4, 8], &[32, 8, 1]))])),
            data0(),
            &["layers.0", "missing"],
        ),
        (
            "storage too short",
            pk::file(pk::dict(&[("layers.0", t("0", &[1, 40, 8], &[320, 8, 1]))])),
            data0(),
            &["layers.0"],
        ),
        (
            "offset past storage",
            pk::file(pk::dict(&[(
                "layers.0",
                pk::tensor("0", "FloatStorage", 1 << 40, &[1, 4, 8], &[32, 8, 1]),
            )])),
            data0(),
            &["layers.0"],
        ),
        (
            "huge shape",
            pk::file(pk::dict(&[(
                "layers.0",
                t("0", &[1 << 40, 1 << 40, 1 << 40], &[1 << 40, 1 << 40, 1]),
            )])),
            data0(),
            &["layers.0"],
        ),
        (
            "negative size",
            pk::file(pk::dict(&[("layers.0", t("0", &[1, -4, 8], &[32, 8, 1]))])),
            data0(),
            &["layers.0", "bad size"],
        ),
        (
            "non-contiguous view",
            pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 4], &[32, 8, 1]))])),
            data0(),
            &["layers.0", "contiguous"],
        ),
        (
            "stride rank differs",
            pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 8], &[8, 1]))])),
            data0(),
            &["layers.0", "stride"],
        ),
        (
            "unknown storage",
            pk::file(pk::dict(&[(
                "layers.0",
                pk::tensor("0", "ComplexFloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
            )])),
            data0(),
            &["layers.0", "ComplexFloatStorage"],
        ),
        (
            "opcode junk",
            vec![0x80, 2, 0xFF, b'.'],
            vec![],
            &["opcode"],
        ),
        (
            "pickle truncated",
            pk::file(pk::dict(&[("layers.0", t("0", &[1, 4, 8], &[32, 8, 1]))]))[..40].to_vec(),
            data0(),
            &["truncated"],
        ),
        (
            "memo never stored",
            vec![0x80, 2, b'h', 9, b'.'],
            vec![],
            &["memo"],
        ),
        (
            "empty stack",
            vec![0x80, 2, b'0', b'.'],
            vec![],
            &["empty stack"],
        ),
        ("no stop", vec![0x80, 2, b'}'], vec![], &["truncated"]),
        (
            "protocol 9",
            vec![0x80, 9, b'}', b'.'],
            vec![],
            &["protocol"],
        ),
        (
            "bad key type",
            pk::file(
                [
                    vec![b'}', b'('],
                    pk::tuple(&[1]),
                    t("0", &[1, 4, 8], &[32, 8, 1]),
                    vec![b'u'],
                ]
                .concat(),
            ),
            data0(),
            &["key"],
        ),
        (
            "string claims 4 GB",
            vec![0x80, 2, b'X', 0xFF, 0xFF, 0xFF, 0xFF, b'a', b'.'],
            vec![],
            &["truncated"],
        ),
        (
            "integer of 200 bytes",
            [vec![0x80, 2, 0x8a, 200], vec![1; 200], vec![b'.']].concat(),
            vec![],
            &["integer"],
        ),
    ];
    for (i, (name, pickle, storages, needles)) in pickle_cases.into_iter().enumerate() {
        let p = write(d, &format!("pickle{i}.pt"), &torch_file(&pickle, &storages));
        cases.push(compare_bad(name, &p, needles));
    }
    // Scalar metadata next to the tensors is not refused, and not skipped silently: it is left out
    // and listed (the report's notes and stderr carry the list).
    let metadata = pk::file(pk::dict(&[
        ("layers.0", t("0", &[1, 4, 8], &[32, 8, 1])),
        ("step", pk::int(5)),
        ("note", pk::str("hi")),
    ]));
    let p = write(d, "metadata.pt", &torch_file(&metadata, &data0()));
    let src = hsdiff::formats::FileSource::open(&p, None).expect("metadata dict opens");
    assert_eq!(src.names(), vec!["layers.0".to_string()]);
    let listed = src.conventions.join(" | ");
    for needle in [
        "not tensors, left out",
        "`step` (a number)",
        "`note` (a string)",
    ] {
        assert!(listed.contains(needle), "`{needle}` not in {listed:?}");
    }
    let no_pkl = zip(&[("archive/other", b"x")]);
    cases.push(compare_bad(
        "zip without data.pkl",
        &write(d, "nopkl.pt", &no_pkl),
        &["neither data.pkl"],
    ));
    cases.push(compare_bad(
        "legacy torch.save",
        &fixture("bad_legacy.pt"),
        &["legacy"],
    ));

    // numpy.
    let npy_cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "npy truncated data",
            npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
                &values(10, 1),
            ),
            &["truncated"],
        ),
        (
            "npy shape overflows",
            npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 64), }",
                &values(8, 1),
            ),
            &["shape"],
        ),
        (
            "npy huge shape",
            npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1099511627776, 1), }",
                &values(8, 1),
            ),
            &["truncated"],
        ),
        (
            "npy complex",
            npy(
                "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 2), }",
                &values(4, 1),
            ),
            &["dtype"],
        ),
        (
            "npy big endian",
            npy(
                "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2), }",
                &values(2, 1),
            ),
            &["big-endian"],
        ),
        (
            "npy no shape",
            npy("{'descr': '<f4', 'fortran_order': False, }", &values(2, 1)),
            &["shape"],
        ),
        (
            "npy no descr",
            npy("{'fortran_order': False, 'shape': (1, 2), }", &values(2, 1)),
            &["dtype"],
        ),
        (
            "npy version 7",
            {
                let mut b = npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }",
                    &values(2, 1),
                );
                b[6] = 7;
                b
            },
            &["version"],
        ),
        (
            "npy header past end",
            {
                let mut b = npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }",
                    &values(2, 1),
                );
                b[8] = 0xFF;
                b[9] = 0xFF;
                b
            },
            &["header"],
        ),
        (
            "npy v2 header 4 GB",
            {
                let mut b = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
                b.extend(b"{'descr'");
                b
            },
            &["header"],
        ),
        (
            "npy header not text",
            {
                let mut b = npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }",
                    &values(2, 1),
                );
                b[12] = 0xFF;
                b
            },
            &["text"],
        ),
        (
            "npy int16 without hint",
            npy(
                "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2, 2), }",
                &values(2, 1),
            ),
            &["dtype-hint"],
        ),
        (
            "npy ints",
            npy(
                "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 2), }",
                &values(4, 1),
            ),
            &["not floating point"],
        ),
        ("npy only magic", b"\x93NUMPY".to_vec(), &[]),
    ];
    for (i, (name, bytes, needles)) in npy_cases.into_iter().enumerate() {
        // Named as hsdiff names a layer, so that only the content is wrong.
        let sub = d.join(format!("npy{i}"));
        std::fs::create_dir(&sub).expect("mkdir");
        let p = write(&sub, "layers.0.npy", &bytes);
        cases.push(compare_bad(name, &p, needles));
    }
    let good_npy = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
        &values(32, 1),
    );
    let npz_cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "npz entry truncated",
            zip(&[("layers.0.npy", &good_npy[..good_npy.len() - 5])]),
            &["layers.0"],
        ),
        (
            "npz entry garbage",
            zip(&[("layers.0.npy", b"garbage")]),
            &["layers.0"],
        ),
        (
            "npz lying shape",
            zip(&[(
                "layers.0.npy",
                &npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 99999999, 99999999), }",
                    &values(4, 1),
                ),
            )]),
            &["layers.0"],
        ),
        (
            "npz deflate bomb claim",
            {
                let b = zip(&[("layers.0.npy", &good_npy)]);
                let cd =
                    u32::from_le_bytes(b[b.len() - 6..b.len() - 2].try_into().unwrap()) as usize;
                let mut b = b;
                b[cd + 10] = 8;
                b[cd + 24..cd + 28].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            },
            &["deflate"],
        ),
        (
            "npz bad deflate data",
            {
                let b = zip(&[("layers.0.npy", &good_npy)]);
                let cd =
                    u32::from_le_bytes(b[b.len() - 6..b.len() - 2].try_into().unwrap()) as usize;
                let mut b = b;
                b[cd + 10] = 8;
                b
            },
            &["layers.0"],
        ),
        (
            "zip of neither",
            zip(&[("readme.txt", b"hello")]),
            &["neither"],
        ),
    ];
    for (i, (name, bytes, needles)) in npz_cases.into_iter().enumerate() {
        let p = write(d, &format!("arch{i}.npz"), &bytes);
        cases.push(compare_bad(name, &p, needles));
    }
    let p = write(
        d,
        "garbage.bin",
        b"just some text, not a tensor file at all",
    );
    cases.push(compare_bad("unknown format", &p, &["unrecognised format"]));

    run_all(cases, 90);
}

#[test]
fn readable_files_compare_with_the_right_exit_code() {
    let dir = tempdir();
    let d = dir.path();
    let a = write(d, "a.pt", &good_torch(1));
    let a_again = write(d, "a_again.pt", &good_torch(1));
    let b = write(d, "b.pt", &good_torch(100));
    let cases = vec![
        Case {
            name: "same values".into(),
            args: args(&["compare", &s(&a), &s(&a_again)]),
            expect: Expect::Clean,
            out: None,
            env: Vec::new(),
        },
        Case {
            name: "different values".into(),
            args: args(&["compare", &s(&a), &s(&b)]),
            expect: Expect::Flagged,
            out: None,
            env: Vec::new(),
        },
        Case {
            name: "perturbed dump".into(),
            args: args(&[
                "compare",
                &s(&fixture("dump_f32.safetensors")),
                &s(&fixture("dump_perturbed.safetensors")),
            ]),
            expect: Expect::Flagged,
            out: None,
            env: Vec::new(),
        },
        Case {
            name: "dump vs itself".into(),
            args: args(&[
                "compare",
                &s(&fixture("dump_f32.safetensors")),
                &s(&fixture("dump_f32.safetensors")),
            ]),
            expect: Expect::Clean,
            out: None,
            env: Vec::new(),
        },
    ];
    run_all(cases, 4);
}

// ---- model folders -----------------------------------------------------------------------------

/// A copy of the golden tiny Qwen3.5 folder whose config.json's `text_config` is edited.
fn model_with(d: &Path, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = d.join(tag);
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &dir);
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    edit(&mut cfg);
    std::fs::write(&path, serde_json::to_vec(&cfg).expect("json")).expect("write config");
    dir
}

fn dump_case(name: &str, d: &Path, model: &Path, extra: &[&str], needles: &[&str]) -> Case {
    let tag: String = name
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
    let mut c = refused(name, a, needles);
    c.out = Some(out);
    c
}

#[test]
fn absurd_configs_and_shard_indexes_are_refused() {
    let dir = tempdir();
    let d = dir.path();
    let mut cases = Vec::new();
    let set = |field: &'static str, v: serde_json::Value| {
        move |c: &mut serde_json::Value| {
            c["text_config"][field] = v;
        }
    };
    use serde_json::json;
    let config_cases: Vec<ConfigCase> = vec![
        (
            "layers u64 max",
            Box::new(set("num_hidden_layers", json!(u64::MAX))),
            &["num_hidden_layers", "--limit layers"],
        ),
        (
            "layers 2^20",
            Box::new(set("num_hidden_layers", json!(1 << 20))),
            &["num_hidden_layers"],
        ),
        (
            "layers 0",
            Box::new(set("num_hidden_layers", json!(0))),
            &["num_hidden_layers"],
        ),
        (
            "layers negative",
            Box::new(set("num_hidden_layers", json!(-3))),
            &["num_hidden_layers"],
        ),
        (
            "layers string",
            Box::new(set("num_hidden_layers", json!("8"))),
            &["num_hidden_layers"],
        ),
        (
            "head_dim 2^40",
            Box::new(set("head_dim", json!(1u64 << 40))),
            &["head_dim", "--limit dim"],
        ),
        (
            "head_dim 0",
            Box::new(set("head_dim", json!(0))),
            &["head_dim"],
        ),
        (
            "hidden 2^40",
            Box::new(set("hidden_size", json!(1u64 << 40))),
            &["hidden_size"],
        ),
        (
            "hidden 0",
            Box::new(set("hidden_size", json!(0))),
            &["hidden_size"],
        ),
        (
            "vocab 0",
            Box::new(set("vocab_size", json!(0))),
            &["vocab_size"],
        ),
        (
            "intermediate 0",
            Box::new(set("intermediate_size", json!(0))),
            &["intermediate_size"],
        ),
        (
            "heads 0",
            Box::new(set("num_attention_heads", json!(0))),
            &["num_attention_heads"],
        ),
        (
            "kv heads 3",
            Box::new(set("num_key_value_heads", json!(3))),
            &["num_key_value_heads"],
        ),
        (
            "kv heads 0",
            Box::new(set("num_key_value_heads", json!(0))),
            &["num_key_value_heads"],
        ),
        (
            "linear key heads 3",
            Box::new(set("linear_num_key_heads", json!(3))),
            &["linear_num_key_heads"],
        ),
        (
            "linear key heads 0",
            Box::new(set("linear_num_key_heads", json!(0))),
            &["linear_num_key_heads"],
        ),
        (
            "linear key dim 2^40",
            Box::new(set("linear_key_head_dim", json!(1u64 << 40))),
            &["linear_key_head_dim"],
        ),
        (
            "conv kernel 0",
            Box::new(set("linear_conv_kernel_dim", json!(0))),
            &["linear_conv_kernel_dim"],
        ),
        (
            "eps negative",
            Box::new(set("rms_norm_eps", json!(-1e-6))),
            &["rms_norm_eps"],
        ),
        (
            "eps zero",
            Box::new(set("rms_norm_eps", json!(0.0))),
            &["rms_norm_eps"],
        ),
        (
            "eps 5",
            Box::new(set("rms_norm_eps", json!(5.0))),
            &["rms_norm_eps"],
        ),
        (
            "eps string",
            Box::new(set("rms_norm_eps", json!("1e-6"))),
            &["rms_norm_eps"],
        ),
        (
            "theta 0",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["rope_theta"] = json!(0.0)
            }),
            &["rope_theta"],
        ),
        (
            "theta negative",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["rope_theta"] = json!(-10000.0)
            }),
            &["rope_theta"],
        ),
        (
            "rotary factor negative",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(-0.5)
            }),
            &["partial_rotary_factor"],
        ),
        (
            "rotary factor 2",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(2.0)
            }),
            &["partial_rotary_factor"],
        ),
        (
            "rotary factor tiny",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(0.001)
            }),
            &["rotary"],
        ),
        (
            "rope type yarn",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]["rope_parameters"]["rope_type"] = json!("yarn")
            }),
            &["rope_type"],
        ),
        (
            "layer_types short",
            Box::new(set("layer_types", json!(["linear_attention"]))),
            &["layer_types"],
        ),
        (
            "layer_types unknown",
            Box::new(set(
                "layer_types",
                json!([
                    "linear_attention",
                    "x",
                    "linear_attention",
                    "full_attention",
                    "linear_attention",
                    "linear_attention",
                    "linear_attention",
                    "full_attention"
                ]),
            )),
            &["layer_types"],
        ),
        (
            "interval 0",
            Box::new(set("full_attention_interval", json!(0))),
            &["full_attention_interval"],
        ),
        (
            "act gelu",
            Box::new(set("hidden_act", json!("gelu"))),
            &["hidden_act"],
        ),
        (
            "model_type unknown",
            Box::new(|c: &mut serde_json::Value| c["model_type"] = json!("llama")),
            &["model_type"],
        ),
        (
            "text_config missing",
            Box::new(|c: &mut serde_json::Value| {
                c.as_object_mut().unwrap().remove("text_config");
            }),
            &["text_config"],
        ),
        (
            "text_config a list",
            Box::new(|c: &mut serde_json::Value| c["text_config"] = json!([1])),
            &["text_config"],
        ),
        (
            "hidden_size missing",
            Box::new(|c: &mut serde_json::Value| {
                c["text_config"]
                    .as_object_mut()
                    .unwrap()
                    .remove("hidden_size");
            }),
            &["hidden_size"],
        ),
        (
            "top level array",
            Box::new(|c: &mut serde_json::Value| *c = json!([1, 2])),
            &["JSON object"],
        ),
    ];
    for (i, (name, edit, needles)) in config_cases.into_iter().enumerate() {
        let model = model_with(d, &format!("cfg{i}"), edit);
        let mut n = vec!["config.json"];
        n.extend_from_slice(needles);
        cases.push(dump_case(name, d, &model, &[], &n));
    }
    let not_json = model_with(d, "notjson", |_| {});
    std::fs::write(not_json.join("config.json"), b"{ not json").expect("write");
    cases.push(dump_case(
        "config not json",
        d,
        &not_json,
        &[],
        &["config.json", "JSON"],
    ));
    let fifo_cfg = model_with(d, "fifocfg", |_| {});
    std::fs::remove_file(fifo_cfg.join("config.json")).expect("rm");
    let st = Command::new("mkfifo")
        .arg(fifo_cfg.join("config.json"))
        .status()
        .expect("mkfifo");
    assert!(st.success());
    cases.push(dump_case(
        "config is a FIFO",
        d,
        &fifo_cfg,
        &[],
        &["config.json", "FIFO"],
    ));
    let dir_cfg = model_with(d, "dircfg", |_| {});
    std::fs::remove_file(dir_cfg.join("config.json")).expect("rm");
    std::fs::create_dir(dir_cfg.join("config.json")).expect("mkdir");
    cases.push(dump_case(
        "config is a directory",
        d,
        &dir_cfg,
        &[],
        &["config.json", "directory"],
    ));

    // Shard indexes.
    let sharded = |tag: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let dir = d.join(tag);
        copy_dir(&golden_model_dir("qwen3_next_moe_tiny"), &dir);
        let path = dir.join("model.safetensors.index.json");
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("index")).expect("json");
        edit(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
        dir
    };
    let first = "model-00001-of-00002.safetensors";
    let second = "model-00002-of-00002.safetensors";
    let wrong = sharded("wrongshard", &|v| {
        let wm = v["weight_map"].as_object_mut().unwrap();
        let (k, val) = wm
            .iter_mut()
            .find(|(_, f)| f.as_str() == Some(first))
            .unwrap();
        let _ = k;
        *val = json!(second);
    });
    cases.push(dump_case(
        "index names the wrong shard",
        d,
        &wrong,
        &[],
        &["index.json", "lists it under"],
    ));
    let unlisted = sharded("unlisted", &|v| {
        let wm = v["weight_map"].as_object_mut().unwrap();
        let k = wm.keys().find(|k| k.contains("layers.1.")).unwrap().clone();
        wm.remove(&k);
    });
    cases.push(dump_case(
        "tensor not in the index",
        d,
        &unlisted,
        &[],
        &["not listed"],
    ));
    let dup = d.join("dupshard");
    copy_dir(&golden_model_dir("qwen3_next_moe_tiny"), &dup);
    let st = std::fs::read(dup.join(first)).expect("shard");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&st).expect("meta");
    let name = meta.tensors().keys().next().expect("a tensor").clone();
    common::rewrite_safetensors(&dup.join(second), |_| common::Edit::Keep);
    {
        // Append `name` from shard 1 to shard 2: the same tensor in two shards.
        let bytes1 = std::fs::read(dup.join(first)).expect("shard 1");
        let s1 = safetensors::SafeTensors::deserialize(&bytes1).expect("shard 1");
        let bytes2 = std::fs::read(dup.join(second)).expect("shard 2");
        let s2 = safetensors::SafeTensors::deserialize(&bytes2).expect("shard 2");
        let mut views: Vec<(String, safetensors::tensor::TensorView)> = s2
            .names()
            .into_iter()
            .map(|n| (n.to_string(), s2.tensor(n).expect("view")))
            .collect();
        views.push((name.clone(), s1.tensor(&name).expect("view")));
        let data = safetensors::serialize(views, None).expect("serialize");
        std::fs::write(dup.join(second), data).expect("write");
    }
    cases.push(dump_case(
        "tensor in two shards",
        d,
        &dup,
        &[],
        &[&name, "also in"],
    ));
    let escape = sharded("escape", &|v| {
        let wm = v["weight_map"].as_object_mut().unwrap();
        let k = wm.keys().next().unwrap().clone();
        wm.insert(k, json!("../../etc/passwd"));
    });
    cases.push(dump_case(
        "shard path escapes",
        d,
        &escape,
        &[],
        &["index.json", "not a file in this folder"],
    ));
    let no_map = sharded("nomap", &|v| *v = json!({"metadata": {}}));
    cases.push(dump_case(
        "index without weight_map",
        d,
        &no_map,
        &[],
        &["weight_map"],
    ));
    let not_name = sharded("notname", &|v| {
        let wm = v["weight_map"].as_object_mut().unwrap();
        let k = wm.keys().next().unwrap().clone();
        wm.insert(k, json!(5));
    });
    cases.push(dump_case(
        "index entry not a name",
        d,
        &not_name,
        &[],
        &["weight_map"],
    ));
    let missing_shard = sharded("missingshard", &|v| {
        let wm = v["weight_map"].as_object_mut().unwrap();
        let k = wm.keys().next().unwrap().clone();
        wm.insert(k, json!("model-00009-of-00009.safetensors"));
    });
    cases.push(dump_case(
        "index names a missing shard",
        d,
        &missing_shard,
        &[],
        &["model-00009-of-00009.safetensors"],
    ));
    let bad_tok = model_with(d, "badtok", |_| {});
    std::fs::write(bad_tok.join("tokenizer.json"), b"{\"version\": 3}").expect("write");
    cases.push(dump_case(
        "tokenizer not usable",
        d,
        &bad_tok,
        &["--prompt", "hello"],
        &["tokenizer.json"],
    ));

    run_all(cases, 45);
}

// ---- CLI values and outputs --------------------------------------------------------------------

#[test]
fn hostile_cli_values_and_outputs_are_refused() {
    let dir = tempdir();
    let d = dir.path();
    let model = golden_model_dir("qwen3_5_tiny");
    let m = s(&model);
    let mut cases = Vec::new();
    let fifo = d.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let big_prompt = d.join("big.txt");
    {
        let mut f = std::fs::File::create(&big_prompt).expect("create");
        let line = "def f(x):\n    return x\n".repeat(1000);
        for _ in 0..440 {
            f.write_all(line.as_bytes()).expect("write");
        }
    }
    let not_utf8 = write(d, "latin1.txt", b"caf\xe9 cr\xe8me");
    let empty = write(d, "empty.txt", b"");
    let many_tokens: String = (0..30_000)
        .map(|i| (i % 300).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let at = |p: &Path| format!("@{}", p.display());
    let (at_fifo, at_dir, at_big, at_latin, at_empty) =
        (at(&fifo), at(d), at(&big_prompt), at(&not_utf8), at(&empty));
    let run_cases: Vec<(&str, Vec<&str>, &[&str])> = vec![
        ("tokens -1", vec!["--tokens", "-1"], &["-1"]),
        ("tokens word", vec!["--tokens", "1,two,3"], &["two"]),
        ("tokens float", vec!["--tokens", "1.5"], &["1.5"]),
        (
            "tokens 2^40",
            vec!["--tokens", "1099511627776"],
            &["1099511627776"],
        ),
        ("tokens empty", vec!["--tokens", ""], &["--tokens"]),
        ("tokens only commas", vec!["--tokens", ",,,"], &["--tokens"]),
        (
            "tokens 30k",
            vec!["--tokens", &many_tokens],
            &["30000", "--limit tokens"],
        ),
        (
            "token out of vocab",
            vec!["--tokens", "1,99999"],
            &["99999"],
        ),
        (
            "prompt from /dev/zero",
            vec!["--prompt", "@/dev/zero"],
            &["/dev/zero", "device"],
        ),
        ("prompt from a FIFO", vec!["--prompt", &at_fifo], &["FIFO"]),
        (
            "prompt from a directory",
            vec!["--prompt", &at_dir],
            &["directory"],
        ),
        (
            "prompt file missing",
            vec!["--prompt", "@/no/such/prompt.txt"],
            &["/no/such/prompt.txt", "no such file"],
        ),
        (
            "prompt 10 MB",
            vec!["--prompt", &at_big],
            &["--limit prompt-bytes"],
        ),
        ("prompt not UTF-8", vec!["--prompt", &at_latin], &["UTF-8"]),
        ("prompt file empty", vec!["--prompt", &at_empty], &["empty"]),
        (
            "prompt and tokens",
            vec!["--prompt", "hi", "--tokens", "1"],
            &["--tokens"],
        ),
        ("dtype f8", vec!["--dtype", "f8"], &["f8"]),
        ("device tpu", vec!["--device", "tpu"], &["tpu"]),
        ("device cuda:99", vec!["--device", "cuda:99"], &["cuda"]),
        ("backend unknown", vec!["--backend", "warp"], &["warp"]),
        ("limit unknown", vec!["--limit", "speed=3"], &["speed"]),
        ("limit zero", vec!["--limit", "tokens=0"], &["tokens"]),
        ("limit no value", vec!["--limit", "tokens"], &["NAME=VALUE"]),
        ("unknown flag", vec!["--frobnicate"], &["--frobnicate"]),
        (
            "model missing",
            vec!["--model", "/no/such/model"],
            &["/no/such/model"],
        ),
        (
            "model is a file",
            vec!["--model", "/etc/hostname"],
            &["/etc/hostname"],
        ),
    ];
    for (name, extra, needles) in run_cases {
        cases.push(dump_case(name, d, &model, &extra, needles));
    }
    // Output targets of dump.
    let input_copy = d.join("modelcopy");
    copy_dir(&model, &input_copy);
    let targets: Vec<(&str, PathBuf, &[&str])> = vec![
        (
            "out is a directory",
            d.to_path_buf(),
            &["directory", "not a regular file"],
        ),
        (
            "out is a FIFO nobody reads",
            fifo.clone(),
            &["FIFO", "no process reads"],
        ),
        (
            "out in a missing folder",
            d.join("no/such/dir/out.safetensors"),
            &["does not exist"],
        ),
        (
            "out is the model's weights",
            input_copy.join("model.safetensors"),
            &["inputs"],
        ),
        (
            "out is the model's config",
            input_copy.join("config.json"),
            &["inputs"],
        ),
    ];
    for (name, out, needles) in targets {
        let mut c = refused(
            name,
            args(&[
                "dump",
                "--out",
                &s(&out),
                "--model",
                &s(&input_copy),
                "--tokens",
                "1,2,3",
            ]),
            needles,
        );
        if out.extension().is_some() {
            c.out = Some(out);
        }
        cases.push(c);
    }
    let prompt_file = write(d, "prompt.txt", b"def add(a, b):\n    return a + b\n");
    cases.push(refused(
        "out is the prompt file",
        args(&[
            "dump",
            "--out",
            &s(&prompt_file),
            "--model",
            &m,
            "--prompt",
            &format!("@{}", prompt_file.display()),
        ]),
        &["inputs"],
    ));

    // compare: values, layers, shift, outputs.
    let a = fixture("dump_f32.safetensors");
    let b = fixture("dump_perturbed.safetensors");
    let (sa, sb) = (s(&a), s(&b));
    let report = d.join("report.md");
    let compare_cases: Vec<ArgsCase> = vec![
        (
            "compare --layers 999",
            args(&["compare", &sa, &sb, "--layers", "999"]),
            &["999"],
            None,
        ),
        (
            "compare --layers -1",
            args(&["compare", &sa, &sb, "--layers", "-1"]),
            &["-1"],
            None,
        ),
        (
            "compare --layers junk",
            args(&["compare", &sa, &sb, "--layers", "a,b"]),
            &["--layers"],
            None,
        ),
        (
            "compare --shift 1000",
            args(&["compare", &sa, &sb, "--shift", "1000"]),
            &["1000"],
            None,
        ),
        (
            "compare --shift -1000",
            args(&["compare", &sa, &sb, "--shift=-1000"]),
            &["-1000"],
            None,
        ),
        (
            "compare --map junk",
            args(&["compare", &sa, &sb, "--map", "nothing"]),
            &["--map"],
            None,
        ),
        (
            "compare --map missing",
            args(&["compare", &sa, &sb, "--map", "no.such=layers.0"]),
            &["no.such"],
            None,
        ),
        (
            "compare --dtype-hint f7",
            args(&["compare", &sa, &sb, "--dtype-hint", "f7"]),
            &["f7"],
            None,
        ),
        (
            "compare --format pdf",
            args(&["compare", &sa, &sb, "--format", "pdf"]),
            &["pdf"],
            None,
        ),
        (
            "compare --fail-on sometimes",
            args(&["compare", &sa, &sb, "--fail-on", "sometimes"]),
            &["sometimes"],
            None,
        ),
        (
            "compare --out equal to A",
            args(&["compare", &sa, &sb, "--out", &sa]),
            &["inputs"],
            None,
        ),
        (
            "compare --out a directory",
            args(&["compare", &sa, &sb, "--out", &s(d)]),
            &["not a regular file"],
            None,
        ),
        (
            "compare --plot .gif",
            args(&[
                "compare",
                &sa,
                &sb,
                "--out",
                &s(&report),
                "--plot",
                &s(&d.join("p.gif")),
            ]),
            &["--plot", "gif"],
            Some(report.clone()),
        ),
        (
            "compare --plot equals --out",
            args(&[
                "compare",
                &sa,
                &sb,
                "--out",
                &s(&d.join("same.svg")),
                "--plot",
                &s(&d.join("same.svg")),
            ]),
            &["same file"],
            Some(d.join("same.svg")),
        ),
        (
            "compare --plot equal to B",
            args(&[
                "compare",
                &sa,
                &s(&fixture("hs_tuple.pt")),
                "--plot",
                &s(&d.join("x.svg")),
                "--out",
                &s(&fixture("hs_tuple.pt")),
            ]),
            &["inputs"],
            None,
        ),
        (
            "compare --plot in missing folder",
            args(&[
                "compare",
                &sa,
                &sb,
                "--out",
                &s(&report),
                "--plot",
                &s(&d.join("none/p.svg")),
            ]),
            &["p.svg", "does not exist"],
            Some(report.clone()),
        ),
        ("compare one file", args(&["compare", &sa]), &["B"], None),
        (
            // A folder is a dataset (docs/datasets.md): nothing in this one pairs with B.
            "compare a directory with nothing to pair",
            args(&["compare", &s(d), &sb]),
            &["error"],
            None,
        ),
        (
            "compare a FIFO",
            args(&["compare", &s(&fifo), &sb]),
            &["FIFO"],
            None,
        ),
        (
            "compare /dev/zero",
            args(&["compare", "/dev/zero", &sb]),
            &["device"],
            None,
        ),
        (
            "compare missing file",
            args(&["compare", "/no/such.pt", &sb]),
            &["/no/such.pt"],
            None,
        ),
        (
            "compare different tokens",
            args(&["compare", &sa, &s(&fixture("dump_tokens.safetensors"))]),
            &["token"],
            None,
        ),
        (
            "check --layers 999",
            args(&["check", "--layers", "999"]),
            &["999"],
            None,
        ),
        (
            "check --golden a FIFO",
            args(&["check", "--golden", &s(&fifo)]),
            &["FIFO"],
            None,
        ),
        (
            "check --out a directory",
            args(&["check", "--out", &s(d)]),
            &["not a regular file"],
            None,
        ),
        (
            "diff --plot .jpg",
            args(&[
                "--a",
                "reference",
                "--b",
                "chunked",
                "--model",
                &m,
                "--tokens",
                "1,2",
                "--plot",
                &s(&d.join("x.jpg")),
            ]),
            &["--plot"],
            None,
        ),
        (
            "diff --out equal to config",
            args(&[
                "--a",
                "reference",
                "--b",
                "chunked",
                "--model",
                &s(&input_copy),
                "--tokens",
                "1,2",
                "--out",
                &s(&input_copy.join("config.json")),
            ]),
            &["inputs"],
            None,
        ),
        (
            "diff one backend",
            args(&["--a", "reference", "--model", &m]),
            &["--b"],
            None,
        ),
    ];
    for (name, a, needles, out) in compare_cases {
        let mut c = refused(name, a, needles);
        c.out = out;
        cases.push(c);
    }
    run_all(cases, 60);
}

// ---- tokenizers --------------------------------------------------------------------------------

#[test]
fn a_tokenizer_regex_that_blows_up_is_an_error_line() {
    let dir = tempdir();
    let d = dir.path();
    let model = d.join("cat");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    let tok_path = model.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tok_path).expect("tokenizer")).expect("json");
    // A catastrophically backtracking pattern: onig gives up (its retry limit) on long input.
    tok["pre_tokenizer"] = serde_json::json!({
        "type": "Split",
        "pattern": {"Regex": "(a|aa)+(a|aa)+(a|aa)+b"},
        "behavior": "Isolated",
        "invert": false
    });
    std::fs::write(&tok_path, serde_json::to_vec(&tok).expect("json")).expect("write");
    let prompt = write(d, "aaa.txt", "a".repeat(200_000).as_bytes());
    let out = d.join("out.safetensors");
    let o = Command::new("prlimit")
        .arg(MEMORY_CAP)
        .args(["--", "timeout", "-s", "KILL", "300"])
        .arg(env!("CARGO_BIN_EXE_hsdiff"))
        .args([
            "dump",
            "--out",
            &s(&out),
            "--model",
            &s(&model),
            "--backend",
            "reference",
        ])
        .arg("--prompt")
        .arg(format!("@{}", prompt.display()))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    // Either the tokenizer copes (then the 200k tokens exceed the tokens limit) or it fails;
    // both must be one error line, never a panic or abort.
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("hsdiff: error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
}

// ---- round 2 (issue 22): outputs, escaping, aborts, silent readings ----------------------------

/// A case that runs and must end with `expect` (not a refusal).
fn expect(name: &str, args: Vec<String>, expect: Expect) -> Case {
    Case {
        name: name.to_string(),
        args,
        expect,
        out: None,
        env: Vec::new(),
    }
}

/// A safetensors file: (name, dtype, shape, little-endian bytes) and the `hsdiff` metadata.
fn st_file(
    tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)],
    meta: Option<&str>,
) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, shape, bytes)| {
            let v = safetensors::tensor::TensorView::new(*d, shape.clone(), bytes).expect("view");
            (n.to_string(), v)
        })
        .collect();
    let meta =
        meta.map(|m| std::collections::HashMap::from([("hsdiff".to_string(), m.to_string())]));
    safetensors::serialize(views, meta).expect("serialize")
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const T: usize = 6;
const H: usize = 8;

/// A capture of T tokens: input_ids, layers.0, layers.1 (seeded values) plus `extra`.
fn capture(
    seed: u64,
    extra: Vec<(&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>)>,
) -> Vec<u8> {
    capture_with(seed, extra, None)
}

/// [`capture`] with a fingerprint (`hsdiff` metadata).
fn capture_with(
    seed: u64,
    extra: Vec<(&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>)>,
    meta: Option<&str>,
) -> Vec<u8> {
    use safetensors::Dtype as D;
    let mut t = vec![
        (
            "input_ids",
            D::I64,
            vec![1, T],
            i64_bytes(&[3, 1, 4, 1, 5, 9]),
        ),
        ("layers.0", D::F32, vec![1, T, H], values(T * H, seed)),
        ("layers.1", D::F32, vec![1, T, H], values(T * H, seed + 1)),
    ];
    for e in extra {
        t.retain(|x| x.0 != e.0);
        t.push(e);
    }
    st_file(&t, meta)
}

fn router(ids: &[i64], k: usize) -> (&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>) {
    (
        "router.1.topk_ids",
        safetensors::Dtype::I64,
        vec![1, ids.len() / k, k],
        i64_bytes(ids),
    )
}

fn ids_for(rows: usize, k: usize) -> Vec<i64> {
    (0..rows * k)
        .map(|i| (i % k) as i64 + (i / k % 3) as i64)
        .collect()
}

#[test]
fn round_two_outputs_never_land_on_inputs_and_devices_are_written_in_place() {
    let dir = tempdir();
    let d = dir.path();
    let model = d.join("m");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    std::fs::write(model.join("notes.txt"), b"the user's notes").expect("write");
    let (a, b) = (
        fixture("dump_f32.safetensors"),
        fixture("dump_perturbed.safetensors"),
    );
    let (sa, sb, sm) = (s(&a), s(&b), s(&model));
    let fifo = d.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::create_dir(d.join("sub")).expect("mkdir");
    let mut cases = Vec::new();
    for target in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "notes.txt",
    ] {
        let out = model.join(target);
        let mut c = refused(
            &format!("compare --out the model's {target}"),
            args(&["compare", &sa, &sb, "--model", &sm, "--out", &s(&out)]),
            &["inputs"],
        );
        c.out = Some(out);
        cases.push(c);
    }
    let mut c = refused(
        "compare --out a model file not there yet",
        args(&[
            "compare",
            &sa,
            &sb,
            "--model",
            &sm,
            "--out",
            &s(&model.join("extra.safetensors")),
        ]),
        &["model file"],
    );
    c.out = Some(model.join("extra.safetensors"));
    cases.push(c);
    let mut c = refused(
        "--out r.svg --plot ./r.svg",
        args(&[
            "compare",
            &sa,
            &sb,
            "--out",
            &s(&d.join("r.svg")),
            "--plot",
            &s(&d.join(".").join("r.svg")),
        ]),
        &["--plot and --out", "same file"],
    );
    c.out = Some(d.join("r.svg"));
    cases.push(c);
    let mut c = refused(
        "--out r.png --plot sub/../r.png",
        args(&[
            "compare",
            &sa,
            &sb,
            "--out",
            &s(&d.join("r.png")),
            "--plot",
            &s(&d.join("sub/../r.png")),
        ]),
        &["same file"],
    );
    c.out = Some(d.join("r.png"));
    cases.push(c);
    let long = d.join("r".repeat(256));
    let mut c = refused(
        "--out a name longer than the file system takes",
        args(&["compare", &sa, &sb, "--out", &s(&long)]),
        &["at most"],
    );
    c.out = Some(long);
    cases.push(c);
    cases.push(refused(
        "--out a FIFO nobody reads",
        args(&["compare", &sa, &sb, "--out", &s(&fifo)]),
        &["no process reads"],
    ));
    cases.push(refused(
        "--out a directory",
        args(&["compare", &sa, &sb, "--out", &s(d)]),
        &["directory"],
    ));
    let mut c = refused(
        "bench forward --json the model's config",
        args(&[
            "bench",
            "forward",
            "--model",
            &sm,
            "--json",
            &s(&model.join("config.json")),
            "--backends",
            "reference",
            "--dtypes",
            "f32",
            "--seq",
            "4",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ]),
        &["inputs"],
    );
    c.out = Some(model.join("config.json"));
    cases.push(c);
    let mut c = refused(
        "dump --out the prompt file",
        {
            let p = write(d, "p.txt", b"def f(x):\n    return x\n");
            args(&[
                "dump",
                "--model",
                &sm,
                "--prompt",
                &format!("@{}", p.display()),
                "--out",
                &s(&p),
            ])
        },
        &["inputs"],
    );
    c.out = Some(d.join("p.txt"));
    cases.push(c);
    cases.push(expect(
        "compare --out /dev/null is written in place",
        args(&["compare", &sa, &sb, "--out", "/dev/null"]),
        Expect::Flagged,
    ));
    cases.push(expect(
        "dump --out /dev/null is written in place",
        args(&[
            "dump",
            "--model",
            &sm,
            "--tokens",
            "1,2,3",
            "--out",
            "/dev/null",
        ]),
        Expect::Clean,
    ));
    run_all(cases, 13);
    // Nothing was replaced in the model folder, and no temp file is left anywhere.
    assert_eq!(
        std::fs::read(model.join("notes.txt")).expect("notes"),
        b"the user's notes"
    );
    let original = golden_model_dir("qwen3_5_tiny");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(model.join(f)).expect("model file"),
            std::fs::read(original.join(f)).expect("original"),
            "{f} changed"
        );
    }
    for dir in [d, &model] {
        for e in std::fs::read_dir(dir).expect("list").flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(
                !n.contains(".hsdiff-") && !n.starts_with(".tmp"),
                "left behind: {n}"
            );
        }
    }
}

#[test]
fn round_two_replacing_keeps_the_mode_long_legal_names_work_and_signals_clean_up() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let d = dir.path();
    let model = golden_model_dir("qwen3_5_tiny");
    let out = d.join("dump.safetensors");
    std::fs::write(&out, b"old").expect("write");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let o = common::hsdiff(
        &[
            "dump",
            "--model",
            &s(&model),
            "--tokens",
            "1,2,3",
            "--out",
            &s(&out),
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
    let mode = std::fs::metadata(&out).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the replaced file's mode is kept");

    // A legal name 5 bytes short of the limit: its temp sibling is shortened, not refused.
    let plot = d.join(format!("{}.svg", "p".repeat(246)));
    let (a, b) = (
        fixture("dump_f32.safetensors"),
        fixture("dump_perturbed.safetensors"),
    );
    let o = common::hsdiff(
        &[
            "compare",
            &s(&a),
            &s(&b),
            "--out",
            &s(&d.join("r.txt")),
            "--plot",
            &s(&plot),
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr_of(&o));
    assert!(plot.is_file() && d.join("r.txt").is_file());

    // SIGTERM while a dump runs: the reserved temp file goes with the process.
    let sig = d.join("sig");
    std::fs::create_dir(&sig).expect("mkdir");
    let many: Vec<String> = (0..400).map(|i| (i % 200 + 1).to_string()).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args([
            "dump",
            "--ops",
            "--model",
            &s(&model),
            "--tokens",
            &many.join(","),
        ])
        .arg("--out")
        .arg(sig.join("out.safetensors"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let temp_seen = (0..600).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::read_dir(&sig)
            .expect("list")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".hsdiff-"))
    });
    assert!(temp_seen, "the output was not reserved up front");
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "dies of the signal: {status:?}");
    let left: Vec<String> = std::fs::read_dir(&sig)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn round_two_bench_work_dir_never_touches_the_users_files() {
    let dir = tempdir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let names = [
        "core-t5-f32.inputs.safetensors",
        "core-t5-f32.reference.safetensors",
    ];
    for n in names {
        std::fs::write(work.join(n), b"the user's file").expect("write");
    }
    let o = common::hsdiff(
        &[
            "bench",
            "core",
            "--lengths",
            "5",
            "--key-heads",
            "1",
            "--value-heads",
            "2",
            "--head-dim",
            "4",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--backends",
            "reference",
            "--dtypes",
            "f32",
            "--work-dir",
            &s(&work),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
    for n in names {
        assert_eq!(
            std::fs::read(work.join(n)).expect("still there"),
            b"the user's file"
        );
    }
    assert_eq!(std::fs::read_dir(&work).expect("list").count(), names.len());
}

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

#[test]
fn round_two_hostile_names_are_escaped_at_every_sink() {
    let dir = tempdir();
    let d = dir.path();
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
    let plot = d.join("p.svg");
    for format in ["table", "markdown"] {
        let mut args = vec![
            "compare".to_string(),
            s(&a),
            s(&b),
            "--format".into(),
            format.into(),
        ];
        if format == "table" {
            args.extend(["--plot".to_string(), s(&plot)]);
        }
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
        let text = String::from_utf8_lossy(out);
        if format == "markdown" {
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
        } else {
            assert!(text.contains("\\x1b[31m\\n```"), "{text}");
        }
        for line in String::from_utf8_lossy(&o.stderr).lines() {
            assert!(!line.contains('\x1b'), "stderr: {line:?}");
        }
    }
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
    // One-line errors stay one line.
    let missing = d.join("no\nsuch\x1b[2J.pt");
    run_all(
        vec![refused(
            "a newline in a missing file's name",
            args(&["compare", &s(&missing), &s(&b)]),
            &["no\\nsuch\\x1b[2J.pt"],
        )],
        1,
    );
}

#[test]
fn round_two_nothing_aborts() {
    let dir = tempdir();
    let d = dir.path();
    let model = d.join("padded");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    let tok_path = model.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tok_path).expect("tokenizer")).expect("json");
    tok["padding"] = serde_json::json!({
        "strategy": {"Fixed": 1_000_000_000u64}, "direction": "Right", "pad_to_multiple_of": null,
        "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"
    });
    tok["truncation"] = serde_json::json!({
        "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
    });
    std::fs::write(&tok_path, serde_json::to_vec(&tok).expect("json")).expect("write");
    let sm = s(&model);
    // A pickle nested 2040 deep, read under the deepest limit accepted.
    let deep = {
        let n = 2040;
        let mut p = vec![0x80, 2];
        p.extend(std::iter::repeat_n(b'(', n));
        p.extend([b'K', 0]);
        p.extend(std::iter::repeat_n(b'l', n));
        p.push(b'.');
        write(d, "deep.pt", &torch_file(&p, &[]))
    };
    let good = write(d, "good.pt", &good_torch(1));
    let mut cases = vec![
        expect(
            "tokenizer with fixed padding of 10^9 and truncation to 2",
            args(&[
                "dump",
                "--model",
                &sm,
                "--prompt",
                "def f(x): return x",
                "--out",
                &s(&d.join("t.safetensors")),
            ]),
            Expect::Clean,
        ),
        refused(
            "--limit pickle-depth=1000000",
            args(&[
                "compare",
                &s(&deep),
                &s(&good),
                "--limit",
                "pickle-depth=1000000",
            ]),
            &["pickle-depth", "2048"],
        ),
        refused(
            "a 2040-deep pickle at the deepest limit",
            args(&[
                "compare",
                &s(&deep),
                &s(&good),
                "--limit",
                "pickle-depth=2048",
            ]),
            &["deep.pt", "not a tensor"],
        ),
        refused(
            "a 2040-deep pickle under the default limit",
            args(&["compare", &s(&deep), &s(&good)]),
            &["pickle-depth"],
        ),
        refused(
            "bench core --head-dim 1000000",
            args(&[
                "bench",
                "core",
                "--head-dim",
                "1000000",
                "--backends",
                "reference",
            ]),
            &["--head-dim"],
        ),
        refused(
            "bench core --lengths u64::MAX",
            args(&[
                "bench",
                "core",
                "--lengths",
                "18446744073709551615",
                "--backends",
                "reference",
            ]),
            &["--lengths"],
        ),
        refused(
            "bench forward --seq 10^8",
            args(&[
                "bench",
                "forward",
                "--model",
                &sm,
                "--seq",
                "100000000",
                "--backends",
                "reference",
            ]),
            &["--seq", "--limit tokens"],
        ),
        refused(
            "bench --threads 10^6",
            args(&[
                "bench",
                "core",
                "--threads",
                "1000000",
                "--backends",
                "reference",
            ]),
            &["--threads"],
        ),
        refused(
            "dump --decode-from u64::MAX",
            args(&[
                "dump",
                "--model",
                &sm,
                "--tokens",
                "1,2,3",
                "--out",
                &s(&d.join("x.safetensors")),
                "--decode-from",
                "18446744073709551615",
                "--decode-steps",
                "2",
            ]),
            &["--decode-from", "--decode-steps"],
        ),
    ];
    let mut c = refused(
        "RAYON_NUM_THREADS=100000",
        args(&["compare", &s(&good), &s(&good)]),
        &["RAYON_NUM_THREADS", "100000"],
    );
    c.env.push(("RAYON_NUM_THREADS", "100000".into()));
    cases.push(c);
    run_all(cases, 10);
}

#[test]
fn round_two_non_utf8_names_and_a_closed_stdout() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempdir();
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

    // stdout on a full device, and on a pipe nobody reads: one error line, exit 2.
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(["prompts"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("hsdiff: error: stdout") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn round_two_nothing_is_resolved_silently() {
    use safetensors::Dtype as D;
    let dir = tempdir();
    let d = dir.path();
    let data = values(32, 5);
    let clash = write(
        d,
        "clash.npz",
        &zip(&[
            (
                "h.1.npy",
                &npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
                    &data,
                ),
            ),
            (
                "blocks.1.npy",
                &npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
                    &values(32, 6),
                ),
            ),
        ]),
    );
    let one = write(
        d,
        "one.npz",
        &zip(&[(
            "layers.1.npy",
            &npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8), }",
                &data,
            ),
        )]),
    );
    // A dict pickled with `layers.0` twice: torch.load keeps the last.
    let twice = {
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
        write(
            d,
            "twice.pt",
            &torch_file(&p, &[("0", values(32, 1)), ("1", values(32, 2))]),
        )
    };
    let last = {
        let p = pk::file(pk::dict(&[(
            "layers.0",
            pk::tensor("0", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        )]));
        write(d, "last.pt", &torch_file(&p, &[("0", values(32, 2))]))
    };
    let base = write(
        d,
        "base.safetensors",
        &capture(1, vec![router(&ids_for(T, 2), 2)]),
    );
    let side = |name: &str, extra| write(d, name, &capture(1, extra));
    let negative = side(
        "neg.safetensors",
        vec![router(&[0, 1, 1, 2, -7, 0, 0, 1, 1, 2, 2, 0], 2)],
    );
    let huge = side(
        "huge.safetensors",
        vec![router(
            &[0, 1, 1, 2, 1_000_000_000_000_000, 0, 0, 1, 1, 2, 2, 0],
            2,
        )],
    );
    let k3 = side("k3.safetensors", vec![router(&ids_for(T, 3), 3)]);
    let short = side("short.safetensors", vec![router(&ids_for(T - 2, 2), 2)]);
    let nan = side(
        "nan.safetensors",
        vec![
            router(&ids_for(T, 2), 2),
            (
                "layers.1",
                D::F32,
                vec![1, T, H],
                f32::NAN.to_le_bytes().repeat(T * H),
            ),
        ],
    );
    let empty_h = |name: &str| {
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
    };
    let (e1, e2) = (empty_h("e1.safetensors"), empty_h("e2.safetensors"));
    let no_tokens = |name: &str| {
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
    };
    let (z1, z2) = (no_tokens("z1.safetensors"), no_tokens("z2.safetensors"));
    let cmp = |x: &Path, y: &Path| args(&["compare", &s(x), &s(y)]);
    let cases = vec![
        refused(
            "two entries read as layers.1",
            cmp(&clash, &one),
            &["h.1", "blocks.1", "--map"],
        ),
        expect(
            "--map picks one of them",
            [cmp(&clash, &one), args(&["--map", "h.1=layers.1"])].concat(),
            Expect::Clean,
        ),
        expect(
            "a key pickled twice: the last is read",
            cmp(&twice, &last),
            Expect::Clean,
        ),
        refused(
            "router id -7",
            cmp(&negative, &base),
            &["router.1.topk_ids", "-7"],
        ),
        refused(
            "router id 10^15",
            cmp(&huge, &base),
            &["router.1.topk_ids", "1000000000000000"],
        ),
        refused(
            "router k 3 vs 2",
            cmp(&k3, &base),
            &["router.1.topk_ids", "3", "2"],
        ),
        refused(
            "router rows for 4 of 6 tokens",
            cmp(&short, &base),
            &["router.1.topk_ids", "4", "6"],
        ),
        expect("router ids that agree", cmp(&base, &base), Expect::Clean),
        expect(
            "a layer all NaN on one side",
            cmp(&base, &nan),
            Expect::Flagged,
        ),
        refused("shapes [T, 0]", cmp(&e1, &e2), &["nothing to compare"]),
        refused(
            "0 tokens",
            cmp(&z1, &z2),
            &["nothing to compare", "0 tokens"],
        ),
    ];
    run_all(cases, 11);
    // The NaN row shows its counts, never a statistic that reads as agreement.
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(cmp(&base, &nan))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with('│') && l.contains("layers.1 "))
        .expect("the layers.1 row");
    assert!(row.contains("NaN/Inf: A 0, B 48"), "{row}");
    assert!(!row.contains("1.000000") && !row.contains("┆ 0 "), "{row}");
}

#[test]
fn round_two_a_hollow_golden_fails_selftest() {
    let dir = tempdir();
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

/// Router ids checked against what the file itself records, with no model: the fingerprint's
/// expert count and experts per token, the width and rows of the layer's router logits, the rows
/// of its margins. Each inconsistency is refused by name, in one line.
#[test]
fn round_two_router_ids_against_the_expert_count_the_file_records() {
    use safetensors::Dtype as D;
    let dir = tempdir();
    let d = dir.path();
    let fp = |experts: usize, per_token: usize| {
        format!(
            r#"{{"format":"hsdiff.dump/v1","source":"pytorch","num_experts":{experts},"num_experts_per_tok":{per_token}}}"#
        )
    };
    let logits = |rows: usize, width: usize| {
        (
            "router.1.logits",
            D::F32,
            vec![1, rows, width],
            values(rows * width, 7),
        )
    };
    let margin = |rows: usize| ("router.1.margin", D::F32, vec![1, rows], values(rows, 9));
    // ids_for(T, 2) chooses experts 0..=3.
    let base = write(
        d,
        "base.safetensors",
        &capture(1, vec![router(&ids_for(T, 2), 2)]),
    );
    let side = |name: &str, extra, meta: Option<String>| {
        write(d, name, &capture_with(1, extra, meta.as_deref()))
    };
    let ok = side(
        "ok.safetensors",
        vec![router(&ids_for(T, 2), 2), logits(T, 4), margin(T)],
        Some(fp(4, 2)),
    );
    let over_count = side(
        "count.safetensors",
        vec![router(&ids_for(T, 2), 2)],
        Some(fp(3, 2)),
    );
    let other_k = side(
        "k.safetensors",
        vec![router(&ids_for(T, 2), 2)],
        Some(fp(8, 3)),
    );
    let narrow_logits = side(
        "narrow.safetensors",
        vec![router(&ids_for(T, 2), 2), logits(T, 3)],
        None,
    );
    let short_logits = side(
        "short_logits.safetensors",
        vec![router(&ids_for(T, 2), 2), logits(T - 1, 8)],
        None,
    );
    let short_margin = side(
        "short_margin.safetensors",
        vec![router(&ids_for(T, 2), 2), margin(T - 2)],
        None,
    );
    let two_counts = side(
        "two.safetensors",
        vec![router(&ids_for(T, 2), 2), logits(T, 6)],
        Some(fp(8, 2)),
    );
    let cmp = |x: &Path, y: &Path| args(&["compare", &s(x), &s(y)]);
    let cases = vec![
        expect(
            "ids within the recorded counts",
            cmp(&ok, &base),
            Expect::Clean,
        ),
        refused(
            "an id not below the fingerprint's num_experts",
            cmp(&over_count, &base),
            &[
                "router.1.topk_ids",
                "expert id 3",
                "below 3, the fingerprint's num_experts",
            ],
        ),
        refused(
            "k against the fingerprint's num_experts_per_tok",
            cmp(&other_k, &base),
            &[
                "router.1.topk_ids",
                "2 experts per token",
                "num_experts_per_tok is 3",
            ],
        ),
        refused(
            "an id not below the router logits' width",
            cmp(&base, &narrow_logits),
            &[
                "router.1.topk_ids",
                "expert id 3",
                "router.1.logits` [1, 6, 3]",
            ],
        ),
        refused(
            "router logits for another number of tokens",
            cmp(&short_logits, &base),
            &[
                "router.1.topk_ids",
                "6 rows",
                "router.1.logits` [1, 5, 8] has 5",
            ],
        ),
        refused(
            "router margins for another number of tokens",
            cmp(&short_margin, &base),
            &["router.1.topk_ids", "6 rows", "router.1.margin` has 4"],
        ),
        refused(
            "two expert counts in one file",
            cmp(&two_counts, &base),
            &[
                "two expert counts",
                "8 (the fingerprint's num_experts)",
                "6 (",
            ],
        ),
    ];
    run_all(cases, 7);
}

/// A stack of hidden states with empty states (`[10¹², 0, 4]`, found by the numpy fuzz target
/// as `[90158, 0, 4]`): the file's size cannot bound the number of layers, so the `layers` limit
/// does — refused at once, never split into 10¹² entries.
#[test]
fn round_two_an_empty_stack_of_a_trillion_layers_is_refused_by_the_layers_limit() {
    let dir = tempdir();
    let npy = |shape: &str| {
        let mut header =
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape}), }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes
    };
    let huge = write(dir.path(), "huge.npy", &npy("1000000000000, 0, 4"));
    let fuzzed = write(dir.path(), "fuzzed.npy", &npy("90158, 0, 4"));
    let cmp = |x: &Path| args(&["compare", &s(x), &s(x)]);
    let cases = vec![
        refused(
            "an empty stack of 10^12 layers",
            cmp(&huge),
            &[
                "huge.npy",
                "number of layers is 999999999999",
                "--limit layers",
            ],
        ),
        refused(
            "the fuzzer's empty stack of 90158 layers",
            cmp(&fuzzed),
            &["fuzzed.npy", "number of layers is 90157", "--limit layers"],
        ),
    ];
    run_all(cases, 2);
}
