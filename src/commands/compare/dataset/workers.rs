//! Pairs compared concurrently, within memory: how many workers ([`Workers::plan`]) and the
//! pool that runs them ([`run_all`]).
//!
//! A pair in flight holds, per side, the stored tensor its layers are cut from (read once) and
//! the layer being compared — at most about twice the side's file (three times for a `.gz`,
//! whose inflated bytes are held as well). The workers are as many as the threads
//! (`RAYON_NUM_THREADS`, else the cores), at most [`MAX_WORKERS`], and no more than half of the
//! memory available now holds at that per-pair bound for the largest pair; at least one. So at
//! most that many pairs are in memory at once, whatever the dataset's size. Results come back
//! to the calling thread as they are done and are put in pairing order by the caller: the
//! report does not depend on the number of workers.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// Pairs in flight at most, however many cores: "a few samples in memory".
pub const MAX_WORKERS: usize = 8;

/// How many pairs run at once, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workers {
    pub count: usize,
    /// The memory bound of one pair (bytes), and the memory the workers may use together.
    pub per_pair: u64,
    pub budget: Option<u64>,
}

impl Workers {
    /// Workers for pairs of the files `pairs` (A's file, B's file), on `threads` threads;
    /// `may_be_gzip` says of each side whether its files may be gzip files (each then opened
    /// for the inflated size it records), as a side's files already read tell.
    pub fn plan<'a>(
        pairs: impl Iterator<Item = (&'a Path, &'a Path)>,
        threads: usize,
        may_be_gzip: (bool, bool),
    ) -> Self {
        let per_pair = pairs
            .map(|(a, b)| in_memory_bound(a, may_be_gzip.0) + in_memory_bound(b, may_be_gzip.1))
            .max()
            .unwrap_or(0);
        let budget = available_bytes().map(|b| b / 2);
        Workers {
            count: count(threads, per_pair, budget),
            per_pair,
            budget,
        }
    }

    /// One line for stderr.
    pub fn describe(&self) -> String {
        let mib = |b: u64| b.div_ceil(1 << 20);
        match self.budget {
            Some(budget) => format!(
                "{} pair(s) at a time (≤ {} MiB each; half the available memory is {} MiB)",
                self.count,
                mib(self.per_pair),
                mib(budget)
            ),
            None => format!(
                "{} pair at a time (the available memory is unknown)",
                self.count
            ),
        }
    }
}

/// Workers on `threads` threads for pairs of `per_pair` bytes each within `budget`.
fn count(threads: usize, per_pair: u64, budget: Option<u64>) -> usize {
    let by_memory = match budget {
        Some(budget) if per_pair > 0 => usize::try_from(budget / per_pair).unwrap_or(usize::MAX),
        Some(_) => usize::MAX,
        // Nothing known about memory: one pair at a time.
        None => 1,
    };
    threads.min(MAX_WORKERS).min(by_memory).max(1)
}

/// What one file of a pair may hold in memory while it is compared.
fn in_memory_bound(path: &Path, may_be_gzip: bool) -> u64 {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    match may_be_gzip.then(|| gzip_size(path)).flatten() {
        // Inflated into memory, then read from there.
        Some(inflated) => inflated.max(len).saturating_mul(3),
        None => len.saturating_mul(2),
    }
}

/// The inflated size a gzip file records in its last four bytes (modulo 2³²: a larger file is
/// at least its compressed size, which the caller takes as well).
fn gzip_size(path: &Path) -> Option<u64> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut magic = [0u8; 2];
    f.read_exact(&mut magic).ok()?;
    if magic != [0x1f, 0x8b] {
        return None;
    }
    f.seek(SeekFrom::End(-4)).ok()?;
    let mut size = [0u8; 4];
    f.read_exact(&mut size).ok()?;
    Some(u64::from(u32::from_le_bytes(size)))
}

fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    crate::util::sysinfo::status_field_kib(&info, "MemAvailable").map(|k| k.saturating_mul(1024))
}

/// Runs `work` on every job (given its index) with `workers` threads (on this thread when there
/// is one) and hands each result to `done` on this thread, with the job's index, as it comes in.
pub fn run_all<J: Sync, R: Send>(
    jobs: &[J],
    workers: usize,
    work: impl Fn(usize, &J) -> R + Sync,
    mut done: impl FnMut(usize, R),
) {
    if workers <= 1 || jobs.len() <= 1 {
        for (i, j) in jobs.iter().enumerate() {
            done(i, work(i, j));
        }
        return;
    }
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..workers.min(jobs.len()) {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    if tx.send((i, work(i, job))).is_err() {
                        break;
                    }
                }
            });
        }
        // The workers hold the only senders left: the loop ends when the last one is done.
        drop(tx);
        for (i, r) in rx {
            done(i, r);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_once_whatever_the_workers() {
        let jobs: Vec<u64> = (0..37).map(|i| i * 7 + 3).collect();
        for workers in [1, 2, 5, 64] {
            let mut got = vec![None; jobs.len()];
            run_all(
                &jobs,
                workers,
                |_, j| j * j,
                |i, r| {
                    assert!(got[i].replace(r).is_none(), "job {i} twice");
                },
            );
            let want: Vec<Option<u64>> = jobs.iter().map(|j| Some(j * j)).collect();
            assert_eq!(got, want, "{workers} workers");
        }
    }

    #[test]
    fn bounded_by_threads_memory_and_the_cap() {
        const GIB: u64 = 1 << 30;
        assert_eq!(count(2, GIB, Some(16 * GIB)), 2, "threads");
        assert_eq!(count(64, GIB, Some(100 * GIB)), MAX_WORKERS, "cap");
        assert_eq!(count(16, 3 * GIB, Some(10 * GIB)), 3, "memory");
        assert_eq!(count(16, 20 * GIB, Some(10 * GIB)), 1, "at least one");
        assert_eq!(count(16, GIB, None), 1, "memory unknown");
    }
}
