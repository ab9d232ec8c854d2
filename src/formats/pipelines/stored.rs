//! A stored tensor that several views cut layers from (`hidden_states [1, T, k·H]` read as k
//! layers) is read from the file once per opened file, not once per layer. Views that are a
//! box of the stored tensor read only their own bytes from the map (`FileSource::load_box`);
//! the others — real positions selected out of a padded batch, compressed entries — go through
//! this cache: the first view read keeps the stored tensor, the next views of the same stored
//! tensor cut theirs out of it. It also counts the bytes read, for the tests. One
//! stored tensor is kept at a time (the views of a file are read in forward order, one stored
//! tensor after the other), so a source holds at most one stored tensor beyond what it hands
//! out; it is dropped with the source. A stored tensor only one view reads (token ids, a loss
//! mask, EAGLE-3's last state) is never kept.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::Tensor;

use super::view::View;
use crate::error::Result;
use crate::formats::{Entry, Loc};

/// Where a stored tensor's bytes are: equal keys, one stored tensor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    zip_entry: Option<String>,
    start: usize,
    len: usize,
}

fn key(loc: &Loc) -> Key {
    match loc {
        Loc::Range(a, b) => Key {
            zip_entry: None,
            start: *a,
            len: b.saturating_sub(*a),
        },
        Loc::Zip { entry, skip, len } => Key {
            zip_entry: Some(entry.clone()),
            start: *skip,
            len: *len,
        },
    }
}

#[derive(Debug, Default)]
pub struct StoredCache {
    /// Stored tensors that two or more views read.
    shared: Vec<Key>,
    kept: Mutex<Option<(Key, Tensor)>>,
    /// Bytes of tensor data read from the file (or its archive) so far.
    bytes_read: AtomicU64,
}

impl StoredCache {
    /// The cache for `entries`, whose `views` say which entries are cuts of a stored tensor.
    pub fn for_views(entries: &[Entry], views: &BTreeMap<usize, View>) -> Self {
        let mut count: BTreeMap<Key, usize> = BTreeMap::new();
        for &i in views.keys() {
            if let Some(e) = entries.get(i) {
                *count.entry(key(&e.loc)).or_default() += 1;
            }
        }
        StoredCache {
            shared: count
                .into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(k, _)| k)
                .collect(),
            ..Default::default()
        }
    }

    /// The stored tensor of `e`: kept from an earlier view of it, or read by `read` (and kept
    /// when other views read it too).
    pub fn get_or_read(&self, e: &Entry, read: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
        let k = key(&e.loc);
        if !self.shared.contains(&k) {
            return read();
        }
        let lock = || self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((kept, t)) = lock().as_ref()
            && *kept == k
        {
            return Ok(t.clone());
        }
        // The one kept before is let go first: at most one stored tensor is held.
        *lock() = None;
        let t = read()?;
        *lock() = Some((k, t.clone()));
        Ok(t)
    }

    /// Counts `n` bytes of tensor data read from the file.
    pub fn note_read(&self, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes of tensor data read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
}
