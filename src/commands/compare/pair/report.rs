//! The pair's report, and when a pipeline's `loss_mask` marks only some positions as trained,
//! the report of those positions on their own (same truth and floor runs, restricted to them):
//! its figures close the pair's notes and sit beside all positions' in a dataset's rows.

use super::Trained;
use super::rows::Planned;
use crate::commands::compare::pair_steps;
use crate::commands::compare::positions::{Positions, TrainedAt, trained_positions};
use crate::compare::{Kind, PlannedRow, TensorSource};
use crate::error::Result;
use crate::formats::FileSource;
use crate::job::{self, Executed, Findings, Given, Parts};
use crate::report::{ComparedInput, Report, TokenIds};

/// What the report says besides the job's runs and the rows.
pub(super) struct Described {
    pub labels: (String, String),
    pub input_ids: Vec<u32>,
    pub token_ids: TokenIds,
    pub num_layers: Option<usize>,
    pub command: Option<String>,
    pub notes: Vec<String>,
    pub uncalibrated_why: Option<String>,
    /// A pipeline's declared layer ids that the truth shows to be off
    /// ([`crate::commands::compare::layer_id_slip`]): they lead the headline.
    pub slips: Vec<String>,
    /// B's states one token later or earlier than A's ([`crate::compare::token_shift`]): it
    /// leads the headline after the slips.
    pub token_shift: Option<String>,
    /// Sides without router choices whose routing was recovered from their states.
    pub routing_recovered: Vec<String>,
}

/// The report of the pair, and of its trained positions when they are not all of them.
pub(super) fn report<'p>(
    done: &Executed,
    (a, b): (&'p FileSource, &'p FileSource),
    planned: &Planned<'p>,
    described: Described,
) -> Result<(Report, Option<Trained>, bool)> {
    let dtype = done.spec().dtype();
    let tokens = compared_tokens(a, &planned.rows, &described.input_ids);
    let [src_a, src_b] = planned.sources(a, b);
    let (label_a, label_b) = described.labels;
    let parts = Parts {
        given: Given::Both(src_a, src_b),
        a_side: pair_steps::side(a, label_a, dtype)?,
        b_side: pair_steps::side(b, label_b, dtype)?,
        rows: planned.rows.clone(),
        input: ComparedInput {
            input_ids: described.input_ids,
            token_ids: described.token_ids,
            tokens,
            num_layers: described.num_layers,
        },
        command: described.command,
    };
    // Built first so that its note is in before the pair's report is built; an error of the
    // pair's own report still comes first.
    let at = trained_positions(a, b, tokens)?;
    let untrained = match at {
        TrainedAt::None(side) => Some(untrained_note(side, tokens)),
        _ => None,
    };
    let index = match at {
        TrainedAt::Some(index) => Some(index),
        _ => None,
    };
    let trained = index.map(|index| {
        let findings = Findings {
            one_sided: planned.one_sided.clone(),
            uncalibrated_why: described.uncalibrated_why.clone(),
            ..Findings::default()
        };
        trained_report(done, &parts, findings, &index)
    });
    let findings = Findings {
        alignment: planned.alignment.clone(),
        notes: described.notes,
        closing_notes: trained
            .iter()
            .flatten()
            .map(trained_note)
            .chain(untrained.clone())
            .collect(),
        leading_findings: (described.slips.into_iter())
            .chain(described.token_shift)
            .collect(),
        routing_recovered: described.routing_recovered,
        one_sided: planned.one_sided.clone(),
        uncalibrated_why: described.uncalibrated_why,
    };
    let report = done.report_of_files(parts, findings)?;
    Ok((report, trained.transpose()?, untrained.is_some()))
}

/// The note of a `loss_mask` (side `side`'s) that trains on none of the `tokens` positions.
fn untrained_note(side: &str, tokens: usize) -> String {
    format!(
        "trained positions (loss_mask): none of {tokens}: {side}'s loss_mask is 0 at every \
         position, so no position is trained on and nothing is compared at trained positions \
         (the table is of all positions)"
    )
}

/// The positions compared: the token ids', else the rows' sequence length.
fn compared_tokens(a: &FileSource, rows: &[PlannedRow], input_ids: &[u32]) -> usize {
    if input_ids.is_empty() {
        rows.iter()
            .find_map(|r| a.shape(&r.key.to_string()))
            .and_then(|s| s.get(1).copied())
            .unwrap_or(0)
    } else {
        input_ids.len()
    }
}

/// The pair's comparison seen at the trained positions `index` only, on the rows that have a
/// value per position.
fn trained_report(
    done: &Executed,
    parts: &Parts,
    findings: Findings,
    index: &[u32],
) -> Result<Trained> {
    let ids = &parts.input.input_ids;
    let kept: Vec<u32> = if ids.is_empty() {
        Vec::new()
    } else {
        index
            .iter()
            .map(|&i| ids.get(i as usize).copied().unwrap_or(0))
            .collect()
    };
    let at_trained = Parts {
        given: parts.given,
        a_side: parts.a_side.clone(),
        b_side: parts.b_side.clone(),
        rows: parts
            .rows
            .iter()
            .filter(|r| Positions::per_token(r.key) && r.kind != Kind::State)
            .cloned()
            .collect(),
        input: ComparedInput {
            input_ids: kept,
            token_ids: parts.input.token_ids,
            tokens: index.len(),
            num_layers: parts.input.num_layers,
        },
        command: None,
    };
    let view = job::view(|s| {
        let seen: Box<dyn TensorSource + '_> = Box::new(Positions::of(s, index));
        seen
    });
    Ok(Trained {
        positions: index.len(),
        of: parts.input.tokens,
        report: done.report_seen(at_trained, findings, &view)?,
    })
}

/// The figures of the positions `loss_mask` trains on, as a note under one pair's table.
fn trained_note(t: &Trained) -> String {
    let worst = t
        .report
        .tensors
        .iter()
        .filter_map(|r| r.judgement.ratio_to_floor.map(|x| (x, &r.name)))
        .max_by(|p, q| p.0.total_cmp(&q.0));
    let size = match worst {
        Some((x, name)) => format!("worst {x:.1}× the floor at {name}"),
        None => format!(
            "max rel L2 {:.2e}",
            t.report
                .tensors
                .iter()
                .map(|r| r.stats.rel_l2)
                .fold(0.0, f64::max)
        ),
    };
    format!(
        "trained positions (loss_mask): {} of {}: {} ({size})",
        t.positions,
        t.of,
        t.report.verdict.as_str()
    )
}
