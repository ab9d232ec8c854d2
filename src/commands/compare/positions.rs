//! The positions a drafter pipeline's `loss_mask` trains on, and captures seen at those
//! positions only: a pair's trained positions compared on their own.

use candle_core::Tensor;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::error::{Error, Result};
use crate::formats::FileSource;

/// The positions a `loss_mask` trains on (A's, else B's), when they are some but not all of
/// the `tokens` compared.
pub(super) fn trained_positions(
    a: &FileSource,
    b: &FileSource,
    tokens: usize,
) -> Result<Option<Vec<u32>>> {
    let mask = match a.loss_mask()? {
        Some(m) => Some((m, a)),
        None => b.loss_mask()?.map(|m| (m, b)),
    };
    let Some((mask, src)) = mask else {
        return Ok(None);
    };
    if mask.len() != tokens {
        return Err(Error::tensor(
            src.path(),
            "loss_mask",
            format!("marks {} positions, {tokens} are compared", mask.len()),
        ));
    }
    let index: Vec<u32> = (0..tokens as u32).filter(|&i| mask[i as usize]).collect();
    Ok((!index.is_empty() && index.len() < tokens).then_some(index))
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

    /// Whether `name` holds one row per position (routers and final states do not).
    pub(super) fn per_token(name: &str) -> bool {
        matches!(
            Key::of(name),
            Some(Key::Embed | Key::FinalNorm | Key::Logits | Key::Layer(_) | Key::Op(..))
        )
    }
}

impl TensorSource for Positions<'_> {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>> {
        if !Self::per_token(name) {
            return Ok(None);
        }
        let Some(t) = self.inner.tensor(name)? else {
            return Ok(None);
        };
        let axis = usize::from(t.rank() >= 3);
        let idx = Tensor::from_vec(self.index.clone(), self.index.len(), t.device())?;
        Ok(Some(t.index_select(&idx, axis)?.contiguous()?))
    }
    fn names(&self) -> Vec<String> {
        self.inner
            .names()
            .into_iter()
            .filter(|n| Self::per_token(n))
            .collect()
    }
}
