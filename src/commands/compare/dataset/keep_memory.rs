//! Freed tensor buffers kept for the next pair. Every pair of a dataset allocates the same
//! large buffers (one per layer and side, 21 MB at the 27B width) and frees them. glibc's
//! malloc hands buffers of that size back to the kernel on free (its mmap threshold and
//! heap trimming adapt to them), so each pair's buffers were fresh pages that the kernel faults
//! in and clears: a fifth of the CPU time of a warm dataset compare (docs/performance.md). Fixed
//! thresholds make malloc keep them: the peak memory is the same (it is set by the pairs in
//! flight), the pages are reused.

/// Buffers up to this size come from malloc's heaps (glibc's largest allowed value, 32 MiB
/// on 64-bit machines).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;
/// Free memory kept at the top of a heap before it is returned to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 1 << 30;

/// Sets the thresholds, for the whole process (a dataset compare is the process's one job).
pub fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning; an unaccepted value is refused (0) and
    // leaves the default, which is only slower.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
