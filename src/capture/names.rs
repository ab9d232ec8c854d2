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

/// Names of the intermediate values inside a layer ([`op`]): the linear-attention backend's
/// (in forward order) and the Gated DeltaNet shell's around them.
pub mod ops {
    /// The causal conv's output, `[B, T, conv_dim]`, and the q, k, v split from it.
    pub const CONV_OUT: &str = "conv_out";
    pub const Q: &str = "q";
    pub const K: &str = "k";
    pub const V: &str = "v";
    /// The gated delta rule's output.
    pub const CORE_OUT: &str = "core_out";
    /// The gated RMSNorm's output, ready for the output projection.
    pub const GATED_NORM_OUT: &str = "gated_norm_out";
    /// The gates: write strength and decay.
    pub const BETA: &str = "beta";
    pub const G: &str = "g";
    /// The output projection's result.
    pub const OUT_PROJ: &str = "out_proj";
}

const ROUTER: &str = "router.";
const ROUTER_TOPK: &str = "topk_ids";
const ROUTER_MARGIN: &str = "margin";
const ROUTER_LOGITS: &str = "logits";

/// The experts chosen per token by the router of MoE layer `i`, `[1, T, k]` int64.
pub fn router_topk(i: usize) -> String {
    format!("{ROUTER}{i}.{ROUTER_TOPK}")
}

/// The router logits of MoE layer `i`, `[1, T, E]` (hsdiff-capture writes them).
pub fn router_logits(i: usize) -> String {
    format!("{ROUTER}{i}.{ROUTER_LOGITS}")
}

/// Per token, the router probability gap between the last chosen expert and the best expert
/// left out in MoE layer `i`, `[1, T]` (accumulation dtype).
pub fn router_margin(i: usize) -> String {
    format!("{ROUTER}{i}.{ROUTER_MARGIN}")
}

/// Parses `router.{i}.{what}` (`what` not empty) into `(i, what)`.
pub fn parse_router(name: &str) -> Option<(usize, &str)> {
    let (i, what) = name.strip_prefix(ROUTER)?.split_once('.')?;
    Some((i.parse().ok()?, what)).filter(|_| !what.is_empty())
}

/// Parses [`router_topk`] names into the layer.
pub fn parse_router_topk(name: &str) -> Option<usize> {
    parse_router(name).and_then(|(i, what)| (what == ROUTER_TOPK).then_some(i))
}

/// Logits of the decoded positions, `[1, K, V]`: entry 0 from the cached prefill, entry m after
/// feeding m more tokens one at a time.
pub const DECODE_LOGITS: &str = "decode.logits";

const DECODE_LAYERS: &str = "decode.layers.";

/// Output of decoder layer `i` at the decoded positions, `[1, K, H]`.
pub fn decode_layer(i: usize) -> String {
    format!("{DECODE_LAYERS}{i}")
}

/// Parses [`decode_layer`] names into the layer.
pub fn parse_decode_layer(name: &str) -> Option<usize> {
    name.strip_prefix(DECODE_LAYERS)?.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back() {
        for i in [0, 7, 47] {
            assert_eq!(parse_layer(&layer(i)), Some(i));
            assert_eq!(parse_op(&op(i, ops::CORE_OUT)), Some((i, ops::CORE_OUT)));
            assert_eq!(parse_router_topk(&router_topk(i)), Some(i));
            assert_eq!(parse_router(&router_margin(i)), Some((i, ROUTER_MARGIN)));
            assert_eq!(parse_router_topk(&router_margin(i)), None);
            assert_eq!(parse_decode_layer(&decode_layer(i)), Some(i));
        }
        for bad in [
            "router.",
            "router.x.topk_ids",
            "router.3.",
            "router.3",
            "layers.3",
        ] {
            assert_eq!(parse_router(bad), None, "{bad}");
        }
        assert_eq!(parse_decode_layer(DECODE_LOGITS), None);
    }
}
