//! MoE routing flips against the truth. A bf16 run flips near-tie router choices at other tokens
//! than the floor run does, and one flipped token dominates a layer's rel L2; so tokens whose
//! expert set differs from the f64 truth's — on side A, side B or the floor run — at a near-tie
//! are judged apart from the rest (docs/reading-a-report.md#routing-flips).
//!
//! Near-tie: the truth's router margin at that token is below τ = 2 × the largest truth margin
//! at which the floor run itself flipped (rounding at this dtype demonstrably flips choices that
//! close), and at least [`MIN_TIE`] × the dtype's unit roundoff. A flip at a larger margin is not
//! explained by rounding: it is listed, and its token stays in the judged set.
//!
//! Evidence rule: a token is set aside only where a flip is *shown* — a run's own recorded router
//! choice differs from the truth's. A side that records no router choice at an MoE layer could
//! have flipped anywhere, so nothing is set aside at that layer (the floor run's flips neither:
//! taking them out of the floor alone would shrink it against a difference that keeps its own
//! flips), and the report says the flips could not be separated. Where the tokens set aside
//! would exceed [`MAX_SET_ASIDE`] of the tensor, none are: the verdict needs a judged set that
//! covers most of the tensor (`report::build`).

use std::collections::BTreeSet;

use candle_core::DType;

use super::RoutingFlip;
use crate::capture::{Key, RouterField};
use crate::compare::TensorSource;
use crate::error::Result;

/// The smallest τ, in units of the dtype's unit roundoff (router probabilities are computed
/// from logits rounded to the dtype; a margin a few roundoffs wide is a tie at that precision).
const MIN_TIE: f64 = 4.0;

/// The largest share of a tensor's tokens that may be set aside for routing flips; beyond it
/// every token is judged (and the report says the flips could not be separated).
pub const MAX_SET_ASIDE: f64 = 0.25;

/// Flips found, and per MoE layer the tokens set aside there.
pub struct Routing {
    pub flips: Vec<RoutingFlip>,
    aside: Vec<(usize, Vec<usize>)>,
    /// MoE layers where a compared side records no router choice, and those sides: flips there
    /// cannot be located, so none are set aside.
    pub unseen: Vec<(usize, Vec<String>)>,
}

impl Routing {
    pub fn none() -> Self {
        Routing {
            flips: Vec::new(),
            aside: Vec::new(),
            unseen: Vec::new(),
        }
    }

    /// The sides that record no router choice at some MoE layer, e.g. `["B"]`.
    pub fn silent_sides(&self) -> Vec<String> {
        let mut sides: Vec<String> = self.unseen.iter().flat_map(|(_, s)| s.clone()).collect();
        sides.sort();
        sides.dedup();
        sides
    }

    /// Tokens set aside for a tensor that has passed MoE layers `< upto` (all when None).
    pub fn set_aside(&self, upto: Option<usize>) -> Vec<usize> {
        let mut set = BTreeSet::new();
        for (layer, tokens) in &self.aside {
            if upto.is_none_or(|u| *layer < u) {
                set.extend(tokens.iter().copied());
            }
        }
        set.into_iter().collect()
    }
}

fn topk(src: &dyn TensorSource, layer: usize) -> Result<Option<Vec<Vec<i64>>>> {
    let Some(t) = src.tensor(&Key::Router(layer, RouterField::TopkIds).to_string())? else {
        return Ok(None);
    };
    let t = if t.rank() == 3 { t.squeeze(0)? } else { t };
    if t.rank() != 2 {
        return Ok(None);
    }
    let mut rows: Vec<Vec<i64>> = t.to_dtype(DType::I64)?.to_vec2()?;
    for r in &mut rows {
        r.sort_unstable();
    }
    Ok(Some(rows))
}

/// One MoE layer: the truth's margins, per token the runs that chose other experts, and the
/// runs that record no routing there.
struct LayerFlips<'a> {
    layer: usize,
    margins: Option<Vec<f64>>,
    on: Vec<Vec<String>>,
    silent: Vec<&'a str>,
}

fn unit_roundoff(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 4.9e-4,
        _ => 3.9e-3,
    }
}

/// The MoE layers whose router choices (`router.{i}.topk_ids`) `source` carries, ascending.
pub(super) fn router_layers(source: &dyn TensorSource) -> Vec<usize> {
    let mut layers: Vec<usize> = source
        .names()
        .iter()
        .filter_map(|n| match Key::of(n)? {
            Key::Router(i, RouterField::TopkIds) => Some(i),
            _ => None,
        })
        .collect();
    layers.sort_unstable();
    layers
}

/// Routing flips of `runs` (label, source) against `truth`; `floor_label` names the floor run(s)
/// among them; `dtype` is the coarsest dtype compared.
pub fn routing(
    truth: &dyn TensorSource,
    runs: &[(&str, &dyn TensorSource)],
    floor_label: &str,
    dtype: DType,
) -> Result<Routing> {
    let layers = router_layers(truth);
    let mut found: Vec<LayerFlips> = Vec::new();
    for &layer in &layers {
        let Some(want) = topk(truth, layer)? else {
            continue;
        };
        let margins: Option<Vec<f64>> =
            match truth.tensor(&Key::Router(layer, RouterField::Margin).to_string())? {
                Some(m) => Some(m.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?),
                None => None,
            };
        let mut on: Vec<Vec<String>> = vec![Vec::new(); want.len()];
        let mut silent = Vec::new();
        for (label, src) in runs {
            match topk(*src, layer)? {
                Some(got) if got.len() == want.len() => {
                    for (t, (x, y)) in got.iter().zip(&want).enumerate() {
                        if x != y && !on[t].iter().any(|l| l == label) {
                            on[t].push((*label).to_string());
                        }
                    }
                }
                _ => silent.push(*label),
            }
        }
        found.push(LayerFlips {
            layer,
            margins,
            on,
            silent,
        });
    }
    let floor_max = found
        .iter()
        .flat_map(|LayerFlips { margins: m, on, .. }| {
            on.iter().enumerate().filter_map(move |(t, who)| {
                who.iter()
                    .any(|w| w == floor_label)
                    .then(|| m.as_ref().and_then(|m| m.get(t).copied()))
                    .flatten()
            })
        })
        .fold(0.0_f64, f64::max);
    let tau = (2.0 * floor_max).max(MIN_TIE * unit_roundoff(dtype));
    let mut flips = Vec::new();
    let mut aside = Vec::new();
    let mut unseen = Vec::new();
    for LayerFlips {
        layer,
        margins,
        on,
        silent,
    } in found
    {
        let margin = |t: usize| margins.as_ref().and_then(|m| m.get(t).copied());
        // Only the compared sides' silence matters: the floor run is always ours and records.
        let silent_sides: Vec<String> = silent
            .iter()
            .filter(|l| **l != floor_label)
            .map(|l| l.to_string())
            .collect();
        let mut tokens = Vec::new();
        for (t, who) in on.into_iter().enumerate() {
            if who.is_empty() {
                continue;
            }
            let near_tie = margin(t).is_some_and(|m| m < tau);
            if near_tie && silent_sides.is_empty() {
                tokens.push(t);
            }
            flips.push(RoutingFlip {
                layer,
                token: t,
                on: who,
                truth_margin: margin(t),
                near_tie,
            });
        }
        if !silent_sides.is_empty() {
            unseen.push((layer, silent_sides));
        }
        aside.push((layer, tokens));
    }
    Ok(Routing {
        flips,
        aside,
        unseen,
    })
}
