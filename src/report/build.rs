//! Building a [`Report`] from two capture sources, and (for live runs) the truth and floor runs.

use candle_core::{DType, Tensor};
use sha2::{Digest, Sha256};

use super::{Inputs, Report, RouterRow, SCHEMA, Side, TensorRow, ThresholdInfo, TokenIds};
use crate::capture::names;
use crate::compare::{Kind, RowSpec, TensorSource};
use crate::device::dtype_label;
use crate::error::{Error, Result};
use crate::metrics::logits::logit_stats;
use crate::metrics::{DiffStats, diff_stats};
use crate::verdict::{
    self, K_DRIFT, K_MISMATCH, Verdict, amplification, classify, ratio_to_floor, thresholds,
};

/// Everything a report is computed from.
pub struct Comparison<'a> {
    pub a: &'a dyn TensorSource,
    pub b: &'a dyn TensorSource,
    pub a_side: Side,
    pub b_side: Side,
    /// The f64 reference run on the same input (live runs).
    pub truth: Option<&'a dyn TensorSource>,
    /// The reference backend at the compute dtype (live runs): its error against `truth` is
    /// the floor.
    pub floor: Option<&'a dyn TensorSource>,
    pub rows: Vec<RowSpec>,
    pub dtype: DType,
    pub mode: String,
    pub input_ids: Vec<u32>,
    pub token_ids_match: bool,
    pub command: Option<String>,
}

fn fetch(src: &dyn TensorSource, side: &str, name: &str) -> Result<Tensor> {
    src.tensor(name)?
        .ok_or_else(|| Error::Compare(format!("side {side} has no tensor `{name}`")))
}

fn rel_to(
    src: Option<&dyn TensorSource>,
    truth: Option<&dyn TensorSource>,
    name: &str,
) -> Result<Option<DiffStats>> {
    match (src, truth) {
        (Some(s), Some(t)) => match (s.tensor(name)?, t.tensor(name)?) {
            (Some(x), Some(y)) => Ok(Some(diff_stats(name, &x, &y)?)),
            _ => Ok(None),
        },
        _ => Ok(None),
    }
}

pub fn build_report(c: &Comparison) -> Result<Report> {
    let th = thresholds(c.dtype);
    let mut tensors = Vec::with_capacity(c.rows.len());
    // Logit gap under which a top-2 order is within the noise: twice the RMS logit error of the
    // floor run, or, without a floor, the static ok band times the logits' RMS.
    let mut tie_margin = None;
    for row in &c.rows {
        let a = fetch(c.a, "A", &row.name)?;
        let b = fetch(c.b, "B", &row.name)?;
        let stats = diff_stats(&row.name, &a, &b)?;
        let floor_stats = rel_to(c.floor, c.truth, &row.name)?;
        if row.kind == Kind::Logits {
            tie_margin = Some(match &floor_stats {
                Some(f) => 2.0 * f.rms_abs(),
                None => th.ok * stats.rms_b(),
            });
        }
        let floor = floor_stats.map(|s| s.rel_l2);
        let a_vs_truth = rel_to(Some(c.a), c.truth, &row.name)?.map(|s| s.rel_l2);
        let b_vs_truth = rel_to(Some(c.b), c.truth, &row.name)?.map(|s| s.rel_l2);
        let verdict = classify(&stats, floor, th);
        tensors.push(TensorRow {
            name: row.name.clone(),
            kind: row.kind,
            layer: row.layer,
            mean_abs: stats.mean_abs,
            max_abs: stats.max_abs,
            max_abs_at: stats.max_abs_at,
            rel_l2: stats.rel_l2,
            cosine: stats.cosine,
            cosine_min: stats.cosine_min,
            cosine_min_token: stats.cosine_min_token,
            floor,
            ratio_to_floor: ratio_to_floor(stats.rel_l2, floor),
            a_vs_truth,
            b_vs_truth,
            nan_a: stats.nan_a,
            inf_a: stats.inf_a,
            nan_b: stats.nan_b,
            inf_b: stats.inf_b,
            verdict,
            per_token_rel: stats.per_token_rel,
        });
    }

    let logits = match (c.a.tensor(names::LOGITS)?, c.b.tensor(names::LOGITS)?) {
        (Some(a), Some(b)) => Some(logit_stats(&a, &b, tie_margin.unwrap_or(0.0))?),
        _ => None,
    };
    let routers = router_rows(c)?;
    let layer_rels: Vec<(usize, f64)> = tensors
        .iter()
        .filter(|t| {
            matches!(
                t.kind,
                Kind::LinearAttention | Kind::FullAttention | Kind::Layer
            )
        })
        .filter_map(|t| t.layer.map(|l| (l, t.rel_l2)))
        .collect();
    let amplification = amplification(&layer_rels);
    let first_divergent = tensors
        .iter()
        .find(|t| t.verdict != Verdict::Ok)
        .map(|t| t.name.clone());
    let overall = tensors
        .iter()
        .map(|t| t.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    let summary = verdict::summary(
        &c.a_side.label,
        &c.b_side.label,
        dtype_label(c.dtype),
        &tensors,
        logits.as_ref(),
    );

    let env_diff = crate::envdiff::env_diff(&c.a_side.fingerprint, &c.b_side.fingerprint);
    // Live runs differ by design in their backend; elsewhere a mattering difference leads.
    let summary = match crate::envdiff::summary_clause(&env_diff) {
        Some(clause) if !matches!(c.mode.as_str(), "propagate" | "isolate") => {
            format!("{summary}; {clause}")
        }
        _ => summary,
    };

    let mut sha = Sha256::new();
    for id in &c.input_ids {
        sha.update(id.to_le_bytes());
    }
    Ok(Report {
        schema: SCHEMA.to_string(),
        verdict: overall,
        summary,
        mode: c.mode.clone(),
        a: c.a_side.clone(),
        b: c.b_side.clone(),
        inputs: Inputs {
            tokens: c.input_ids.len(),
            token_ids_sha256: format!("{:x}", sha.finalize()),
            token_ids_match: c.token_ids_match,
            token_ids: if c.token_ids_match {
                TokenIds::Match
            } else {
                TokenIds::Unknown
            },
        },
        thresholds: ThresholdInfo {
            dtype: dtype_label(c.dtype).to_string(),
            bands: th,
            k_drift: K_DRIFT,
            k_mismatch: K_MISMATCH,
            floor_source: c.floor.map(|_| {
                format!(
                    "reference backend at {} vs reference at f64, same input",
                    dtype_label(c.dtype)
                )
            }),
        },
        tensors,
        first_divergent,
        amplification,
        logits,
        routers,
        command: c.command.clone(),
        alignment: None,
        env_diff,
    })
}

/// Router top-k agreement for every `router.{i}.topk_ids` both sides carry.
fn router_rows(c: &Comparison) -> Result<Vec<RouterRow>> {
    let mut rows = Vec::new();
    let mut layers: Vec<usize> =
        c.a.names()
            .iter()
            .filter_map(|n| {
                n.strip_prefix("router.")?
                    .strip_suffix(".topk_ids")?
                    .parse()
                    .ok()
            })
            .collect();
    layers.sort_unstable();
    for layer in layers {
        let name = names::router_topk(layer);
        let (Some(a), Some(b)) = (c.a.tensor(&name)?, c.b.tensor(&name)?) else {
            continue;
        };
        let a: Vec<Vec<i64>> = a.squeeze(0)?.to_dtype(DType::I64)?.to_vec2()?;
        let b: Vec<Vec<i64>> = b.squeeze(0)?.to_dtype(DType::I64)?.to_vec2()?;
        let flipped: Vec<usize> = a
            .iter()
            .zip(&b)
            .enumerate()
            .filter(|(_, (x, y))| {
                let (mut x, mut y) = ((*x).clone(), (*y).clone());
                x.sort_unstable();
                y.sort_unstable();
                x != y
            })
            .map(|(t, _)| t)
            .collect();
        let margins: Option<Vec<f64>> = match c.b.tensor(&names::router_margin(layer))? {
            Some(m) => Some(m.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?),
            None => None,
        };
        let flip_margins = flipped
            .iter()
            .map(|&t| margins.as_ref().and_then(|m| m.get(t).copied()))
            .collect();
        rows.push(RouterRow {
            layer,
            agree: 1.0 - flipped.len() as f64 / a.len().max(1) as f64,
            flipped_tokens: flipped,
            flip_margins,
        });
    }
    Ok(rows)
}
