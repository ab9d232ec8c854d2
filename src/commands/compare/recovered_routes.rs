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
//!
//! Every truth the search runs is made as the job's truth is, and kept with the job's runs
//! ([`crate::job::prior`]): the first is the job's own truth (whose runner-ups,
//! `router.{i}.runner_up`, are the choices tried), each forced one resumes the earlier run it
//! shares the most layers with at the first layer it forces otherwise, and the one the search
//! ends on is the truth the job then judges the side against — no run is made twice.

use std::collections::BTreeMap;

use candle_core::DType;

use crate::capture::{Captures, Key, RouterField};
use crate::compare::TensorSource;
use crate::compare::metrics::diff_stats;
use crate::compare::metrics::stats::median;
use crate::error::{Error, Result};
use crate::job::prior::Prior;
use crate::job::session::ModelInput;
use crate::job::truth_run;
use crate::model::Routes;

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

/// Per token, `side`'s relative error against `truth` at `layers.{layer}`.
fn token_errors(side: &dyn TensorSource, truth: &Captures, layer: usize) -> Result<Vec<f64>> {
    let name = Key::Layer(layer).to_string();
    match (
        side.tensor(Key::Layer(layer))?,
        truth.get(Key::Layer(layer)),
    ) {
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

/// Per token, the best expert the run's router left out at `layer` (None where it chose every
/// expert: −1 in `router.{layer}.runner_up`).
fn runner_ups(caps: &Captures, layer: usize) -> Result<Vec<Option<u32>>> {
    Ok(match caps.get(Key::Router(layer, RouterField::RunnerUp)) {
        Some(t) => {
            let ids: Vec<i64> = t.flatten_all()?.to_dtype(DType::I64)?.to_vec1()?;
            ids.into_iter().map(|e| u32::try_from(e).ok()).collect()
        }
        None => {
            return Err(Error::Internal(format!(
                "the truth run recorded no `{}`",
                Key::Router(layer, RouterField::RunnerUp)
            )));
        }
    })
}

/// What the truth's own routing offers to try at each MoE layer: its margins and runner-ups.
struct Choices {
    margins: BTreeMap<usize, Vec<f64>>,
    runner_up: BTreeMap<usize, Vec<Option<u32>>>,
}

impl Choices {
    /// The choices of the truth run `caps` at the MoE layers `moe`.
    fn of(caps: &Captures, moe: &[usize]) -> Result<Self> {
        let mut choices = Choices {
            margins: BTreeMap::new(),
            runner_up: BTreeMap::new(),
        };
        for &l in moe {
            choices.margins.insert(l, margins(caps, l)?);
            choices.runner_up.insert(l, runner_ups(caps, l)?);
        }
        Ok(choices)
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

/// One side's search for the flips its states show: the truth under the routes found so far,
/// and what its router offers to try.
struct Search<'s, 'i> {
    input: &'s ModelInput<'i>,
    /// How the truth runs stop and what they capture, as the job's truth does.
    truth_as: (Option<usize>, bool),
    prior: &'s mut Prior,
    side: &'s dyn TensorSource,
    moe: Vec<usize>,
    routes: Routes,
    current: Captures,
    choices: Choices,
    flips: Vec<(usize, usize)>,
}

impl Search<'_, '_> {
    /// The truth under `routes` becomes the current one.
    fn adopt(&mut self, routes: Routes, truth: Captures) -> Result<()> {
        self.choices = Choices::of(&truth, &self.moe)?;
        self.routes = routes;
        self.current = truth;
        Ok(())
    }

    /// One round of tries at held layer `at`, the MoE layers `window` to flip in: every token
    /// that stands out and is not `tried` yet gets the other choice, all in one forced truth.
    /// Returns whether any was tried.
    fn round(&mut self, at: usize, window: &[usize], tried: &mut [bool]) -> Result<bool> {
        let errors = token_errors(self.side, &self.current, at)?;
        let finite: Vec<f64> = errors.iter().copied().filter(|e| e.is_finite()).collect();
        let typical = median(&finite);
        let mut trial = self.routes.clone();
        let mut tries = Vec::new();
        for (t, &e) in errors.iter().enumerate() {
            if tried[t] || e.partial_cmp(&(OUTLIER * typical)) != Some(std::cmp::Ordering::Greater)
            {
                continue;
            }
            tried[t] = true;
            if let Some((layer, rows)) = self.choices.other(&trial, &self.current, window, t)? {
                trial.insert(layer, rows);
                tries.push((layer, t));
            }
        }
        if tries.is_empty() {
            return Ok(false);
        }
        let tried_caps = truth_run(self.input, Some(&trial), self.truth_as, self.prior)?;
        let after = token_errors(self.side, &tried_caps, at)?;
        let tries_made = tries.len();
        let kept: Vec<(usize, usize)> = tries
            .into_iter()
            .filter(|&(_, t)| after.get(t).is_some_and(|a| *a < KEPT_BELOW * errors[t]))
            .collect();
        if kept.len() == tries_made {
            // Every try kept: the forced run is the truth under the new routes.
            self.flips.extend(kept);
            self.adopt(trial, tried_caps)?;
        } else if !kept.is_empty() {
            self.keep_only(&kept, &trial)?;
        }
        Ok(true)
    }

    /// Only the `kept` tries of `trial`: each layer's rows as they were, the kept tokens as
    /// tried; the truth rerun under them.
    fn keep_only(&mut self, kept: &[(usize, usize)], trial: &Routes) -> Result<()> {
        let mut routes = self.routes.clone();
        for &(layer, t) in kept {
            let rows = match routes.get(layer) {
                Some(rows) => Some(rows.to_vec()),
                None => chosen(&self.current, layer)?,
            };
            if let (Some(mut rows), Some(tried_rows)) = (rows, trial.get(layer)) {
                rows[t] = tried_rows[t].clone();
                routes.insert(layer, rows);
            }
        }
        self.flips.extend_from_slice(kept);
        let rerun = truth_run(self.input, Some(&routes), self.truth_as, self.prior)?;
        self.adopt(routes, rerun)
    }
}

/// `side`'s routes recovered against the f64 truth on `input` (its model and ids), the truth
/// runs made as the job's (`truth_as`: the last layer they run, whether they capture ops) and
/// kept in `prior`, which already holds the truth its exact router routed; None when the model
/// has no MoE layer there or the side holds no layer.
pub fn recover(
    input: &ModelInput,
    (side, prior): (&dyn TensorSource, &mut Prior),
    truth_as: (Option<usize>, bool),
) -> Result<Option<Recovered>> {
    let cfg = &input.model.config;
    let last = truth_as
        .0
        .unwrap_or(cfg.num_hidden_layers.saturating_sub(1));
    let moe: Vec<usize> = (0..=last).filter(|&i| cfg.is_moe_layer(i)).collect();
    let keys = side.keys();
    let held: Vec<usize> = (0..=last)
        .filter(|&i| keys.contains(&Key::Layer(i)))
        .collect();
    if held.is_empty() || moe.is_empty() {
        return Ok(None);
    }
    let own = truth_run(input, None, truth_as, prior)?;
    // No token stands out: no flip to try, and no forward to make.
    if !stands_out(side, &own, &held, &moe)? {
        return Ok(Some(Recovered {
            routes: Routes::default(),
            flips: Vec::new(),
        }));
    }
    let mut search = Search {
        input,
        truth_as,
        prior,
        side,
        choices: Choices::of(&own, &moe)?,
        moe,
        routes: Routes::default(),
        current: own,
        flips: Vec::new(),
    };
    let mut before = None;
    for &at in &held {
        let window: Vec<usize> = (search.moe.iter().copied())
            .filter(|&m| m <= at && before.is_none_or(|b| m > b))
            .collect();
        before = Some(at);
        let mut tried = vec![false; input.ids.len()];
        for _ in 0..ROUNDS {
            if window.is_empty() || !search.round(at, &window, &mut tried)? {
                break;
            }
        }
    }
    search.flips.sort_unstable();
    Ok(Some(Recovered {
        routes: search.routes,
        flips: search.flips,
    }))
}
