//! NVIDIA Model-Optimizer (`examples/speculative_decoding/collect_hidden_states/
//! compute_hidden_states_hf.py`): `{conversation_id}.pt`, a torch.save dict with
//! `input_ids [T]`, `hidden_states [T, H]` (transformers' `last_hidden_state`: after the final
//! norm), `aux_hidden_states [T, k·H]` (the outputs of layers `{1, L/2−1, L−4}` by default,
//! concatenated), `conversation_id` and, in later versions, `loss_mask [T]`. Its TensorRT-LLM
//! path names the last state `hidden_state`.

use super::layer_ids::Convention;
use super::{
    Index, Part, Pipeline, Plan, ReadOptions, check_ids, check_width, concatenated, list,
    resolve_ids, seq_shape,
};
use crate::capture::Key;

fn last_key(index: &Index) -> Option<&'static str> {
    ["hidden_states", "hidden_state"]
        .into_iter()
        .find(|k| index.has(k))
}

pub(super) fn detect(index: &Index) -> bool {
    index.has("input_ids") && index.has("aux_hidden_states") && last_key(index).is_some()
}

pub(super) fn plan(index: &Index, opts: &ReadOptions) -> Result<Plan, String> {
    let key = last_key(index).unwrap_or("hidden_states");
    let last = index.shape(key).unwrap_or_default();
    let aux = index.shape("aux_hidden_states").unwrap_or_default();
    let (batch, t, h, batched) = seq_shape(last, true)
        .ok_or_else(|| format!("`{key}` has shape {last:?}; Model-Optimizer writes [T, H]"))?;
    let (ab, at, f, aux_batched) = seq_shape(aux, true).ok_or_else(|| {
        format!("`aux_hidden_states` has shape {aux:?}; Model-Optimizer writes [T, k·H]")
    })?;
    if (ab, at, aux_batched) != (batch, t, batched) || h == 0 || f % h != 0 {
        return Err(format!(
            "`aux_hidden_states` {aux:?} is not k layers of `{key}` {last:?}"
        ));
    }
    check_ids(index, "input_ids", batch, t)?;
    check_width(h, opts, &format!("`{key}`"))?;
    let k = f / h;
    let default = opts.num_layers.map(|l| {
        let mut ids = vec![1, (l / 2).saturating_sub(1), l.saturating_sub(4)];
        ids.sort_unstable();
        ids.dedup();
        (ids, "{1, L/2−1, L−4}")
    });
    let what = format!("`aux_hidden_states` {aux:?}");
    let (ids, from) = resolve_ids(&what, k, opts, default, Convention::OutputOf)?;
    let axis = if batched { 2 } else { 1 };
    let mut parts = concatenated("aux_hidden_states", axis, h, &ids, Convention::OutputOf);
    parts.push(Part {
        name: Key::FinalNorm.to_string(),
        stored: if key == "hidden_state" {
            "hidden_state"
        } else {
            "hidden_states"
        },
        ops: Vec::new(),
        label: key.to_string(),
    });
    Ok(Plan {
        pipeline: Pipeline::ModelOptimizer,
        ids: Some("input_ids"),
        loss_mask: index.has("loss_mask").then_some("loss_mask"),
        description: format!(
            "modelopt: `aux_hidden_states` {aux:?} split into {k} layers by {from} ({}; id N = output of layer N), `{key}` {last:?} read as final_norm (after the final norm) → {}",
            list(&ids),
            super::specforge::names_of(&parts)
        ),
        parts,
        batched,
        batch,
        positions: t,
        last_state: Some(Key::FinalNorm.to_string()),
    })
}
