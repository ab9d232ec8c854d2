//! SGLang's `return_hidden_states=True` output as users save it: the response of `/generate`
//! (or `Engine.generate`) written as JSON — one dict per request, a list of them for a batch —
//! with the request's `input_ids` added beside `meta_info` (SGLang does not echo them).
//!
//! `meta_info.hidden_states` (tokenizer_manager.py: `recv_obj.output_hidden_states[i]`) is a list
//! whose first entry is the prefill's `[prompt_tokens, hidden]` rows and each later one a decode
//! step's `[hidden]` row, `.tolist()` of the tensor the model hands its logits processor — the
//! state after the final norm (logits_processor.py `_get_hidden_states_to_store`). The rows stand
//! for the tokens fed: `input_ids + output_ids[:-1]` (SGLang's test_hidden_states.py compares them
//! with transformers' `hidden_states[-1]` of that sequence). Counts that do not add up are
//! refused by [`super::returned_counts`], never compared.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use super::assemble::{self, Sample};
use super::returned_counts::{self, Counts};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::ReadOptions;
use crate::formats::value_dtype::exact_16bit;
use crate::util::{input, limits};

/// A `.json` file is read as a saved SGLang response.
pub fn is_response(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// One request of the response: its ids and its returned rows.
struct Returned {
    ids: Vec<u32>,
    output_ids: Vec<u32>,
    counts: Counts,
    width: usize,
    /// The rows, row-major `[counts.rows, width]`.
    values: Vec<f64>,
}

pub fn open(path: &Path, hint: Option<DType>, opts: &ReadOptions) -> Result<FileSource> {
    let refuse = |msg: String| Error::file(path, format!("sglang-return-hidden-states: {msg}"));
    let bytes = input::read_regular(path, limits::get().json_bytes, "json-bytes")?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
        let nonfinite = [&b"NaN"[..], b"Infinity"]
            .iter()
            .any(|w| bytes.windows(w.len()).any(|x| x == *w));
        refuse(format!(
            "not JSON ({e}){}",
            if nonfinite {
                ": it holds NaN or Infinity, which Python's json writes for a non-finite state"
            } else {
                ""
            }
        ))
    })?;
    let list: Vec<&Value> = match &doc {
        Value::Array(a) => a.iter().collect(),
        v @ Value::Object(_) => vec![v],
        _ => {
            return Err(refuse(
                "neither a response dict nor a list of them".to_string(),
            ));
        }
    };
    if list.is_empty() || list.len() > limits::get().tokens {
        return Err(refuse(format!(
            "a list of {} responses: expected 1 to {}",
            list.len(),
            limits::get().tokens
        )));
    }
    let requests = list
        .iter()
        .enumerate()
        .map(|(r, v)| request(v, opts.hidden_size).map_err(|e| refuse(format!("request {r}: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let counts: Vec<Counts> = requests.iter().map(|q| q.counts).collect();
    returned_counts::check(&counts).map_err(refuse)?;
    let r = opts.sample.unwrap_or(0);
    let Some(one) = requests.get(r) else {
        return Err(refuse(format!(
            "the file holds {} request(s), not request {r}",
            requests.len()
        )));
    };
    let pass_ids = if requests.len() > 1 {
        requests.iter().map(fed_ids).collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let sample = sample(one, r, requests.len())?;
    assemble::source(path, sample, hint, requests.len(), pass_ids)
}

/// The tokens the rows stand for: the prompt, then every output token but the last (never fed).
fn fed_ids(q: &Returned) -> Result<Tensor> {
    let fed = q.output_ids.len().saturating_sub(1);
    let ids: Vec<i64> = q
        .ids
        .iter()
        .chain(&q.output_ids[..fed])
        .map(|&t| i64::from(t))
        .collect();
    let n = ids.len();
    Ok(Tensor::from_vec(ids, n, &Device::Cpu)?)
}

fn sample(q: &Returned, r: usize, n: usize) -> Result<Sample> {
    let rows = q.counts.rows;
    let dtype = exact_dtype(&q.values);
    let states =
        Tensor::from_vec(q.values.clone(), (rows, q.width), &Device::Cpu)?.to_dtype(dtype)?;
    let which = if n > 1 {
        format!("request {r} of the file's {n}; ")
    } else {
        String::new()
    };
    Ok(Sample {
        tensors: vec![
            (Key::InputIds.to_string(), fed_ids(q)?),
            (Key::FinalNorm.to_string(), states),
        ],
        description: format!(
            "sglang-return-hidden-states: {which}`meta_info.hidden_states` of a response to \
             return_hidden_states=True, the state after the final norm SGLang hands its logits \
             processor: final_norm = the prefill's {} rows + one row per decode step ({}), at \
             the tokens input_ids + output_ids[:-1]; its values are exact {} numbers",
            q.counts.prefill_rows,
            rows - q.counts.prefill_rows,
            crate::util::device::dtype_label(dtype)
        ),
        requests: vec![rows],
        absent_prefix: 0,
    })
}

/// The first of bf16, f16, f32, f64 holding every value exactly (`.tolist()` of a bf16 tensor
/// gives bf16 numbers, written exactly by Python's shortest round-trip repr; the file records no
/// dtype, so an f16 model's states whose values all happen to be bf16 numbers read as bf16).
fn exact_dtype(values: &[f64]) -> DType {
    match exact_16bit(values) {
        Some(narrow) => narrow,
        None if values.iter().all(|&v| f64::from(v as f32) == v) => DType::F32,
        None => DType::F64,
    }
}

fn request(v: &Value, hidden_size: Option<usize>) -> std::result::Result<Returned, String> {
    let meta = v
        .get("meta_info")
        .ok_or("no `meta_info`: not a response of SGLang's /generate")?;
    let ids = token_list(v.get("input_ids"), "input_ids").map_err(|e| {
        format!(
            "{e} (SGLang's response does not echo the prompt's ids: save the request's \
             `input_ids` beside `meta_info`)"
        )
    })?;
    let output_ids = token_list(v.get("output_ids"), "output_ids")?;
    let count = |field: &str| -> std::result::Result<usize, String> {
        meta.get(field)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(format!("`meta_info.{field}` is missing or not a count"))
    };
    let prompt_tokens = count("prompt_tokens")?;
    let completion_tokens = count("completion_tokens")?;
    if ids.len() != prompt_tokens || output_ids.len() != completion_tokens {
        return Err(format!(
            "`input_ids` holds {} ids and `output_ids` {}, but `meta_info` counts \
             prompt_tokens {prompt_tokens} and completion_tokens {completion_tokens}",
            ids.len(),
            output_ids.len()
        ));
    }
    let steps = meta.get("hidden_states").and_then(Value::as_array).ok_or(
        "no `meta_info.hidden_states` list: was the request sent with return_hidden_states=True?",
    )?;
    let (prefill_rows, rows, width, values) = rows_of(steps, hidden_size)?;
    Ok(Returned {
        ids,
        output_ids,
        counts: Counts {
            prompt_tokens,
            completion_tokens,
            prefill_rows,
            rows,
        },
        width,
        values,
    })
}

fn token_list(v: Option<&Value>, field: &str) -> std::result::Result<Vec<u32>, String> {
    let list = v
        .and_then(Value::as_array)
        .ok_or(format!("no `{field}` list"))?;
    if list.len() > limits::get().tokens {
        return Err(limits::exceeded(
            &format!("`{field}`"),
            list.len(),
            "tokens",
            limits::get().tokens,
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or(format!("`{field}[{i}]` is {t}, not a token id"))
        })
        .collect()
}

/// The rows of `meta_info.hidden_states`: (the first entry's rows, all rows, width, values).
fn rows_of(
    steps: &[Value],
    hidden_size: Option<usize>,
) -> std::result::Result<(usize, usize, usize, Vec<f64>), String> {
    let l = limits::get();
    let mut values = Vec::new();
    let mut width = None;
    let mut rows = 0usize;
    let mut prefill_rows = 0;
    for (k, step) in steps.iter().enumerate() {
        let list = step
            .as_array()
            .ok_or(format!("`meta_info.hidden_states[{k}]` is not a list"))?;
        // A decode step's entry is one row; the prefill's (and a step's several) are rows.
        let step_rows: Vec<(String, &Value)> = match list.first() {
            Some(Value::Array(_)) => list
                .iter()
                .enumerate()
                .map(|(j, row)| (format!("meta_info.hidden_states[{k}][{j}]"), row))
                .collect(),
            _ => vec![(format!("meta_info.hidden_states[{k}]"), step)],
        };
        for (at, row) in step_rows {
            let row = row.as_array().ok_or(format!("`{at}` is not a list"))?;
            let w = *width.get_or_insert(row.len());
            if row.len() != w || w == 0 {
                return Err(format!(
                    "`{at}` holds {} values, the first row {w}",
                    row.len()
                ));
            }
            rows += 1;
            if rows > l.tokens {
                return Err(limits::exceeded(
                    "`meta_info.hidden_states`",
                    rows,
                    "tokens",
                    l.tokens,
                ));
            }
            for (c, x) in row.iter().enumerate() {
                values.push(
                    x.as_f64()
                        .ok_or(format!("`{at}[{c}]` is {x}, not a number"))?,
                );
            }
        }
        if k == 0 {
            prefill_rows = rows;
        }
    }
    let width = width.ok_or("`meta_info.hidden_states` is empty")?;
    if width > l.dim {
        return Err(limits::exceeded(
            "`meta_info.hidden_states`",
            width,
            "dim",
            l.dim,
        ));
    }
    match hidden_size {
        Some(h) if h != width => Err(format!(
            "`meta_info.hidden_states` rows are {width} wide, but the model's hidden size is {h} \
             (an EAGLE-3 target returns its captured layers concatenated)"
        )),
        _ => Ok((prefill_rows, rows, width, values)),
    }
}
