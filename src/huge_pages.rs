//! The hsdiff binary's allocator: the system allocator, with the inside of every large block
//! (whole 2 MiB pages of a block of at least that size) offered to the kernel as transparent huge
//! pages, `madvise(MADV_HUGEPAGE)`.
//!
//! Why: a forward pass writes fresh buffers all the time (every activation, every product's
//! output, every packed weight), and the system allocator maps each large block anew and unmaps
//! it when freed. Each first touch of a 4 KiB page is then a page fault; under a VM (EPT walks,
//! page clearing, cgroup charging) that was measured at about 1 GB/s of fresh memory, slower than
//! packing the weight itself, and 4–5 % of a whole f64 forward (docs/performance.md, "Huge
//! pages"). One fault per 2 MiB page instead costs a fraction of that.
//!
//! A hint only: where transparent huge pages are off (`never`) or the kernel has none free, the
//! pages stay small; no value changes either way. Only the inside of a block is advised, so no
//! huge page reaches past the block into memory the allocator hands out elsewhere. Linux only;
//! elsewhere this is the system allocator as it is.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator with large blocks on transparent huge pages (see the module's comment).
pub struct HugePages;

/// A huge page of the x86-64 and arm64 kernels' transparent huge pages (PMD size).
const HUGE_PAGE: usize = 2 << 20;

// SAFETY: every call is the system allocator's, with the same arguments; `advise` only passes a
// hint about pages inside the block just returned.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let block = unsafe { System.alloc(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let block = unsafe { System.alloc_zeroed(layout) };
        advise(block, layout.size());
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let block = unsafe { System.realloc(block, layout, new_size) };
        advise(block, new_size);
        block
    }
}

/// Advises the whole huge pages inside `size` bytes from `block` (nothing for a smaller block).
fn advise(block: *mut u8, size: usize) {
    if block.is_null() || size < HUGE_PAGE {
        return;
    }
    let (start, end) = huge_pages_inside(block as usize, size);
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: `start..end` lies inside the block the allocator just returned; MADV_HUGEPAGE
        // changes no contents. Its result is ignored: it is a hint, and where the kernel refuses
        // it the pages stay small.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end);
}

/// The addresses `start..end` of the whole huge pages inside `size` bytes from `at` (`start >=
/// end` when there is none).
fn huge_pages_inside(at: usize, size: usize) -> (usize, usize) {
    (
        at.next_multiple_of(HUGE_PAGE),
        (at + size) / HUGE_PAGE * HUGE_PAGE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_huge_pages_inside_the_block_are_advised() {
        let mb = 1 << 20;
        // A block from 1 MiB to 6 MiB holds the pages 2–4 MiB and 4–6 MiB.
        assert_eq!(huge_pages_inside(mb, 5 * mb), (2 * mb, 6 * mb));
        // Aligned at both ends: all of it.
        assert_eq!(huge_pages_inside(4 * mb, 4 * mb), (4 * mb, 8 * mb));
        // From 1 MiB + 1 to 4 MiB - 1: no whole page (2–4 MiB reaches past its end).
        let (start, end) = huge_pages_inside(mb + 1, 3 * mb - 2);
        assert!(start >= end, "{start:#x}..{end:#x}");
    }

    #[test]
    fn blocks_from_it_hold_what_was_written() {
        // Large and small, zeroed and grown: the allocator's blocks behave as the system's.
        for size in [64, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 12345] {
            let layout = Layout::from_size_align(size, 64).expect("a valid layout");
            // SAFETY: a non-zero size; the block is written inside its size and freed once.
            unsafe {
                let zeroed = HugePages.alloc_zeroed(layout);
                assert!(!zeroed.is_null());
                let bytes = std::slice::from_raw_parts_mut(zeroed, size);
                assert!(bytes.iter().all(|&b| b == 0));
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = (i % 251) as u8;
                }
                let grown = HugePages.realloc(zeroed, layout, 2 * size);
                assert!(!grown.is_null());
                let kept = std::slice::from_raw_parts(grown, size);
                assert!(kept.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
                HugePages.dealloc(grown, Layout::from_size_align(2 * size, 64).expect("valid"));
            }
        }
    }
}
