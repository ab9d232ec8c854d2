//! Feed-forward blocks: the dense SwiGLU MLP and the sparse MoE block with a gated shared expert.

use candle_core::{D, Tensor};

use super::Weights;
use super::linear::{Linear, forward_shared};
use crate::backends::accumulation_dtype;
use crate::error::Result;
use crate::weights::config::{ModelConfig, MoeConfig};

/// `down(SiLU(gate(x)) ⊙ up(x))`, every op in the compute dtype.
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    pub fn new(w: &Weights, hidden: usize, intermediate: usize) -> Result<Self> {
        Ok(Mlp {
            gate_proj: Linear::new(&w.pp("gate_proj"), intermediate, hidden, false)?,
            up_proj: Linear::new(&w.pp("up_proj"), intermediate, hidden, false)?,
            down_proj: Linear::new(&w.pp("down_proj"), hidden, intermediate, false)?,
        })
    }

    fn from_parts(gate: Tensor, up: Tensor, down: Tensor) -> Result<Self> {
        Ok(Mlp {
            gate_proj: Linear::from_weight(gate)?,
            up_proj: Linear::from_weight(up)?,
            down_proj: Linear::from_weight(down)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // One input for both products: laid out for the kernels once.
        let [gate, up] = forward_shared(x, [&self.gate_proj, &self.up_proj])?;
        self.down_proj
            .forward(&(candle_nn::ops::silu(&gate)? * up)?)
    }
}

/// Router: softmax over all experts at the accumulation precision, top-k, renormalised (when
/// configured), weights rounded to the compute dtype; experts summed in ascending expert order;
/// plus σ(shared_expert_gate(x)) · shared_expert(x). An expert's weights are read only when a
/// token is routed to it, and dropped once its tokens are done.
pub struct SparseMoe<'a> {
    router: Linear,
    experts: Experts<'a>,
    shared_expert: Mlp,
    shared_expert_gate: Linear,
    top_k: usize,
    norm_topk_prob: bool,
}

/// What the router decided for each token.
pub struct RouterChoice {
    /// The experts each token was routed to, `[tokens][k]`: most probable first, or in the
    /// order they were forced.
    pub experts: Vec<Vec<u32>>,
    /// Per token, the probability gap between the router's own k-th expert and the best expert
    /// it left out: how close the routing was to flipping.
    pub margins: Vec<f64>,
    /// The router's logits, `[tokens, experts]`: how far every other choice was.
    pub logits: Tensor,
    /// Forced routing only: per token, how far the forced set is from the router's own choice
    /// ([`flip_gap`]); None for a run that routed itself.
    pub flip_gaps: Option<Vec<f64>>,
}

/// Where the forced set `forced` is the router's own top-k (`own`): −1. Otherwise the gap, in
/// units of the token's router-logit RMS, between the best expert of its own that the router
/// was denied and the worst forced expert it would not have chosen: the logit change that
/// would have made the router choose the forced set itself. Dimensionless, so a bound from
/// the arithmetic's relative error applies to it (`report::routing`).
pub(crate) fn flip_gap(logits: &[f64], own: &[usize], forced: &[usize]) -> f64 {
    let denied = own.iter().filter(|e| !forced.contains(e));
    let imposed = forced.iter().filter(|e| !own.contains(e));
    let best_denied = denied.map(|&e| logits[e]).fold(f64::NEG_INFINITY, f64::max);
    let worst_imposed = imposed.map(|&e| logits[e]).fold(f64::INFINITY, f64::min);
    if !best_denied.is_finite() {
        return -1.0;
    }
    let rms = (logits.iter().map(|l| l * l).sum::<f64>() / logits.len().max(1) as f64).sqrt();
    ((best_denied - worst_imposed) / rms).max(0.0)
}

/// Where the routed experts' weights are, read one expert at a time.
struct Experts<'a> {
    /// Rooted at the block (`…mlp.`).
    w: Weights<'a>,
    count: usize,
    hidden: usize,
    intermediate: usize,
    /// transformers 5 fused form: `experts.gate_up_proj` [E, 2I, H] (gate rows first) and
    /// `experts.down_proj` [E, H, I]; otherwise one `experts.{x}.*_proj` per expert.
    fused: bool,
}

impl Experts<'_> {
    fn load(&self, x: usize) -> Result<Mlp> {
        let (e, h, i) = (self.count, self.hidden, self.intermediate);
        if self.fused {
            let gu = self
                .w
                .get_rows("experts.gate_up_proj", &[e, 2 * i, h], &[x])?
                .squeeze(0)?;
            let down = self
                .w
                .get_rows("experts.down_proj", &[e, h, i], &[x])?
                .squeeze(0)?;
            Mlp::from_parts(gu.narrow(0, 0, i)?, gu.narrow(0, i, i)?, down)
        } else {
            Mlp::new(&self.w.pp("experts").pp(x), h, i)
        }
    }
}

impl<'a> SparseMoe<'a> {
    pub fn new(cfg: &ModelConfig, moe: &MoeConfig, w: &Weights<'a>) -> Result<Self> {
        let h = cfg.hidden_size;
        let experts = Experts {
            w: w.clone(),
            count: moe.num_experts,
            hidden: h,
            intermediate: moe.moe_intermediate_size,
            fused: w.contains("experts.gate_up_proj"),
        };
        Ok(SparseMoe {
            router: Linear::new(&w.pp("gate"), moe.num_experts, h, false)?,
            experts,
            shared_expert: Mlp::new(
                &w.pp("shared_expert"),
                h,
                moe.shared_expert_intermediate_size,
            )?,
            shared_expert_gate: Linear::new(&w.pp("shared_expert_gate"), 1, h, false)?,
            top_k: moe.num_experts_per_tok,
            norm_topk_prob: moe.norm_topk_prob,
        })
    }

    /// x: `[B, T, H]` → (`[B, T, H]`, the experts chosen per token). `forced`: the experts
    /// each token must use (`[B·T][k]`; none: the router's own), in place of the router's
    /// top-k; their weights are the
    /// router's own probabilities of those experts, renormalised over them when configured —
    /// as transformers weighs whichever experts top-k picked.
    pub fn forward(
        &self,
        x: &Tensor,
        forced: Option<&[Vec<u32>]>,
    ) -> Result<(Tensor, RouterChoice)> {
        let (b, t, h) = x.dims3()?;
        let dtype = x.dtype();
        let flat = x.reshape((b * t, h))?;
        let logits = self.router.forward(&flat)?;
        let probs =
            candle_nn::ops::softmax(&logits.to_dtype(accumulation_dtype(dtype))?, D::Minus1)?;
        let ranked = rank_experts(&probs, self.top_k)?;
        let forced = match forced {
            Some(f) => Some(self.forced_choice(f, &probs, &logits, &ranked)?),
            None => None,
        };

        let mut choice = RouterChoice {
            experts: Vec::with_capacity(ranked.len()),
            margins: Vec::with_capacity(ranked.len()),
            flip_gaps: forced.as_ref().map(|(_, gaps)| gaps.clone()),
            logits: logits.clone(),
        };
        // per expert: (token rows, routing weights)
        let mut routed: Vec<(Vec<u32>, Vec<f64>)> =
            vec![(Vec::new(), Vec::new()); self.experts.count];
        for (token, best) in ranked.iter().enumerate() {
            let top = match &forced {
                Some((sets, _)) => &sets[token][..],
                None => &best[..self.top_k],
            };
            let total: f64 = top.iter().map(|&(_, p)| p).sum();
            for &(e, p) in top {
                let w = if self.norm_topk_prob { p / total } else { p };
                routed[e].0.push(token as u32);
                routed[e].1.push(w);
            }
            choice
                .experts
                .push(top.iter().map(|&(e, _)| e as u32).collect());
            let kth = best[self.top_k - 1].1;
            choice
                .margins
                .push(best.get(self.top_k).map_or(kth, |&(_, p)| kth - p));
        }

        let mut out = flat.zeros_like()?;
        for (e, (rows, weights)) in routed.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let expert = self.experts.load(e)?;
            let n = rows.len();
            let idx = Tensor::from_vec(rows, n, x.device())?;
            let y = expert.forward(&flat.index_select(&idx, 0)?)?;
            // The routing weights are computed at the accumulation precision and rounded to
            // the compute dtype before scaling the expert output.
            let w = Tensor::from_vec(weights, (n, 1), x.device())?
                .to_dtype(accumulation_dtype(dtype))?
                .to_dtype(dtype)?;
            out = out.index_add(&idx, &y.broadcast_mul(&w)?, 0)?;
        }
        let shared = self.shared_expert.forward(&flat)?;
        let gate = candle_nn::ops::sigmoid(&self.shared_expert_gate.forward(&flat)?)?;
        let out = (out + shared.broadcast_mul(&gate)?)?;
        Ok((out.reshape((b, t, h))?, choice))
    }
}

impl SparseMoe<'_> {
    /// The forced experts with the router's probabilities of them, and each token's
    /// [`flip_gap`]; a token given no experts keeps the router's own, and one given some is
    /// refused unless they are `k` distinct experts of this block.
    #[allow(clippy::type_complexity)]
    fn forced_choice(
        &self,
        forced: &[Vec<u32>],
        probs: &Tensor,
        logits: &Tensor,
        ranked: &[Vec<(usize, f64)>],
    ) -> Result<(Vec<Vec<(usize, f64)>>, Vec<f64>)> {
        let refuse = |msg: String| {
            Err(crate::error::Error::Compare(format!(
                "forced routing: {msg}"
            )))
        };
        if forced.len() != ranked.len() {
            return refuse(format!(
                "{} tokens' experts given for {} tokens",
                forced.len(),
                ranked.len()
            ));
        }
        let probs: Vec<Vec<f64>> = probs.to_dtype(candle_core::DType::F64)?.to_vec2()?;
        let logits: Vec<Vec<f64>> = logits.to_dtype(candle_core::DType::F64)?.to_vec2()?;
        let mut sets = Vec::with_capacity(forced.len());
        let mut gaps = Vec::with_capacity(forced.len());
        for (token, ids) in forced.iter().enumerate() {
            let own: Vec<usize> = ranked[token][..self.top_k]
                .iter()
                .map(|&(e, _)| e)
                .collect();
            // No experts given: the router's own choice (routes that force a few tokens).
            let ids: Vec<usize> = match &ids[..] {
                [] => own.clone(),
                ids => ids.iter().map(|&e| e as usize).collect(),
            };
            let mut distinct = ids.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if ids.len() != self.top_k || distinct.len() != ids.len() {
                return refuse(format!(
                    "token {token}: {ids:?} is not {} distinct experts",
                    self.top_k
                ));
            }
            if let Some(bad) = ids.iter().find(|&&e| e >= self.experts.count) {
                return refuse(format!(
                    "token {token}: expert {bad} of {} experts",
                    self.experts.count
                ));
            }
            sets.push(ids.iter().map(|&e| (e, probs[token][e])).collect());
            gaps.push(flip_gap(&logits[token], &own, &ids));
        }
        Ok((sets, gaps))
    }
}

/// Each token's `k + 1` most probable experts (all of them when there are at most `k + 1`) with
/// their probabilities in f64, highest first; equal probabilities keep the lower expert index
/// first. On a GPU the ranking runs there (`router_rank_*`), so only these values come back.
fn rank_experts(probs: &Tensor, k: usize) -> Result<Vec<Vec<(usize, f64)>>> {
    let keep = (k + 1).min(probs.dim(1)?);
    #[cfg(feature = "cuda")]
    if probs.device().is_cuda() && keep <= crate::backends::fused::cuda::RANK_MAX {
        let (idx, top) = crate::backends::fused::cuda::router_rank(probs, keep)?;
        let pairs = idx.iter().zip(&top).map(|(&e, &p)| (e as usize, p));
        let pairs: Vec<(usize, f64)> = pairs.collect();
        return Ok(pairs.chunks(keep).map(<[_]>::to_vec).collect());
    }
    let probs: Vec<Vec<f64>> = probs.to_dtype(candle_core::DType::F64)?.to_vec2()?;
    Ok(probs
        .iter()
        .map(|p| {
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&i, &j| p[j].total_cmp(&p[i]).then(i.cmp(&j)));
            order.into_iter().take(keep).map(|e| (e, p[e])).collect()
        })
        .collect())
}
