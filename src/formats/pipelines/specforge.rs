//! SpecForge (`scripts/prepare_hidden_states.py`): `rows_{g}-{g+N}/data_{i}.ckpt` (`.ckpt.gz`
//! with `--compress`), one torch.save dict per sample with `input_ids [T]` and `loss_mask [T]`.
//! DFlash adds `hidden_states [1, T, k·H]`: the layers of `dflash_config.target_layer_ids`
//! concatenated; EAGLE-3 adds `aux_hidden_state [1, T, 3H]` (default layers
//! `[1, L/2−1, L−4]`, captured by SGLang as the input of layer id + 1, i.e. the output of layer
//! id) and `hidden_state [1, T, H]` (the logits processor's input: after the final norm).

use super::layer_ids::Convention;
use super::{
    Index, Part, Pipeline, Plan, ReadOptions, check_ids, check_width, concatenated, list,
    resolve_ids, seq_shape,
};
use crate::capture::Key;

pub(super) fn detect_dflash(index: &Index) -> bool {
    index.has("input_ids")
        && index.has("loss_mask")
        // [1, T, k·H]; more axes are still this layout, refused with the shape in the plan.
        && index.shape("hidden_states").is_some_and(|s| s.len() >= 3)
        && !index.has("aux_hidden_states")
        && !index.has("aux_hidden_state")
}

pub(super) fn detect_eagle3(index: &Index) -> bool {
    index.has("input_ids") && index.has("aux_hidden_state") && index.has("hidden_state")
}

pub(super) fn plan_dflash(index: &Index, opts: &ReadOptions) -> Result<Plan, String> {
    let shape = index.shape("hidden_states").unwrap_or_default();
    let (batch, t, f, _) = seq_shape(shape, false).ok_or_else(|| {
        format!("`hidden_states` has shape {shape:?}; SpecForge DFlash writes [1, T, k·H]")
    })?;
    check_ids(index, "input_ids", batch, t)?;
    let k = match (&opts.layer_ids, opts.hidden_size) {
        (Some(given), _) => given.ids.len(),
        (None, Some(h)) if h > 0 && f % h == 0 => f / h,
        (None, _) => {
            return Err(format!(
                "`hidden_states` {shape:?} holds k layers of H values per position concatenated \
                 (k·H = {f}): say which layers with --layer-ids LIST or --draft-config FILE \
                 (dflash_config.target_layer_ids; id N = output of layer N)"
            ));
        }
    };
    if k == 0 || f % k != 0 {
        return Err(format!(
            "`hidden_states` {shape:?} does not split into {k} layers of equal width"
        ));
    }
    let h = f / k;
    check_width(h, opts, "each layer of `hidden_states`")?;
    let what = format!("`hidden_states` {shape:?}");
    let (ids, from) = resolve_ids(&what, k, opts, None, Convention::OutputOf)?;
    let parts = concatenated("hidden_states", 2, h, &ids, Convention::OutputOf);
    let description = format!(
        "specforge-dflash: `hidden_states` {shape:?} split into {k} layers by {from} ({}; id N = output of layer N) → {}",
        list(&ids),
        names_of(&parts)
    );
    Ok(sample_plan(
        Pipeline::SpecforgeDflash,
        description,
        parts,
        (batch, t),
        None,
    ))
}

pub(super) fn plan_eagle3(index: &Index, opts: &ReadOptions) -> Result<Plan, String> {
    let last = index.shape("hidden_state").unwrap_or_default();
    let aux = index.shape("aux_hidden_state").unwrap_or_default();
    let (batch, t, h, _) = seq_shape(last, false).ok_or_else(|| {
        format!("`hidden_state` has shape {last:?}; SpecForge EAGLE-3 writes [1, T, H]")
    })?;
    let (ab, at, f, _) = seq_shape(aux, false).ok_or_else(|| {
        format!("`aux_hidden_state` has shape {aux:?}; SpecForge EAGLE-3 writes [1, T, k·H]")
    })?;
    if (ab, at) != (batch, t) || h == 0 || f % h != 0 {
        return Err(format!(
            "`aux_hidden_state` {aux:?} is not k layers of `hidden_state` {last:?}"
        ));
    }
    check_ids(index, "input_ids", batch, t)?;
    check_width(h, opts, "`hidden_state`")?;
    let k = f / h;
    let default = opts.num_layers.map(|l| {
        (
            vec![1, (l / 2).saturating_sub(1), l.saturating_sub(4)],
            "[1, L/2−1, L−4]",
        )
    });
    let what = format!("`aux_hidden_state` {aux:?}");
    let (ids, from) = resolve_ids(&what, k, opts, default, Convention::OutputOf)?;
    let mut parts = concatenated("aux_hidden_state", 2, h, &ids, Convention::OutputOf);
    parts.push(Part {
        name: Key::FinalNorm.to_string(),
        stored: "hidden_state",
        ops: Vec::new(),
        label: "hidden_state".to_string(),
    });
    let description = format!(
        "specforge-eagle3: `aux_hidden_state` {aux:?} split into {k} layers by {from} ({}; id N = output of layer N), `hidden_state` {last:?} read as final_norm (after the final norm) → {}",
        list(&ids),
        names_of(&parts)
    );
    let last_state = Some(Key::FinalNorm.to_string());
    Ok(sample_plan(
        Pipeline::SpecforgeEagle3,
        description,
        parts,
        (batch, t),
        last_state,
    ))
}

/// A plan of SpecForge's per-sample dict: `input_ids` and `loss_mask` beside hidden states
/// `[B, T, …]`, B and T given as `(batch, positions)`.
fn sample_plan(
    pipeline: Pipeline,
    description: String,
    parts: Vec<Part>,
    (batch, positions): (usize, usize),
    last_state: Option<String>,
) -> Plan {
    Plan {
        pipeline,
        ids: Some("input_ids"),
        loss_mask: Some("loss_mask"),
        description,
        parts,
        batched: true,
        batch,
        positions,
        last_state,
    }
}

pub(super) fn names_of(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
