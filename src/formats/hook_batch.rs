//! A plain `torch.save` of a batch captured by forward hooks: every hidden state `[B, T, H]`,
//! with the batch's `attention_mask [B, T]` (and `input_ids [B, T]`). It is B samples, each
//! seen at its real positions only (mask ≠ 0), left or right padding alike, so a prompt of a
//! padded batch pairs with the same prompt captured alone. A batch without a mask stays
//! refused (no telling padding from tokens, save for the zero padding both sides share).

use candle_core::DType;

use super::FileSource;
use super::pipelines::view::{Op, View};
use crate::capture::Key;
use crate::error::{Error, Result};

const MASK: &str = "attention_mask";

/// Whether hsdiff's `name` holds one row per position (`[B, T, H]` in a batch).
fn per_position(name: &str) -> bool {
    matches!(
        Key::of(name),
        Some(Key::Embed | Key::Layer(_) | Key::FinalNorm | Key::Logits)
    )
}

/// A masked batch as found in the file: its mask's entry and shape, the per-position states'
/// entries and the token ids' entry.
struct Batch {
    mask_idx: usize,
    batch: usize,
    tokens: usize,
    states: Vec<usize>,
    ids: Option<usize>,
}

impl FileSource {
    /// Reads sample `sample` (None: the file must hold one) of a masked hook batch; changes
    /// nothing when the file has no `attention_mask [B, T]` or no `[B, T, …]` hidden state.
    pub(super) fn read_hook_batch(&mut self, sample: Option<usize>) -> Result<()> {
        let Some(found) = self.masked_batch() else {
            return Ok(());
        };
        self.check_batch_shapes(&found)?;
        if self.ids_list.is_some() {
            return Err(Error::tensor(
                &self.path,
                "input_ids",
                "a Python list in a masked batch: save the batch's ids as a [B, T] tensor",
            ));
        }
        let Batch { batch, tokens, .. } = found;
        let sample = self.batch_sample(sample, &found)?;
        let real = self.real_rows(&found, sample)?;
        let mut ops = vec![Op::Narrow {
            axis: 0,
            start: sample,
            len: 1,
        }];
        if real.len() != tokens {
            ops.push(Op::Select {
                axis: 1,
                index: real.clone(),
            });
        }
        for &i in found.states.iter().chain(&found.ids) {
            let e = &self.entries[i];
            let view = View::new(&e.shape, ops.clone())
                .map_err(|m| Error::tensor(&self.path, &e.raw, format!("cannot be read: {m}")))?;
            self.views.insert(i, view);
        }
        self.samples_in_file = batch;
        self.conventions.push(format!(
            "a batch of {batch} ({tokens} positions, `{MASK}`): sample {sample} of the batch's \
             {batch}; {} of {tokens} positions compared (`{MASK}` = 0 left out)",
            real.len()
        ));
        Ok(())
    }

    /// The file's masked batch: an `attention_mask [B, T]` and a per-position state `[B, …]`.
    fn masked_batch(&self) -> Option<Batch> {
        let mask_idx = self.entries.iter().position(|e| e.raw == MASK)?;
        let [batch, tokens] = self.entries[mask_idx].shape[..] else {
            return None;
        };
        let states: Vec<usize> = self
            .names
            .iter()
            .filter(|(n, _)| per_position(n))
            .map(|(_, &i)| i)
            .collect();
        let batched =
            |i: &usize| self.entries[*i].shape.len() == 3 && self.entries[*i].shape[0] == batch;
        if !states.iter().any(batched) {
            return None;
        }
        let ids = self.names.get(&Key::InputIds.to_string()).copied();
        Some(Batch {
            mask_idx,
            batch,
            tokens,
            states,
            ids,
        })
    }

    /// Every hidden state is `[B, T, H]` and the token ids `[B, T]`, as the mask is `[B, T]`.
    fn check_batch_shapes(&self, found: &Batch) -> Result<()> {
        let mask_shape = &self.entries[found.mask_idx].shape;
        for &i in found.states.iter().chain(&found.ids) {
            let e = &self.entries[i];
            let want_rank = if Some(i) == found.ids { 2 } else { 3 };
            if e.shape.len() != want_rank || e.shape[..2] != [found.batch, found.tokens] {
                return Err(Error::tensor(
                    &self.path,
                    &e.raw,
                    format!(
                        "has shape {:?}, but `{MASK}` is {mask_shape:?} (batch, positions): in a \
                         masked batch every hidden state is [B, T, H] and the token ids [B, T]",
                        e.shape
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The sample to read: the one asked for, else the batch's only one.
    fn batch_sample(&self, sample: Option<usize>, found: &Batch) -> Result<usize> {
        match (sample, found.batch) {
            (Some(s), b) if s < b => Ok(s),
            (Some(s), b) => Err(Error::file(
                &self.path,
                format!("holds {b} samples, not sample {s}"),
            )),
            (None, 1) => Ok(0),
            (None, b) => Err(Error::file(
                &self.path,
                format!(
                    "holds a batch of {b} samples (`{MASK}` {:?}): compare it as a \
                     dataset (each sample on its own)",
                    self.entries[found.mask_idx].shape
                ),
            )),
        }
    }

    /// The positions of `sample` its mask marks real (≠ 0); refused when there is none.
    fn real_rows(&self, found: &Batch, sample: usize) -> Result<Vec<u32>> {
        let mask: Vec<f64> = self
            .load_entry(&self.entries[found.mask_idx])?
            .get(sample)?
            .to_dtype(DType::F64)?
            .to_vec1()?;
        let real: Vec<u32> = (0..found.tokens as u32)
            .filter(|&t| mask[t as usize] != 0.0)
            .collect();
        if real.is_empty() {
            return Err(Error::tensor(
                &self.path,
                MASK,
                format!("of sample {sample} is all zeros: no position to compare"),
            ));
        }
        Ok(real)
    }
}
