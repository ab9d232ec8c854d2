//! The dataset report's headline, one sentence from its rows: token ids that differ lead it,
//! then the verdict of the compared samples (ok within the floor, uncalibrated within the band,
//! or flagged with the worst sample and the layer-id slips), then what was paired by token ids,
//! judged otherwise at the trained positions, left out, unpaired or not compared, and how the
//! samples were calibrated. Never "ok" when nothing was compared.

use crate::compare::verdict::Verdict;
use crate::report::dataset::{DatasetReport, SampleRow};

/// The headline of `r`, its rows and lists complete.
pub fn headline(r: &DatasetReport) -> String {
    let n = r.samples.len();
    let mismatched = r.token_mismatches.len();
    if n == 0 {
        return nothing_compared(r);
    }
    let lead = if mismatched > 0 && !r.token_mismatches_allowed {
        format!(
            "token ids differ in {mismatched} of {} pairs, left out ({}); ",
            mismatched + n,
            token_differences(&r.token_mismatches)
        )
    } else {
        String::new()
    };
    format!("{lead}{}{}", verdict_clause(r), after_the_verdict(r))
}

/// What the compared samples come to: ok within the floor, uncalibrated within the band, or
/// how many are flagged and the worst.
fn verdict_clause(r: &DatasetReport) -> String {
    let n = r.samples.len();
    let flagged: Vec<&SampleRow> = r
        .samples
        .iter()
        .filter(|s| s.verdict != Verdict::Ok)
        .collect();
    if !flagged.is_empty() {
        return flagged_clause(r, &flagged);
    }
    match r
        .samples
        .iter()
        .filter_map(|s| s.worst_x_floor)
        .reduce(f64::max)
    {
        Some(x) if r.metric == "x_floor" => {
            format!("ok: all {n} compared samples within {x:.1}× the rounding floor")
        }
        // No floor judged them: only what no rounding explains could have been flagged.
        worst => format!(
            "uncalibrated: all {n} compared samples within the depth-scaled band (max rel L2 \
                 {:.2e}){}",
            r.samples.iter().map(|s| s.worst_rel_l2).fold(0.0, f64::max),
            if worst.is_none() {
                "; pass --model DIR to judge them against the rounding floor"
            } else {
                ""
            }
        ),
    }
}

/// "VERDICT: SLIPS K of N compared samples flagged — worst sample …".
fn flagged_clause(r: &DatasetReport, flagged: &[&SampleRow]) -> String {
    let n = r.samples.len();
    let worst = flagged
        .iter()
        .max_by(|p, q| {
            p.verdict.cmp(&q.verdict).then(
                p.worst_x_floor
                    .unwrap_or(p.worst_rel_l2)
                    .total_cmp(&q.worst_x_floor.unwrap_or(q.worst_rel_l2)),
            )
        })
        .copied();
    let what = worst.map_or(String::new(), |w| {
        let at = w
            .first_divergent
            .as_deref()
            .or(w.worst_tensor.as_deref())
            .unwrap_or("?");
        // NaN is the finding itself, never a bound the mismatch exceeds.
        let size = match w.worst_x_floor {
            _ if w.worst_rel_l2.is_nan() => "NaN/Inf values: no distance is measured".to_string(),
            Some(x) => format!("{x:.1}× the floor"),
            None => format!("rel L2 {:.2e}", w.worst_rel_l2),
        };
        // A sample flagged by a finding of its pairing alone (a layer-id slip, a token shift)
        // has no row that departs: "from layers.N (0.0× the floor)" would name one.
        if w.first_divergent.is_none() && !w.layer_id_slips.is_empty() {
            return format!(
                " — worst sample {}: {} for the finding above alone (its rows at most {size})",
                w.id,
                w.verdict.as_str()
            );
        }
        format!(
            " — worst sample {}: {} from {at} ({size})",
            w.id,
            w.verdict.as_str()
        )
    });
    format!(
        "{}: {}{} of {n} compared samples flagged{what}",
        r.verdict.as_str(),
        layer_id_slips(&r.samples),
        flagged.len()
    )
}

/// The clauses after the verdict: samples paired by token ids, judged otherwise at their
/// trained positions, left out (allowed), unpaired, not compared, and how they were
/// calibrated.
fn after_the_verdict(r: &DatasetReport) -> String {
    let n = r.samples.len();
    let mismatched = r.token_mismatches.len();
    let mut s = String::new();
    let by_tokens = r.samples.iter().filter(|x| x.paired_by != "id").count();
    if by_tokens > 0 {
        s.push_str(&format!("; {by_tokens} paired by token ids"));
    }
    let trained_differs: Vec<&str> = r
        .samples
        .iter()
        .filter(|x| x.trained.as_ref().is_some_and(|t| t.verdict != x.verdict))
        .map(|x| x.id.as_str())
        .collect();
    if !trained_differs.is_empty() {
        s.push_str(&format!(
            "; the trained positions (loss_mask) judge differently in {}",
            trained_differs.join(", ")
        ));
    }
    let ids = |v: &[crate::report::dataset::Unpaired]| {
        let shown: Vec<&str> = v.iter().take(3).map(|u| u.id.as_str()).collect();
        let more = if v.len() > 3 {
            format!(", … ({} in all)", v.len())
        } else {
            String::new()
        };
        format!("{}{more}", shown.join(", "))
    };
    if mismatched > 0 && r.token_mismatches_allowed {
        s.push_str(&format!(
            "; {mismatched} pair(s) left out, token ids differ ({}), allowed by \
             --allow-token-mismatch",
            ids(&r.token_mismatches)
        ));
    }
    if !r.unpaired_a.is_empty() {
        s.push_str(&format!("; unpaired in A: {}", ids(&r.unpaired_a)));
    }
    if !r.unpaired_b.is_empty() {
        s.push_str(&format!("; unpaired in B: {}", ids(&r.unpaired_b)));
    }
    if !r.failed.is_empty() {
        s.push_str(&format!(
            "; {} sample(s) could not be compared",
            r.failed.len()
        ));
    }
    let calibrated = r
        .samples
        .iter()
        .filter(|x| x.rows.values().any(|f| f.x_floor.is_some()))
        .count();
    if calibrated == n {
        s.push_str(&format!("; {}", r.calibration));
    } else {
        s.push_str(&format!(
            "; {}: {calibrated} of {n} samples calibrated",
            r.calibration
        ));
    }
    s
}

/// The pairs' layer-id slips, which lead a flagged headline: each distinct clause with the
/// samples it is in, "CLAUSE (in N of M samples: a, b, c and K more); ".
fn layer_id_slips(samples: &[SampleRow]) -> String {
    let mut groups: Vec<(&[String], Vec<&str>)> = Vec::new();
    for s in samples.iter().filter(|s| !s.layer_id_slips.is_empty()) {
        match groups
            .iter_mut()
            .find(|(c, _)| *c == s.layer_id_slips.as_slice())
        {
            Some((_, ids)) => ids.push(&s.id),
            None => groups.push((&s.layer_id_slips, vec![&s.id])),
        }
    }
    groups
        .into_iter()
        .map(|(clauses, ids)| {
            let shown: Vec<&str> = ids.iter().take(3).copied().collect();
            let more = match ids.len() - shown.len() {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            format!(
                "{} (in {} of {} samples: {}{more}); ",
                clauses.join("; "),
                ids.len(),
                samples.len(),
                shown.join(", ")
            )
        })
        .collect()
}

/// The headline when no pair was compared: why, never "ok".
fn nothing_compared(r: &DatasetReport) -> String {
    let mut why = Vec::new();
    if !r.token_mismatches.is_empty() {
        why.push(format!(
            "token ids differ in all {} pairs of equal ids ({})",
            r.token_mismatches.len(),
            token_differences(&r.token_mismatches)
        ));
    }
    if !r.failed.is_empty() {
        why.push(format!(
            "{} sample(s) could not be compared",
            r.failed.len()
        ));
    }
    if why.is_empty() {
        why.push(match r.shard {
            Some(s) => format!("shard {}/{} holds no pair", s.index, s.count),
            None => "no pair".to_string(),
        });
    }
    format!("nothing compared: {}", why.join("; "))
}

/// How the left-out pairs' token ids differ: once when every pair differs the same way, else
/// the first few pairs each with its difference.
fn token_differences(left_out: &[crate::report::dataset::Unpaired]) -> String {
    let first_kind = left_out.first().and_then(|u| u.kind.as_deref());
    if let Some(kind) = first_kind
        && left_out.len() > 1
        && left_out.iter().all(|u| u.kind.as_deref() == Some(kind))
    {
        return format!("every one the same way: {kind}");
    }
    let shown: Vec<String> = left_out
        .iter()
        .take(3)
        .map(|u| {
            format!(
                "{}: {}",
                u.id,
                u.why.as_deref().unwrap_or("token ids differ")
            )
        })
        .collect();
    let more = match left_out.len().saturating_sub(3) {
        0 => String::new(),
        more => format!("; and {more} more"),
    };
    format!("{}{more}", shown.join("; "))
}
