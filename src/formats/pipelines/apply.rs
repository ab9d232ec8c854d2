//! A pipeline's plan applied to its file: the stored tensors seen through [`View`]s that pick
//! one sample at its real positions and cut out each layer, under hsdiff's names.

use std::collections::BTreeMap;
use std::path::PathBuf;

use candle_core::DType;

use super::view::{Op, View};
use super::{Index, PipelineInfo, Plan, stored};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::{Entry, FileSource};

/// The entries a plan makes, each seen through its view, and the names they go by.
struct Viewed {
    path: PathBuf,
    entries: Vec<Entry>,
    views: BTreeMap<usize, View>,
    names: BTreeMap<String, usize>,
}

impl Viewed {
    /// Adds stored entry `e` seen through `ops`, shown as `label`; returns its index.
    fn push(
        &mut self,
        name: Option<String>,
        e: &Entry,
        label: String,
        ops: Vec<Op>,
    ) -> Result<usize> {
        let view = View::new(&e.shape, ops)
            .map_err(|m| Error::tensor(&self.path, &e.raw, format!("cannot be read: {m}")))?;
        let i = self.entries.len();
        // The entry keeps its stored shape (its bytes are read whole); the view's shape is
        // what the file is seen to hold.
        self.entries.push(Entry {
            raw: label,
            ..e.clone()
        });
        self.views.insert(i, view);
        if let Some(n) = name {
            self.names.insert(n, i);
        }
        Ok(i)
    }
}

/// The ops that pick `sample` (of a batched file) and `positions` (when not all) out of a
/// stored tensor of `shape` whose tokens lie on `token_axis`.
fn selection(
    plan: &Plan,
    sample: usize,
    positions: &[u32],
    shape: &[usize],
    token_axis: usize,
) -> Vec<Op> {
    let mut ops = Vec::new();
    if plan.batched && shape.len() >= 2 {
        ops.push(Op::Narrow {
            axis: 0,
            start: sample,
            len: 1,
        });
    }
    if positions.len() != plan.positions {
        ops.push(Op::Select {
            axis: token_axis,
            index: positions.to_vec(),
        });
    }
    ops
}

impl FileSource {
    /// The positions of `sample` that are not padding (`attention_mask` ≠ 0), or all of them.
    pub(super) fn real_positions(
        &self,
        plan: &Plan,
        sample: usize,
    ) -> std::result::Result<(Vec<u32>, Option<String>), String> {
        let index = Index {
            entries: &self.entries,
        };
        let all = || (0..plan.positions as u32).collect::<Vec<u32>>();
        let Some((idx, shape)) = index.get("attention_mask") else {
            return Ok((all(), None));
        };
        let want: &[usize] = if plan.batched {
            &[plan.batch, plan.positions]
        } else {
            &[plan.positions]
        };
        let fits = shape == want || (shape.len() == 2 && shape[0] == 1 && shape[1..] == want[..]);
        if !fits {
            return Err(format!(
                "`attention_mask` has shape {shape:?}, the hidden states {want:?} (batch, positions)"
            ));
        }
        let t = self
            .load_entry(&self.entries[idx])
            .map_err(|e| e.to_string())?;
        let t = match t.rank() {
            2 => t.get(sample).map_err(|e| e.to_string())?,
            _ => t,
        };
        let mask: Vec<f64> = t
            .to_dtype(DType::F64)
            .and_then(|t| t.to_vec1())
            .map_err(|e| format!("`attention_mask`: {e}"))?;
        let real: Vec<u32> = (0..mask.len() as u32)
            .filter(|&i| mask[i as usize] != 0.0)
            .collect();
        if real.is_empty() {
            return Err(format!(
                "`attention_mask` of sample {sample} is all zeros: no position to compare"
            ));
        }
        Ok((real, Some("attention_mask".to_string())))
    }

    /// Replaces the file's entries and names with the plan's views for `sample` at `positions`.
    pub(super) fn apply_plan(
        &mut self,
        plan: Plan,
        sample: usize,
        positions: Vec<u32>,
        masked_by: Option<String>,
    ) -> Result<()> {
        let stored = std::mem::take(&mut self.entries);
        let mut viewed = Viewed {
            path: self.path.clone(),
            entries: Vec::new(),
            views: BTreeMap::new(),
            names: BTreeMap::new(),
        };
        let find = |raw: &str| stored.iter().find(|e| e.raw == raw && e.seq.is_none());
        // Token ids and the loss mask: [T] or [B, T].
        let mut loss_idx = None;
        for (raw, name) in [
            (plan.ids, Some(Key::InputIds.to_string())),
            (plan.loss_mask, None),
        ] {
            let Some(e) = raw.and_then(find) else {
                continue;
            };
            let axis = usize::from(e.shape.len() == 2);
            let ops = selection(&plan, sample, &positions, &e.shape, axis);
            let i = viewed.push(name, e, e.raw.clone(), ops)?;
            if raw == plan.loss_mask {
                loss_idx = Some(i);
            }
        }
        for part in &plan.parts {
            let e = find(part.stored).ok_or_else(|| Error::Internal(part.stored.to_string()))?;
            let token_axis = usize::from(plan.batched);
            let mut ops = selection(&plan, sample, &positions, &e.shape, token_axis);
            ops.extend(part.ops.iter().cloned());
            viewed.push(Some(part.name.clone()), e, part.label.clone(), ops)?;
        }
        let description = described(&plan, sample, positions.len(), masked_by.as_deref());
        self.stored = stored::StoredCache::for_views(&viewed.entries, &viewed.views);
        self.entries = viewed.entries;
        self.names = viewed.names;
        self.views = viewed.views;
        self.conventions.push(description.clone());
        // Ids were read through a convention: the caller checks the reading against the truth.
        self.index_keyed = plan
            .parts
            .iter()
            .any(|p| matches!(Key::of(&p.name), Some(Key::Layer(_))));
        self.pipeline = Some(PipelineInfo {
            pipeline: plan.pipeline,
            description,
            batch: plan.batch,
            sample,
            positions: positions.len(),
            stored_positions: plan.positions,
            masked_by,
            loss_mask: loss_idx,
            last_state: plan.last_state,
        });
        Ok(())
    }
}

/// The plan's description with the positions compared and the sample read.
fn described(plan: &Plan, sample: usize, compared: usize, masked_by: Option<&str>) -> String {
    let mut description = plan.description.clone();
    if let Some(m) = masked_by {
        description.push_str(&format!(
            "; {compared} of {} positions compared (`{m}` = 0 left out)",
            plan.positions
        ));
    }
    if plan.batch > 1 {
        description.push_str(&format!("; sample {sample} of a batch of {}", plan.batch));
    }
    description
}
