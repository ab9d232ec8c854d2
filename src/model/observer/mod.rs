//! What a forward pass hands out and what it is fed, decided by an [`Observer`] the forward
//! calls as it goes (as llama.cpp's eval callback): the model computes a layer's ops or final
//! states only for an observer that wants them, and runs a layer on a substituted input where
//! the observer feeds one (isolate mode).
//!
//! `routes`: another run's router choices to force; `recorder`: the observer of a run whose
//! captures are kept, fed or resumed from another run's.

mod recorder;
mod routes;
#[cfg(test)]
mod tests;

pub use recorder::Recorder;
pub use routes::Routes;

use candle_core::Tensor;

use crate::capture::Key;
use crate::error::Result;

pub trait Observer {
    /// Whether the forward is to hand `key`'s tensor to [`record`](Self::record). The hidden
    /// states are computed anyway; a layer's ops and final states cost work of their own and are
    /// computed only when the observer wants one of them.
    fn wants(&self, key: Key) -> bool;

    /// `key`'s tensor, as the forward computed it (only keys the observer wants).
    fn record(&mut self, key: Key, t: Tensor);

    /// The input decoder layer `layer` is to run on instead of the pass's own residual stream
    /// (`layer` = the number of layers: the final norm's input); None keeps the pass's own.
    fn feed(&self, layer: usize) -> Result<Option<Tensor>>;

    /// The experts each token must use at MoE layer `layer` (`[tokens][k]`), in place of the
    /// router's own top-k; None lets the router choose.
    fn route(&self, _layer: usize) -> Option<&[Vec<u32>]> {
        None
    }

    /// The first decoder layer the pass runs (0: the whole pass). Resuming at a later layer,
    /// the observer already holds what the layers before it gave (another run's, recorded
    /// alike) and [`feed`](Self::feed)s this one their output.
    fn resume_at(&self) -> usize {
        0
    }
}
