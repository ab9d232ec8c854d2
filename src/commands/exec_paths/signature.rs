//! Known-bug signatures: when paths diverge in a pattern that a known failure leaves, name it.
//! A small rule table; each rule looks at all path results and returns the paths it explains.
//! Rules only fire on positive evidence — a divergence that fits none stays unexplained.

use serde::Serialize;

use super::PathResult;
use super::plan::{CHUNK, Cut};
use crate::compare::verdict::Verdict;

/// A named failure a path's divergence looks like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signature {
    pub name: &'static str,
    /// What the evidence was, in this run's numbers.
    pub evidence: String,
}

/// The paths a rule explains, and the evidence in words.
pub type Finding = (Vec<usize>, String);

/// One rule: a name and a test over every path result that returns the paths it explains.
pub struct Rule {
    pub name: &'static str,
    pub check: fn(&[PathResult]) -> Option<Finding>,
}

/// The rule table, in the order rules are tried; a path keeps the first signature that fits.
pub const RULES: &[Rule] = &[
    Rule {
        name: "state updated by chunk padding (pad tokens update the recurrent state)",
        check: chunk_padding,
    },
    Rule {
        name: "state not reset at the packed-document boundary",
        check: packed_no_reset,
    },
    Rule {
        name: "state precision: the decode step keeps the recurrent state at low precision",
        check: state_precision,
    },
];

/// Gives every flagged path the first signature whose evidence fits.
pub fn attach(results: &mut [PathResult]) {
    for rule in RULES {
        if let Some((paths, evidence)) = (rule.check)(results) {
            for i in paths {
                if results[i].signature.is_none() && results[i].verdict != Verdict::Ok {
                    results[i].signature = Some(Signature {
                        name: rule.name,
                        evidence: evidence.clone(),
                    });
                }
            }
        }
    }
}

fn is_stored_state(r: &PathResult) -> bool {
    matches!(
        r.cut,
        Cut::Decode {
            state_dtype: Some(_),
            ..
        }
    )
}

fn flagged(r: &PathResult) -> bool {
    r.verdict != Verdict::Ok
}

/// Decode / prefill-in-pieces paths continue from a cached prefix: diverging exactly when that
/// prefix is not a whole number of 64-token chunks, with at least one aligned prefix clean.
fn chunk_padding(results: &[PathResult]) -> Option<Finding> {
    let continued: Vec<(usize, usize)> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            !matches!(
                r.cut,
                Cut::Decode {
                    state_dtype: Some(_),
                    ..
                }
            )
        })
        .filter_map(|(i, r)| r.cut.prefix_len().map(|p| (i, p)))
        .collect();
    let bad: Vec<(usize, usize)> = continued
        .iter()
        .copied()
        .filter(|&(i, _)| flagged(&results[i]))
        .collect();
    let aligned_ok = continued
        .iter()
        .any(|&(i, p)| p % CHUNK == 0 && !flagged(&results[i]));
    let fits = !bad.is_empty() && aligned_ok && bad.iter().all(|&(_, p)| p % CHUNK != 0);
    fits.then(|| {
        let lens: Vec<String> = bad.iter().map(|(_, p)| p.to_string()).collect();
        // Stored-state variants of an unaligned decode carry the same polluted state.
        let variants = results.iter().enumerate().filter(|(_, r)| {
            matches!(r.cut, Cut::Decode { state_dtype: Some(_), from, .. } if (from + 1) % CHUNK != 0)
                && flagged(r)
        });
        (
            bad.iter().map(|&(i, _)| i).chain(variants.map(|(i, _)| i)).collect(),
            format!(
                "paths continuing from a cached prefix of {} tokens diverge, from a whole 64-token chunk they do not",
                lens.join(", ")
            ),
        )
    })
}

/// The packed path diverges, but not before the second document starts.
fn packed_no_reset(results: &[PathResult]) -> Option<Finding> {
    let (i, boundary, at) = results.iter().enumerate().find_map(|(i, r)| match r.cut {
        Cut::Packed { boundary, .. } if flagged(r) => Some((i, boundary, r.departs_at?)),
        _ => None,
    })?;
    (at >= boundary).then(|| {
        (
            vec![i],
            format!("the first document is clean; the second departs at position {at} (boundary {boundary})"),
        )
    })
}

/// Every plain decode path diverges with an error that grows with the steps, while prefill in
/// pieces (which never takes the decode step) stays clean; the closest stored-state dtype row
/// says which precision the error is like.
fn state_precision(results: &[PathResult]) -> Option<Finding> {
    let decodes: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(
                r.cut,
                Cut::Decode {
                    state_dtype: None,
                    ..
                }
            )
        })
        .map(|(i, _)| i)
        .collect();
    if decodes.is_empty() || !decodes.iter().all(|&i| flagged(&results[i])) {
        return None;
    }
    let pieces_clean = results
        .iter()
        .filter(|r| matches!(r.cut, Cut::Split { .. }))
        .all(|r| !flagged(r));
    let grows = decodes.iter().all(|&i| logits_grow(&results[i]));
    if !(pieces_clean && grows) {
        return None;
    }
    let err = decodes
        .iter()
        .filter_map(|&i| results[i].logits_rel_l2)
        .fold(0.0f64, f64::max);
    // Stored-state rows that pass at their own dtype's floor are the yardsticks; the flagged
    // ones carry this bug themselves.
    let like = results
        .iter()
        .filter(|r| is_stored_state(r) && !flagged(r))
        .filter_map(|r| Some((r.name.as_str(), r.logits_rel_l2?)))
        .filter(|(_, e)| *e > 0.0)
        .min_by(|a, b| (a.1 / err).ln().abs().total_cmp(&(b.1 / err).ln().abs()))
        .filter(|(_, e)| (e / err).ln().abs() < 10f64.ln())
        .map(|(name, e)| {
            format!("; the closest stored-state row is `{name}` (logits rel L2 {e:.2e})")
        })
        .unwrap_or_default();
    Some((
        decodes,
        format!(
            "decode logits error {err:.2e} grows with the steps while prefill in pieces is clean{like}"
        ),
    ))
}

/// Whether the per-position logits error grows over the decode steps: the later half of the
/// decoded steps is worse on average than the earlier half (position 0 is the prefill's own).
fn logits_grow(r: &PathResult) -> bool {
    let Some(row) = r
        .rows
        .iter()
        .find(|x| crate::capture::Key::of(&x.name) == Some(crate::capture::Key::Logits))
    else {
        return false;
    };
    let e = &row.stats.per_token_rel;
    if e.len() < 5 {
        return false;
    }
    let mid = e.len().div_ceil(2);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    mean(&e[mid..]) > mean(&e[1..mid])
}
