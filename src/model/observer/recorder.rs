//! The observer of a run whose captures are kept.

use candle_core::Tensor;

use super::{Observer, Routes};
use crate::capture::{Captures, Key, RouterField};
use crate::error::{Error, Result};

/// The observer of a run whose captures are kept: every hidden state and router choice, the
/// ops and final states when asked, fed another run's layer outputs in isolate mode.
pub struct Recorder<'a> {
    ops: bool,
    states: bool,
    feed: Option<&'a Captures>,
    routes: Option<&'a Routes>,
    router_logits: bool,
    /// The run this one resumes, and the layer it resumes at.
    resumed: Option<(&'a Captures, usize)>,
    caps: Captures,
}

impl<'a> Recorder<'a> {
    /// Records the hidden states and router choices of a run over `ids`.
    pub fn new(ids: &[u32]) -> Self {
        Recorder {
            ops: false,
            states: false,
            feed: None,
            routes: None,
            router_logits: false,
            resumed: None,
            caps: Captures::new(ids.to_vec()),
        }
    }

    /// Also the values inside linear-attention layers (`layers.{i}.{op}`).
    pub fn with_ops(self, ops: bool) -> Self {
        Recorder { ops, ..self }
    }

    /// Also each linear-attention layer's state after the last token (`state.layers.{i}.*`).
    /// Full prefill only: a cached run's states are in its cache.
    pub fn with_states(self, states: bool) -> Self {
        Recorder { states, ..self }
    }

    /// Isolate mode: each layer runs on the input recorded in `feed` (another run's captures)
    /// instead of this run's own residual stream.
    pub fn fed_by(self, feed: Option<&'a Captures>) -> Self {
        Recorder { feed, ..self }
    }

    /// Forced routing: each MoE layer in `routes` uses the experts given there.
    pub fn routed_by(self, routes: Option<&'a Routes>) -> Self {
        Recorder { routes, ..self }
    }

    /// Also what each MoE layer's router could have chosen instead: its logits
    /// (`router.{i}.logits`).
    pub fn with_router_logits(self, router_logits: bool) -> Self {
        Recorder {
            router_logits,
            ..self
        }
    }

    /// Resumes `base`, a run recorded alike whose routing agrees with this one's before layer
    /// `at`: its captures of the embedding and the layers before `at` are this run's, and the
    /// pass starts at layer `at` on `base`'s output of the layer before (0: the whole pass).
    pub fn resuming(self, base: Option<(&'a Captures, usize)>) -> Self {
        let mut caps = self.caps;
        if let Some((base, at)) = base.filter(|&(_, at)| at > 0) {
            for (key, t) in base.iter() {
                let before = match key {
                    Key::Embed => true,
                    other => other.layer().is_some_and(|l| l < at),
                };
                if before {
                    caps.insert(key, t.clone());
                }
            }
        }
        Recorder {
            resumed: base.filter(|&(_, at)| at > 0),
            caps,
            ..self
        }
    }

    pub fn into_captures(self) -> Captures {
        self.caps
    }
}

impl Observer for Recorder<'_> {
    fn wants(&self, key: Key) -> bool {
        match key {
            Key::Op(..) => self.ops,
            Key::State(..) => self.states,
            Key::Router(_, RouterField::Logits) => self.router_logits,
            _ => true,
        }
    }

    fn record(&mut self, key: Key, t: Tensor) {
        self.caps.insert(key, t);
    }

    /// The embedding for layer 0, else the output of layer − 1, from the feeding run; at the
    /// layer a resumed run starts, the output of the one before from the run it resumes.
    fn feed(&self, layer: usize) -> Result<Option<Tensor>> {
        let feed = match (self.feed, self.resumed) {
            (Some(feed), _) => feed,
            (None, Some((base, at))) if at == layer => base,
            (None, _) => return Ok(None),
        };
        let key = match layer {
            0 => Key::Embed,
            i => Key::Layer(i - 1),
        };
        feed.get(key)
            .cloned()
            .map(Some)
            .ok_or_else(|| Error::Compare(format!("isolate mode: the feeding run has no `{key}`")))
    }

    fn route(&self, layer: usize) -> Option<&[Vec<u32>]> {
        self.routes.and_then(|r| r.get(layer))
    }

    fn resume_at(&self) -> usize {
        self.resumed.map_or(0, |(_, at)| at)
    }
}
