//! MoE routing flips against the f64 truth (docs/reading-a-report.md#routing-flips-moe).
//!
//! When both sides record their router choices at every MoE layer, the truth and floor were run
//! under each side's own routing (`job::spec::Routing`), so a side's distance from its truth is
//! arithmetic only: a flip and all it causes downstream are in neither. What is left to say
//! about routing is where a side's choice differs from the one the exact router would have made
//! on that side's own path — the routed truth's `router.{i}.flip_gap` — and whether that is a
//! rounding-level near-tie.
//!
//! Near-tie: the flip gap (the logit change, in units of the token's router-logit RMS, that
//! would make the exact router choose the side's experts) is within what the arithmetic's own
//! error can move it: [`NEAR_TIE_SIGMAS`] × the relative error at that token of that layer's
//! output against the routed truth — the larger of the side's own ([`side_noise`]) and the floor
//! run's (the reference at that dtype under the same routing) — and never below [`MIN_TIE`] unit
//! roundoffs of the compared dtype. A flip beyond that is not rounding: it is a finding.
//!
//! Without router ids on both sides the flips cannot be located: the report says so, and no
//! flip is listed.

use candle_core::DType;

use super::RoutingFlip;
use crate::capture::{Key, RouterField};
use crate::compare::TensorSource;
use crate::compare::metrics::diff_stats;
use crate::error::{Error, Result};

/// The smallest near-tie bound, in units of the dtype's unit roundoff: router logits are
/// rounded to the dtype, so a gap a few roundoffs wide is a tie at that precision.
const MIN_TIE: f64 = 4.0;

/// A relative error e of the router's input moves each logit by about e × the logits' RMS, a
/// difference of two by about √2 of that; six is over four standard deviations of it.
pub(crate) const NEAR_TIE_SIGMAS: f64 = 6.0;

/// Flips found, and the MoE layers where a side records no router choice.
pub struct Routing {
    pub flips: Vec<RoutingFlip>,
    /// MoE layers where a compared side records no router choice, and those sides: flips there
    /// cannot be located.
    pub unseen: Vec<(usize, Vec<String>)>,
}

impl Routing {
    pub fn none() -> Self {
        Routing {
            flips: Vec::new(),
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

    /// The flips beyond the rounding bound: findings.
    pub fn beyond_ties(&self) -> impl Iterator<Item = &RoutingFlip> {
        self.flips.iter().filter(|f| !f.near_tie)
    }
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
    layers_of(source, |k| match k {
        Key::Router(i, RouterField::TopkIds) => Some(i),
        _ => None,
    })
}

/// The layers `layer` picks out of `source`'s keys, ascending.
fn layers_of(source: &dyn TensorSource, layer: impl Fn(Key) -> Option<usize>) -> Vec<usize> {
    let mut layers: Vec<usize> = source.keys().into_iter().filter_map(layer).collect();
    layers.sort_unstable();
    layers
}

fn row_f64(src: &dyn TensorSource, key: Key) -> Result<Option<Vec<f64>>> {
    match src.tensor(key)? {
        Some(t) => Ok(Some(t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?)),
        None => Ok(None),
    }
}

/// The layers whose outputs (`layers.{i}`) `source` carries, ascending.
fn held_layers(source: &dyn TensorSource) -> Vec<usize> {
    layers_of(source, |k| match k {
        Key::Layer(i) => Some(i),
        _ => None,
    })
}

/// Per token, the side's own relative error against its routed truth at the router's input of
/// MoE layer `layer`: its error at that layer's output where it holds it; where it does not
/// (hooks on a few layers), the larger of its errors at the nearest layers it holds below and
/// above. The router's input lies between those two outputs on the residual stream, and a side's
/// arithmetic can be noisier than the floor run's (another kernel, other rounding points), so
/// the floor run's error alone can understate it there. `errors` holds the side's per-token
/// errors at each layer it holds.
fn side_noise(errors: &[(usize, Vec<f64>)], layer: usize) -> Vec<f64> {
    if let Some((_, e)) = errors.iter().find(|(l, _)| *l == layer) {
        return e.clone();
    }
    let below = errors.iter().rev().find(|(l, _)| *l < layer);
    let above = errors.iter().find(|(l, _)| *l > layer);
    let mut noise: Vec<f64> = Vec::new();
    for (_, e) in below.into_iter().chain(above) {
        noise.resize(noise.len().max(e.len()), 0.0);
        for (n, &x) in noise.iter_mut().zip(e) {
            // A NaN error bounds nothing: it is left out, as in the bound itself.
            if x.is_finite() {
                *n = n.max(x);
            }
        }
    }
    noise
}

/// Per token, the relative error of `run` (named `what` in an error) against `truth` at
/// `layers.{layer}` (empty when either lacks it).
fn token_errors(
    (run, what): (&dyn TensorSource, &str),
    truth: &dyn TensorSource,
    layer: usize,
) -> Result<Vec<f64>> {
    let key = Key::Layer(layer);
    Ok(match (run.tensor(key)?, truth.tensor(key)?) {
        // The truth's shape is the model's, never a side's.
        (Some(x), Some(y)) if x.dims() != y.dims() => {
            return Err(Error::Compare(format!(
                "`{key}` has shape {:?} in {what} but {:?} in the model's f64 truth",
                x.dims(),
                y.dims()
            )));
        }
        (Some(x), Some(y)) => diff_stats(&key.to_string(), &x, &y)?.per_token_rel,
        _ => Vec::new(),
    })
}

/// Routing flips of the compared `sides` (label, captures, the truth under that side's
/// routing, the floor run under the same routing); `dtype` is the coarsest dtype compared.
#[allow(clippy::type_complexity)]
pub fn routing(
    sides: &[(
        &str,
        &dyn TensorSource,
        &dyn TensorSource,
        &dyn TensorSource,
    )],
    dtype: DType,
) -> Result<Routing> {
    let floor_bound = MIN_TIE * unit_roundoff(dtype);
    let mut flips: Vec<RoutingFlip> = Vec::new();
    let mut unseen: Vec<(usize, Vec<String>)> = Vec::new();
    for &(label, side, truth, floor) in sides {
        let moe = router_layers(truth);
        if moe.is_empty() {
            continue;
        }
        let side_errors = held_layers(side)
            .into_iter()
            .map(|l| Ok((l, token_errors((side, &format!("side {label}")), truth, l)?)))
            .collect::<Result<Vec<_>>>()?;
        for layer in moe {
            let recorded = side
                .tensor(Key::Router(layer, RouterField::TopkIds))?
                .is_some();
            if !recorded {
                match unseen.iter_mut().find(|(l, _)| *l == layer) {
                    Some((_, who)) => who.push(label.to_string()),
                    None => unseen.push((layer, vec![label.to_string()])),
                }
                continue;
            }
            // A truth its router routed (the other side records no choice somewhere): this
            // side's flips against it are not located either; the silent side is named.
            let Some(gaps) = row_f64(truth, Key::Router(layer, RouterField::FlipGap))? else {
                continue;
            };
            // The side's own error there, and the floor run's (the reference at that dtype
            // under the same routing, which holds every layer).
            let noise = [
                side_noise(&side_errors, layer),
                token_errors((floor, &format!("{label}'s floor run")), truth, layer)?,
            ];
            for (token, &gap) in gaps.iter().enumerate() {
                // −1: the side's experts are the exact router's own choice there.
                if gap < 0.0 {
                    continue;
                }
                // A NaN error bounds nothing: the flip is judged against the dtype's bound.
                let e = noise
                    .iter()
                    .filter_map(|n| n.get(token).copied())
                    .filter(|e| e.is_finite())
                    .fold(0.0, f64::max);
                let bound = (NEAR_TIE_SIGMAS * e).max(floor_bound);
                match flips
                    .iter_mut()
                    .find(|f| f.layer == layer && f.token == token)
                {
                    Some(f) => {
                        f.on.push(label.to_string());
                        f.near_tie_bound = f.near_tie_bound.min(bound);
                        f.near_tie = f.near_tie && gap <= bound;
                    }
                    None => flips.push(RoutingFlip {
                        layer,
                        token,
                        on: vec![label.to_string()],
                        flip_gap: gap,
                        near_tie_bound: bound,
                        near_tie: gap <= bound,
                    }),
                }
            }
        }
    }
    flips.sort_by_key(|f| (f.layer, f.token));
    unseen.sort();
    Ok(Routing { flips, unseen })
}

#[cfg(test)]
mod tests {
    use super::side_noise;
    use crate::backends::cases::SplitMix;

    fn errors(rng: &mut SplitMix, tokens: usize) -> Vec<f64> {
        (0..tokens).map(|_| 1e-3 + 5e-2 * rng.uniform()).collect()
    }

    #[test]
    fn a_side_noise_is_its_own_error_where_held_and_its_neighbours_larger_elsewhere() {
        let mut rng = SplitMix::new(0x5eed_0004);
        let held: Vec<(usize, Vec<f64>)> = [1, 3, 5].map(|l| (l, errors(&mut rng, 9))).into();
        assert_eq!(side_noise(&held, 3), held[1].1);
        let between = side_noise(&held, 4);
        let larger: Vec<f64> = held[1]
            .1
            .iter()
            .zip(&held[2].1)
            .map(|(a, b)| a.max(*b))
            .collect();
        assert_eq!(between, larger);
        assert_eq!(
            side_noise(&held, 0),
            held[0].1,
            "below every held layer: the first"
        );
        assert_eq!(
            side_noise(&held, 7),
            held[2].1,
            "above every held layer: the last"
        );
        assert!(
            side_noise(&[], 2).is_empty(),
            "a side holding no layer has no noise of its own"
        );
    }

    #[test]
    fn a_nan_error_bounds_nothing() {
        let mut rng = SplitMix::new(0x5eed_0005);
        let mut below = errors(&mut rng, 4);
        let above = errors(&mut rng, 4);
        below[2] = f64::NAN;
        let noise = side_noise(&[(1, below.clone()), (3, above.clone())], 2);
        assert_eq!(noise[2], above[2]);
        assert_eq!(noise[0], below[0].max(above[0]));
    }
}
