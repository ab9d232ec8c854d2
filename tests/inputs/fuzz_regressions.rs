//! Replays the fuzzing corpus (`fuzz/seeds/`, `fuzz/corpus/`, and any crashers saved under
//! `fuzz/regressions/`) through the same readers the fuzz targets drive, so that `cargo test`
//! keeps every input the fuzzer found interesting panic-free. Errors are the expected answer
//! to most of these inputs; a panic fails the test.

use std::path::{Path, PathBuf};

use hsdiff::formats::FileSource;
use hsdiff::util::input::Tokenizer;
use hsdiff::weights::config::ModelConfig;

/// The fuzz targets' own decoding of an input (options, folders, parts), shared so the replay
/// drives the readers exactly as the targets do.
#[path = "../../fuzz/fuzz_targets/common.rs"]
mod fuzz_common;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The inputs committed per fuzz target: (target, seeds, corpus). The replay must find at least
/// these many — a corpus folder that went missing or was emptied fails here instead of turning
/// the replay into a test of the seeds alone. Raise the numbers when a corpus grows.
const COMMITTED: &[(&str, usize, usize)] = &[
    ("safetensors", 3, 615),
    ("torch", 8, 633),
    ("numpy", 3, 526),
    ("pickle", 4, 363),
    ("config", 2, 1029),
    ("tokenizer", 4, 300),
    ("pipelines", 8, 291),
    ("sglang", 7, 54),
    ("merge_part", 3, 153),
];

/// Every file under `fuzz/{seeds,corpus,regressions}/<target>/` (regressions/ exists only once
/// a crasher has been saved), checked against [`COMMITTED`].
fn inputs(target: &str) -> Vec<PathBuf> {
    let &(_, seeds, corpus) = COMMITTED
        .iter()
        .find(|(t, _, _)| *t == target)
        .unwrap_or_else(|| panic!("no committed counts for fuzz target {target}"));
    let files = |kind: &str| -> Vec<PathBuf> {
        let dir = fuzz_dir().join(kind).join(target);
        match std::fs::read_dir(&dir) {
            Ok(list) => list
                .map(|e| e.expect("read corpus folder").path())
                .filter(|p| p.is_file())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && kind == "regressions" => {
                Vec::new()
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && kind == "corpus" && corpus == 0 =>
            {
                Vec::new()
            }
            Err(e) => panic!("{}: {e}", dir.display()),
        }
    };
    let (s, c) = (files("seeds"), files("corpus"));
    assert!(
        s.len() >= seeds,
        "{target}: {} seeds, {seeds} committed",
        s.len()
    );
    assert!(
        c.len() >= corpus,
        "{target}: {} corpus files, {corpus} committed",
        c.len()
    );
    let mut out: Vec<PathBuf> = s.into_iter().chain(c).chain(files("regressions")).collect();
    out.sort();
    out
}

/// Opens `data` as a file with extension `ext` and reads every tensor, as the targets do.
fn open_and_read_all(data: &[u8], ext: &str, scratch: &Path) {
    let path = scratch.join(format!("input{ext}"));
    std::fs::write(&path, data).expect("write input");
    if let Ok(src) = FileSource::open(&path, None) {
        let _ = src.input_ids();
        let _ = src.compute_dtype();
        for name in src.names() {
            let _ = src.get_head(&name, 2);
            let _ = src.get(&name);
        }
    }
}

#[test]
fn file_readers_survive_the_corpus() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut n = 0;
    for (target, ext) in [("safetensors", ".safetensors"), ("torch", ".pt")] {
        for p in inputs(target) {
            open_and_read_all(&std::fs::read(&p).expect("read"), ext, scratch.path());
            n += 1;
        }
    }
    for p in inputs("numpy") {
        let data = std::fs::read(&p).expect("read");
        if let Some((&which, rest)) = data.split_first() {
            let ext = if which & 1 == 0 { ".npy" } else { ".npz" };
            open_and_read_all(rest, ext, scratch.path());
            n += 1;
        }
    }
    let committed: usize = COMMITTED
        .iter()
        .filter(|(t, _, _)| ["safetensors", "torch", "numpy"].contains(t))
        .map(|(_, seeds, corpus)| seeds + corpus)
        .sum();
    assert!(
        n >= committed,
        "only {n} corpus files, {committed} committed"
    );
}

#[test]
fn pickle_config_and_tokenizer_survive_the_corpus() {
    for p in inputs("pickle") {
        let _ = hsdiff::formats::pickle::parse(&std::fs::read(&p).expect("read"));
    }
    for p in inputs("config") {
        let _ =
            ModelConfig::from_bytes(&std::fs::read(&p).expect("read"), Path::new("config.json"));
    }
    let tok = Tokenizer::from_file(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/qwen3_5_tiny/tokenizer.json"),
    )
    .expect("golden tokenizer");
    for p in inputs("tokenizer") {
        if let Ok(text) = String::from_utf8(std::fs::read(&p).expect("read")) {
            let _ = tok.encode(&text);
        }
    }
}

#[test]
fn pipeline_sglang_and_merge_readers_survive_the_corpus() {
    for p in inputs("pipelines") {
        let data = std::fs::read(&p).expect("read");
        if let Some((&flags, file)) = data.split_first() {
            let (ext, opts) = fuzz_common::pipeline_options(flags);
            fuzz_common::open_with_and_read_all(file, ext, &opts);
        }
    }
    for p in inputs("sglang") {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = fuzz_common::write_folder(dir.path(), &std::fs::read(&p).expect("read"));
        if let Some(first) = paths.first() {
            fuzz_common::open_path_and_read_all(first, &Default::default());
        }
    }
    for p in inputs("merge_part") {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = fuzz_common::write_parts(dir.path(), &std::fs::read(&p).expect("read"));
        let _ = hsdiff::commands::compare::dataset::merge::merge(&paths);
    }
}
