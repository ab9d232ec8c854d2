//! Names of captured tensors: the contract between the forward pass, dump files, `compare` and
//! the JSON report. Defined here and nowhere else.

pub const INPUT_IDS: &str = "input_ids";
pub const EMBED: &str = "embed";
pub const FINAL_NORM: &str = "final_norm";
pub const LOGITS: &str = "logits";

/// Output of decoder layer `i` (the residual stream after it, before the final norm).
pub fn layer(i: usize) -> String {
    format!("layers.{i}")
}

/// An intermediate value inside decoder layer `i`, e.g. `layers.3.core_out`.
pub fn op(i: usize, op: &str) -> String {
    format!("layers.{i}.{op}")
}

/// The experts chosen per token by the router of MoE layer `i`, `[1, T, k]` int64.
pub fn router_topk(i: usize) -> String {
    format!("router.{i}.topk_ids")
}

/// Per token, the router probability gap between the last chosen expert and the best expert
/// left out in MoE layer `i`, `[1, T]` (accumulation dtype).
pub fn router_margin(i: usize) -> String {
    format!("router.{i}.margin")
}

/// Logits of the decoded positions, `[1, K, V]`: entry 0 from the cached prefill, entry m after
/// feeding m more tokens one at a time.
pub const DECODE_LOGITS: &str = "decode.logits";

/// Output of decoder layer `i` at the decoded positions, `[1, K, H]`.
pub fn decode_layer(i: usize) -> String {
    format!("decode.layers.{i}")
}

/// The conv window of linear-attention layer `i` after the last token, `[1, conv_dim, K]`.
pub fn state_conv(i: usize) -> String {
    format!("state.layers.{i}.{STATE_CONV}")
}

/// The recurrent state of linear-attention layer `i` after the last token, `[1, Hv, dk, dv]`.
pub fn state_recurrent(i: usize) -> String {
    format!("state.layers.{i}.{STATE_RECURRENT}")
}

/// The two kinds of final state of a linear-attention layer, as [`parse_state`] returns them.
pub const STATE_CONV: &str = "conv";
pub const STATE_RECURRENT: &str = "recurrent";

/// Parses `state.layers.{i}.conv` / `.recurrent` into `(i, kind)`.
pub fn parse_state(name: &str) -> Option<(usize, &'static str)> {
    let (i, kind) = name.strip_prefix("state.layers.")?.split_once('.')?;
    let kind = [STATE_CONV, STATE_RECURRENT]
        .into_iter()
        .find(|k| *k == kind)?;
    Some((i.parse().ok()?, kind))
}

/// Parses `layers.{i}` (exactly; not op names) into `i`.
pub fn parse_layer(name: &str) -> Option<usize> {
    name.strip_prefix("layers.")?.parse().ok()
}

/// Parses `layers.{i}.{op}` into `(i, op)`.
pub fn parse_op(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("layers.")?;
    let (i, op) = rest.split_once('.')?;
    Some((i.parse().ok()?, op))
}
