//! Which side of a report is closer to the f64 truth, in words, for its summary.

use super::TensorRow;
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

/// rel L2 below which a side counts as the f64 truth itself (f64 rounding over a deep model).
const EXACT: f64 = 1e-12;
