//! A drafter pipeline's layer ids against the f64 truth. Pipelines count ids two ways
//! ([`Convention`]): vLLM's aux ids from `idx + 1` (id N is the output of layer N − 1), the
//! others' as the layer itself. A capture counted one way and read the other, or a config that
//! names other layers than were captured, puts every state one or two layers off its id. Both
//! checks of it — vLLM's aux ids as declared or ±1 ([`super::aux_ids`]) and any pipeline's
//! declared ids ±1, ±2 (`commands::compare::layer_id_slip`) — measure the side's states against
//! the truth's under shifted ids and take a shift only when it fits [`FAR_BETTER`]× better than
//! the ids as declared: that reasoning is here.

use candle_core::Tensor;

use super::Pipeline;
use super::layer_ids::Convention;
use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::rel_l2_tensors_over_finite;
use crate::error::Result;

/// A side's layer ids as declared, and the shift of them its states fit.
#[derive(Debug, Clone, PartialEq)]
pub struct IdShift {
    /// The ids as declared, in the pipeline's convention.
    pub declared: Vec<usize>,
    /// Layers to add to the declared ids: 0 when they fit.
    pub shift: i64,
    /// Median rel L2 against the truth as declared, and as found (shifted).
    pub as_declared: f64,
    pub as_found: f64,
}

impl IdShift {
    /// The ids the states are.
    pub fn found(&self) -> Vec<usize> {
        self.declared
            .iter()
            .map(|&id| (id as i64 + self.shift) as usize)
            .collect()
    }
}

impl Pipeline {
    /// How the pipeline counts its layer ids.
    pub fn convention(self) -> Convention {
        match self {
            Pipeline::Speculators => Convention::HiddenStatesIndex,
            _ => Convention::OutputOf,
        }
    }
}

impl Convention {
    /// The id of hsdiff's `layers.N` is `N + offset`.
    pub fn id_offset(self) -> i64 {
        match self {
            Convention::OutputOf => 0,
            Convention::HiddenStatesIndex => 1,
        }
    }
}

/// rel L2 of `x` (a side's state, its first [`SAMPLE_TOKENS`] tokens) against the truth's
/// `key`; None when the truth lacks it or holds it in another shape.
pub fn rel_to_truth(x: &Tensor, truth: &dyn TensorSource, key: Key) -> Result<Option<f64>> {
    match truth.tensor_head(key, SAMPLE_TOKENS)? {
        Some(t) if t.dims() == x.dims() => Ok(Some(rel_l2_tensors_over_finite(x, &t)?)),
        _ => Ok(None),
    }
}

/// Of the shifted readings (shift, median rel L2), the closest (the first on ties) when it fits
/// [`FAR_BETTER`]× better than the declared reading's `as_declared`.
pub fn far_better(
    as_declared: f64,
    shifted: impl IntoIterator<Item = (i64, f64)>,
) -> Option<(i64, f64)> {
    let mut best: Option<(i64, f64)> = None;
    for (s, m) in shifted {
        if best.is_none_or(|(_, b)| m < b) {
            best = Some((s, m));
        }
    }
    best.filter(|(_, m)| m * FAR_BETTER < as_declared)
}
