//! A dumper folder's files, listed once per run and indexed by forward pass.
//!
//! A dumper folder holds one file per tensor and forward pass: reading each pass by listing the
//! whole folder again made a folder of P passes cost P listings of P × tensors entries. The
//! listing is kept per folder (and the folder's modification time, so a folder written to since
//! is listed again) and shared by every pass read from it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use super::tags::{self, Tags};
use crate::error::{Error, Result};

/// The dumper files of one folder, by forward pass: `("step", "3")` or `("forward_pass_id", "3")`
/// → that pass's files, sorted by path.
pub struct Listing {
    by_pass: BTreeMap<(String, String), Vec<(Tags, PathBuf)>>,
}

impl Listing {
    fn of(dir: &Path) -> Result<Listing> {
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut by_pass: BTreeMap<(String, String), Vec<(Tags, PathBuf)>> = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let path = entry.path();
            let Some(t) = tags::parse(&path) else {
                continue;
            };
            for key in ["step", "forward_pass_id"] {
                if let Some(step) = t.get(key) {
                    by_pass
                        .entry((key.to_string(), step.to_string()))
                        .or_default()
                        .push((t.clone(), path.clone()));
                }
            }
        }
        for files in by_pass.values_mut() {
            files.sort_by(|a, b| a.1.cmp(&b.1));
        }
        Ok(Listing { by_pass })
    }

    /// The files of the forward pass `step` (counted by `step_key`).
    pub fn pass(&self, step_key: &str, step: &str) -> &[(Tags, PathBuf)] {
        self.by_pass
            .get(&(step_key.to_string(), step.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    /// Every forward pass counted by `step_key`, in the order of their numbers (unnumbered last).
    pub fn passes(&self, step_key: &str) -> Vec<&str> {
        let mut steps: Vec<&str> = self
            .by_pass
            .keys()
            .filter(|(k, _)| k == step_key)
            .map(|(_, s)| s.as_str())
            .collect();
        steps.sort_by_key(|s| (s.parse::<u64>().unwrap_or(u64::MAX), s.to_string()));
        steps
    }
}

type Cache = Mutex<HashMap<PathBuf, (Option<SystemTime>, Arc<Listing>)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The listing of `dir`, read once per run (again when the folder has changed since).
pub fn of(dir: &Path) -> Result<Arc<Listing>> {
    let modified = std::fs::metadata(dir)
        .map_err(|e| Error::io(dir, e))?
        .modified()
        .ok();
    // A poisoned lock only means another thread panicked while listing: the map is still whole.
    let mut map = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((when, listing)) = map.get(dir)
        && *when == modified
        && modified.is_some()
    {
        return Ok(Arc::clone(listing));
    }
    let listing = Arc::new(Listing::of(dir)?);
    map.insert(dir.to_path_buf(), (modified, Arc::clone(&listing)));
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_indexed_once() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("hsdiff-listing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        for name in [
            "step=10___rank=0___name=input_ids.pt",
            "step=2___rank=0___name=x.pt",
            "step=2___rank=0___name=input_ids.pt",
            "forward_pass_id=1___rank=0___name=input_ids___dump_index=1.pt",
            "notes.txt",
        ] {
            let p = dir.join(name);
            std::fs::write(&p, b"").map_err(|e| Error::io(&p, e))?;
        }
        let listing = of(&dir)?;
        assert_eq!(listing.passes("step"), ["2", "10"]);
        assert_eq!(listing.passes("forward_pass_id"), ["1"]);
        let two: Vec<&str> = listing
            .pass("step", "2")
            .iter()
            .filter_map(|(t, _)| t.name())
            .collect();
        assert_eq!(two, ["input_ids", "x"]);
        assert!(listing.pass("step", "3").is_empty());
        // The same folder unchanged: the same listing, not a new one.
        assert!(Arc::ptr_eq(&listing, &of(&dir)?));
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(())
    }
}
