//! Memory-mapped input files that survive being truncated while they are read. Reading a page
//! of a map past the file's (new) end raises SIGBUS, which would kill the process without a
//! word. A map made here registers its address range; the SIGBUS handler, when the faulting
//! address lies in a registered map, maps a page of zeros over the faulting page (so the read
//! completes) and marks that map. Every read of tensor data is followed by [`check`], and
//! nothing is written or printed before a last [`check`]: the zeros never reach a report — the
//! run ends with "FILE changed while being read". A SIGBUS outside these maps keeps its default
//! action. The check costs one atomic load per slot; reads of the map are not slowed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};

use memmap2::Mmap;

use crate::error::{Error, Result};

/// Maps open at one time (two files per side, shards of a checkpoint); a map beyond this many
/// is read like the others but not guarded.
const SLOTS: usize = 512;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const CLEAR: AtomicBool = AtomicBool::new(false);
static STARTS: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
static ENDS: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
static FAULTED: [AtomicBool; SLOTS] = [CLEAR; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// Each slot's file, for the message.
static PATHS: Mutex<Vec<Option<PathBuf>>> = Mutex::new(Vec::new());
/// Files whose map faulted and was dropped before a check saw it.
static LOST: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A read-only map of a whole file, guarded as the module describes.
pub struct FileMap {
    /// Shared when it is anonymous memory several sources read (an inflated `.gz`).
    map: Arc<Mmap>,
    slot: Option<usize>,
}

impl FileMap {
    /// Maps `file` (opened from `path`, which names it in messages).
    pub fn map(file: &File, path: &Path) -> Result<Self> {
        install_handler();
        // SAFETY: a read-only map; a file truncated under it is caught by the SIGBUS handler
        // (pages past the end read as zeros, the map marked, the run stopped by `check`).
        let map = unsafe { Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
        let slot = register(&map, path);
        Ok(FileMap {
            map: Arc::new(map),
            slot,
        })
    }

    /// Anonymous memory holding a file's bytes (an inflated `.gz`): nothing can truncate it, so
    /// it is not guarded. It may be shared with other sources of the same file.
    pub fn anonymous(map: Arc<Mmap>) -> Self {
        FileMap { map, slot: None }
    }

    /// The memmap2 map itself (for `madvise`).
    pub fn inner(&self) -> &Mmap {
        &self.map
    }
}

impl std::ops::Deref for FileMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let mut paths = lock(&PATHS);
            if FAULTED[slot].swap(false, Ordering::AcqRel)
                && let Some(p) = paths.get(slot).cloned().flatten()
            {
                lock(&LOST).push(p);
            }
            if let Some(p) = paths.get_mut(slot) {
                *p = None;
            }
            STARTS[slot].store(0, Ordering::Release);
            ENDS[slot].store(0, Ordering::Release);
        }
    }
}

fn register(map: &Mmap, path: &Path) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    let start = map.as_ptr() as usize;
    let mut paths = lock(&PATHS);
    if paths.len() < SLOTS {
        paths.resize(SLOTS, None);
    }
    let slot = paths.iter().position(Option::is_none)?;
    paths[slot] = Some(path.to_path_buf());
    FAULTED[slot].store(false, Ordering::Release);
    // End first: the handler tests start <= addr < end, so a half-written slot matches nothing.
    ENDS[slot].store(start + map.len(), Ordering::Release);
    STARTS[slot].store(start, Ordering::Release);
    Some(slot)
}

/// An error naming the first file that changed under its map, if any did.
pub fn check() -> Result<()> {
    let paths = lock(&PATHS);
    for (slot, flag) in FAULTED.iter().enumerate() {
        if flag.load(Ordering::Acquire)
            && let Some(p) = paths.get(slot).cloned().flatten()
        {
            return Err(changed(&p));
        }
    }
    drop(paths);
    match lock(&LOST).first() {
        Some(p) => Err(changed(p)),
        None => Ok(()),
    }
}

fn changed(p: &Path) -> Error {
    Error::file(
        p,
        "changed while being read (truncated by another process?): nothing was reported from it",
    )
}

fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sysconf and sigaction with a handler that only touches atomics and calls
        // mmap/signal (system calls).
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in 0..SLOTS {
        let start = STARTS[slot].load(Ordering::Acquire);
        let end = ENDS[slot].load(Ordering::Acquire);
        if start != 0 && start <= addr && addr < end {
            let page = PAGE.load(Ordering::Relaxed);
            let at = addr & !(page - 1);
            // SAFETY: replaces one page of our own read-only file map with zeros; the map is
            // unmapped whole when it is dropped.
            let p = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                FAULTED[slot].store(true, Ordering::Release);
                return;
            }
        }
    }
    // Not one of ours: the default action, when the faulting access runs again.
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_truncated_under_its_map_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("shrinks.bin");
        let page = PAGE.load(Ordering::Relaxed).max(4096);
        let mut f = File::create(&path).expect("create");
        f.write_all(&vec![7u8; page * 4]).expect("write");
        drop(f);
        let file = File::open(&path).expect("open");
        let map = FileMap::map(&file, &path).expect("maps");
        assert!(check().is_ok());
        File::options()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(page as u64)
            .expect("truncate");
        // The last page now lies past the end of the file: reading it would be SIGBUS.
        let sum: u64 = map[page * 3..].iter().map(|&b| u64::from(b)).sum();
        assert_eq!(sum, 0);
        let err = check().expect_err("the change is reported");
        assert!(
            err.to_string().contains("changed while being read"),
            "{err}"
        );
        drop(map);
        // Reported even once the map is gone.
        assert!(check().is_err());
        lock(&LOST).clear();
    }
}
