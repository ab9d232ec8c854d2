//! The threading of a product: tasks of (row chunk × panel) taken in order by the workers, each
//! writing its own tile of the output.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::{MR, NR, PackedBf16};

/// Splits an `m × n` product into tasks of (up to `mc` rows) × (one panel of `NR` columns) and
/// runs them in parallel: `task(scratch, panel, first_row, rows, c)` accumulates into a zeroed
/// per-thread tile `c` (`rows × NR`), which `finish` turns into output values written straight
/// into the task's part of the output. No `m × n` accumulator buffer is ever allocated.
pub(super) fn tiled<Acc, Out, S>(
    m: usize,
    mc: usize,
    w: &PackedBf16,
    scratch: impl Fn() -> S + Send + Sync,
    task: impl Fn(&mut S, usize, usize, usize, &mut [Acc]) + Send + Sync,
    finish: impl Fn(Acc) -> Out + Send + Sync,
) -> Vec<Out>
where
    Acc: Copy + Default + Send + Sync,
    Out: Copy + Default + Send + Sync,
{
    let n = w.n;
    let mut y = vec![Out::default(); m * n];
    if m == 0 || n == 0 {
        return y;
    }
    let panels = n.div_ceil(NR);
    // As many chunks as `mc` rows need, of equal size (a multiple of every kernel's rows per
    // call): no short last chunk that pays a whole task's weight conversion for a few rows.
    let mc = m.div_ceil(m.div_ceil(mc)).next_multiple_of(MR);
    let out = Disjoint(y.as_mut_ptr());
    // Task t covers panel t % panels of row chunk t / panels. Each worker takes the next task in
    // order, so that the tasks running at the same time share their rows of `x` (read from L3 or
    // memory once for all of them). rayon's own split of a range would run the chunks side by side,
    // each streamed by one worker: at 27B's down_proj, 2 × 18 MB in f32 or 2 × 24 MB in f64,
    // more than an L3 holds.
    let tasks = panels * m.div_ceil(mc);
    let next = AtomicUsize::new(0);
    let workers = rayon::current_num_threads().min(tasks);
    (0..workers).into_par_iter().for_each(|_| {
        let (mut scratch, mut c) = (scratch(), vec![Acc::default(); mc * NR]);
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                break;
            }
            let (panel, first_row) = (t % panels, t / panels * mc);
            let rows = mc.min(m - first_row);
            let c = &mut c[..rows * NR];
            c.fill(Acc::default());
            task(&mut scratch, panel, first_row, rows, c);
            let cols = NR.min(n - panel * NR);
            for (r, c) in c.chunks_exact(NR).enumerate() {
                // SAFETY: rows `first_row..first_row + rows` × columns `panel · NR ..
                // panel · NR + cols` lie inside `y` (`m × n`), and task t alone writes them.
                let y = unsafe { out.slice((first_row + r) * n + panel * NR, cols) };
                for (y, &v) in y.iter_mut().zip(c) {
                    *y = finish(v);
                }
            }
        }
    });
    y
}

/// The output of [`tiled`], shared by its tasks, each of which writes its own elements only.
struct Disjoint<T>(*mut T);

// SAFETY: the tasks write disjoint elements ([`Disjoint::slice`]'s contract).
unsafe impl<T: Send> Send for Disjoint<T> {}
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    /// `len` elements from `at`.
    ///
    /// # Safety
    /// They lie inside the buffer, and no other live slice covers any of them.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}
