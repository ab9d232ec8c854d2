//! Statistics of the difference between two captured tensors, computed in f64 one token row at
//! a time, read from the stored values (`kernel`): no f64 copy of a tensor is ever made.
//! Nothing here decides what is "bad"; that is [`crate::compare::verdict`]'s job.

mod kernel;
pub use kernel::{NonFiniteValue, RANGE_LIMITS};
pub mod logits;
mod rows;
pub mod stats;
mod stored;
#[cfg(test)]
mod tests;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use stored::StoredRows;

/// Where the largest absolute difference sits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Location {
    pub token: usize,
    pub channel: usize,
}

/// How `a` differs from `b` (`b` is the denominator of relative quantities).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffStats {
    pub elements: usize,
    pub mean_abs: f64,
    pub max_abs: f64,
    pub max_abs_at: Location,
    /// ‖a − b‖₂ / ‖b‖₂ over the whole tensor: the primary number.
    pub rel_l2: f64,
    /// Cosine similarity of the flattened tensors.
    pub cosine: f64,
    /// The smallest per-token cosine, and its token.
    pub cosine_min: f64,
    pub cosine_min_token: usize,
    pub nan_a: usize,
    pub inf_a: usize,
    pub nan_b: usize,
    pub inf_b: usize,
    /// Elements where the two sides disagree about being finite: finite on one side only, NaN
    /// against ±Inf, or +Inf against −Inf; and the first of them (token order).
    pub non_finite_disagree: usize,
    pub non_finite_disagree_at: Option<Location>,
    /// Elements non-finite in the same way on both sides (both NaN, both +Inf, both −Inf), and
    /// the first of them.
    pub non_finite_both: usize,
    pub non_finite_both_at: Option<Location>,
    /// Each side's first non-finite element (token order) and its value.
    #[serde(skip)]
    pub first_non_finite_a: Option<(Location, NonFiniteValue)>,
    #[serde(skip)]
    pub first_non_finite_b: Option<(Location, NonFiniteValue)>,
    /// Each side's first finite element past f16's and bf16's largest finite value
    /// ([`RANGE_LIMITS`], in that order), and its value.
    #[serde(skip)]
    pub first_beyond_a: [Option<(Location, f64)>; 2],
    #[serde(skip)]
    pub first_beyond_b: [Option<(Location, f64)>; 2],
    /// ‖a_t − b_t‖ / ‖b_t‖ per token.
    pub per_token_rel: Vec<f64>,
    /// ‖b‖₂, to put absolute numbers in scale.
    pub norm_b: f64,
    /// Per token, Σ(a − b)² and Σb² over finite elements: rel L2 over a subset of tokens.
    #[serde(skip)]
    pub token_sq_diff: Vec<f64>,
    #[serde(skip)]
    pub token_sq_b: Vec<f64>,
}

impl DiffStats {
    /// The statistics of a `rows × cols` pair before any row is summed: no difference, the
    /// cosines 1 (what identical rows give), nothing non-finite.
    fn before_any_row(rows: usize, cols: usize) -> Self {
        DiffStats {
            elements: rows * cols,
            mean_abs: 0.0,
            max_abs: 0.0,
            max_abs_at: Location {
                token: 0,
                channel: 0,
            },
            rel_l2: 0.0,
            cosine: 1.0,
            cosine_min: 1.0,
            cosine_min_token: 0,
            nan_a: 0,
            inf_a: 0,
            nan_b: 0,
            inf_b: 0,
            non_finite_disagree: 0,
            non_finite_disagree_at: None,
            non_finite_both: 0,
            non_finite_both_at: None,
            first_non_finite_a: None,
            first_non_finite_b: None,
            first_beyond_a: [None, None],
            first_beyond_b: [None, None],
            per_token_rel: Vec::with_capacity(rows),
            norm_b: 0.0,
            token_sq_diff: Vec::with_capacity(rows),
            token_sq_b: Vec::with_capacity(rows),
        }
    }

    /// Root-mean-square of the absolute difference.
    pub fn rms_abs(&self) -> f64 {
        self.rel_l2 * self.norm_b / (self.elements.max(1) as f64).sqrt()
    }

    /// Root-mean-square of side B's values.
    pub fn rms_b(&self) -> f64 {
        self.norm_b / (self.elements.max(1) as f64).sqrt()
    }
}

/// Running sums over the elements where both sides are finite.
#[derive(Default)]
struct Sums {
    abs: f64,
    sq_diff: f64,
    sq_a: f64,
    sq_b: f64,
    dot: f64,
}

/// Views a capture as `[tokens, channels]`: the leading batch dim of 1 is dropped, the dims after
/// the token axis are flattened into channels.
fn as_rows(name: &str, t: &Tensor) -> Result<Tensor> {
    let dims = t.dims();
    let t = match dims {
        [1, _, ..] if dims.len() >= 3 => t.squeeze(0)?,
        _ => t.clone(),
    };
    let rows = t
        .dim(0)
        .map_err(|_| Error::Compare(format!("`{name}` is a scalar")))?;
    let cols = t.elem_count() / rows.max(1);
    Ok(t.reshape((rows, cols))?)
}

/// Compares `a` with `b` (same shape; any float dtypes).
pub fn diff_stats(name: &str, a: &Tensor, b: &Tensor) -> Result<DiffStats> {
    if a.dims() != b.dims() {
        return Err(Error::Compare(format!(
            "`{name}` has shape {:?} on side A but {:?} on side B",
            a.dims(),
            b.dims()
        )));
    }
    let a = as_rows(name, a)?;
    let b = as_rows(name, b)?;
    let (rows, cols) = a.dims2()?;
    let (mut rows_a, mut rows_b) = (rows::Rows::of(&a)?, rows::Rows::of(&b)?);
    let mut acc = Accumulator::new(rows, cols);
    for token in 0..rows {
        acc.add(token, rows_a.row(token)?, rows_b.row(token)?);
    }
    Ok(acc.finish())
}

/// [`diff_stats`] of two captures read where they are stored — the same operations in the same
/// order, so the same bits; None when a row cannot be viewed in place or the two differ in shape
/// (the caller then reads the tensors, and [`diff_stats`] says what differs).
pub fn diff_stats_stored(a: &StoredRows, b: &StoredRows) -> Option<DiffStats> {
    let (rows, cols) = (a.rows, a.cols());
    if b.rows != rows || b.cols() != cols || rows * cols == 0 || !a.viewable() || !b.viewable() {
        return None;
    }
    let mut acc = Accumulator::new(rows, cols);
    for token in 0..rows {
        acc.add(token, a.row(token)?, b.row(token)?);
    }
    Some(acc.finish())
}

/// The statistics being summed, token row by token row.
struct Accumulator {
    s: DiffStats,
    total: Sums,
    nf: kernel::NonFinite,
}

impl Accumulator {
    fn new(rows: usize, cols: usize) -> Self {
        Accumulator {
            s: DiffStats::before_any_row(rows, cols),
            total: Sums::default(),
            nf: kernel::NonFinite::default(),
        }
    }

    /// Token row `token` of both sides (rows in token order).
    fn add(&mut self, token: usize, ra: kernel::Row, rb: kernel::Row) {
        let s = &mut self.s;
        let row = kernel::row(ra, rb, token, s.max_abs, &mut self.nf);
        // The first occurrence of the largest difference in token order: a row's maximum is
        // taken only when it beats every earlier row's.
        if let Some((max, channel)) = row.max {
            s.max_abs = max;
            s.max_abs_at = Location { token, channel };
        }
        // A token with NaN/Inf on one side only has no meaningful error: mark it NaN rather than
        // let the finite elements make it look fine.
        s.per_token_rel.push(if row.one_sided {
            f64::NAN
        } else {
            ratio(row.sq_diff.sqrt(), row.sq_b.sqrt())
        });
        // Bit-identical rows have cosine exactly 1, whatever the rounding of the dot product.
        let cos = if row.sq_diff == 0.0 {
            1.0
        } else {
            cosine(row.dot, row.sq_a, row.sq_b)
        };
        if cos < s.cosine_min || token == 0 {
            s.cosine_min = cos;
            s.cosine_min_token = token;
        }
        for (first, row_first) in s.first_beyond_a.iter_mut().zip(row.beyond_a) {
            *first = first.or(row_first.map(|(channel, v)| (Location { token, channel }, v)));
        }
        for (first, row_first) in s.first_beyond_b.iter_mut().zip(row.beyond_b) {
            *first = first.or(row_first.map(|(channel, v)| (Location { token, channel }, v)));
        }
        s.token_sq_diff.push(row.sq_diff);
        s.token_sq_b.push(row.sq_b);
        self.total.abs += row.abs;
        self.total.sq_diff += row.sq_diff;
        self.total.sq_a += row.sq_a;
        self.total.sq_b += row.sq_b;
        self.total.dot += row.dot;
    }

    fn finish(mut self) -> DiffStats {
        let s = &mut self.s;
        s.nan_a = self.nf.nan_a;
        s.inf_a = self.nf.inf_a;
        s.nan_b = self.nf.nan_b;
        s.inf_b = self.nf.inf_b;
        s.non_finite_disagree = self.nf.disagree;
        s.non_finite_disagree_at = self.nf.disagree_at;
        s.non_finite_both = self.nf.both;
        s.non_finite_both_at = self.nf.both_at;
        s.first_non_finite_a = self.nf.first_a;
        s.first_non_finite_b = self.nf.first_b;
        let finite = s.elements - (s.nan_a + s.inf_a).max(s.nan_b + s.inf_b);
        s.mean_abs = if finite > 0 {
            self.total.abs / finite as f64
        } else {
            0.0
        };
        s.norm_b = self.total.sq_b.sqrt();
        s.rel_l2 = ratio(self.total.sq_diff.sqrt(), s.norm_b);
        s.cosine = if self.total.sq_diff == 0.0 {
            1.0
        } else {
            cosine(self.total.dot, self.total.sq_a, self.total.sq_b)
        };
        self.s
    }
}

/// `num / den`, with 0/0 = 0 (two zero tensors are identical) and x/0 = ∞.
fn ratio(num: f64, den: f64) -> f64 {
    if num == 0.0 {
        0.0
    } else if den == 0.0 {
        f64::INFINITY
    } else {
        num / den
    }
}

/// Cosine of two vectors from their dot product and squared norms; two zero vectors count as
/// identical (1), one zero vector as orthogonal (0).
fn cosine(dot: f64, sq_a: f64, sq_b: f64) -> f64 {
    match (sq_a == 0.0, sq_b == 0.0) {
        (true, true) => 1.0,
        (true, false) | (false, true) => 0.0,
        _ => (dot / (sq_a.sqrt() * sq_b.sqrt())).clamp(-1.0, 1.0),
    }
}
