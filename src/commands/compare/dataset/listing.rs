//! A digest of what an input listed when a shard ran: each file's path, size and modification
//! time, in listing order. Two shards of one run see the same listing; a dataset dumped again,
//! a file added, removed or rewritten, lists differently — so a part made before is redone, and
//! `hsdiff merge` refuses to join parts that saw different files. The files' contents are not
//! read for it (a dataset holds terabytes); a rewrite shows in the size or the time.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::report::dataset_part::InputListing;

/// The listing of `files`, an input given as `given`.
pub fn of<'p>(given: &Path, files: impl IntoIterator<Item = &'p Path>) -> InputListing {
    let mut hash = Sha256::new();
    let mut count = 0;
    for path in files {
        count += 1;
        hash.update(path.as_os_str().as_bytes());
        hash.update(b"\0");
        match std::fs::metadata(path) {
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                hash.update(
                    format!("{} {}.{:09}", meta.len(), meta.mtime(), meta.mtime_nsec()).as_bytes(),
                );
            }
            // Listed, then gone or unreadable: that too is what this run saw.
            Err(e) => hash.update(format!("? {:?}", e.kind()).as_bytes()),
        }
        hash.update(b"\n");
    }
    InputListing {
        given: given.display().to_string(),
        files: count,
        listing: crate::report::dataset_part::hex(&hash.finalize()),
    }
}

/// The listing of a model folder: its files (not its subfolders), by name.
pub fn of_folder(dir: &Path) -> Result<InputListing> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(of(dir, files.iter().map(|p| p.as_path())))
}
