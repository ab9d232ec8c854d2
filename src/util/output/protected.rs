//! What a run reads, by identity (device and inode): the files and folders no output may land
//! on.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::util::glob::{self, Glob};
use crate::util::limits::DATASET_DEPTH;

/// A file's identity: device and inode.
pub(super) type FileId = (u64, u64);

pub(super) fn id_of(meta: &std::fs::Metadata) -> FileId {
    (meta.dev(), meta.ino())
}

/// Files a model folder holds that an output must never replace or add.
pub(super) fn is_model_file(name: &[u8]) -> bool {
    name == b"config.json"
        || name == b"tokenizer.json"
        || name.ends_with(b".safetensors")
        || name.ends_with(b".safetensors.index.json")
}

/// Folder levels walked under one input folder (every level a dataset side reads: the folder
/// itself and [`DATASET_DEPTH`] below it) and the most entries walked.
const WALK_DEPTH: usize = DATASET_DEPTH + 1;
const WALK_ENTRIES: usize = 200_000;

/// What a run reads, by identity: no output may land on any of it.
#[derive(Debug, Default, Clone)]
pub struct Protected {
    files: HashSet<FileId>,
    pub(super) folders: HashSet<FileId>,
}

impl Protected {
    /// The files and folders `inputs` name (a folder with every file under it; a glob with
    /// every file it matches and the folders it is matched in). Paths that do not exist are
    /// skipped: reading them fails on its own, later.
    pub fn of(inputs: &[&Path]) -> Self {
        let mut p = Protected::default();
        let mut budget = WALK_ENTRIES;
        for input in inputs {
            let Ok(meta) = std::fs::metadata(input) else {
                if let Some(g) = glob::pattern(input) {
                    p.walk(&g.root, WALK_DEPTH, &mut budget, Some(&g));
                }
                continue;
            };
            if meta.is_dir() {
                p.walk(input, WALK_DEPTH, &mut budget, None);
            } else {
                p.files.insert(id_of(&meta));
            }
        }
        p
    }

    /// `dir`'s folders and files, `depth` levels; with a glob, only the files it matches.
    fn walk(&mut self, dir: &Path, depth: usize, budget: &mut usize, glob: Option<&Glob>) {
        let Ok(meta) = std::fs::metadata(dir) else {
            return;
        };
        if !self.folders.insert(id_of(&meta)) || depth == 0 {
            return;
        }
        let Ok(list) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in list.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let path = entry.path();
            let matched =
                glob.is_none_or(|g| g.matches(path.strip_prefix(&g.root).unwrap_or(&path)));
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => self.walk(&path, depth - 1, budget, glob),
                Ok(m) if matched => {
                    self.files.insert(id_of(&m));
                }
                _ => {}
            }
        }
    }

    pub(super) fn holds(&self, id: FileId) -> bool {
        self.files.contains(&id)
    }
}
