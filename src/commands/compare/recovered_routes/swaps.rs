//! What a side's states are read against: its per-token error at a layer, and the other
//! choices the truth's router could have made at a token, each with how near it was.

use candle_core::{DType, Tensor};

use crate::capture::{Captures, Key, RouterField};
use crate::compare::metrics::diff_stats;
use crate::error::Result;
use crate::model::Routes;
use crate::model::flip_gap;

/// Per token, the relative error of `side`'s `layers.{layer}` (as read from its file) against
/// `truth`'s.
pub(super) fn token_errors(side: &Tensor, truth: &Captures, layer: usize) -> Result<Vec<f64>> {
    match truth.get(Key::Layer(layer)) {
        Some(t) if side.dims() == t.dims() => {
            Ok(diff_stats(&Key::Layer(layer).to_string(), side, t)?.per_token_rel)
        }
        _ => Ok(Vec::new()),
    }
}

/// `[tokens][k]` experts of a run's `router.{layer}` row.
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

/// Token `t`'s router logits at `layer` in a truth run (which records them).
fn logits_at(caps: &Captures, layer: usize, t: usize) -> Result<Option<Vec<f64>>> {
    let Some(all) = caps.get(Key::Router(layer, RouterField::Logits)) else {
        return Ok(None);
    };
    let rows = all.squeeze(0)?;
    if t >= rows.dim(0)? {
        return Ok(None);
    }
    Ok(Some(rows.get(t)?.to_dtype(DType::F64)?.to_vec1()?))
}

/// The `k` experts of largest logit (the router's own choice: softmax keeps the order).
fn own_choice(logits: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&i, &j| logits[j].total_cmp(&logits[i]).then(i.cmp(&j)));
    order.truncate(k);
    order
}

/// One other choice at one token: `layer`'s rows with the token's experts changed, and its
/// flip gap (the logit change, in units of the token's logit RMS, the router needs to choose
/// it: what the report's near-tie bound is set against).
pub(super) struct Swap {
    pub layer: usize,
    pub rows: Vec<Vec<u32>>,
    pub gap: f64,
}

/// Every choice at token `t` that differs from its current experts by one — one of them
/// swapped for one the router left out — at each MoE layer of `window` not in `flipped` yet,
/// whose flip gap is within `bound`; nearest first. The current experts are those `routes`
/// forces, else the `current` truth's router's own; each swap's rows force only the tokens
/// forced before and `t`.
pub(super) fn near_swaps(
    (current, routes): (&Captures, &Routes),
    window: &[usize],
    t: usize,
    bound: f64,
    flipped: &[(usize, usize)],
) -> Result<Vec<Swap>> {
    let mut found = Vec::new();
    for &layer in window.iter().filter(|&&l| !flipped.contains(&(l, t))) {
        let (Some(logits), Some(own_rows)) =
            (logits_at(current, layer, t)?, chosen(current, layer)?)
        else {
            continue;
        };
        let Some(own_set) = own_rows.get(t) else {
            continue;
        };
        let rows = match routes.get(layer) {
            Some(rows) => rows.to_vec(),
            None => vec![Vec::new(); own_rows.len()],
        };
        let set = match rows.get(t) {
            Some(forced) if !forced.is_empty() => forced.clone(),
            _ => own_set.clone(),
        };
        let own = own_choice(&logits, set.len());
        for slot in 0..set.len() {
            for other in (0..logits.len() as u32).filter(|e| !set.contains(e)) {
                let mut swapped = set.clone();
                swapped[slot] = other;
                let ids: Vec<usize> = swapped.iter().map(|&e| e as usize).collect();
                let gap = flip_gap(&logits, &own, &ids).max(0.0);
                if gap <= bound {
                    let mut rows = rows.clone();
                    rows[t] = swapped;
                    found.push(Swap { layer, rows, gap });
                }
            }
        }
    }
    found.sort_by(|a, b| a.gap.total_cmp(&b.gap));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// A truth of two tokens over four experts, top-2: token 0's logits 3, 2.9, 2, 0 (it chose
    /// experts 0 and 1), token 1's chose 2 and 3.
    fn truth() -> Captures {
        let mut caps = Captures::new(vec![1, 2]);
        let logits = [3.0, 2.9, 2.0, 0.0, 0.0, 0.1, 1.0, 2.0];
        let logits = Tensor::from_vec(logits.to_vec(), (1, 2, 4), &Device::Cpu).expect("logits");
        caps.insert(Key::Router(0, RouterField::Logits), logits);
        let ids = Tensor::from_vec(vec![0i64, 1, 3, 2], (1, 2, 2), &Device::Cpu).expect("ids");
        caps.insert(Key::Router(0, RouterField::TopkIds), ids);
        caps
    }

    #[test]
    fn near_swaps_are_the_choices_within_the_bound_nearest_first_forcing_only_the_token() {
        let caps = truth();
        let rms = (21.41f64 / 4.0).sqrt();
        let swaps = near_swaps((&caps, &Routes::default()), &[0], 0, 0.5, &[]).expect("swaps");
        let found: Vec<(Vec<u32>, f64)> =
            swaps.iter().map(|s| (s.rows[0].clone(), s.gap)).collect();
        // Expert 1 for 2 needs 0.9 of a logit, expert 0 for 2 a whole one; expert 3 more than 0.5.
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, vec![0, 2]);
        assert!((found[0].1 - 0.9 / rms).abs() < 1e-12, "{found:?}");
        assert_eq!(found[1].0, vec![2, 1]);
        assert!((found[1].1 - 1.0 / rms).abs() < 1e-12, "{found:?}");
        // The other token keeps the router's own choice.
        assert!(swaps.iter().all(|s| s.rows[1].is_empty()));
        // A layer flipped at the token already is not tried again.
        let again =
            near_swaps((&caps, &Routes::default()), &[0], 0, 0.5, &[(0, 0)]).expect("swaps");
        assert!(again.is_empty());
    }
}
