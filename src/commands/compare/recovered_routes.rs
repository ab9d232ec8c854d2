//! Router choices recovered from a side's states when its file records none (hooks on decoder
//! layers give no `router.{i}.topk_ids`). The f64 truth routes by its exact router; where a
//! side's rounding tipped a near-tie the other way, the side's layer output at that token — and,
//! through the recurrent state and attention, at later ones — is far from the truth for a reason
//! that is no bug. The side's own states say where: at each layer the side holds, a token whose
//! error against the truth stands out from the layer's typical token ([`OUTLIER`] × the median)
//! is tried with the other choice at the MoE layer (since the layer held before) where the
//! truth's router was closest to flipping there — its k-th expert swapped for the best one it
//! left out — all such tokens in one forced f64 forward; a try is kept where it brings the
//! side's error at that token under [`KEPT_BELOW`] of what it was. A kept flip is the truth
//! agreeing with the side, so a bug, which moves the typical token, is never explained away: its
//! tokens do not stand out, and the flips kept move none of them.
//!
//! The side's routes force each MoE layer with a kept flip to the truth's own choices there (on
//! the path of the flips before it) with the flips; the router chooses elsewhere. The
//! calibration runs are then routed by them as by recorded choices, so the side is judged on its
//! arithmetic alone.

use std::collections::BTreeMap;

use candle_core::{DType, Device};

use crate::capture::{Captures, Key, RouterField};
use crate::compare::TensorSource;
use crate::compare::metrics::diff_stats;
use crate::compare::metrics::stats::median;
use crate::error::Result;
use crate::job::TRUTH_BACKEND;
use crate::model::{Model, Observer, Recorder, Routes, RunOptions};
use crate::util::progress::Progress;

/// A token whose error is this many times the layer's median stands out: honest rounding
/// spreads over tokens within a small factor, a flipped expert moves its token by far more.
const OUTLIER: f64 = 4.0;

/// A flip is kept when the forced truth brings the side's error at the token below this share
/// of what it was: the other choice explains the token, not a chance wobble.
const KEPT_BELOW: f64 = 0.5;

/// Rounds of tries per held layer (a kept flip can make a later token stand out on its own).
const ROUNDS: usize = 3;

/// A side's routes as recovered, and the flips (MoE layer, token) that differ from the truth's
/// own choice.
pub struct Recovered {
    pub routes: Routes,
    pub flips: Vec<(usize, usize)>,
}

impl Recovered {
    /// "layers.0 token 3, layers.2 token 17" (the first few).
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self
            .flips
            .iter()
            .take(6)
            .map(|(l, t)| format!("router.{l} token {t}"))
            .collect();
        let more = self.flips.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("{}{more}", shown.join(", "))
    }
}

/// Per MoE layer, per token, the best expert the router left out.
type RunnerUps = BTreeMap<usize, Vec<Option<u32>>>;

/// A recorder that also keeps each MoE layer's runner-up experts.
struct Probe<'a> {
    recorder: Recorder<'a>,
    runner_up: BTreeMap<usize, Vec<Option<u32>>>,
}

impl Observer for Probe<'_> {
    fn wants(&self, key: Key) -> bool {
        self.recorder.wants(key)
    }
    fn record(&mut self, key: Key, t: candle_core::Tensor) {
        self.recorder.record(key, t);
    }
    fn feed(&self, layer: usize) -> Result<Option<candle_core::Tensor>> {
        self.recorder.feed(layer)
    }
    fn route(&self, layer: usize) -> Option<&[Vec<u32>]> {
        self.recorder.route(layer)
    }
    fn runner_up(&mut self, layer: usize, experts: &[Option<u32>]) {
        self.runner_up.insert(layer, experts.to_vec());
    }
}

/// The f64 truth through layer `through`, routed by `routes` (its own router when None).
fn truth(
    model: &Model,
    ids: &[u32],
    routes: Option<&Routes>,
    through: usize,
) -> Result<(Captures, RunnerUps)> {
    let backend = TRUTH_BACKEND.open(&Device::Cpu)?;
    let opts = RunOptions {
        dtype: DType::F64,
        device: Device::Cpu,
        backend: backend.as_ref(),
    };
    let mut probe = Probe {
        recorder: Recorder::new(ids).routed_by(routes),
        runner_up: BTreeMap::new(),
    };
    model.observe(ids, &opts, &mut probe, &Progress::hidden(), Some(through))?;
    Ok((probe.recorder.into_captures(), probe.runner_up))
}

/// Per token, `side`'s relative error against `truth` at `layers.{layer}`.
fn token_errors(side: &dyn TensorSource, truth: &Captures, layer: usize) -> Result<Vec<f64>> {
    let name = Key::Layer(layer).to_string();
    match (side.tensor(&name)?, truth.get(Key::Layer(layer))) {
        (Some(x), Some(t)) if x.dims() == t.dims() => Ok(diff_stats(&name, &x, t)?.per_token_rel),
        _ => Ok(Vec::new()),
    }
}

/// `[tokens][k]` experts of a run's `router.{layer}` row, or its margins.
fn chosen(caps: &Captures, layer: usize) -> Result<Option<Vec<Vec<u32>>>> {
    let Some(t) = caps.get(Key::Router(layer, RouterField::TopkIds)) else {
        return Ok(None);
    };
    let rows: Vec<Vec<i64>> = t.squeeze(0)?.to_dtype(DType::I64)?.to_vec2()?;
    Ok(Some(
        rows.into_iter()
            .map(|r| r.into_iter().map(|e| e as u32).collect())
            .collect(),
    ))
}

fn margins(caps: &Captures, layer: usize) -> Result<Vec<f64>> {
    Ok(match caps.get(Key::Router(layer, RouterField::Margin)) {
        Some(t) => t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?,
        None => Vec::new(),
    })
}

/// What the truth's own routing offers to try at each MoE layer: its margins and runner-ups.
struct Choices {
    margins: BTreeMap<usize, Vec<f64>>,
    runner_up: BTreeMap<usize, Vec<Option<u32>>>,
}

impl Choices {
    /// The choices of the truth run `caps` (its runner-ups `runner_up`) at the MoE layers `moe`.
    fn of(
        caps: &Captures,
        runner_up: BTreeMap<usize, Vec<Option<u32>>>,
        moe: &[usize],
    ) -> Result<Self> {
        let mut margins_at = BTreeMap::new();
        for &l in moe {
            margins_at.insert(l, margins(caps, l)?);
        }
        Ok(Choices {
            margins: margins_at,
            runner_up,
        })
    }

    /// The other choice at token `t` among `window`'s MoE layers: the layer where the router was
    /// closest to flipping, and that layer's rows (`routes`', else the current truth's own) with
    /// token `t`'s k-th expert swapped for the runner-up.
    fn other(
        &self,
        routes: &Routes,
        current: &Captures,
        window: &[usize],
        t: usize,
    ) -> Result<Option<(usize, Vec<Vec<u32>>)>> {
        let margin = |l: &usize| self.margins.get(l).and_then(|m| m.get(t)).copied();
        let Some(&layer) = window
            .iter()
            .filter(|l| margin(l).is_some())
            .min_by(|x, y| {
                margin(x)
                    .unwrap_or(0.0)
                    .total_cmp(&margin(y).unwrap_or(0.0))
            })
        else {
            return Ok(None);
        };
        let Some(alt) = self
            .runner_up
            .get(&layer)
            .and_then(|r| r.get(t))
            .copied()
            .flatten()
        else {
            return Ok(None);
        };
        let mut rows = match routes.get(layer) {
            Some(rows) => rows.to_vec(),
            None => match chosen(current, layer)? {
                Some(rows) => rows,
                None => return Ok(None),
            },
        };
        match rows.get_mut(t) {
            // The runner-up is no expert the token already uses (a forced set is distinct).
            Some(set) if !set.contains(&alt) => match set.last_mut() {
                Some(kth) => *kth = alt,
                None => return Ok(None),
            },
            _ => return Ok(None),
        }
        Ok(Some((layer, rows)))
    }
}

/// Whether some layer `side` holds, after a MoE layer, has a token that stands out against
/// `truth`.
fn stands_out(
    side: &dyn TensorSource,
    truth: &Captures,
    held: &[usize],
    moe: &[usize],
) -> Result<bool> {
    for &at in held.iter().filter(|&&at| moe.iter().any(|&m| m <= at)) {
        let errors = token_errors(side, truth, at)?;
        let finite: Vec<f64> = errors.iter().copied().filter(|e| e.is_finite()).collect();
        let typical = median(&finite);
        if errors.iter().any(|&e| e > OUTLIER * typical) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The f64 truth its own router routed, with its runner-ups, through one deepest layer: the
/// start of every side's recovery on the same ids, run once for both sides.
#[derive(Default)]
pub struct Unrouted {
    through: Option<(usize, Captures, RunnerUps)>,
}

impl Unrouted {
    fn through(
        &mut self,
        model: &Model,
        ids: &[u32],
        deepest: usize,
    ) -> Result<(Captures, RunnerUps)> {
        match &self.through {
            Some((d, caps, runner_up)) if *d == deepest => Ok((caps.clone(), runner_up.clone())),
            _ => {
                let (caps, runner_up) = truth(model, ids, None, deepest)?;
                self.through = Some((deepest, caps.clone(), runner_up.clone()));
                Ok((caps, runner_up))
            }
        }
    }
}

/// `side`'s routes recovered against the f64 truth of `model` on `ids`, through `last` (all
/// layers when None), `own` the truth the exact router routed (already run), `unrouted` that
/// truth with runner-ups as far as another side's recovery ran it; None when the model has no
/// MoE layer there or the side holds no layer.
pub fn recover(
    model: &Model,
    ids: &[u32],
    (side, unrouted): (&dyn TensorSource, &mut Unrouted),
    own: &Captures,
    last: Option<usize>,
) -> Result<Option<Recovered>> {
    let cfg = &model.config;
    let last = last.unwrap_or(cfg.num_hidden_layers.saturating_sub(1));
    let moe: Vec<usize> = (0..=last).filter(|&i| cfg.is_moe_layer(i)).collect();
    let names = side.names();
    let held: Vec<usize> = (0..=last)
        .filter(|&i| names.contains(&Key::Layer(i).to_string()))
        .collect();
    let (Some(&deepest), false) = (held.last(), moe.is_empty()) else {
        return Ok(None);
    };
    // No token stands out: no flip to try, and no forward to make.
    if !stands_out(side, own, &held, &moe)? {
        return Ok(Some(Recovered {
            routes: Routes::default(),
            flips: Vec::new(),
        }));
    }
    let (mut current, runner_up) = unrouted.through(model, ids, deepest)?;
    let mut routes = Routes::default();
    let mut choices = Choices::of(&current, runner_up, &moe)?;
    let mut flips = Vec::new();
    let mut before = None;
    for &at in &held {
        let window: Vec<usize> = moe
            .iter()
            .copied()
            .filter(|&m| m <= at && before.is_none_or(|b| m > b))
            .collect();
        before = Some(at);
        if window.is_empty() {
            continue;
        }
        let mut tried = vec![false; ids.len()];
        for _ in 0..ROUNDS {
            let errors = token_errors(side, &current, at)?;
            let finite: Vec<f64> = errors.iter().copied().filter(|e| e.is_finite()).collect();
            let typical = median(&finite);
            let mut trial = routes.clone();
            let mut tries = Vec::new();
            for (t, &e) in errors.iter().enumerate() {
                if tried[t]
                    || e.partial_cmp(&(OUTLIER * typical)) != Some(std::cmp::Ordering::Greater)
                {
                    continue;
                }
                tried[t] = true;
                if let Some((layer, rows)) = choices.other(&trial, &current, &window, t)? {
                    trial.insert(layer, rows);
                    tries.push((layer, t));
                }
            }
            if tries.is_empty() {
                break;
            }
            // Through the deepest held layer: when every try is kept, this run is the truth
            // under the new routes, and no rerun is needed.
            let (tried_caps, tried_runner_up) = truth(model, ids, Some(&trial), deepest)?;
            let after = token_errors(side, &tried_caps, at)?;
            let tries_made = tries.len();
            let kept: Vec<(usize, usize)> = tries
                .into_iter()
                .filter(|&(_, t)| after.get(t).is_some_and(|a| *a < KEPT_BELOW * errors[t]))
                .collect();
            if kept.is_empty() {
                continue;
            }
            if kept.len() == tries_made {
                flips.extend(kept);
                routes = trial;
                current = tried_caps;
                choices = Choices::of(&current, tried_runner_up, &moe)?;
                continue;
            }
            // Only the kept tries: the layer's rows as they were, the kept tokens as tried.
            for &(layer, t) in &kept {
                let rows = match routes.get(layer) {
                    Some(rows) => Some(rows.to_vec()),
                    None => chosen(&current, layer)?,
                };
                if let (Some(mut rows), Some(tried_rows)) = (rows, trial.get(layer)) {
                    rows[t] = tried_rows[t].clone();
                    routes.insert(layer, rows);
                }
            }
            flips.extend(kept);
            let (rerun, runner_up) = truth(model, ids, Some(&routes), deepest)?;
            current = rerun;
            choices = Choices::of(&current, runner_up, &moe)?;
        }
    }
    flips.sort_unstable();
    Ok(Some(Recovered { routes, flips }))
}
