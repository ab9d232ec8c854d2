//! Running a path and what it should equal: the full prefill of the same tokens by the same
//! backend at the same dtype. Both give an [`Observed`]: hidden states at the compared
//! positions and, where the path ends in a state, that state.

use candle_core::{DType, Device, Tensor};

use super::plan::{Cut, PathPlan};
use crate::backends::LinearAttentionBackend;
use crate::capture::{Captures, Key};
use crate::error::{Error, Result};
use crate::model::{DecodePlan, Model, ModelCache, RunOptions, TokenLayout, push_states};
use crate::util::progress::Progress;

/// Hidden states of a path at its compared positions (`layers.{i}`, `final_norm`, `logits`,
/// each `[1, n, ·]`), the absolute position of each, and final states (`state.layers.{i}.*`).
#[derive(Clone)]
pub struct Observed {
    pub hidden: Captures,
    pub positions: Vec<usize>,
    pub states: Option<Captures>,
}

/// Runs things on one model and prompt.
pub struct Runner<'a> {
    pub model: &'a Model,
    pub ids: &'a [u32],
    pub device: Device,
}

/// The hidden states a path compares, in forward order.
pub fn hidden_keys(model: &Model) -> Vec<Key> {
    let mut v: Vec<Key> = (0..model.config.num_hidden_layers)
        .map(Key::Layer)
        .collect();
    v.extend([Key::FinalNorm, Key::Logits]);
    v
}

/// Which backend runs, at which dtype: the path's own, or those the job plans for the truth and
/// the floor.
#[derive(Clone, Copy)]
pub struct Pass<'b> {
    pub backend: &'b dyn LinearAttentionBackend,
    pub dtype: DType,
}

impl Runner<'_> {
    fn opts<'b>(&self, pass: Pass<'b>) -> RunOptions<'b> {
        RunOptions {
            dtype: pass.dtype,
            device: self.device.clone(),
            backend: pass.backend,
        }
    }

    /// A fresh cached call over `rows`; returns its captures and the cache after it.
    fn fresh(
        &self,
        rows: &[Vec<u32>],
        layout: &TokenLayout,
        pass: Pass,
    ) -> Result<(Captures, ModelCache)> {
        let mut cache = ModelCache::new(self.model.config.num_hidden_layers);
        let caps = self.model.run_cached(
            rows,
            layout,
            &self.opts(pass),
            &mut cache,
            &Progress::hidden(),
        )?;
        Ok((caps, cache))
    }

    /// The path itself.
    pub fn path(&self, plan: &PathPlan, pass: Pass) -> Result<Observed> {
        match plan.cut {
            Cut::Decode {
                from,
                steps,
                state_dtype,
            } => self.decoded(
                DecodePlan {
                    from,
                    steps,
                    state_dtype,
                },
                pass,
            ),
            Cut::Split { at, end } => self.split(at, end, pass),
            Cut::Packed { boundary, end } => {
                let layout = TokenLayout {
                    real: None,
                    doc_starts: Some(vec![0, boundary]),
                };
                let (caps, _) = self.fresh(&[self.ids[..end].to_vec()], &layout, pass)?;
                Ok(Observed {
                    hidden: select(&caps, &hidden_keys(self.model), false)?,
                    positions: (0..end).collect(),
                    states: None,
                })
            }
            Cut::Padded { pad, end } => self.padded(pad, end, pass),
        }
    }

    /// A cached prefill, then one token at a time ([`Cut::Decode`]).
    fn decoded(&self, plan: DecodePlan, pass: Pass) -> Result<Observed> {
        let ids = self.ids;
        let (from, steps) = (plan.from, plan.steps);
        let decoded = self
            .model
            .run_decode(ids, plan, &self.opts(pass), &Progress::hidden())?;
        let mut hidden = Captures::new(ids[..from + steps].to_vec());
        let mut states = Captures::new(Vec::new());
        for (key, t) in decoded.iter() {
            match key {
                Key::DecodeLogits => hidden.insert(Key::Logits, t.clone()),
                Key::DecodeLayer(i) => hidden.insert(Key::Layer(i), t.clone()),
                _ => states.insert(key, t.clone()),
            }
        }
        // The decode path records no final_norm; the logits stand after it.
        let hidden = select(&hidden, &hidden_keys(self.model), true)?;
        Ok(Observed {
            hidden,
            positions: (from..from + steps).collect(),
            states: Some(states),
        })
    }

    /// A cached prefill of `0..at`, then `at..end` in one continuation call ([`Cut::Split`]).
    fn split(&self, at: usize, end: usize, pass: Pass) -> Result<Observed> {
        let ids = self.ids;
        let mut cache = ModelCache::new(self.model.config.num_hidden_layers);
        let opts = self.opts(pass);
        let layout = TokenLayout::default();
        self.model.run_cached(
            &[ids[..at].to_vec()],
            &layout,
            &opts,
            &mut cache,
            &Progress::hidden(),
        )?;
        let rest = self.model.run_cached(
            &[ids[at..end].to_vec()],
            &layout,
            &opts,
            &mut cache,
            &Progress::hidden(),
        )?;
        Ok(Observed {
            hidden: select(&rest, &hidden_keys(self.model), false)?,
            positions: (at..end).collect(),
            states: Some(states_of(&cache)),
        })
    }

    /// A batch of two: `0..end − pad` left-padded by `pad`, and `0..end` ([`Cut::Padded`]).
    fn padded(&self, pad: usize, end: usize, pass: Pass) -> Result<Observed> {
        let ids = self.ids;
        let short = &ids[..end - pad];
        let mut row0 = vec![0u32; pad];
        row0.extend_from_slice(short);
        let real0: Vec<bool> = (0..end).map(|j| j >= pad).collect();
        let layout = TokenLayout {
            real: Some(vec![real0, vec![true; end]]),
            doc_starts: None,
        };
        let (caps, cache) = self.fresh(&[row0, ids[..end].to_vec()], &layout, pass)?;
        // Row 0's real positions, then row 1: the same layout as `alone`.
        let mut hidden = Captures::new(Vec::new());
        for key in hidden_keys(self.model) {
            let t = need(&caps, key)?;
            let row0 = t.narrow(0, 0, 1)?.narrow(1, pad, end - pad)?;
            let row1 = t.narrow(0, 1, 1)?;
            hidden.insert(key, Tensor::cat(&[&row0, &row1], 1)?);
        }
        let positions = (0..end - pad).chain(0..end).collect();
        Ok(Observed {
            hidden,
            positions,
            states: Some(states_of(&cache)),
        })
    }

    /// What the path should equal: the same tokens, each sequence alone, in one fresh prefill.
    pub fn alone(&self, plan: &PathPlan, pass: Pass) -> Result<Observed> {
        let ids = self.ids;
        let keys = hidden_keys(self.model);
        let layout = TokenLayout::default();
        let window = |caps: &Captures, start: usize, len: usize| -> Result<Captures> {
            let mut out = Captures::new(Vec::new());
            for &key in &keys {
                out.insert(key, need(caps, key)?.narrow(1, start, len)?);
            }
            Ok(out)
        };
        match plan.cut {
            Cut::Decode { from, steps, .. } => {
                let end = from + steps;
                let (caps, cache) = self.fresh(&[ids[..end].to_vec()], &layout, pass)?;
                let mut hidden = window(&caps, from, steps)?;
                hidden = select(&hidden, &keys, true)?;
                Ok(Observed {
                    hidden,
                    positions: (from..end).collect(),
                    states: Some(states_of(&cache)),
                })
            }
            Cut::Split { at, end } => {
                let (caps, cache) = self.fresh(&[ids[..end].to_vec()], &layout, pass)?;
                Ok(Observed {
                    hidden: window(&caps, at, end - at)?,
                    positions: (at..end).collect(),
                    states: Some(states_of(&cache)),
                })
            }
            Cut::Packed { boundary, end } => {
                let (a, _) = self.fresh(&[ids[..boundary].to_vec()], &layout, pass)?;
                let (b, _) = self.fresh(&[ids[boundary..end].to_vec()], &layout, pass)?;
                Ok(Observed {
                    hidden: concat_tokens(&a, &b, &keys)?,
                    positions: (0..end).collect(),
                    states: None,
                })
            }
            Cut::Padded { pad, end } => {
                let (a, ca) = self.fresh(&[ids[..end - pad].to_vec()], &layout, pass)?;
                let (b, cb) = self.fresh(&[ids[..end].to_vec()], &layout, pass)?;
                let (sa, sb) = (states_of(&ca), states_of(&cb));
                let mut states = Captures::new(Vec::new());
                for (key, t) in sa.iter() {
                    states.insert(key, Tensor::cat(&[t, need(&sb, key)?], 0)?);
                }
                Ok(Observed {
                    hidden: concat_tokens(&a, &b, &keys)?,
                    positions: (0..end - pad).chain(0..end).collect(),
                    states: Some(states),
                })
            }
        }
    }
}

fn need(caps: &Captures, key: Key) -> Result<&Tensor> {
    caps.get(key)
        .ok_or_else(|| Error::Compare(format!("the path run captured no `{key}`")))
}

/// `keys` out of `caps`; `skip_final_norm` for the decode path, which has none.
fn select(caps: &Captures, keys: &[Key], skip_final_norm: bool) -> Result<Captures> {
    let mut out = Captures::new(caps.input_ids.clone());
    for &key in keys {
        if skip_final_norm && key == Key::FinalNorm {
            continue;
        }
        out.insert(key, need(caps, key)?.clone());
    }
    Ok(out)
}

fn concat_tokens(a: &Captures, b: &Captures, keys: &[Key]) -> Result<Captures> {
    let mut out = Captures::new(Vec::new());
    for &key in keys {
        out.insert(key, Tensor::cat(&[need(a, key)?, need(b, key)?], 1)?);
    }
    Ok(out)
}

fn states_of(cache: &ModelCache) -> Captures {
    let mut caps = Captures::new(Vec::new());
    push_states(&mut caps, cache);
    caps
}
