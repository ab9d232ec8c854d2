//! A shared output buffer for tasks that write disjoint but interleaved index sets.
//!
//! The fused kernel parallelises over (batch, value head), and the core output is laid out
//! [B, T, Hv, dv]: each task owns the strided set {(b, t, h, ·) : t} which cannot be expressed as
//! disjoint `&mut` sub-slices. This wrapper hands out raw writes; the safety argument lives with
//! each caller.

use std::marker::PhantomData;

/// Write-only view of a `&mut [T]` shared between tasks that write disjoint ranges.
pub(crate) struct DisjointOut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: the wrapper only allows writes to ranges that callers guarantee are disjoint between
// tasks (see `write`), so sharing it between threads is like sharing disjoint `&mut` sub-slices.
unsafe impl<T: Send> Send for DisjointOut<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for DisjointOut<'_, T> {}

impl<'a, T: Copy> DisjointOut<'a, T> {
    /// Borrows `out` mutably for the lifetime of the wrapper.
    pub(crate) fn new(out: &'a mut [T]) -> Self {
        Self {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _borrow: PhantomData,
        }
    }

    /// Copies `src` to `out[offset .. offset + src.len()]`.
    ///
    /// Panics if the range is out of bounds (an internal bug: shapes are validated before any
    /// task starts).
    ///
    /// # Safety
    /// No other task may write or read any element of the same range while the wrapper lives.
    pub(crate) unsafe fn write(&self, offset: usize, src: &[T]) {
        let end = offset.checked_add(src.len());
        assert!(
            matches!(end, Some(e) if e <= self.len),
            "DisjointOut: range out of bounds"
        );
        // SAFETY: in bounds (checked above); exclusivity of the range is the caller's contract;
        // `src` cannot alias the output because the output is mutably borrowed by `self`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) }
    }
}
