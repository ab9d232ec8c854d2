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

use super::assemble::{self, Sample};
use super::dump_file;
use super::dumper_layers::{Dumped, PREFIX, Role, reconstruct, role};
use super::listing;
use super::requests;
use super::served::{self, Served};
use super::tags::Tags;
use super::tp::{self, Join, Shard};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::pipelines::ReadOptions;

/// Each wanted tensor's files (one per rank), by role and name.
type Wanted = BTreeMap<(Role, String), Vec<(Tags, PathBuf)>>;

/// Reads the forward pass `path` belongs to: its tensors, and its `seq_lens` when dumped.
/// `per_sample` says what one sample is, for the reading's description.
fn read_pass(
    path: &Path,
    tags: &Tags,
    opts: &ReadOptions,
    per_sample: &str,
) -> Result<(Sample, Option<(String, Tensor)>)> {
    let (step_key, step) = step_of(tags);
    let refuse =
        |msg: String| Error::file(path, format!("sglang-dumper ({step_key} {step}): {msg}"));
    let listing = listing::of(folder_of(path))?;
    let (wanted, left_out) = by_role(listing.pass(step_key, step).iter().cloned());
    let (wanted, ranked_ops) = without_ranked_ops(wanted);
    let (got, shards_joined) = read_wanted(wanted, &refuse)?;
    let (tensors, reading) = reconstruct(&got, opts).map_err(&refuse)?;
    if tensors
        .iter()
        .all(|(n, _)| Key::of(n) == Some(Key::InputIds))
    {
        return Err(refuse(no_layer_output(&got, &left_out)));
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
    if !ranked_ops.is_empty() {
        description.push_str(&format!(
            "; ops dumped by several tensor-parallel ranks not read (their shards carry no \
             `dims`): {}",
            ranked_ops.join(", ")
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

/// The pass's files by the role their tensor plays, and the names of the tensors not read.
fn by_role(files: impl Iterator<Item = (Tags, PathBuf)>) -> (Wanted, Vec<String>) {
    let mut wanted = Wanted::new();
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
    (wanted, left_out)
}

/// The wanted tensors less the ops dumped by several ranks, and those ops' names: a module's
/// output under tensor parallelism is a shard (a norm's rows, a row-parallel linear's partial
/// sum) that the all-modules hooks dump without the `dims` saying how shards join.
fn without_ranked_ops(wanted: Wanted) -> (Wanted, Vec<String>) {
    let (ranked, kept): (Wanted, Wanted) = wanted
        .into_iter()
        .partition(|((r, _), files)| matches!(r, Role::Op(..)) && files.len() > 1);
    (kept, ranked.into_keys().map(|(_, name)| name).collect())
}

/// Reads each wanted tensor, its ranks' copies joined; with the lines saying how shards joined.
fn read_wanted(wanted: Wanted, refuse: &impl Fn(String) -> Error) -> Result<(Dumped, Vec<String>)> {
    let mut shards_joined: Vec<String> = Vec::new();
    let mut got = Dumped::new();
    for ((r, name), files) in wanted {
        if let Some((other, _)) = got.get(&r) {
            return Err(refuse(format!(
                "`{name}` and `{other}` are the same tensor"
            )));
        }
        let (tensor, how) = read_joined(r, &name, &files, refuse)?;
        if let Some(how) = how {
            let line = format!("{} ranks {}", files.len(), joined_how(how));
            if !shards_joined.contains(&line) {
                shards_joined.push(line);
            }
        }
        got.insert(r, (name, tensor));
    }
    Ok((got, shards_joined))
}

/// One tensor's files read and joined: token ids are inputs, the same on every rank (checked);
/// hidden states are joined only as their meta says.
fn read_joined(
    r: Role,
    name: &str,
    files: &[(Tags, PathBuf)],
    refuse: &impl Fn(String) -> Error,
) -> Result<(Tensor, Option<Join>)> {
    let mut shards = Vec::new();
    for (t, p) in files {
        if let (Some(n), Some(id)) = (r.layer(), t.get("layer_id"))
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
    if matches!(r, Role::Ids | Role::SeqLens) {
        Ok((tp::identical(name, shards).map_err(refuse)?, None))
    } else {
        tp::join(name, shards).map_err(refuse)
    }
}

fn joined_how(how: Join) -> String {
    match how {
        Join::Concat(axis) => format!("concatenated along axis {axis}"),
        Join::Sum => "summed (tp:partial)".to_string(),
        Join::Replicated => "one copy of identical ones (tp:replicated)".to_string(),
    }
}

/// The refusal of a pass with no layer output, naming what it holds.
fn no_layer_output(got: &Dumped, left_out: &[String]) -> String {
    let mut seen: Vec<String> = got.values().map(|(n, _)| n.clone()).collect();
    seen.extend(left_out.iter().take(8).cloned());
    format!(
        "no layer output to read (looked for {PREFIX}…layers.N.output.0 + .output.1, or \
         ….inputs.hidden_states + .inputs.residual); its tensors: {}{}",
        seen.join(", "),
        if left_out.len() > 8 { ", …" } else { "" }
    )
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
