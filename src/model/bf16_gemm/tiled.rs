//! The threading of a product: tasks of (row chunk × panel) taken in order by the workers, each
//! writing its own tile of the output.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::{MR, NR, PackedBf16};

/// Splits the `m × nⱼ` products of one input with the weights `ws` (all of `k` columns) into
/// tasks of (up to `mc` rows) × (one panel of `NR` columns of one weight) and runs them in
/// parallel: `task(scratch, w, panel, first_row, rows, c)` accumulates into a zeroed per-thread
/// tile `c` (`rows × NR`), which `finish` turns into output values written straight into the
/// task's part of its product's output. No `m × n` accumulator buffer is ever allocated. Each
/// output element is one task's, so how the work is split changes no value.
pub(super) fn tiled<Acc, Out, S>(
    m: usize,
    mc: usize,
    ws: &[&PackedBf16],
    scratch: impl Fn() -> S + Send + Sync,
    task: impl Fn(&mut S, &PackedBf16, usize, usize, usize, &mut [Acc]) + Send + Sync,
    finish: impl Fn(Acc) -> Out + Send + Sync,
) -> Vec<Vec<Out>>
where
    Acc: Copy + Default + Send + Sync,
    Out: Copy + Default + Send + Sync,
{
    let mut ys: Vec<Vec<Out>> = ws.iter().map(|w| vec![Out::default(); m * w.n]).collect();
    // The first panel of each product in the list of all products' panels, and their count.
    let mut first_panel = Vec::with_capacity(ws.len());
    let mut panels = 0;
    for w in ws {
        first_panel.push(panels);
        panels += w.n.div_ceil(NR);
    }
    if m == 0 || panels == 0 {
        return ys;
    }
    // As many chunks as `mc` rows need, of equal size (a multiple of every kernel's rows per
    // call): no short last chunk that pays a whole task's weight conversion for a few rows.
    let mc = m.div_ceil(m.div_ceil(mc)).next_multiple_of(MR);
    let outs: Vec<Disjoint<Out>> = ys.iter_mut().map(|y| Disjoint(y.as_mut_ptr())).collect();
    // Task t covers panel t % panels (of all products' panels, product after product) of row
    // chunk t / panels. Each worker takes the next task in order, so that the tasks running at
    // the same time share their rows of `x` (read from L3 or memory once for all of them, and for
    // every product of the input). rayon's own split of a range would run the chunks side by
    // side, each streamed by one worker: at 27B's down_proj, 2 × 18 MB in f32 or 2 × 24 MB in
    // f64, more than an L3 holds.
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
            let (global, first_row) = (t % panels, t / panels * mc);
            let j = first_panel.partition_point(|&p| p <= global) - 1;
            let (w, out, panel) = (ws[j], &outs[j], global - first_panel[j]);
            let (rows, n) = (mc.min(m - first_row), w.n);
            let c = &mut c[..rows * NR];
            c.fill(Acc::default());
            task(&mut scratch, w, panel, first_row, rows, c);
            let cols = NR.min(n - panel * NR);
            for (r, c) in c.chunks_exact(NR).enumerate() {
                // SAFETY: rows `first_row..first_row + rows` × columns `panel · NR ..
                // panel · NR + cols` lie inside product j's `y` (`m × n`), and task t alone
                // writes them.
                let y = unsafe { out.slice((first_row + r) * n + panel * NR, cols) };
                for (y, &v) in y.iter_mut().zip(c) {
                    *y = finish(v);
                }
            }
        }
    });
    ys
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
