//! vLLM speculators (`src/speculators/data_generation/offline.py`): `hs_{i}.safetensors`, one
//! per sample, with `token_ids [T]` and `hidden_states [T, k, H]` — the k layers of
//! `eagle_aux_hidden_state_layer_ids` stacked on axis 1 in vLLM's ids (id N = transformers'
//! `hidden_states[N]`; default `[2, L/2, L−3, L]`, the last being the last layer's output before
//! the final norm, which training applies itself). The loss mask lives in the preprocessed
//! dataset, not here.

use super::layer_ids::Convention;
use super::view::Op;
use super::{Index, Part, Pipeline, Plan, ReadOptions, check_ids, check_width, list, resolve_ids};
use crate::capture::Key;

pub(super) fn detect(index: &Index) -> bool {
    match (index.shape("token_ids"), index.shape("hidden_states")) {
        // Counts that differ are still this layout: refused with the counts in `plan`.
        (Some([_]), Some([_, _, _])) => true,
        _ => false,
    }
}

pub(super) fn plan(index: &Index, opts: &ReadOptions) -> Result<Plan, String> {
    let shape = index.shape("hidden_states").unwrap_or_default();
    let [t, k, h] = shape else {
        return Err(format!(
            "`hidden_states` has shape {shape:?}; speculators writes [T, k, H]"
        ));
    };
    let (t, k, h) = (*t, *k, *h);
    if let Some([n]) = index.shape("token_ids")
        && *n != t
    {
        let one = if t == 1 {
            " (one position's state: a capture of one column of a multi-token output)"
        } else {
            ""
        };
        return Err(format!(
            "`hidden_states` holds {t} states for {n} token ids{one}: they do not add up \
             (vLLM's ExampleHiddenStatesConnector writes one state per id), so nothing is compared"
        ));
    }
    check_ids(index, "token_ids", 1, t)?;
    check_width(h, opts, "`hidden_states`")?;
    let convention = Convention::HiddenStatesIndex;
    let default = opts
        .num_layers
        .map(|l| (vec![2, l / 2, l.saturating_sub(3), l], "[2, L/2, L−3, L]"));
    let what = format!("`hidden_states` {shape:?}");
    let (ids, from) = resolve_ids(&what, k, opts, default, convention)?;
    let parts: Vec<Part> = ids
        .iter()
        .enumerate()
        .map(|(j, &id)| Part {
            name: convention.name(id),
            stored: "hidden_states",
            ops: vec![
                Op::Narrow {
                    axis: 1,
                    start: j,
                    len: 1,
                },
                Op::Squeeze(1),
            ],
            label: format!("hidden_states[:, {j}]"),
        })
        .collect();
    let last_state = opts
        .num_layers
        .filter(|l| ids.contains(l))
        .map(|l| Key::Layer(l - 1).to_string());
    Ok(Plan {
        pipeline: Pipeline::Speculators,
        ids: Some("token_ids"),
        loss_mask: None,
        description: format!(
            "vllm-speculators: `hidden_states` {shape:?} split into {k} layers on axis 1 by {from} ({}; {}) → {}",
            list(&ids),
            convention.describe(),
            super::specforge::names_of(&parts)
        ),
        parts,
        batched: false,
        batch: 1,
        positions: t,
        last_state,
    })
}
