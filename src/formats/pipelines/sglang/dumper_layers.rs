//! The dumper's tensors by what they are ([`Role`], from their names), and hsdiff's tensors
//! rebuilt from them: a layer's output is `hidden_states + residual`, from the layer's own
//! output pair or, failing that, from the next layer's input pair ([`super::dumper`] says why).

use std::collections::BTreeMap;

use candle_core::Tensor;

use super::assemble::{HiddenShapes, layer_output};
use super::dumper_ops;
use crate::capture::{Key, Op};
use crate::formats::pipelines::ReadOptions;
use crate::util::limits;

pub(super) const PREFIX: &str = "non_intrusive__";

/// What a dumped tensor is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Role {
    Ids,
    SeqLens,
    Embed,
    FinalNorm,
    /// `layers.N.output.0` / `.output.1`.
    OutHidden(usize),
    OutResidual(usize),
    /// `layers.N.inputs.hidden_states` / `.inputs.residual`.
    InHidden(usize),
    InResidual(usize),
    /// A module output inside layer N read as an op ([`dumper_ops`]).
    Op(usize, Op),
}

impl Role {
    /// The layer a role's module path names, if it is a layer's.
    pub(super) fn layer(self) -> Option<usize> {
        match self {
            Role::OutHidden(n)
            | Role::OutResidual(n)
            | Role::InHidden(n)
            | Role::InResidual(n)
            | Role::Op(n, _) => Some(n),
            _ => None,
        }
    }
}

pub(super) fn role(name: &str) -> Option<Role> {
    match name {
        "input_ids" => return Some(Role::Ids),
        "seq_lens" => return Some(Role::SeqLens),
        _ => {}
    }
    let path = name.strip_prefix(PREFIX)?;
    let (module, what) = [
        ".output.0",
        ".output.1",
        ".output",
        ".inputs.hidden_states",
        ".inputs.residual",
    ]
    .iter()
    .find_map(|s| path.strip_suffix(s).map(|m| (m, *s)))?;
    let comps: Vec<&str> = module.split('.').collect();
    let in_layers = comps.contains(&"layers");
    match (comps.as_slice(), what) {
        ([.., "embed_tokens"], ".output") if !in_layers => Some(Role::Embed),
        ([.., "norm"], ".output.0" | ".output") if !in_layers => Some(Role::FinalNorm),
        ([.., "layers", n], _) => {
            let n: usize = n.parse().ok()?;
            match what {
                ".output.0" => Some(Role::OutHidden(n)),
                ".output.1" => Some(Role::OutResidual(n)),
                ".inputs.hidden_states" => Some(Role::InHidden(n)),
                ".inputs.residual" => Some(Role::InResidual(n)),
                _ => None,
            }
        }
        _ => {
            let at = comps.iter().position(|c| *c == "layers")?;
            let n: usize = comps.get(at + 1)?.parse().ok()?;
            dumper_ops::op_of(&comps[at + 2..], what).map(|op| Role::Op(n, op))
        }
    }
}

/// The dumped tensors of one pass by role: (the dumped name, the joined tensor).
pub(super) type Dumped = BTreeMap<Role, (String, Tensor)>;

type Rebuilt<T> = std::result::Result<T, String>;

/// Checks a hidden state against the sample's shape, in the dumper's words.
fn check(shapes: &mut HiddenShapes, what: &str, t: &Tensor) -> Rebuilt<()> {
    shapes.check(what, t, |s, first| {
        format!(
            "{what} is [{}, {}], other hidden states [{}, {}]",
            s.0, s.1, first.0, first.1
        )
    })
}

/// `hidden + residual` of a dumped pair, both checked as hidden states.
fn summed(shapes: &mut HiddenShapes, hn: &str, h: &Tensor, r: &Tensor) -> Rebuilt<Tensor> {
    check(shapes, &format!("`{hn}`"), h)?;
    check(shapes, &format!("`{hn}` (residual)"), r)?;
    layer_output(h, r).map_err(|e| e.to_string())
}

/// hsdiff's tensors from the dumped ones, and the words for how they were read.
pub(super) fn reconstruct(
    got: &Dumped,
    opts: &ReadOptions,
) -> Rebuilt<(Vec<(String, Tensor)>, String)> {
    let mut shapes = HiddenShapes::new(opts.hidden_size);
    let last = last_layer(got)?;
    let mut layers: BTreeMap<usize, Tensor> = BTreeMap::new();
    let from_outputs = layers_from_outputs(got, last, &mut shapes, &mut layers)?;
    let (embed_input, from_inputs) = layers_from_inputs(got, last, &mut shapes, &mut layers)?;
    if let (Some(l), Some((&last, _))) = (opts.num_layers, layers.last_key_value())
        && last >= l
    {
        return Err(format!(
            "the dump holds layer {last}, past this model's {l} layers"
        ));
    }
    let mut out: Vec<(String, Tensor)> = Vec::new();
    let mut how: Vec<String> = Vec::new();
    let embed = match (embed_input, got.get(&Role::Embed)) {
        (Some(e), _) => Some(e),
        (None, Some((name, t))) => {
            check(&mut shapes, &format!("`{name}`"), t)?;
            Some((name.clone(), t.clone()))
        }
        (None, None) => None,
    };
    if let Some((name, t)) = embed {
        out.push((Key::Embed.to_string(), t));
        how.push(format!("embed = `{name}`"));
    }
    if !layers.is_empty() {
        how.push(layers_read(&layers, from_outputs, from_inputs));
    }
    let (ops, ops_left) = dumper_ops::named(layer_ops(got, &shapes)?, |n| layers.contains_key(&n));
    how.extend(dumper_ops::described(&ops, &ops_left));
    for (n, t) in layers {
        out.push((Key::Layer(n).to_string(), t));
    }
    out.extend(ops);
    if let Some((name, t)) = got.get(&Role::FinalNorm) {
        check(&mut shapes, &format!("`{name}`"), t)?;
        out.push((Key::FinalNorm.to_string(), t.clone()));
        how.push(format!("final_norm = `{name}`"));
    }
    if let Some(ids) = token_ids(got, &shapes)? {
        out.push((Key::InputIds.to_string(), ids));
    }
    Ok((out, how.join(", ")))
}

/// The dumped op tensors in hsdiff's layout, checked against the hidden states' shape (none
/// without a hidden state: the pass is then refused for holding no layer output).
fn layer_ops(got: &Dumped, shapes: &HiddenShapes) -> Rebuilt<Vec<(usize, Op, Tensor)>> {
    let Some(shape) = shapes.first() else {
        return Ok(Vec::new());
    };
    let mut ops = Vec::new();
    for (role, (name, t)) in got {
        if let Role::Op(n, op) = *role {
            ops.push((n, op, dumper_ops::shaped(name, op, t, shape)?));
        }
    }
    Ok(ops)
}

/// The highest layer any dumped tensor names, within the layer limit.
fn last_layer(got: &Dumped) -> Rebuilt<Option<usize>> {
    let max_layer = got.keys().filter_map(|r| r.layer()).max();
    if max_layer.is_some_and(|m| m >= limits::get().layers) {
        return Err(limits::exceeded(
            "the layer index",
            max_layer.unwrap_or(0),
            "layers",
            limits::get().layers,
        ));
    }
    Ok(max_layer)
}

/// The layers whose own output pair was dumped; true when there was one.
fn layers_from_outputs(
    got: &Dumped,
    last: Option<usize>,
    shapes: &mut HiddenShapes,
    layers: &mut BTreeMap<usize, Tensor>,
) -> Rebuilt<bool> {
    let mut any = false;
    for n in 0..=last.unwrap_or(0) {
        match (got.get(&Role::OutHidden(n)), got.get(&Role::OutResidual(n))) {
            (Some((hn, h)), Some((_, r))) => {
                layers.insert(n, summed(shapes, hn, h, r)?);
                any = true;
            }
            (Some(_), None) => {
                return Err(half_output(
                    n,
                    "output.0 (hidden_states)",
                    "output.1 (residual)",
                ));
            }
            (None, Some(_)) => {
                return Err(half_output(
                    n,
                    "output.1 (residual)",
                    "output.0 (hidden_states)",
                ));
            }
            (None, None) => {}
        }
    }
    Ok(any)
}

fn half_output(n: usize, have: &str, miss: &str) -> String {
    format!("layer {n}'s {have} is dumped without its {miss}: a layer's output is their sum")
}

/// The layers not read from their own outputs whose output is the next layer's dumped input
/// pair (layer 0's input: the embedding, no residual yet). Returns the embedding read from layer
/// 0's input when no `embed_tokens` output was dumped, and whether any layer came from inputs.
fn layers_from_inputs(
    got: &Dumped,
    last: Option<usize>,
    shapes: &mut HiddenShapes,
    layers: &mut BTreeMap<usize, Tensor>,
) -> Rebuilt<(Option<(String, Tensor)>, bool)> {
    let mut embed = None;
    let mut any = false;
    for n in 0..=last.unwrap_or(0) {
        let hidden = got.get(&Role::InHidden(n));
        let residual = got.get(&Role::InResidual(n));
        match (n, hidden, residual) {
            (_, None, None) => {}
            (0, Some((hn, h)), None) => {
                if !got.contains_key(&Role::Embed) {
                    check(shapes, &format!("`{hn}`"), h)?;
                    embed = Some((hn.clone(), h.clone()));
                }
            }
            (0, _, Some((rn, _))) => {
                return Err(format!(
                    "`{rn}`: layer 0 has no residual input (it starts the residual stream)"
                ));
            }
            (_, Some((hn, h)), Some((_, r))) => {
                if let std::collections::btree_map::Entry::Vacant(slot) = layers.entry(n - 1) {
                    slot.insert(summed(shapes, hn, h, r)?);
                    any = true;
                }
            }
            (_, Some((name, _)), None) | (_, None, Some((name, _))) => {
                return Err(format!(
                    "`{name}` is dumped without its pair (inputs.hidden_states and inputs.residual): \
                     layer {}'s output is their sum",
                    n - 1
                ));
            }
        }
    }
    Ok((embed, any))
}

/// "layers.N = hidden_states + residual (…) for N = 0,1,2": which pairs the layers came from.
fn layers_read(layers: &BTreeMap<usize, Tensor>, from_outputs: bool, from_inputs: bool) -> String {
    let list: Vec<String> = layers.keys().map(usize::to_string).collect();
    format!(
        "layers.N = hidden_states + residual ({}) for N = {}",
        match (from_outputs, from_inputs) {
            (true, false) => "`model.layers.N` output.0 + output.1",
            (false, true) =>
                "`model.layers.N+1` inputs: the output of layer N is the input of layer N+1",
            _ => "`model.layers.N` output.0 + output.1, else `model.layers.N+1`'s inputs",
        },
        list.join(",")
    )
}

/// The pass's token ids `[tokens]`, as many as the hidden states hold.
fn token_ids(got: &Dumped, shapes: &HiddenShapes) -> Rebuilt<Option<Tensor>> {
    let Some((name, t)) = got.get(&Role::Ids) else {
        return Ok(None);
    };
    let n = t.elem_count();
    if t.rank() != 1 {
        return Err(format!("`{name}` has shape {:?}, not [tokens]", t.dims()));
    }
    if let Some((tokens, _)) = shapes.first()
        && tokens != n
    {
        return Err(format!(
            "`{name}` holds {n} tokens, the hidden states {tokens}"
        ));
    }
    Ok(Some(t.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_names() {
        let r = |s: &str| role(s);
        assert_eq!(
            r("non_intrusive__model.layers.3.output.0"),
            Some(Role::OutHidden(3))
        );
        assert_eq!(
            r("non_intrusive__model.layers.3.output.1"),
            Some(Role::OutResidual(3))
        );
        assert_eq!(
            r("non_intrusive__model.language_model.layers.12.inputs.residual"),
            Some(Role::InResidual(12))
        );
        assert_eq!(
            r("non_intrusive__model.norm.output.0"),
            Some(Role::FinalNorm)
        );
        assert_eq!(
            r("non_intrusive__model.embed_tokens.output"),
            Some(Role::Embed)
        );
        // A norm inside a layer (the GDN's gated norm, the layer norms) is not the final norm.
        assert_eq!(
            r("non_intrusive__model.layers.0.linear_attn.norm.output"),
            Some(Role::Op(0, Op::GatedNormOut))
        );
        assert_eq!(
            r("non_intrusive__model.layers.1.input_layernorm.output.1"),
            None
        );
        assert_eq!(r("non_intrusive__model.layers.1.mlp.output"), None);
        assert_eq!(r("input_ids"), Some(Role::Ids));
        assert_eq!(r("positions"), None);
    }
}
