//! What a difference in hidden states does to the next-token distribution: per-token KL
//! divergence, top-1 agreement with near-ties set apart, top-5 overlap. All in f64.

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogitStats {
    /// KL(softmax(b) ‖ softmax(a)) per token: mean, 99th percentile, max (nats).
    pub kl_mean: f64,
    pub kl_p99: f64,
    pub kl_max: f64,
    pub kl_max_token: usize,
    /// Fraction of decided tokens (not near-ties) whose argmax agrees.
    pub top1_agree: f64,
    /// Tokens whose top-2 margin on side B is below the tie margin: a flip there is noise.
    pub near_ties: usize,
    /// Tokens (decided or not) whose argmax differs.
    pub top1_flips: usize,
    /// Of those, the ones that are not near-ties: flips the noise does not explain.
    pub top1_flips_decided: usize,
    /// Mean |top5(a) ∩ top5(b)| / 5.
    pub top5_overlap: f64,
    pub tokens: usize,
    /// The margin below which a top-2 gap counts as a near-tie.
    pub tie_margin: f64,
}

/// `a`, `b`: logits `[1, T, V]` (or `[T, V]`). `tie_margin`: logit gap under which the top-2
/// order is within the noise.
pub fn logit_stats(a: &Tensor, b: &Tensor, tie_margin: f64) -> Result<LogitStats> {
    if a.dims() != b.dims() {
        return Err(Error::Compare(format!(
            "logits have shape {:?} on side A but {:?} on side B",
            a.dims(),
            b.dims()
        )));
    }
    let (a, b) = if a.rank() == 3 {
        (a.squeeze(0)?, b.squeeze(0)?)
    } else {
        (a.clone(), b.clone())
    };
    let tokens = a.dim(0)?;
    let mut kls = Vec::with_capacity(tokens);
    let (mut agree, mut decided, mut near_ties, mut flips, mut overlap) =
        (0usize, 0usize, 0usize, 0usize, 0.0);
    for t in 0..tokens {
        let la: Vec<f64> = a.get(t)?.to_dtype(DType::F64)?.to_vec1()?;
        let lb: Vec<f64> = b.get(t)?.to_dtype(DType::F64)?.to_vec1()?;
        kls.push(kl(&log_softmax(&lb), &log_softmax(&la)));
        let top_a = top_k(&la, 5);
        let top_b = top_k(&lb, 5);
        let same = top_a.first() == top_b.first();
        if !same {
            flips += 1;
        }
        let margin = match top_b.as_slice() {
            [first, second, ..] => lb[*first] - lb[*second],
            _ => f64::INFINITY,
        };
        if margin < tie_margin {
            near_ties += 1;
        } else {
            decided += 1;
            agree += usize::from(same);
        }
        let k = top_a.len().min(top_b.len()).max(1);
        overlap += top_a.iter().filter(|i| top_b.contains(i)).count() as f64 / k as f64;
    }
    let (kl_max_token, kl_max) =
        kls.iter()
            .copied()
            .enumerate()
            .fold((0, 0.0_f64), |best, (i, x)| {
                if !best.1.is_nan() && (x.is_nan() || x > best.1) {
                    (i, x)
                } else {
                    best
                }
            });
    Ok(LogitStats {
        kl_mean: kls.iter().sum::<f64>() / tokens.max(1) as f64,
        kl_p99: percentile(&kls, 0.99),
        kl_max,
        kl_max_token,
        top1_agree: if decided > 0 {
            agree as f64 / decided as f64
        } else {
            1.0
        },
        near_ties,
        top1_flips: flips,
        top1_flips_decided: decided - agree,
        top5_overlap: overlap / tokens.max(1) as f64,
        tokens,
        tie_margin,
    })
}

fn log_softmax(x: &[f64]) -> Vec<f64> {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + x.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    x.iter().map(|v| v - lse).collect()
}

/// KL(p ‖ q) from log-probabilities; clamped at 0 against rounding.
fn kl(log_p: &[f64], log_q: &[f64]) -> f64 {
    log_p
        .iter()
        .zip(log_q)
        .map(|(&lp, &lq)| {
            if lp == f64::NEG_INFINITY {
                0.0
            } else {
                lp.exp() * (lp - lq)
            }
        })
        .sum::<f64>()
        .max(0.0)
}

/// Indices of the k largest values, largest first (ties: lower index first).
fn top_k(x: &[f64], k: usize) -> Vec<usize> {
    let order = |i: &usize, j: &usize| x[*j].total_cmp(&x[*i]).then(i.cmp(j));
    let mut idx: Vec<usize> = (0..x.len()).collect();
    if k < idx.len() {
        // Partial selection: O(V) per token instead of a full sort of the vocabulary.
        idx.select_nth_unstable_by(k, order);
        idx.truncate(k);
    }
    idx.sort_by(order);
    idx
}

/// Nearest-rank percentile of `xs` (q in [0, 1]).
pub fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
