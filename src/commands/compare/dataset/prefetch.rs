//! Reading ahead across pairs: when a worker starts pair i, the kernel is asked to read the
//! files of pair i + workers (the next one a worker will start) into the page cache, on a
//! short-lived thread, so that the disk reads while the CPUs compare and the next pair's
//! first reads do not wait for it. Only advice: a file that cannot be opened here is
//! reported when its pair is compared, and the comparison reads the same bytes either way.

use std::path::PathBuf;

/// Asks the kernel to read `paths` ahead (`posix_fadvise(WILLNEED)`), without waiting.
pub fn read_ahead(paths: Vec<PathBuf>) {
    // The advice may block while the reads are queued: not on a worker.
    let _ = std::thread::Builder::new()
        .name("hsdiff-read-ahead".into())
        .spawn(move || {
            for path in paths {
                if let Ok(file) = std::fs::File::open(&path) {
                    use std::os::fd::AsRawFd;
                    // SAFETY: advice on an open descriptor; it changes no data.
                    unsafe {
                        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
                    }
                }
            }
        });
}
