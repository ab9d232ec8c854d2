//! The notes under a report about FP8: how far FP8 serving moves the hidden states (a calibrated
//! comparison of an FP8-served capture, `--dtype fp8`, with one of another dtype), and the
//! pattern of an FP8 weight read without its block scales.

use candle_core::DType;

use super::TensorRow;
use crate::compare::Kind;
use crate::compare::verdict::{K_DRIFT, Verdict};
use crate::fp8::serving::act_scale;
use crate::util::device::dtype_label;

/// Above this rel L2 a side is not off but out of scale: ‖A − B‖ ≥ 10 ‖B‖.
const OUT_OF_SCALE: f64 = 10.0;

/// How far FP8 serving moved the hidden states and whether its floor explains it ("the difference
/// is FP8's, not a bug", or not), when exactly one side was served in FP8 and the rows carry both floors and the
/// FP8 side's distance to the truth.
pub fn serving_note(
    (a, a_dtype): (&str, DType),
    (b, b_dtype): (&str, DType),
    rows: &[TensorRow],
) -> Option<String> {
    let a_fp8 = act_scale(a_dtype).is_some();
    if a_fp8 == act_scale(b_dtype).is_some() {
        return None;
    }
    let (side, fp8, other) = if a_fp8 {
        (a, a_dtype, b_dtype)
    } else {
        (b, b_dtype, a_dtype)
    };
    // (row, FP8 side vs truth, its own floor, the other side's floor)
    let measured: Vec<(&TensorRow, f64, f64, f64)> = rows
        .iter()
        .filter(|r| !matches!(r.kind, Kind::Op | Kind::Embed))
        .filter_map(|r| {
            let (vs, own, theirs) = if a_fp8 {
                (
                    r.judgement.a_vs_truth?,
                    r.judgement.floor_a?,
                    r.judgement.floor_b?,
                )
            } else {
                (
                    r.judgement.b_vs_truth?,
                    r.judgement.floor_b?,
                    r.judgement.floor_a?,
                )
            };
            (own > 0.0 && theirs > 0.0).then_some((r, vs, own, theirs))
        })
        .collect();
    let deepest = measured
        .iter()
        .rev()
        .find(|(r, ..)| !matches!(r.kind, Kind::Logits | Kind::State))?;
    let (at, vs, _, theirs) = *deepest;
    let (fp8, other) = (dtype_label(fp8), dtype_label(other));
    let worst = measured
        .iter()
        .map(|&(r, vs, own, _)| (r, vs / own))
        .max_by(|x, y| x.1.total_cmp(&y.1))?;
    let verdict = if worst.1 <= K_DRIFT {
        format!(
            "within {:.1}× its own {fp8} floor everywhere: the difference is FP8's, not a bug",
            worst.1
        )
    } else {
        format!(
            "but {:.1}× its own {fp8} floor at {}: more than FP8 serving explains",
            worst.1, worst.0.name
        )
    };
    Some(format!(
        "{fp8} serving: {side} is {:.1}× the {other} floor from the f64 truth at {} ({vs:.2e} vs \
         {theirs:.2e}), {verdict}",
        vs / theirs,
        at.name
    ))
}

/// When the first tensor that parts is out of scale on one side (rel L2 ≥ 10 against the other
/// side or the truth), which no rounding produces: the pattern of a weight read without its
/// scale. An FP8 checkpoint's `weight_scale_inv` dropped by the loader leaves the fp8 values
/// (up to 448) where weights of ~1e-2 belong — the hidden states 100–10000× off from the first
/// layer that reads one (unsloth #6200).
pub fn dropped_scale_note(a: &str, b: &str, rows: &[TensorRow]) -> Option<String> {
    let first = rows
        .iter()
        .find(|r| r.judgement.verdict == Verdict::Mismatch)?;
    if first.stats.non_finite_disagree > 0 || first.stats.non_finite_both > 0 {
        return None;
    }
    let (side, off) = match (first.judgement.a_vs_truth, first.judgement.b_vs_truth) {
        (Some(x), Some(y)) if x >= y => (a, x),
        (Some(_), Some(y)) => (b, y),
        _ => (a, first.stats.rel_l2),
    };
    (off >= OUT_OF_SCALE).then(|| {
        format!(
            "{side} is out of scale at {}, the first tensor that parts (rel L2 {off:.1e}: the \
             difference {off:.0}× the size of the tensor itself), which no rounding produces: a weight read \
             without its scale looks like this (an FP8 checkpoint's weight_scale_inv dropped \
             by the loader, unsloth #6200; hsdiff refuses such a checkpoint at load)",
            first.name
        )
    })
}
