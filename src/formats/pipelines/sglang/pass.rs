//! `--debug-tensor-dump-output-folder` (`debug_utils/tensor_dump_forward_hook.py`): one
//! `Pass{n:05}.pt` per forward pass and rank, a dict of the outputs of the model's leaf modules
//! (a tuple output saved as a list, so `model.layers.N.input_layernorm` is
//! `[normed, residual]` from layer 1 on) and `model.forward_batch_info.input_ids`.
//!
//! The decoder layers are not leaves, so their `(hidden_states, residual)` pair is not saved;
//! the fused add-RMSNorm that sums it is: `model.layers.N.input_layernorm`'s second output is
//! `hidden_states + residual` of layer N − 1 — that layer's output — and `model.norm`'s is the
//! last layer's, its first the final norm's output. (The MLP's `down_proj` output is no layer
//! output: under tensor parallelism it can be a partial sum before the all-reduce.) The dict's
//! `model` and `logits_processor` entries are the previous pass's (the hook saves the file when
//! the model's forward ends, before the model's own output is added) and are not read.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Tensor;

use super::assemble::{self, HiddenShapes, Sample};
use super::dump_file;
use super::requests;
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::ReadOptions;
use crate::util::limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Ids,
    SeqLens,
    Embed,
    /// `layers.N.input_layernorm`'s residual output: the output of layer N − 1.
    AddNormResidual(usize),
    /// `layers.N.input_layernorm`'s normed output (layer 0's only output); marks layer N.
    LayerSeen(usize),
    FinalNorm,
    /// `model.norm`'s residual output: the last layer's output.
    LastResidual,
}

fn role(raw: &str) -> Option<Role> {
    if let Some(rest) = raw.strip_suffix("forward_batch_info.input_ids") {
        return (rest.is_empty() || rest.ends_with('.')).then_some(Role::Ids);
    }
    if let Some(rest) = raw.strip_suffix("forward_batch_info.seq_lens") {
        return (rest.is_empty() || rest.ends_with('.')).then_some(Role::SeqLens);
    }
    let (module, output) = match raw.rsplit_once('.') {
        Some((m, "0")) => (m, Some(0)),
        Some((m, "1")) => (m, Some(1)),
        _ => (raw, None),
    };
    let comps: Vec<&str> = module.split('.').collect();
    let in_layers = comps.contains(&"layers");
    match (comps.as_slice(), output) {
        ([.., "embed_tokens"], None) if !in_layers => Some(Role::Embed),
        ([.., "norm"], None | Some(0)) if !in_layers => Some(Role::FinalNorm),
        ([.., "norm"], Some(1)) if !in_layers => Some(Role::LastResidual),
        ([.., "layers", n, "input_layernorm"], out) => {
            let n: usize = n.parse().ok()?;
            match out {
                Some(1) => Some(Role::AddNormResidual(n)),
                _ => Some(Role::LayerSeen(n)),
            }
        }
        _ => None,
    }
}

pub fn open(
    path: &Path,
    hint: Option<candle_core::DType>,
    opts: &ReadOptions,
) -> Result<FileSource> {
    let sample = read(path, opts)?;
    let n = sample.requests.len();
    let pass_ids = requests::each_requests_ids(&sample)?;
    let one = requests::cut(sample, opts.sample.unwrap_or(0))
        .map_err(|e| Error::file(path, format!("sglang-tensor-dump: {e}")))?;
    assemble::source(path, one, hint, n, pass_ids)
}

/// The pass's entries by role: (the entry's name, its tensor).
type Dumped = BTreeMap<Role, (String, Tensor)>;

/// Tensors under hsdiff's names.
type Tensors = Vec<(String, Tensor)>;

fn read(path: &Path, opts: &ReadOptions) -> Result<Sample> {
    let (src, _) = dump_file::open_torch(path)?;
    let refuse = |msg: String| Error::file(path, format!("sglang-tensor-dump: {msg}"));
    let (got, layers_seen, left_out) = by_role(&src, &refuse)?;
    let span = layer_span(&src, &got, layers_seen, opts, &refuse)?;
    let mut shapes = HiddenShapes::new(opts.hidden_size);
    let (mut tensors, layer_list) = hidden_states(&got, &span, &mut shapes).map_err(&refuse)?;
    if layer_list.is_empty() {
        return Err(refuse(
            if span.model_layers.is_none() && got.contains_key(&Role::LastResidual) {
                "no layer output without --model: only `model.norm` has a residual output (the last \
             layer's), and the layer it follows is known only from the model"
                .to_string()
            } else {
                "no layer output: neither `model.layers.N.input_layernorm` nor `model.norm` has a \
             residual output (a pass of the first layer only?)"
                    .to_string()
            },
        ));
    }
    let shape = shapes.first();
    if let Some((name, t)) = got.get(&Role::Ids) {
        if t.rank() != 1 || shape.is_some_and(|s| s.0 != t.elem_count()) {
            let hidden = match shape {
                Some((tokens, width)) => format!("[{tokens}, {width}]: {tokens} tokens"),
                None => "none".to_string(),
            };
            return Err(refuse(format!(
                "`{name}` has shape {:?}, the hidden states {hidden}: one id per token",
                t.dims(),
            )));
        }
        tensors.push((Key::InputIds.to_string(), t.clone()));
    }
    let seq_lens = got.get(&Role::SeqLens).map(|(n, t)| (n.as_str(), t));
    let requests = requests::lengths(seq_lens, shape.map_or(0, |s| s.0)).map_err(&refuse)?;
    Ok(Sample {
        tensors,
        requests,
        absent_prefix: 0,
        description: format!(
            "sglang-tensor-dump: Pass{{n}}.pt of --debug-tensor-dump-output-folder, one forward pass \
             per sample; layers.N = the residual output of `model.layers.N+1.input_layernorm` \
             (the fused add-RMSNorm summing layer N's hidden_states + residual; the last layer's: \
             `model.norm`'s) for N = {}{}, final_norm = `model.norm` output 0{}; {left_out} other \
             entries not read",
            layer_list.join(","),
            span_words(&span, &got),
            if got.contains_key(&Role::Embed) {
                ", embed = `model.embed_tokens`"
            } else {
                ""
            }
        ),
    })
}

/// The entries read by role, the layers whose `input_layernorm` normed output marks them, and
/// how many entries are not read.
fn by_role(
    src: &FileSource,
    refuse: &impl Fn(String) -> Error,
) -> Result<(Dumped, Vec<usize>, usize)> {
    let mut got = Dumped::new();
    let mut layers_seen: Vec<usize> = Vec::new();
    let mut left_out = 0usize;
    for e in &src.entries {
        match role(&e.raw) {
            None => left_out += 1,
            Some(Role::LayerSeen(n)) => layers_seen.push(n),
            Some(r) => {
                let t = src.load_entry(e)?;
                if let Some((other, _)) = got.insert(r, (e.raw.clone(), t)) {
                    return Err(refuse(format!(
                        "`{}` and `{other}` are the same tensor",
                        e.raw
                    )));
                }
            }
        }
    }
    Ok((got, layers_seen, left_out))
}

/// Which layers the pass's entries hold: `model.layers.0..=top`'s input_layernorms (the
/// outputs of layers 0..top), and `model.norm`'s residual, the last layer's output — whose index
/// only the model tells: a dump filtered to its first layers (`--debug-tensor-dump-layers`) and an
/// unfiltered dump of a smaller model hold the same entries.
struct Span {
    /// The highest `model.layers.N.input_layernorm` index.
    top: usize,
    /// The model's layer count, when it is at hand.
    model_layers: Option<usize>,
}

impl Span {
    /// The layer `model.norm`'s residual is the output of, if known.
    fn last_layer(&self) -> Option<usize> {
        self.model_layers.map(|l| l - 1)
    }
}

fn layer_span(
    src: &FileSource,
    got: &Dumped,
    mut layers_seen: Vec<usize>,
    opts: &ReadOptions,
    refuse: &impl Fn(String) -> Error,
) -> Result<Span> {
    layers_seen.extend(got.keys().filter_map(|r| match r {
        Role::AddNormResidual(n) => Some(*n),
        _ => None,
    }));
    let Some(&top) = layers_seen.iter().max() else {
        let seen: Vec<&str> = src.entries.iter().take(8).map(|e| e.raw.as_str()).collect();
        return Err(refuse(format!(
            "no `model.layers.N.input_layernorm` output (the fused add-RMSNorm whose residual output \
             is the previous layer's output); its entries: {}",
            seen.join(", ")
        )));
    };
    if top >= limits::get().layers {
        return Err(refuse(limits::exceeded(
            "the layer index",
            top,
            "layers",
            limits::get().layers,
        )));
    }
    if let Some(l) = opts.num_layers
        && top >= l
    {
        return Err(refuse(format!(
            "the pass holds layers 0 to {top}, this model has {l} layers"
        )));
    }
    Ok(Span {
        top,
        model_layers: opts.num_layers,
    })
}

/// What the reading says of the layers beyond the pass's input_layernorms: with the model, a
/// filtered pass's span and the layer no entry holds; without, that the last layer's output is
/// not read.
fn span_words(span: &Span, got: &Dumped) -> String {
    let has_last = got.contains_key(&Role::LastResidual);
    match span.model_layers {
        Some(l) if span.top + 1 < l => format!(
            "; the pass holds layers 0 to {} of {l} (filtered: `--debug-tensor-dump-layers`): \
             layer {}'s output is in no entry{}",
            span.top,
            span.top,
            if has_last && span.top + 2 < l {
                format!(", layers {} to {} are not dumped", span.top + 1, l - 2)
            } else {
                String::new()
            }
        ),
        None if has_last => "; the last layer's output (`model.norm`'s residual) is not compared \
                             without --model: the pass may hold a filtered set of layers \
                             (`--debug-tensor-dump-layers`), so the layer it follows is unknown"
            .to_string(),
        _ => String::new(),
    }
}

/// The embedding, each layer's output (the next add-norm's residual output; the last layer's,
/// `model.norm`'s, when the model tells its index) and the final norm, each checked as a hidden
/// state; with the layers read.
fn hidden_states(
    got: &Dumped,
    span: &Span,
    shapes: &mut HiddenShapes,
) -> std::result::Result<(Tensors, Vec<String>), String> {
    let mut check = |name: &str, t: &Tensor| {
        shapes.check(&format!("`{name}`"), t, |s, first| {
            format!("`{name}` is {s:?}, other hidden states {first:?}")
        })
    };
    let mut tensors = Vec::new();
    let mut layer_list = Vec::new();
    if let Some((name, t)) = got.get(&Role::Embed) {
        check(name, t)?;
        tensors.push((Key::Embed.to_string(), t.clone()));
    }
    let layer_outputs = (1..=span.top)
        .map(|n| (Role::AddNormResidual(n), n - 1))
        .chain(span.last_layer().map(|l| (Role::LastResidual, l)));
    for (role, layer) in layer_outputs {
        if let Some((name, t)) = got.get(&role) {
            check(name, t)?;
            tensors.push((Key::Layer(layer).to_string(), t.clone()));
            layer_list.push(layer.to_string());
        }
    }
    if let Some((name, t)) = got.get(&Role::FinalNorm) {
        check(name, t)?;
        tensors.push((Key::FinalNorm.to_string(), t.clone()));
    }
    Ok((tensors, layer_list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_keys() {
        assert_eq!(role("model.forward_batch_info.input_ids"), Some(Role::Ids));
        assert_eq!(
            role("model.layers.3.input_layernorm.1"),
            Some(Role::AddNormResidual(3))
        );
        assert_eq!(
            role("model.layers.3.input_layernorm.0"),
            Some(Role::LayerSeen(3))
        );
        assert_eq!(
            role("model.layers.0.input_layernorm"),
            Some(Role::LayerSeen(0))
        );
        assert_eq!(role("model.norm.0"), Some(Role::FinalNorm));
        assert_eq!(role("model.norm.1"), Some(Role::LastResidual));
        assert_eq!(role("model.layers.0.linear_attn.norm"), None);
        assert_eq!(role("model.layers.2.mlp.down_proj"), None);
        assert_eq!(role("model"), None);
    }
}
