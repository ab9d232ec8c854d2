//! Shared by the file-format targets: the input is written to a file with the extension the
//! reader dispatches on, opened as `hsdiff compare` opens it, and every tensor is read. Any
//! outcome but a panic (or a crash, hang or runaway allocation, which libFuzzer reports) is fine:
//! errors are the expected answer to garbage. `tests/inputs/fuzz_regressions.rs` replays the
//! corpora the same way.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use hsdiff::formats::FileSource;
use hsdiff::formats::pipelines::{IdsFrom, LayerIds, ReadOptions};

/// Between the files of a folder (`sglang`) or the parts of a merge (`merge_part`).
pub const SEPARATOR: &[u8] = b"\n--hsdiff-fuzz-file--\n";

/// Most files one input makes.
const MAX_FILES: usize = 16;

pub fn open_and_read_all(data: &[u8], ext: &str) {
    open_with_and_read_all(data, ext, &ReadOptions::default());
}

pub fn open_with_and_read_all(data: &[u8], ext: &str, opts: &ReadOptions) {
    let mut file = tempfile::Builder::new()
        .suffix(ext)
        .tempfile()
        .expect("temp file");
    file.write_all(data).expect("write");
    file.flush().expect("flush");
    open_path_and_read_all(file.path(), opts);
}

pub fn open_path_and_read_all(path: &Path, opts: &ReadOptions) {
    if let Ok(src) = FileSource::open_with(path, None, opts) {
        let _ = src.input_ids();
        let _ = src.compute_dtype();
        for name in src.names() {
            let _ = src.get_head(&name, 2);
            let _ = src.get(&name);
        }
    }
}

/// The extension and read options the `pipelines` target's first byte picks: bits 0–1 the
/// extension, then layer ids, the model's layers, its width, its experts, and the sample.
pub fn pipeline_options(flags: u8) -> (&'static str, ReadOptions) {
    let ext = [".ckpt", ".pt", ".safetensors", ".ckpt.gz"][usize::from(flags & 3)];
    let bit = |n: u8| flags & (1 << n) != 0;
    let opts = ReadOptions {
        layer_ids: bit(2).then(|| LayerIds {
            ids: vec![1, 3, 4],
            from: IdsFrom::BothSides,
        }),
        num_layers: bit(3).then_some(8),
        hidden_size: bit(4).then_some(64),
        num_experts: bit(5).then_some(8),
        sample: if bit(6) {
            Some(usize::from(bit(7)))
        } else {
            None
        },
    };
    (ext, opts)
}

/// `data` cut at [`SEPARATOR`], at most [`MAX_FILES`] pieces.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() + 1 < MAX_FILES {
        match rest.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                out.push(&rest[..at]);
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => break,
        }
    }
    out.push(rest);
    out
}

/// One component of a path from the fuzzer's bytes: the characters of dumper names only.
fn component(raw: &[u8]) -> Option<String> {
    let name: String = raw
        .iter()
        .map(|&b| b as char)
        .filter(|c| c.is_ascii_alphanumeric() || "_=.-".contains(*c))
        .take(200)
        .collect();
    (!name.is_empty() && !name.starts_with('.')).then_some(name)
}

/// `folder/file` (or `file`, put in `dump/`) from a name line: two components at most, none
/// leaving the fuzz folder.
fn relative_path(raw: &[u8]) -> Option<PathBuf> {
    let mut parts = raw.splitn(2, |&b| b == b'/');
    let (first, second) = (parts.next()?, parts.next());
    Some(match second {
        Some(file) => Path::new(&component(first)?).join(component(file)?),
        None => Path::new("dump").join(component(first)?),
    })
}

/// Each piece of `data` (a name line — `FOLDER/FILE` or `FILE` — then the file's bytes)
/// written under `dir`; the paths written, in the input's order.
pub fn write_folder(dir: &Path, data: &[u8]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for piece in pieces(data) {
        let (name, bytes) = match piece.iter().position(|&b| b == b'\n') {
            Some(at) => (&piece[..at], &piece[at + 1..]),
            None => (piece, &[][..]),
        };
        let Some(path) = relative_path(name).map(|r| dir.join(r)) else {
            continue;
        };
        let Some(parent) = path.parent() else {
            continue;
        };
        if paths.contains(&path) || std::fs::create_dir_all(parent).is_err() {
            continue;
        }
        if std::fs::write(&path, bytes).is_ok() {
            paths.push(path);
        }
    }
    paths
}

/// Each piece of `data` as a part file `dir/part_N.json`.
pub fn write_parts(dir: &Path, data: &[u8]) -> Vec<PathBuf> {
    pieces(data)
        .into_iter()
        .take(4)
        .enumerate()
        .map(|(n, bytes)| {
            let path = dir.join(format!("part_{n}.json"));
            std::fs::write(&path, bytes).expect("write");
            path
        })
        .collect()
}
