//! The sentence under a calibrated comparison of an FP8-served capture (`--dtype fp8`) with one
//! of another dtype: how far FP8 serving moves the hidden states, in units of the other side's
//! rounding floor, and whether FP8's own floor explains it — "the difference is FP8's, not a
//! bug", or not.

use candle_core::DType;

use super::TensorRow;
use crate::compare::Kind;
use crate::device::dtype_label;
use crate::fp8::serving::act_scale;
use crate::verdict::K_DRIFT;

/// The sentence, when exactly one side was served in FP8 and the rows carry both floors and the
/// FP8 side's distance to the truth.
pub fn fp8_note(
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
                (r.a_vs_truth?, r.floor_a?, r.floor_b?)
            } else {
                (r.b_vs_truth?, r.floor_b?, r.floor_a?)
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
