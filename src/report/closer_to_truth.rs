//! Which side of a report is closer to the f64 truth, in words, for its summary.

use super::TensorRow;
use crate::compare::Kind;
use crate::compare::verdict::K_DRIFT;

/// Which side is closer to the f64 truth at row `r` (the first flagged row, or the last hidden
/// state): "fused is 1.3× closer to the f64 truth than reference at final_norm; both within 1.1×
/// the floor of the truth everywhere" (the last clause only while both are within [`K_DRIFT`]
/// floors everywhere).
pub fn who_is_right(a: &str, b: &str, r: &TensorRow, rows: &[TensorRow]) -> Option<String> {
    // Distances over the finite elements of a row with NaN/Inf would read as agreement.
    if let (na, nb) = r.non_finite()
        && na + nb > 0
    {
        return Some(format!(
            "at {}, {a} holds {na} and {b} {nb} NaN/Inf values: no distance from the f64 truth is measured there",
            r.name
        ));
    }
    let (da, db) = (r.judgement.a_vs_truth?, r.judgement.b_vs_truth?);
    let within = rows
        .iter()
        .filter(|r| r.non_finite() == (0, 0))
        .filter_map(|r| {
            Some(
                r.judgement.a_vs_truth?.max(r.judgement.b_vs_truth?)
                    / r.judgement.floor.filter(|f| *f > 0.0)?,
            )
        })
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        .filter(|x| *x <= K_DRIFT)
        .map(|x| format!("; both within {x:.1}× the floor of the truth everywhere"))
        .unwrap_or_default();
    let at = &r.name;
    // A side within f64 rounding of the truth *is* the truth for this purpose.
    let exact = |d: f64| d < EXACT;
    let off = |d: f64| match r.judgement.floor.filter(|f| *f > 0.0) {
        Some(f) => format!("{d:.2e} ({:.1}× the floor)", d / f),
        None => format!("{d:.2e}"),
    };
    Some(match (exact(da), exact(db)) {
        (true, true) => format!("both match the f64 truth at {at}"),
        (true, false) => format!(
            "{a} matches the f64 truth; {b} is {} from it at {at}{within}",
            off(db)
        ),
        (false, true) => format!(
            "{b} matches the f64 truth; {a} is {} from it at {at}{within}",
            off(da)
        ),
        (false, false) => {
            let (near, far, k) = if da <= db {
                (a, b, db / da)
            } else {
                (b, a, da / db)
            };
            if k < 1.1 {
                format!("{a} and {b} are equally close to the f64 truth at {at}{within}")
            } else {
                format!("{near} is {k:.1}× closer to the f64 truth than {far} at {at}{within}")
            }
        }
    })
}

/// When both sides are farther than [`K_DRIFT`] × their own floor from the f64 truth at every
/// decoder layer: neither is a correct run of the model that calibrates them, however close
/// they are to each other (bit-identical copies included). The rule is relative to the floor,
/// so a model whose weights differ only slightly (a quantised copy, a fine-tune) is caught where
/// plausibility's absolute rule (half the signal) is not. None when a layer lacks a floor or
/// holds NaN/Inf (that is the report's own finding).
pub fn neither_near_truth(rows: &[TensorRow]) -> Option<String> {
    let layers = rows.iter().filter(|r| {
        matches!(
            r.kind,
            Kind::LinearAttention | Kind::FullAttention | Kind::Layer
        )
    });
    let mut nearest: Option<(f64, &str)> = None;
    let mut count = 0;
    for r in layers {
        let j = &r.judgement;
        let ratio = |d: Option<f64>, f: Option<f64>| Some(d? / f.filter(|f| *f > 0.0)?);
        let x = ratio(j.a_vs_truth, j.floor_a)?.min(ratio(j.b_vs_truth, j.floor_b)?);
        if r.non_finite() != (0, 0) || !x.is_finite() || x <= K_DRIFT {
            return None;
        }
        count += 1;
        if nearest.is_none_or(|(n, _)| x < n) {
            nearest = Some((x, &r.name));
        }
    }
    let (x, at) = nearest?;
    Some(format!(
        "but neither side is a correct run of this model: both are more than \
         {K_DRIFT}× their rounding floor from its f64 truth at every one of the {count} \
         layers ({x:.1}× at {at}) — another model's weights, or the same bug on both sides"
    ))
}

/// rel L2 below which a side counts as the f64 truth itself (f64 rounding over a deep model).
const EXACT: f64 = 1e-12;
