//! The positions a drafter pipeline's `loss_mask` trains on, and captures seen at those
//! positions only: a pair's trained positions compared on their own.

use candle_core::Tensor;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::error::{Error, Result};
use crate::formats::FileSource;

/// What a `loss_mask` (A's, else B's) says of the positions compared.
pub(super) enum TrainedAt {
    /// No mask, or one that trains on every position: the pair's report is the trained one.
    Every,
    /// A mask of all zeros on this side (`A` or `B`): no position is trained on.
    None(&'static str),
    /// These positions only.
    Some(Vec<u32>),
}

/// Where a `loss_mask` trains, against the `tokens` compared.
pub(super) fn trained_positions(
    a: &FileSource,
    b: &FileSource,
    tokens: usize,
) -> Result<TrainedAt> {
    let mask = match a.loss_mask()? {
        Some(m) => Some((m, a, "A")),
        None => b.loss_mask()?.map(|m| (m, b, "B")),
    };
    let Some((mask, src, side)) = mask else {
        return Ok(TrainedAt::Every);
    };
    if mask.len() != tokens {
        return Err(Error::tensor(
            src.path(),
            "loss_mask",
            format!("marks {} positions, {tokens} are compared", mask.len()),
        ));
    }
    let index: Vec<u32> = (0..tokens as u32).filter(|&i| mask[i as usize]).collect();
    Ok(if index.is_empty() && tokens > 0 {
        TrainedAt::None(side)
    } else if index.len() < tokens {
        TrainedAt::Some(index)
    } else {
        TrainedAt::Every
    })
}

/// A source seen at some positions only (the token axis of `[1, T, D]` captures).
pub(super) struct Positions<'a> {
    inner: &'a dyn TensorSource,
    index: Vec<u32>,
}

impl<'s> Positions<'s> {
    pub(super) fn of(inner: &'s dyn TensorSource, index: &[u32]) -> Self {
        Positions {
            inner,
            index: index.to_vec(),
        }
    }

    /// Whether `key` holds one row per position (routers and final states do not).
    pub(super) fn per_token(key: Key) -> bool {
        matches!(
            key,
            Key::Embed | Key::FinalNorm | Key::Logits | Key::Layer(_) | Key::Op(..)
        )
    }
}

impl TensorSource for Positions<'_> {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        if !Self::per_token(key) {
            return Ok(None);
        }
        let Some(t) = self.inner.tensor(key)? else {
            return Ok(None);
        };
        let axis = usize::from(t.rank() >= 3);
        let idx = Tensor::from_vec(self.index.clone(), self.index.len(), t.device())?;
        Ok(Some(t.index_select(&idx, axis)?.contiguous()?))
    }
    fn keys(&self) -> Vec<Key> {
        self.inner
            .keys()
            .into_iter()
            .filter(|&k| Self::per_token(k))
            .collect()
    }
}
