//! The entries under a dataset side's folder: the files to read, and every other entry with why
//! it is not read, so that nothing is dropped unsaid. The rule for links: a symbolic link is
//! followed to the file or folder it names, once per folder (a link back to a folder searched
//! already is a loop, not read again); a link to nothing, a link loop, a FIFO, a socket or a
//! device is listed, never opened (opening a FIFO would wait for a writer). Names starting with
//! `.` are listed as hidden, and folders deeper than [`DATASET_DEPTH`] as not searched.

use std::collections::HashSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::util::limits::DATASET_DEPTH;

/// Why an entry was not read: the kinds of [`NotRead`], each listed in one note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    Hidden,
    Dangling,
    LinkLoop,
    FolderSeen,
    TooDeep,
    Fifo,
    NotAFile,
    Unreadable,
}

impl Why {
    pub fn words(self) -> String {
        match self {
            Why::Hidden => "hidden (the name starts with '.')".to_string(),
            Why::Dangling => "symbolic links to nothing".to_string(),
            Why::LinkLoop => "symbolic link loops".to_string(),
            Why::FolderSeen => {
                "links to a folder searched already (read once, not again)".to_string()
            }
            Why::TooDeep => format!("folders deeper than the {DATASET_DEPTH} levels searched"),
            Why::Fifo => "FIFOs (never opened: reading one waits for a writer)".to_string(),
            Why::NotAFile => "sockets or devices, not regular files".to_string(),
            Why::Unreadable => "entries that cannot be inspected".to_string(),
        }
    }
}

/// An entry that is neither a file read nor a folder searched.
#[derive(Debug, Clone)]
pub struct NotRead {
    pub path: PathBuf,
    pub why: Why,
}

/// What a walk found.
#[derive(Default)]
pub struct Found {
    pub files: Vec<PathBuf>,
    /// Folders not entered and other entries not read, with why.
    pub not_read: Vec<NotRead>,
}

/// Every entry under `root`, searched [`DATASET_DEPTH`] folders deep.
pub fn walk(root: &Path) -> Result<Found> {
    let mut found = Found::default();
    let mut seen = HashSet::new();
    if let Ok(meta) = std::fs::metadata(root) {
        seen.insert((meta.dev(), meta.ino()));
    }
    walk_into(root, 0, &mut seen, &mut found)?;
    Ok(found)
}

fn walk_into(
    dir: &Path,
    depth: usize,
    seen: &mut HashSet<(u64, u64)>,
    found: &mut Found,
) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let mut not_read = |why| {
            found.not_read.push(NotRead {
                path: path.clone(),
                why,
            })
        };
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            not_read(Why::Hidden);
            continue;
        }
        // Links followed: the kind of what the entry names.
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) => {
                not_read(match e.raw_os_error() {
                    Some(libc::ELOOP) => Why::LinkLoop,
                    Some(libc::ENOENT) => Why::Dangling,
                    _ => Why::Unreadable,
                });
                continue;
            }
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            if depth >= DATASET_DEPTH {
                not_read(Why::TooDeep);
            } else if !seen.insert((meta.dev(), meta.ino())) {
                not_read(Why::FolderSeen);
            } else {
                walk_into(&path, depth + 1, seen, found)?;
            }
        } else if kind.is_file() {
            found.files.push(path);
        } else if kind.is_fifo() {
            not_read(Why::Fifo);
        } else {
            not_read(Why::NotAFile);
        }
    }
    Ok(())
}

/// One note per kind of entry not read, naming each (`side`: "A" or "B").
pub fn notes(side: &str, not_read: &[NotRead]) -> Vec<String> {
    let mut kinds: Vec<Why> = not_read.iter().map(|n| n.why).collect();
    kinds.sort();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|why| {
            let paths: Vec<String> = not_read
                .iter()
                .filter(|n| n.why == why)
                .map(|n| crate::util::escape::path_text(&n.path))
                .collect();
            let entries = if paths.len() == 1 { "entry" } else { "entries" };
            format!(
                "{side}: {} {entries} not read, {}: {}",
                paths.len(),
                why.words(),
                paths.join(", ")
            )
        })
        .collect()
}
