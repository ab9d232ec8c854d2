//! A router's chosen experts (`router.{i}.topk_ids`), checked as they are read, with no model at
//! hand: integers, `[T, k]` or `[1, T, k]` with k ≥ 1, no expert twice in a row, every id a
//! possible expert index — below the expert count of `--model`'s config.json when a model is at
//! hand and the file's when it records one (its fingerprint's `num_experts`, or the width of the
//! same layer's `router.{i}.logits`; all of them equal), else below the `dim` limit — k equal to the fingerprint's `num_experts_per_tok` when recorded, and as many rows
//! as the layer's router logits and margins have. Anything else would be read as agreement or as
//! flips that never happened. (Both sides' k and rows against each other and the token count:
//! report/build.rs, where both are at hand.)

use std::path::Path;

use candle_core::{DType, Tensor};

use super::FileSource;
use crate::capture::{Key, RouterField};
use crate::error::{Error, Result};

/// What the file records beside one layer's router choices: each number with where it came
/// from, for the message.
#[derive(Debug, Default)]
pub(super) struct Recorded {
    /// The expert count.
    experts: Vec<(usize, String)>,
    /// Experts chosen per token.
    per_token: Option<(usize, String)>,
    /// Rows (tokens) of the layer's other router tensors.
    rows: Vec<(usize, String)>,
}

impl Recorded {
    pub(super) fn of(src: &FileSource, layer: usize) -> Self {
        let mut r = Recorded::default();
        let recorded = |key: &str| {
            src.fingerprint
                .as_ref()
                .and_then(|fp| fp.get(key))
                .and_then(|v| v.as_u64())
                .and_then(|n| usize::try_from(n).ok())
        };
        if let Some(n) = src.model_experts {
            r.experts
                .push((n, "the num_experts of --model's config.json".into()));
        }
        if let Some(n) = recorded("num_experts") {
            r.experts.push((n, "the fingerprint's num_experts".into()));
        }
        if let Some(n) = recorded("num_experts_per_tok") {
            r.per_token = Some((n, "the fingerprint's num_experts_per_tok".into()));
        }
        let logits = Key::Router(layer, RouterField::Logits).to_string();
        if let Some(shape) = src.shape(&logits)
            && let [.., rows, width] = shape[..]
        {
            let what = format!("`{logits}` {shape:?}");
            r.experts.push((width, what.clone()));
            r.rows.push((rows, what));
        }
        let margin = Key::Router(layer, RouterField::Margin).to_string();
        if let Some(&rows) = src.shape(&margin).as_deref().and_then(|s| s.last()) {
            r.rows.push((rows, format!("`{margin}`")));
        }
        r
    }
}

pub(super) fn check(
    path: &Path,
    raw: &str,
    layer: usize,
    t: &Tensor,
    recorded: &Recorded,
) -> Result<()> {
    let err = |msg: String| Error::tensor(path, raw, msg);
    if !matches!(
        t.dtype(),
        DType::I64 | DType::I32 | DType::I16 | DType::U32 | DType::U8
    ) {
        return Err(err(format!(
            "router expert ids are {} values, not integers",
            crate::util::device::dtype_label(t.dtype())
        )));
    }
    let dims = t.dims();
    let (rows, k) = match dims {
        [rows, k] | [1, rows, k] => (*rows, *k),
        _ => {
            return Err(err(format!(
                "router expert ids have shape {dims:?}: expected [T, k] or [1, T, k]"
            )));
        }
    };
    if k == 0 {
        return Err(err("router expert ids choose no expert (k = 0)".into()));
    }
    if let Some((n, what)) = &recorded.per_token
        && *n != k
    {
        return Err(err(format!(
            "router expert ids choose {k} experts per token, {what} is {n}"
        )));
    }
    if let Some((n, what)) = recorded.rows.iter().find(|(n, _)| *n != rows) {
        return Err(err(format!(
            "router expert ids have {rows} rows (tokens), {what} has {n}"
        )));
    }
    if let [(a, what_a), rest @ ..] = &recorded.experts[..]
        && let Some((b, what_b)) = rest.iter().find(|(b, _)| b != a)
    {
        return Err(err(format!(
            "the file records two expert counts: {a} ({what_a}) and {b} ({what_b})"
        )));
    }
    let (max, bound) = match recorded.experts.first() {
        Some((n, what)) => (*n as i64, format!("below {n}, {what}")),
        None => {
            let n = crate::util::limits::get().dim as i64;
            (n, format!("0 to {}", n - 1))
        }
    };
    let ids: Vec<i64> = t.flatten_all()?.to_dtype(DType::I64)?.to_vec1()?;
    for (row, chunk) in ids.chunks(k).enumerate() {
        if let Some(bad) = chunk.iter().find(|&&id| id < 0 || id >= max) {
            return Err(err(format!(
                "layer {layer}, token {row}: expert id {bad} is not an expert index ({bound})"
            )));
        }
        let mut sorted = chunk.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(err(format!(
                "layer {layer}, token {row}: the same expert chosen twice ({chunk:?})"
            )));
        }
    }
    Ok(())
}
