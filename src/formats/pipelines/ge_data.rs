//! EAGLE-1/2 `ge_data` (`eagle/ge_data/ge_data_all_*.py`): `{outdir}/{index}/data_{n}.ckpt`, a
//! torch.save dict with `input_ids [T]`, `hidden_state [T, H]` (transformers'
//! `hidden_states[-1]`: after the final norm) and `loss_mask [T]`, in fp16. SpecForge's EAGLE-3
//! dump without `--enable-aux-hidden-states` has the same keys (`[1, T, H]`).

use super::{Index, Part, Pipeline, Plan, ReadOptions, check_ids, check_width, seq_shape};
use crate::capture::Key;

pub(super) fn detect(index: &Index) -> bool {
    index.has("input_ids")
        && index.has("hidden_state")
        && !index.has("aux_hidden_state")
        && !index.has("aux_hidden_states")
}

pub(super) fn plan(index: &Index, opts: &ReadOptions) -> Result<Plan, String> {
    if let Some(given) = &opts.layer_ids {
        return Err(format!(
            "{} names layers, but ge_data stores one state, `hidden_state` (after the final \
             norm), whatever the drafter's layers: give the ids only for the other side \
             (--layer-ids-a / --layer-ids-b)",
            given.from
        ));
    }
    let shape = index.shape("hidden_state").unwrap_or_default();
    let (batch, t, h, batched) = seq_shape(shape, true)
        .ok_or_else(|| format!("`hidden_state` has shape {shape:?}; ge_data writes [T, H]"))?;
    check_ids(index, "input_ids", batch, t)?;
    check_width(h, opts, "`hidden_state`")?;
    Ok(Plan {
        pipeline: Pipeline::EagleGeData,
        ids: Some("input_ids"),
        loss_mask: index.has("loss_mask").then_some("loss_mask"),
        description: format!(
            "eagle-ge-data: `hidden_state` {shape:?} read as final_norm (after the final norm)"
        ),
        parts: vec![Part {
            name: Key::FinalNorm.to_string(),
            stored: "hidden_state",
            ops: Vec::new(),
            label: "hidden_state".to_string(),
        }],
        batched,
        batch,
        positions: t,
        last_state: Some(Key::FinalNorm.to_string()),
    })
}
