//! The samples one side of a dataset holds: a folder (searched recursively, `entries`), a glob
//! (`*`, `?` within a name, `**` for any folders: `util::glob`), or one file; a batched file is
//! one sample per row. Each sample's id is unique on its side; its token ids are read (hashed)
//! for pairing; the tensors are not.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::entries::{self, NotRead};
use super::listing;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::{ReadOptions, sample_id};
use crate::report::dataset_part::InputListing;
use crate::util::escape::path_text;
use crate::util::glob::{self, CAPTURE_SUFFIXES};

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
            Some(b) => format!("{}[{b}]", path_text(&self.path)),
            None => path_text(&self.path),
        }
    }
}

/// What a side holds: its samples, how its files were read, and the files left out.
pub struct Side {
    pub samples: Vec<Sample>,
    pub formats: Vec<String>,
    /// Files that are no capture (by name): counted in the report's notes.
    pub skipped: Vec<PathBuf>,
    /// Other entries not read (links to nothing, loops, FIFOs, …): each named in the notes.
    pub not_read: Vec<NotRead>,
    /// Whether some file was read as a drafter pipeline's dump.
    pub pipeline: bool,
    /// Whether some file carries an hsdiff fingerprint (which may name a model to calibrate).
    pub fingerprinted: bool,
    /// Every file the side listed, for a shard's part (`listing`).
    pub listing: InputListing,
}

/// Whether `spec` names more than one file: a folder or a glob (a path that exists is itself).
pub fn is_dataset(spec: &Path) -> bool {
    spec.is_dir() || glob::pattern(spec).is_some()
}

/// What a side's spec lists.
pub struct Listed {
    /// The files to read, in natural order (`data_2` before `data_10`), an SGLang pass one file.
    pub files: Vec<PathBuf>,
    /// Files no capture's by name.
    pub skipped: Vec<PathBuf>,
    /// Other entries, with why they are not read.
    pub not_read: Vec<NotRead>,
    /// The listing of all three (every file of an SGLang pass, before one stands for it).
    pub listing: InputListing,
    /// The folder the files are found under: sample ids are told apart by their path below it.
    pub root: PathBuf,
}

/// The entries `spec` names (see [`Listed`]).
pub fn files(spec: &Path) -> Result<Listed> {
    let pattern = glob::pattern(spec);
    let root = match &pattern {
        Some(g) => g.root.clone(),
        None if spec.is_dir() => spec.to_path_buf(),
        None => {
            return Ok(Listed {
                files: vec![spec.to_path_buf()],
                skipped: Vec::new(),
                not_read: Vec::new(),
                listing: listing::of(spec, [spec]),
                root: spec.parent().unwrap_or(Path::new("")).to_path_buf(),
            });
        }
    };
    if !root.is_dir() {
        return Err(Error::file(&root, "no such folder (from the glob)"));
    }
    let found = entries::walk(&root)?;
    let rel = |p: &Path| p.strip_prefix(&root).unwrap_or(p).to_path_buf();
    let in_pattern = |p: &Path, folder_too: bool| {
        pattern
            .as_ref()
            .is_none_or(|g| g.matches(&rel(p)) || folder_too && g.may_hold(&rel(p)))
    };
    let mut keep = Vec::new();
    let mut skipped = Vec::new();
    for f in found.files {
        if !in_pattern(&f, false) {
            continue;
        }
        if is_capture_name(&f) {
            keep.push(f);
        } else {
            skipped.push(f);
        }
    }
    let not_read: Vec<NotRead> = found
        .not_read
        .into_iter()
        .filter(|n| in_pattern(&n.path, true))
        .collect();
    keep.sort_by_key(|p| natural_key(&p.to_string_lossy()));
    let listing = listing::of(
        spec,
        keep.iter()
            .chain(&skipped)
            .chain(not_read.iter().map(|n| &n.path))
            .map(PathBuf::as_path),
    );
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
    Ok(Listed {
        files: keep,
        skipped,
        not_read,
        listing,
        root,
    })
}

fn is_capture_name(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| glob::is_capture_name(n.as_encoded_bytes()))
}

/// Each file's sample id: its name's (`data_12.ckpt` → `12`); where two files of the side give
/// one id, its folder below `root` and that id (`0/12`, `1/12`); where that is still shared
/// (`data_0.pt` beside `data_0.safetensors`), its whole path below `root`.
fn unique_ids(paths: &[PathBuf], root: &Path) -> Vec<String> {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).to_path_buf();
    let plain: Vec<String> = paths.iter().map(|p| sample_id(p)).collect();
    let in_folder = |k: usize| match rel(&paths[k]).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => format!("{}/{}", path_text(dir), plain[k]),
        _ => plain[k].clone(),
    };
    let whole = |k: usize| path_text(&rel(&paths[k]));
    let mut ids = plain.clone();
    for qualify in [&in_folder as &dyn Fn(usize) -> String, &whole] {
        let mut count: HashMap<&str, usize> = HashMap::new();
        for id in &ids {
            *count.entry(id.as_str()).or_default() += 1;
        }
        let shared: Vec<usize> = (0..ids.len())
            .filter(|&k| count[ids[k].as_str()] > 1)
            .collect();
        for k in shared {
            ids[k] = qualify(k);
        }
    }
    ids
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

impl Listed {
    /// Each file's sample id (see [`unique_ids`]).
    pub fn ids(&self) -> Vec<String> {
        unique_ids(&self.files, &self.root)
    }

    /// The side these files make, with no sample yet.
    pub fn side(&self) -> Side {
        Side {
            samples: Vec::new(),
            formats: Vec::new(),
            skipped: self.skipped.clone(),
            not_read: self.not_read.clone(),
            pipeline: false,
            fingerprinted: false,
            listing: self.listing.clone(),
        }
    }
}

/// What one file tells about its side: how it was read, whether it is a drafter pipeline's
/// dump, whether it carries a fingerprint, whether it was a gzip file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    format: String,
    pub pipeline: bool,
    pub fingerprinted: bool,
    pub inflated: bool,
}

impl Facts {
    pub fn of(src: &FileSource) -> Facts {
        Facts {
            format: format_of(src),
            pipeline: src.pipeline.is_some(),
            fingerprinted: src.fingerprint.is_some(),
            inflated: src.inflated(),
        }
    }
}

impl Side {
    /// Takes in what one of the side's files tells (in the files' order: formats are listed
    /// in the order they are first seen).
    pub fn learn(&mut self, facts: Facts) {
        self.pipeline |= facts.pipeline;
        self.fingerprinted |= facts.fingerprinted;
        if !self.formats.contains(&facts.format) {
            self.formats.push(facts.format);
        }
    }
}

/// How a file was read, without its per-sample parts: files read alike are listed once.
fn format_of(src: &FileSource) -> String {
    match &src.pipeline {
        Some(p) => general(&strip_batch(&p.description), p.stored_positions),
        None if src.conventions.is_empty() => src.format.as_str().to_string(),
        None => format!(
            "{} ({})",
            src.format.as_str(),
            strip_batch(&src.conventions.join("; "))
        ),
    }
}

/// A sample (or a whole file) of a side that could not be read: its file, the sample id it
/// would have had, and why.
pub struct Unread {
    pub path: PathBuf,
    pub id: String,
    pub error: Error,
}

/// The samples of one side's files. A file that cannot be read is an error when it is the
/// side's first (a side misread as a whole), else it is returned in `failed` with its error.
pub fn side(
    listed: &Listed,
    hint: Option<candle_core::DType>,
    read: &ReadOptions,
) -> Result<(Side, Vec<Unread>)> {
    let ids = listed.ids();
    let mut side = listed.side();
    let mut failed = Vec::new();
    for (n, path) in listed.files.iter().enumerate() {
        // Sample 0 tells the batch size.
        let first = match open(path, Some(0), hint, read) {
            Ok(src) => src,
            Err(e) if n == 0 => return Err(e),
            Err(error) => {
                failed.push(Unread {
                    path: path.clone(),
                    id: ids[n].clone(),
                    error,
                });
                continue;
            }
        };
        side.learn(Facts::of(&first));
        samples_of(
            path,
            &ids[n],
            &first,
            (hint, read),
            &mut side.samples,
            &mut failed,
        );
    }
    Ok((side, failed))
}

/// The samples of one file, whose sample 0 is `first`: their ids and token ids.
fn samples_of(
    path: &Path,
    id: &str,
    first: &FileSource,
    (hint, read): (Option<candle_core::DType>, &ReadOptions),
    samples: &mut Vec<Sample>,
    failed: &mut Vec<Unread>,
) {
    let batch = first.samples_held();
    for b in 0..batch {
        let sample_id = if batch > 1 {
            format!("{id}#{b}")
        } else {
            id.to_string()
        };
        let mut unread = |error| {
            failed.push(Unread {
                path: path.to_path_buf(),
                id: sample_id.clone(),
                error,
            })
        };
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
                    unread(e);
                    continue;
                }
            }
        };
        let tokens = match ids {
            Ok(ids) => ids.map(|ids| (digest(&ids), ids.len())),
            Err(e) => {
                unread(e);
                continue;
            }
        };
        samples.push(Sample {
            id: sample_id,
            path: path.to_path_buf(),
            batch_index: (batch > 1).then_some(b),
            tokens,
            held_from,
        });
    }
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
    fn ids_shared_by_two_files_are_told_apart_by_their_folders() {
        let root = Path::new("/d");
        let paths: Vec<PathBuf> = ["/d/0/data_0.ckpt", "/d/1/data_0.ckpt", "/d/1/data_1.ckpt"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(unique_ids(&paths, root), ["0/0", "1/0", "1"]);
        let same_folder: Vec<PathBuf> = ["/d/data_0.pt", "/d/data_0.safetensors"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(
            unique_ids(&same_folder, root),
            ["data_0.pt", "data_0.safetensors"]
        );
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
