//! The decode path: a cached prefill of tokens 0..=P, then one token at a time through the
//! recurrent form, as a serving engine generates (teacher-forced: the next token is the
//! prompt's, so every position has a full-prefill counterpart).

use candle_core::{DType, Tensor};

use super::cache::ModelCache;
use super::cached::TokenLayout;
use super::{Model, RunOptions};
use crate::capture::{Captures, Key};
use crate::error::{Error, Result};
use crate::util::progress::Progress;

/// Where a decode starts and how far it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodePlan {
    /// The cached prefill covers tokens 0..=from.
    pub from: usize,
    /// Positions produced: `from` (by the prefill) and the `steps − 1` after it.
    pub steps: usize,
    /// Store the recurrent state at this dtype between calls (none: as computed).
    pub state_dtype: Option<DType>,
}

impl DecodePlan {
    pub fn check(&self, tokens: usize) -> Result<()> {
        // Checked: both numbers come from the command line.
        let needs = self.from.checked_add(self.steps);
        if self.steps == 0 || needs.is_none_or(|n| n > tokens) {
            return Err(Error::prompt(format!(
                "--decode-from {} --decode-steps {} needs at least {} tokens and one step; the input has {tokens}",
                self.from,
                self.steps,
                needs.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
            )));
        }
        Ok(())
    }
}

impl Model {
    /// Runs the decode path over `ids` and returns `decode.logits` `[1, K, V]`,
    /// `decode.layers.{i}` `[1, K, H]` and the final `state.layers.{i}.conv` / `.recurrent`.
    pub fn run_decode(
        &self,
        ids: &[u32],
        plan: DecodePlan,
        opts: &RunOptions,
        progress: &Progress,
    ) -> Result<Captures> {
        plan.check(ids.len())?;
        let layers = self.config.num_hidden_layers;
        let mut cache = ModelCache::new(layers);
        let mut logits = Vec::with_capacity(plan.steps);
        let mut hidden: Vec<Vec<Tensor>> = vec![Vec::with_capacity(plan.steps); layers];
        for m in 0..plan.steps {
            let call: Vec<u32> = if m == 0 {
                ids[..=plan.from].to_vec()
            } else {
                vec![ids[plan.from + m]]
            };
            let caps =
                self.run_cached(&[call], &TokenLayout::default(), opts, &mut cache, progress)?;
            let last = |key: Key| -> Result<Tensor> {
                let t = caps
                    .get(key)
                    .ok_or_else(|| Error::Compare(format!("cached run captured no `{key}`")))?;
                let n = t.dim(1)?;
                Ok(t.narrow(1, n - 1, 1)?)
            };
            logits.push(last(Key::Logits)?);
            for (i, h) in hidden.iter_mut().enumerate() {
                h.push(last(Key::Layer(i))?);
            }
            if let Some(dtype) = plan.state_dtype {
                cache.store_recurrent_as(dtype)?;
            }
        }
        let mut out = Captures::new(ids[..plan.from + plan.steps].to_vec());
        out.insert(Key::DecodeLogits, Tensor::cat(&logits, 1)?);
        for (i, h) in hidden.iter().enumerate() {
            out.insert(Key::DecodeLayer(i), Tensor::cat(h, 1)?);
        }
        push_states(&mut out, &cache);
        Ok(out)
    }
}

/// Adds `state.layers.{i}.conv` / `.recurrent` of every linear-attention layer in `cache`.
pub fn push_states(caps: &mut Captures, cache: &ModelCache) {
    for (i, s) in cache.linear_states() {
        super::push_state(caps, i, s);
    }
}
