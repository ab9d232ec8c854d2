//! The samples one side of a dataset holds: a folder (searched recursively), a glob (`*`, `?`
//! within a name, `**` for any folders), or one file; a batched file is one sample per row.
//! Each sample's token ids are read (hashed) for pairing; the tensors are not.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::listing;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::{ReadOptions, sample_id};
use crate::report::dataset_part::InputListing;

/// File names a capture can have.
const CAPTURE_SUFFIXES: &[&str] = &[
    ".ckpt",
    ".ckpt.gz",
    ".pt",
    ".pth",
    ".bin",
    ".safetensors",
    ".st",
    ".npz",
    ".npy",
];

/// One sample of one side.
#[derive(Debug, Clone)]
pub struct Sample {
    pub id: String,
    pub path: PathBuf,
    /// Row of a batched file.
    pub batch_index: Option<usize>,
    /// Digest and length of the token ids, when the file carries them.
    pub tokens: Option<([u8; 32], usize)>,
    /// The sample's first position: > 0 for a request served after a prefix-cache hit, whose
    /// positions 0..held_from are in no pass (its token ids are those from `held_from` on).
    pub held_from: usize,
}

impl Sample {
    pub fn file_label(&self) -> String {
        match self.batch_index {
            Some(b) => format!("{}[{b}]", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

/// What a side holds: its samples, how its files were read, and the files left out.
pub struct Side {
    pub samples: Vec<Sample>,
    pub formats: Vec<String>,
    /// Files that are no capture (by name): counted in the report's notes.
    pub skipped: Vec<PathBuf>,
    /// Whether some file was read as a drafter pipeline's dump.
    pub pipeline: bool,
    /// Whether some file carries an hsdiff fingerprint (which may name a model to calibrate).
    pub fingerprinted: bool,
    /// Every file the side listed, for a shard's part (`listing`).
    pub listing: InputListing,
}

/// Whether `spec` names more than one file: a folder or a glob.
pub fn is_dataset(spec: &Path) -> bool {
    spec.is_dir() || has_wildcard(&spec.to_string_lossy())
}

fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// The files `spec` names, in natural order (`data_2` before `data_10`); the files no capture's
/// by name; and the listing of both (every file of an SGLang pass, before one stands for it).
pub fn files(spec: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>, InputListing)> {
    let text = spec.to_string_lossy().into_owned();
    let (root, pattern): (PathBuf, Option<Vec<String>>) = if has_wildcard(&text) {
        let parts: Vec<&str> = text.split('/').collect();
        let first = parts.iter().position(|p| has_wildcard(p)).unwrap_or(0);
        let root = parts[..first].join("/");
        let root = if root.is_empty() && text.starts_with('/') {
            "/".to_string()
        } else if root.is_empty() {
            ".".to_string()
        } else {
            root
        };
        (
            PathBuf::from(root),
            Some(parts[first..].iter().map(|s| s.to_string()).collect()),
        )
    } else if spec.is_dir() {
        (spec.to_path_buf(), None)
    } else {
        let listing = listing::of(spec, [spec]);
        return Ok((vec![spec.to_path_buf()], Vec::new(), listing));
    };
    if !root.is_dir() {
        return Err(Error::file(&root, "no such folder (from the glob)"));
    }
    let mut found = Vec::new();
    walk(&root, &mut found, 0)?;
    let mut keep = Vec::new();
    let mut skipped = Vec::new();
    for f in found {
        let rel = f.strip_prefix(&root).unwrap_or(&f);
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match &pattern {
            Some(p) if !glob_match(p, &parts) => {}
            _ if !is_capture_name(&f) => skipped.push(f),
            _ => keep.push(f),
        }
    }
    keep.sort_by_key(|p| natural_key(&p.to_string_lossy()));
    let listing = listing::of(spec, keep.iter().chain(&skipped).map(PathBuf::as_path));
    // An SGLang dumper folder holds one file per tensor: one file stands for each forward pass.
    let keep = crate::formats::pipelines::sglang::collapse(keep)?;
    if keep.is_empty() {
        return Err(Error::file(
            spec,
            format!(
                "no capture files found (looked for names ending {})",
                CAPTURE_SUFFIXES.join(", ")
            ),
        ));
    }
    Ok((keep, skipped, listing))
}

/// Folders are searched this deep at most (SpecForge nests one level, ge_data one).
const MAX_DEPTH: usize = 8;

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() && depth < MAX_DEPTH {
            walk(&path, out, depth + 1)?;
        } else if kind.is_file() || kind.is_symlink() && path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn is_capture_name(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    CAPTURE_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// `pattern` components (`**` = any folders) against a relative path's components.
fn glob_match(pattern: &[String], parts: &[String]) -> bool {
    match (pattern.first(), parts.first()) {
        (None, None) => true,
        (Some(p), _) if p == "**" => {
            glob_match(&pattern[1..], parts)
                || (!parts.is_empty() && glob_match(pattern, &parts[1..]))
        }
        (Some(p), Some(s)) => {
            name_match(p.as_bytes(), s.as_bytes()) && glob_match(&pattern[1..], &parts[1..])
        }
        _ => false,
    }
}

/// `*` and `?` within one name.
fn name_match(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => name_match(&p[1..], s) || (!s.is_empty() && name_match(p, &s[1..])),
        (Some(b'?'), Some(_)) => name_match(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => name_match(&p[1..], &s[1..]),
        _ => false,
    }
}

/// Digits compared as numbers: `data_2` < `data_10`.
fn natural_key(s: &str) -> Vec<(String, u128)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u128> = None;
    for c in s.chars() {
        match (c.to_digit(10), num) {
            (Some(d), Some(n)) => num = Some(n.saturating_mul(10).saturating_add(d.into())),
            (Some(d), None) => num = Some(d.into()),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(c);
            }
            (None, None) => text.push(c),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

/// Opens one sample (a row of a batched file when `batch_index` is set).
pub fn open(
    path: &Path,
    batch_index: Option<usize>,
    hint: Option<candle_core::DType>,
    read: &ReadOptions,
) -> Result<FileSource> {
    let opts = ReadOptions {
        sample: batch_index,
        ..read.clone()
    };
    FileSource::open_with(path, hint, &opts)
}

/// The samples of one side. A file that cannot be read is an error when it is the side's first
/// (a side misread as a whole), else it is returned in `failed` with its error.
pub fn side(
    spec: &Path,
    hint: Option<candle_core::DType>,
    read: &ReadOptions,
) -> Result<(Side, Vec<(PathBuf, Error)>)> {
    let (paths, skipped, listing) = files(spec)?;
    let mut samples = Vec::new();
    let mut formats: Vec<String> = Vec::new();
    let mut failed = Vec::new();
    let mut pipeline = false;
    let mut fingerprinted = false;
    for (n, path) in paths.iter().enumerate() {
        // Sample 0 tells the batch size.
        let first = match open(path, Some(0), hint, read) {
            Ok(src) => src,
            Err(e) if n == 0 => return Err(e),
            Err(e) => {
                failed.push((path.clone(), e));
                continue;
            }
        };
        let batch = first.samples_held();
        pipeline |= first.pipeline.is_some();
        fingerprinted |= first.fingerprint.is_some();
        let format = match &first.pipeline {
            Some(p) => general(&strip_batch(&p.description), p.stored_positions),
            None if first.conventions.is_empty() => first.format.as_str().to_string(),
            None => format!(
                "{} ({})",
                first.format.as_str(),
                strip_batch(&first.conventions.join("; "))
            ),
        };
        if !formats.contains(&format) {
            formats.push(format);
        }
        let id = sample_id(path);
        for b in 0..batch {
            // Sample 0's source may hold every sample's ids (an SGLang pass's requests): no
            // reading of the file again for them.
            let (ids, held_from) = if b == 0 {
                (first.input_ids(), first.held_from)
            } else if let Some(held) = first.held_input_ids(b) {
                (held.map(Some), 0)
            } else {
                match open(path, Some(b), hint, read) {
                    Ok(src) => (src.input_ids(), src.held_from),
                    Err(e) => {
                        failed.push((path.clone(), e));
                        continue;
                    }
                }
            };
            let tokens = match ids {
                Ok(ids) => ids.map(|ids| (digest(&ids), ids.len())),
                Err(e) => {
                    failed.push((path.clone(), e));
                    continue;
                }
            };
            samples.push(Sample {
                id: if batch > 1 {
                    format!("{id}#{b}")
                } else {
                    id.clone()
                },
                path: path.clone(),
                batch_index: (batch > 1).then_some(b),
                tokens,
                held_from,
            });
        }
    }
    Ok((
        Side {
            samples,
            formats,
            skipped,
            pipeline,
            fingerprinted,
            listing,
        },
        failed,
    ))
}

/// A reading's description without the per-sample parts (positions, batch row); an SGLang pass's
/// "request r of the pass's n (seq_lens …: positions …)" becomes what holds for every request.
fn strip_batch(description: &str) -> String {
    description
        .split("; ")
        .filter(|p| !p.starts_with("sample ") && !p.contains(" positions compared"))
        .map(|p| {
            if p.starts_with("request ") && p.contains(" of the pass's ") {
                "each request of a pass one sample, its positions cut by seq_lens"
            } else {
                p
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A reading's description with the sample's length inside shapes written `T`
/// (`[1, 230, 640]` → `[1, T, 640]`), so that samples read alike are listed once.
fn general(description: &str, positions: usize) -> String {
    let t = positions.to_string();
    let mut out = String::with_capacity(description.len());
    for (k, part) in description.split('[').enumerate() {
        if k > 0 {
            out.push('[');
        }
        match part.split_once(']') {
            Some((dims, rest)) if k > 0 => {
                let dims: Vec<&str> = dims
                    .split(", ")
                    .map(|d| if d == t { "T" } else { d })
                    .collect();
                out.push_str(&dims.join(", "));
                out.push(']');
                out.push_str(rest);
            }
            _ => out.push_str(part),
        }
    }
    out
}

pub fn digest(ids: &[u32]) -> [u8; 32] {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let p = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
        assert!(glob_match(
            &p("rows_*/data_*.ckpt"),
            &p("rows_0-5000/data_12.ckpt")
        ));
        assert!(!glob_match(
            &p("rows_*/data_*.ckpt"),
            &p("rows_0-5000/x/data_12.ckpt")
        ));
        assert!(glob_match(
            &p("**/hs_?.safetensors"),
            &p("a/b/hs_3.safetensors")
        ));
        assert!(glob_match(
            &p("**/hs_?.safetensors"),
            &p("hs_3.safetensors")
        ));
        assert!(!glob_match(
            &p("**/hs_?.safetensors"),
            &p("hs_31.safetensors")
        ));
    }

    #[test]
    fn a_readings_per_sample_parts_leave_the_sides_description() {
        assert_eq!(
            strip_batch("torch.save (x); sample 1 of the batch's 2; 10 positions compared"),
            "torch.save (x)"
        );
        // Two requests of two passes read alike.
        for request in [
            "request 0 of the pass's 2 (seq_lens [10, 13]: positions 0..10)",
            "request 2 of the pass's 3 (seq_lens [4, 5, 6]: positions 9..15)",
        ] {
            assert_eq!(
                strip_batch(&format!("torch.save (sglang); {request}")),
                "torch.save (sglang); each request of a pass one sample, its positions cut by \
                 seq_lens"
            );
        }
    }

    #[test]
    fn shapes_generalised() {
        assert_eq!(
            general(
                "`hidden_states` [1, 230, 640] and [230, 64]; 230 positions",
                230
            ),
            "`hidden_states` [1, T, 640] and [T, 64]; 230 positions"
        );
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["data_10.ckpt", "data_2.ckpt", "data_1.ckpt"];
        v.sort_by_key(|s| natural_key(s));
        assert_eq!(v, ["data_1.ckpt", "data_2.ckpt", "data_10.ckpt"]);
    }
}
