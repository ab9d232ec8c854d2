//! The dumper's files of one forward pass, read as one sample.
//!
//! SGLang's Qwen3.5 / Qwen3-Next decoder layers return `(hidden_states, residual)`: the MLP's
//! output and the residual stream before it is added, because the add is fused into the next
//! RMSNorm (`input_layernorm(hidden_states, residual)` of the next layer, `model.norm(…)` after
//! the last). A layer's output in transformers' terms — what hsdiff calls `layers.N` — is
//! `hidden_states + residual`. The dumper's non-intrusive hooks write a tuple output as
//! `non_intrusive__model.layers.N.output.0` / `.output.1`, and a layer's keyword inputs as
//! `….inputs.hidden_states` / `….inputs.residual` (the pair layer N − 1 returned: the input of
//! layer N is the output of layer N − 1 — the "+1" SGLang's EAGLE-3 / DFlash capture adds to
//! the ids it is given). `model.norm`'s `output.0` is the final norm's output; the core field
//! `input_ids` the forward pass's token ids.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use super::assemble::{self, Sample, check_hidden, layer_output};
use super::dump_file;
use super::listing;
use super::requests;
use super::served::{self, Served};
use super::tags::Tags;
use super::tp::{self, Join, Shard};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::pipelines::ReadOptions;
use crate::util::limits;

const PREFIX: &str = "non_intrusive__";

/// What a dumped tensor is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
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
}

fn role(name: &str) -> Option<Role> {
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
        _ => None,
    }
}

/// Reads the forward pass `path` belongs to: its tensors, and its `seq_lens` when dumped.
/// `per_sample` says what one sample is, for the reading's description.
fn read_pass(
    path: &Path,
    tags: &Tags,
    opts: &ReadOptions,
    per_sample: &str,
) -> Result<(Sample, Option<(String, Tensor)>)> {
    let dir = folder_of(path);
    let (step_key, step) = step_of(tags);
    let refuse =
        |msg: String| Error::file(path, format!("sglang-dumper ({step_key} {step}): {msg}"));
    let listing = listing::of(dir)?;
    let files = listing.pass(step_key, step).iter().cloned();
    // Each tensor's files (one per rank), by name; other tensors are left out.
    let mut wanted: BTreeMap<(Role, String), Vec<(Tags, PathBuf)>> = BTreeMap::new();
    let mut left_out: Vec<String> = Vec::new();
    for (t, p) in files {
        let name = t.name().unwrap_or_default().to_string();
        match role(&name) {
            Some(r) => wanted.entry((r, name)).or_default().push((t, p)),
            // The served layout's core fields, read by the request plan ([`served`]).
            None if matches!(name.as_str(), "positions" | "req_pool_indices" | "rids") => {}
            None if !left_out.contains(&name) => left_out.push(name),
            None => {}
        }
    }
    let mut shards_joined: Vec<String> = Vec::new();
    let mut got: BTreeMap<Role, (String, Tensor)> = BTreeMap::new();
    for ((r, name), files) in wanted {
        if let Some((other, _)) = got.get(&r) {
            return Err(refuse(format!(
                "`{name}` and `{other}` are the same tensor"
            )));
        }
        let mut shards = Vec::new();
        for (t, p) in &files {
            if let (
                Role::OutHidden(n) | Role::OutResidual(n) | Role::InHidden(n) | Role::InResidual(n),
                Some(id),
            ) = (r, t.get("layer_id"))
                && id != n.to_string()
            {
                return Err(refuse(format!(
                    "`{name}` is tagged layer_id={id}, its module path says layer {n}"
                )));
            }
            let f = dump_file::read(p)?;
            shards.push(Shard {
                tensor: f.value,
                meta: f.meta,
                file_rank: t.get("rank").unwrap_or("?").to_string(),
            });
        }
        // Token ids are inputs, the same on every rank (checked); hidden states are joined
        // only as their meta says.
        let (tensor, how) = if matches!(r, Role::Ids | Role::SeqLens) {
            (tp::identical(&name, shards).map_err(&refuse)?, None)
        } else {
            tp::join(&name, shards).map_err(&refuse)?
        };
        if let Some(how) = how {
            let text = match how {
                Join::Concat(axis) => format!("concatenated along axis {axis}"),
                Join::Sum => "summed (tp:partial)".to_string(),
                Join::Replicated => "one copy of identical ones (tp:replicated)".to_string(),
            };
            let line = format!("{} ranks {text}", files.len());
            if !shards_joined.contains(&line) {
                shards_joined.push(line);
            }
        }
        got.insert(r, (name, tensor));
    }
    let (tensors, reading) = reconstruct(&got, opts).map_err(&refuse)?;
    if tensors
        .iter()
        .all(|(n, _)| Key::of(n) == Some(Key::InputIds))
    {
        let mut seen: Vec<String> = got.values().map(|(n, _)| n.clone()).collect();
        seen.extend(left_out.iter().take(8).cloned());
        return Err(refuse(format!(
            "no layer output to read (looked for {PREFIX}…layers.N.output.0 + .output.1, or \
             ….inputs.hidden_states + .inputs.residual); its tensors: {}{}",
            seen.join(", "),
            if left_out.len() > 8 { ", …" } else { "" }
        )));
    }
    let mut description = format!(
        "sglang-dumper: dumper.py files (`…___name=….pt`, {}), {per_sample}; {reading}",
        if tags.get("step").is_some() {
            "{value, meta}"
        } else {
            "bare tensors or {value, meta}"
        }
    );
    if !shards_joined.is_empty() {
        description.push_str(&format!(
            "; tensor-parallel shards joined by their meta's `dims`: {}",
            shards_joined.join(", ")
        ));
    }
    if !left_out.is_empty() {
        description.push_str(&format!("; {} other tensors not read", left_out.len()));
    }
    let tokens = tensors
        .iter()
        .find(|(n, _)| Key::of(n) != Some(Key::InputIds))
        .and_then(|(_, t)| t.dims().first().copied())
        .unwrap_or(0);
    let seq_lens = got.get(&Role::SeqLens).cloned();
    let sample = Sample {
        tensors,
        description,
        requests: vec![tokens],
        absent_prefix: 0,
    };
    Ok((sample, seq_lens))
}

/// Reads the forward pass `path` belongs to, one sample per request of whole prompts.
fn read(path: &Path, tags: &Tags, opts: &ReadOptions) -> Result<Sample> {
    let per_sample = format!("one forward pass ({}) per sample", step_of(tags).0);
    let (mut sample, seq_lens) = read_pass(path, tags, opts, &per_sample)?;
    let tokens = sample.requests.first().copied().unwrap_or(0);
    let seq_lens = seq_lens.as_ref().map(|(n, t)| (n.as_str(), t));
    sample.requests = requests::lengths(seq_lens, tokens)
        .map_err(|m| Error::file(path, format!("sglang-dumper ({}): {m}", pass_label(tags))))?;
    Ok(sample)
}

/// `step S` (or `forward_pass_id S`), the pass counter the dumper's file names carry.
fn pass_label(tags: &Tags) -> String {
    let (key, step) = step_of(tags);
    format!("{key} {step}")
}

fn step_of(tags: &Tags) -> (&'static str, &str) {
    match tags.get("step") {
        Some(s) => ("step", s),
        None => ("forward_pass_id", tags.step().unwrap_or_default()),
    }
}

fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// hsdiff's tensors from the dumped ones, and the words for how they were read.
fn reconstruct(
    got: &BTreeMap<Role, (String, Tensor)>,
    opts: &ReadOptions,
) -> std::result::Result<(Vec<(String, Tensor)>, String), String> {
    let mut out: Vec<(String, Tensor)> = Vec::new();
    let mut how: Vec<String> = Vec::new();
    let mut shape: Option<(usize, usize)> = None;
    let mut check = |what: &str, t: &Tensor| -> std::result::Result<(), String> {
        let s = check_hidden(what, t, opts.hidden_size)?;
        match shape {
            Some(first) if first != s => Err(format!(
                "{what} is [{}, {}], other hidden states [{}, {}]",
                s.0, s.1, first.0, first.1
            )),
            _ => {
                shape = Some(s);
                Ok(())
            }
        }
    };
    let pair = |h: Role, r: Role| got.get(&h).zip(got.get(&r));
    let mut layers: BTreeMap<usize, Tensor> = BTreeMap::new();
    let mut from_outputs = false;
    let mut from_inputs = false;
    let max_layer = got
        .keys()
        .filter_map(|r| match r {
            Role::OutHidden(n) | Role::OutResidual(n) | Role::InHidden(n) | Role::InResidual(n) => {
                Some(*n)
            }
            _ => None,
        })
        .max();
    if max_layer.is_some_and(|m| m >= limits::get().layers) {
        return Err(limits::exceeded(
            "the layer index",
            max_layer.unwrap_or(0),
            "layers",
            limits::get().layers,
        ));
    }
    for n in 0..=max_layer.unwrap_or(0) {
        match (got.get(&Role::OutHidden(n)), got.get(&Role::OutResidual(n))) {
            (Some(_), None) | (None, Some(_)) => {
                let (have, miss) = if got.contains_key(&Role::OutHidden(n)) {
                    ("output.0 (hidden_states)", "output.1 (residual)")
                } else {
                    ("output.1 (residual)", "output.0 (hidden_states)")
                };
                return Err(format!(
                    "layer {n}'s {have} is dumped without its {miss}: a layer's output is their sum"
                ));
            }
            _ => {}
        }
        if let Some(((hn, h), (_, r))) = pair(Role::OutHidden(n), Role::OutResidual(n)) {
            check(&format!("`{hn}`"), h)?;
            check(&format!("`{hn}` (residual)"), r)?;
            layers.insert(n, layer_output(h, r).map_err(|e| e.to_string())?);
            from_outputs = true;
        }
    }
    // A layer's inputs are the previous layer's output pair (layer 0's: the embedding, no
    // residual yet).
    for n in 0..=max_layer.unwrap_or(0) {
        let hidden = got.get(&Role::InHidden(n));
        let residual = got.get(&Role::InResidual(n));
        match (n, hidden, residual) {
            (_, None, None) => {}
            (0, Some((hn, h)), None) => {
                if !got.contains_key(&Role::Embed) {
                    check(&format!("`{hn}`"), h)?;
                    out.push((Key::Embed.to_string(), h.clone()));
                    how.push(format!("embed = `{hn}`"));
                }
            }
            (0, _, Some((rn, _))) => {
                return Err(format!(
                    "`{rn}`: layer 0 has no residual input (it starts the residual stream)"
                ));
            }
            (_, Some((hn, h)), Some((_, r))) => {
                if let std::collections::btree_map::Entry::Vacant(slot) = layers.entry(n - 1) {
                    check(&format!("`{hn}`"), h)?;
                    check(&format!("`{hn}` (residual)"), r)?;
                    slot.insert(layer_output(h, r).map_err(|e| e.to_string())?);
                    from_inputs = true;
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
    if let (Some(l), Some((&last, _))) = (opts.num_layers, layers.last_key_value())
        && last >= l
    {
        return Err(format!(
            "the dump holds layer {last}, past this model's {l} layers"
        ));
    }
    if let Some((name, t)) = got.get(&Role::Embed) {
        check(&format!("`{name}`"), t)?;
        out.push((Key::Embed.to_string(), t.clone()));
        how.push(format!("embed = `{name}`"));
    }
    if !layers.is_empty() {
        let list: Vec<String> = layers.keys().map(usize::to_string).collect();
        how.push(format!(
            "layers.N = hidden_states + residual ({}) for N = {}",
            match (from_outputs, from_inputs) {
                (true, false) => "`model.layers.N` output.0 + output.1",
                (false, true) =>
                    "`model.layers.N+1` inputs: the output of layer N is the input of layer N+1",
                _ => "`model.layers.N` output.0 + output.1, else `model.layers.N+1`'s inputs",
            },
            list.join(",")
        ));
    }
    for (n, t) in layers {
        out.push((Key::Layer(n).to_string(), t));
    }
    if let Some((name, t)) = got.get(&Role::FinalNorm) {
        check(&format!("`{name}`"), t)?;
        out.push((Key::FinalNorm.to_string(), t.clone()));
        how.push(format!("final_norm = `{name}`"));
    }
    if let Some((name, t)) = got.get(&Role::Ids) {
        let n = t.elem_count();
        if t.rank() != 1 {
            return Err(format!("`{name}` has shape {:?}, not [tokens]", t.dims()));
        }
        if let Some((tokens, _)) = shape
            && tokens != n
        {
            return Err(format!(
                "`{name}` holds {n} tokens, the hidden states {tokens}"
            ));
        }
        out.push((Key::InputIds.to_string(), t.clone()));
    }
    Ok((out, how.join(", ")))
}

/// Reads the forward pass of `path` as a file source.
pub fn open(
    path: &Path,
    tags: &Tags,
    hint: Option<candle_core::DType>,
    opts: &ReadOptions,
) -> Result<crate::formats::FileSource> {
    let (key, step) = step_of(tags);
    if let Some(plan) = served::plan(folder_of(path), key)? {
        return open_request(path, &plan, (key, step), hint, opts);
    }
    let sample = read(path, tags, opts)?;
    let n = sample.requests.len();
    let pass_ids = requests::each_requests_ids(&sample)?;
    let one = requests::cut(sample, opts.sample.unwrap_or(0))
        .map_err(|e| Error::file(path, format!("sglang-dumper: {e}")))?;
    assemble::source(path, one, hint, n, pass_ids)
}

/// Request `opts.sample` of those beginning in the pass `step` of a served folder: its share of
/// every pass it spans, joined.
fn open_request(
    path: &Path,
    plan: &Served,
    (key, step): (&str, &str),
    hint: Option<candle_core::DType>,
    opts: &ReadOptions,
) -> Result<crate::formats::FileSource> {
    let refuse = |msg: String| Error::file(path, format!("sglang-dumper ({key} {step}): {msg}"));
    let beginning = plan.beginning_at(step);
    if beginning.is_empty() {
        return Err(refuse(match plan.begun_before(step) {
            Some(first) => format!(
                "this pass continues a request begun in {key} {first} (a later chunk or a decode \
                 step): open that pass's file, whose sample is the whole request"
            ),
            None => "no request's tokens are in this pass".to_string(),
        }));
    }
    let b = opts.sample.unwrap_or(0);
    let Some(request) = beginning.get(b) else {
        return Err(refuse(format!(
            "{} request(s) begin in this pass, not request {b}",
            beginning.len()
        )));
    };
    let dir = folder_of(path);
    let listing = listing::of(dir)?;
    let mut joined: Vec<(String, Tensor)> = Vec::new();
    let mut reading = String::new();
    for segment in &request.segments {
        let Some((tags, file)) = listing.pass(key, &segment.step).first() else {
            return Err(refuse(format!("{key} {} has no files", segment.step)));
        };
        let (pass, _) = read_pass(file, tags, opts, "one request per sample")?;
        if reading.is_empty() {
            reading = pass.description;
        }
        served::append(&mut joined, pass.tensors, segment).map_err(&refuse)?;
    }
    let sample = Sample {
        tensors: joined,
        description: format!("{reading}; {}", served::describe(request, key)),
        requests: vec![request.end() - request.first()],
        absent_prefix: request.first(),
    };
    assemble::source(path, sample, hint, beginning.len(), Vec::new())
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
            None
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
