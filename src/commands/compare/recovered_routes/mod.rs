//! Router choices recovered from a side's states when its file records none (hooks on decoder
//! layers give no `router.{i}.topk_ids`). The f64 truth routes by its exact router; where a
//! side's rounding tipped a near-tie the other way, the side's layer output at that token — and,
//! through the recurrent state and attention, at later ones — is far from the truth for a reason
//! that is no bug. The side's own states say where: at a layer the side holds, a token whose
//! error against the truth stands out from the layer's typical token ([`OUTLIER`] × the median)
//! is one a flip may explain.
//!
//! The search follows causality: a flip at token t changes nothing before t, and what it causes
//! after t is gone once it is found. So it explains the earliest token that stands out at any
//! held layer first (at the first layer where it does), then looks again under the routes
//! found. The token is tried with every near choice at each MoE layer since the layer held
//! before — one of its experts swapped for one the router left out, within the near-tie bound
//! the report applies ([`crate::report::NEAR_TIE_SIGMAS`] × the layer's typical error: the
//! side's rounding can make such a flip, and only such a one) — one forced f64 forward each,
//! nearest first, until one leaves the token no longer standing out — and the choice that
//! brings the side's error at the token lowest is kept where that is under [`KEPT_BELOW`] of
//! what it was; at most [`TRIES_PER_TOKEN`] choices per token and [`FORWARDS`] forwards per
//! side. A kept flip is the truth agreeing with the side, so a bug, which moves the typical
//! token, is never explained away: its tokens do not stand out, and the flips kept move none of
//! them.
//!
//! The side's routes force only the flipped tokens: every other token keeps the router's own
//! choice on the path of the flips, so a flip found later at an earlier layer or token re-routes
//! what it moves downstream. The calibration runs are then routed by them as by recorded
//! choices, so the side is judged on its arithmetic alone.
//!
//! Every truth the search runs is made as the job's truth is, and kept with the job's runs
//! ([`crate::job::prior`]): the first is the job's own truth (whose router logits,
//! `router.{i}.logits`, say how near each other choice was), each forced one resumes the
//! earlier run it shares the most layers with at the layer it forces otherwise, and the one the
//! search ends on is the truth the job then judges the side against — no run is made twice.

mod swaps;

use std::collections::{BTreeMap, BTreeSet};

use candle_core::Tensor;

use crate::capture::{Captures, Key};
use crate::compare::TensorSource;
use crate::compare::metrics::stats::median;
use crate::error::Result;
use crate::job::prior::Prior;
use crate::job::session::ModelInput;
use crate::job::truth_run;
use crate::model::Routes;
use crate::report::NEAR_TIE_SIGMAS;
use swaps::{near_swaps, token_errors};

/// A token whose error is this many times the layer's median stands out: honest rounding
/// spreads over tokens within a small factor, a flipped expert moves its token by far more.
const OUTLIER: f64 = 4.0;

/// A flip is kept when the forced truth brings the side's error at the token below this share
/// of what it was: the other choice explains the token, not a chance wobble.
const KEPT_BELOW: f64 = 0.5;

/// The nearest choices tried per token: a near-tie tips to the router's runner-up or, rarely,
/// the choice after; on a model of hundreds of experts many more lie within the bound, and
/// rounding makes the farther ones no likelier than a bug.
const TRIES_PER_TOKEN: usize = 4;

/// The forced forwards one side's search may make: on the honest MoE datasets of 256 tokens a
/// side needs at most about 35; past this the search ends with the flips found, so what is left
/// stays judged as it is.
const FORWARDS: usize = 128;

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

/// A token that stands out at a held layer: where, how far, and the layer's typical error.
struct Outlier {
    token: usize,
    at: usize,
    error: f64,
    typical: f64,
}

/// One side's search for the flips its states show: the truth under the routes found so far.
struct Search<'s, 'i> {
    input: &'s ModelInput<'i>,
    /// How the truth runs stop and what they capture, as the job's truth does.
    truth_as: (Option<usize>, bool),
    prior: &'s mut Prior,
    moe: Vec<usize>,
    /// The layers the side holds from the first MoE layer on, each read from its file once:
    /// every pass and every try measures them again.
    held: BTreeMap<usize, Tensor>,
    routes: Routes,
    current: Captures,
    flips: Vec<(usize, usize)>,
    /// (held layer, token) pairs no near choice explained.
    unexplained: BTreeSet<(usize, usize)>,
    /// The forced forwards left to make ([`FORWARDS`]).
    forwards_left: usize,
}

impl Search<'_, '_> {
    /// The earliest token that stands out at some held layer and is not unexplained there, at
    /// the first such layer.
    fn first_outlier(&self) -> Result<Option<Outlier>> {
        let mut first: Option<Outlier> = None;
        for (&at, side) in &self.held {
            let errors = token_errors(side, &self.current, at)?;
            let finite: Vec<f64> = errors.iter().copied().filter(|e| e.is_finite()).collect();
            let typical = median(&finite);
            let found = errors
                .iter()
                .enumerate()
                .find(|&(t, &e)| e > OUTLIER * typical && !self.unexplained.contains(&(at, t)));
            if let Some((token, &error)) = found
                && first.as_ref().is_none_or(|f| token < f.token)
            {
                first = Some(Outlier {
                    token,
                    at,
                    error,
                    typical,
                });
            }
        }
        Ok(first)
    }

    /// The MoE layers a flip seen first at held layer `at` can be at: since the layer held
    /// before.
    fn window(&self, at: usize) -> Vec<usize> {
        let before = self.held.range(..at).next_back().map(|(&h, _)| h);
        (self.moe.iter().copied())
            .filter(|&m| m <= at && before.is_none_or(|b| m > b))
            .collect()
    }

    /// Tries every near choice for `o`'s token and keeps the one that explains it best, or
    /// marks the token unexplained at its layer.
    fn explain(&mut self, o: &Outlier) -> Result<()> {
        let bound = NEAR_TIE_SIGMAS * o.typical;
        let swaps = near_swaps(
            (&self.current, &self.routes),
            &self.window(o.at),
            o.token,
            bound,
            &self.flips,
        )?;
        let mut best: Option<(f64, usize, Routes, Captures)> = None;
        for swap in swaps.into_iter().take(TRIES_PER_TOKEN) {
            let Some(left) = self.forwards_left.checked_sub(1) else {
                break;
            };
            self.forwards_left = left;
            let mut trial = self.routes.clone();
            trial.insert(swap.layer, swap.rows);
            let tried = truth_run(self.input, Some(&trial), self.truth_as, self.prior)?;
            let after = match self.held.get(&o.at) {
                Some(side) => token_errors(side, &tried, o.at)?,
                None => Vec::new(),
            };
            let Some(&e) = after.get(o.token) else {
                continue;
            };
            if e < KEPT_BELOW * o.error && best.as_ref().is_none_or(|b| e < b.0) {
                best = Some((e, swap.layer, trial, tried));
            }
            // A choice after which the token no longer stands out explains it: a farther one,
            // which rounding is less likely to have made, is not tried.
            if e <= OUTLIER * o.typical {
                break;
            }
        }
        match best {
            Some((_, layer, routes, truth)) => {
                self.flips.push((layer, o.token));
                self.routes = routes;
                self.current = truth;
            }
            None => {
                self.unexplained.insert((o.at, o.token));
            }
        }
        Ok(())
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
    let (Some(&first_moe), false) = (moe.first(), held.is_empty()) else {
        return Ok(None);
    };
    let mut held_states = BTreeMap::new();
    for h in held.into_iter().filter(|&h| h >= first_moe) {
        if let Some(state) = side.tensor(Key::Layer(h))? {
            held_states.insert(h, state);
        }
    }
    let current = truth_run(input, None, truth_as, prior)?;
    let mut search = Search {
        input,
        truth_as,
        prior,
        moe,
        held: held_states,
        routes: Routes::default(),
        current,
        flips: Vec::new(),
        unexplained: BTreeSet::new(),
        forwards_left: FORWARDS,
    };
    // Each pass keeps a flip at a (layer, token) not flipped before or marks a (held layer,
    // token) unexplained, so it ends.
    while search.forwards_left > 0
        && let Some(outlier) = search.first_outlier()?
    {
        search.explain(&outlier)?;
    }
    search.flips.sort_unstable();
    Ok(Some(Recovered {
        routes: search.routes,
        flips: search.flips,
    }))
}
