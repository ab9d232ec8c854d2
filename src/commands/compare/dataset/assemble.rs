//! The dataset report of a run: the sides, how their samples paired (pairs left out for their
//! token ids, samples with no partner, entries not read), the rows and failures of the pairs
//! compared, summed up by `aggregate`.

use std::path::Path;

use super::discover::{self, Sample, Side};
use super::pairs::Ran;
use super::sides::Found;
use super::{DatasetOptions, aggregate, entries, prefix_hits};
use crate::commands::compare::token_difference::token_difference;
use crate::compare::verdict::Verdict;
use crate::formats::pipelines::ReadOptions;
use crate::report::dataset::{DATASET_SCHEMA, DatasetReport, Unpaired};
use crate::util::escape::path_text;

/// The report of `found`'s pairs, `ran` the ones compared; `calibration` says how they were
/// calibrated, `total` the pairs of the whole dataset.
pub fn report(
    (a, b): (&Path, &Path),
    found: Found,
    mut ran: Ran,
    (calibration, total): (String, usize),
    opts: &DatasetOptions,
) -> DatasetReport {
    let (sa, sb) = (&found.a.samples, &found.b.samples);
    let m = &found.matching;
    let mut notes = prefix_hits::notes(&found.prefix_hits, sa, sb);
    notes.extend(side_notes("A", &found.a));
    notes.extend(side_notes("B", &found.b));
    let mut failed = found.failed;
    failed.append(&mut ran.failed);
    let mut report = DatasetReport {
        schema: DATASET_SCHEMA.to_string(),
        verdict: Verdict::Ok,
        summary: String::new(),
        a: path_text(a),
        b: path_text(b),
        formats_a: found.a.formats.clone(),
        formats_b: found.b.formats.clone(),
        metric: String::new(),
        calibration,
        samples: ran.samples,
        layers: Vec::new(),
        token_mismatches: m
            .token_mismatches
            .iter()
            .map(|&(i, j)| token_mismatch(&sa[i], &sb[j], opts))
            .collect(),
        token_mismatches_allowed: opts.allow_token_mismatch,
        unpaired_a: unpaired(sa, &m.unpaired_a),
        unpaired_b: unpaired(sb, &m.unpaired_b),
        failed,
        shard: opts.shard,
        pairs_total: total,
        notes,
        sample_notes: Vec::new(),
        command: opts.pair.command.clone(),
        part: None,
    };
    aggregate::finish(&mut report);
    report
}

/// The notes on a side's entries that were not read.
fn side_notes(name: &str, side: &Side) -> Vec<String> {
    let mut notes = Vec::new();
    if !side.skipped.is_empty() {
        notes.push(format!(
            "{name}: {} file(s) not read, not captures by name: {}",
            side.skipped.len(),
            side.skipped
                .iter()
                .take(3)
                .map(|p| path_text(p))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.extend(entries::notes(name, &side.not_read));
    notes
}

fn unpaired(side: &[Sample], idx: &[usize]) -> Vec<Unpaired> {
    idx.iter()
        .map(|&i| Unpaired {
            id: side[i].id.clone(),
            file: side[i].file_label(),
            other: None,
            why: None,
            kind: None,
        })
        .collect()
}

/// A pair of equal ids left out for its token ids, with how they differ (read again: the
/// samples' digests say only that they do).
fn token_mismatch(a: &Sample, b: &Sample, opts: &DatasetOptions) -> Unpaired {
    let ids = |s: &Sample, read: &ReadOptions| {
        discover::open(&s.path, s.batch_index, opts.dtype_hint, read)
            .and_then(|src| src.input_ids())
    };
    let (why, kind) = match (ids(a, &opts.read_a), ids(b, &opts.read_b)) {
        (Ok(Some(x)), Ok(Some(y))) => match token_difference(&x, &y) {
            Some(d) => (d.describe(), Some(d.kind.describe())),
            None => ("token ids differ".to_string(), None),
        },
        (Err(e), _) | (_, Err(e)) => (format!("token ids differ (not read again: {e})"), None),
        _ => ("token ids differ".to_string(), None),
    };
    Unpaired {
        id: a.id.clone(),
        file: a.file_label(),
        other: Some(b.file_label()),
        why: Some(why),
        kind,
    }
}
