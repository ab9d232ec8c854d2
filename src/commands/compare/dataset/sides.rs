//! Every sample of both sides found and paired before any pair is read: each file opened for
//! its samples and their token ids (`discover`), the samples paired by id, then by token ids
//! (`match_samples`), then as requests served after a prefix-cache hit (`prefix_hits`). What a
//! dataset whose names do not pair, a shard, or a run that pairing by name gave up
//! (`by_name`) needs; each sample's file is opened here and again by its pair.

use std::path::Path;

use super::DatasetOptions;
use super::discover::{self, Listed, Sample, Side, Unread};
use super::match_samples::{self, Matching};
use super::prefix_hits::{self, PrefixHits};
use crate::error::{Error, Result};
use crate::formats::pipelines::check_ids_used;
use crate::report::dataset::Failed;
use crate::util::escape::{one_line, path_text};

/// Both sides, and how their samples paired.
pub struct Found {
    pub a: Side,
    pub b: Side,
    pub matching: Matching,
    pub prefix_hits: PrefixHits,
    /// The files of either side that could not be read.
    pub failed: Vec<Failed>,
}

/// Finds and pairs the samples of `a` (listed) and `b` (listed, or why not: said after A's
/// files are read, as a side's own error comes first).
pub fn find(
    (a, b): (&Path, &Path),
    (listed_a, listed_b): (&Listed, Result<Listed>),
    opts: &DatasetOptions,
) -> Result<Found> {
    let (side_a, failed_a) = discover::side(listed_a, opts.dtype_hint, &opts.read_a)?;
    let (side_b, failed_b) = discover::side(&listed_b?, opts.dtype_hint, &opts.read_b)?;
    check_ids_used(
        (&opts.read_a, side_a.pipeline),
        (&opts.read_b, side_b.pipeline),
    )?;
    let mut matching = match_samples::match_samples(&side_a.samples, &side_b.samples);
    let prefix_hits = prefix_hits::pair(
        &mut matching,
        &side_a.samples,
        &side_b.samples,
        &mut |is_a, s| {
            let read = if is_a { &opts.read_a } else { &opts.read_b };
            discover::open(&s.path, s.batch_index, opts.dtype_hint, read)?.input_ids()
        },
    )?;
    if matching.pairs.is_empty() && matching.token_mismatches.is_empty() {
        return Err(Error::Compare(format!(
            "no sample of {} ({}) pairs with one of {} ({}): no id is on both sides and no two \
             samples carry the same token ids",
            path_text(a),
            held(&side_a, &failed_a),
            path_text(b),
            held(&side_b, &failed_b)
        )));
    }
    tell((a, b), (&side_a, &side_b));
    let mut failed: Vec<Failed> = (failed_a.iter())
        .map(|u| failed_file(u, true, &side_b, &mut matching.unpaired_b))
        .collect();
    failed.extend(
        (failed_b.iter()).map(|u| failed_file(u, false, &side_a, &mut matching.unpaired_a)),
    );
    Ok(Found {
        a: side_a,
        b: side_b,
        matching,
        prefix_hits,
        failed,
    })
}

/// How many samples a side holds and, where some of its files could not be read, how many and
/// why the first could not: a side whose every file failed is named by its files' errors, never
/// as a bare "0 samples".
fn held(side: &Side, failed: &[Unread]) -> String {
    let samples = side.samples.len();
    match failed.first() {
        None => format!("{samples} samples"),
        Some(Unread { error: e, .. }) => format!(
            "{samples} samples; {} file(s) could not be read, the first: {}",
            failed.len(),
            one_line(&e.to_string())
        ),
    }
}

/// A sample of one side (`in_a`) that could not be read, with the other side's file of the
/// same id where it has one — that sample is then accounted for here, not left `unpaired`.
fn failed_file(u: &Unread, in_a: bool, other: &Side, unpaired: &mut Vec<usize>) -> Failed {
    let partner = unpaired
        .iter()
        .position(|&j| other.samples[j].id == u.id)
        .map(|at| unpaired.remove(at));
    let (mine, theirs) = (
        path_text(&u.path),
        partner.map_or_else(String::new, |j| other.samples[j].file_label()),
    );
    let (file_a, file_b) = if in_a { (mine, theirs) } else { (theirs, mine) };
    Failed {
        id: u.id.clone(),
        file_a,
        file_b,
        error: u.error.to_string(),
    }
}

/// Says on stderr what each side holds, once the sides pair: an error before this is one line.
pub fn tell((a, b): (&Path, &Path), (side_a, side_b): (&Side, &Side)) {
    for (name, spec, side) in [("A", a, side_a), ("B", b, side_b)] {
        eprintln!(
            "hsdiff: {name} ({}): {} samples in {} files",
            one_line(&path_text(spec)),
            side.samples.len(),
            count_files(&side.samples)
        );
        for f in &side.formats {
            eprintln!("hsdiff: {name}: {}", one_line(f));
        }
    }
}

fn count_files(samples: &[Sample]) -> usize {
    let mut paths: Vec<&Path> = samples.iter().map(|s| s.path.as_path()).collect();
    paths.dedup();
    paths.len()
}
