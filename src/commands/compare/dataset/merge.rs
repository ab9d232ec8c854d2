//! `hsdiff merge PART.json…`: the parts of `--shard I/N` runs joined into the report of the
//! whole run — the same samples, per-layer rows, verdict and headline. Nothing in a part is
//! taken on trust: each is checked whole (digest, rows against its shard, verdict against its
//! rows: [`super::part::parse`]), all must be parts of one run, each shard once and none
//! missing; the merged verdict and headline are computed again from the samples' rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::aggregate;
use super::part;
use crate::error::{Error, Result};
use crate::report::dataset::DatasetReport;
use crate::report::dataset_part::{PartHeader, first_difference};

/// Missing shards named at most this many at once.
const NAMED: usize = 10;

/// A part read and checked whole: its path, its report, its header.
type Part<'p> = (&'p PathBuf, DatasetReport, PartHeader);

/// Joins the parts at `paths`.
pub fn merge(paths: &[PathBuf]) -> Result<DatasetReport> {
    let parts = read_parts(paths)?;
    check_one_run(&parts)?;
    Ok(join(parts))
}

/// Each part read and checked whole.
fn read_parts(paths: &[PathBuf]) -> Result<Vec<Part<'_>>> {
    let mut parts: Vec<Part> = Vec::with_capacity(paths.len());
    for p in paths {
        let bytes = crate::util::input::read_regular(
            p,
            crate::util::limits::get().json_bytes,
            "json-bytes",
        )?;
        let (r, h) = part::parse(&bytes).map_err(|why| Error::file(p, why))?;
        parts.push((p, r, h));
    }
    Ok(parts)
}

/// That the parts are of one run, each shard once and none missing.
fn check_one_run(parts: &[Part]) -> Result<()> {
    let Some((first_path, first, first_header)) = parts.first() else {
        return Err(Error::argument("PART.json", "no part to merge"));
    };
    let count = first_header.shard.count;
    // Keyed by index: nothing is sized by a count a file claims.
    let mut seen: BTreeMap<usize, &PathBuf> = BTreeMap::new();
    for (path, r, h) in parts {
        let another = |what: String| {
            Error::file(
                path,
                format!(
                    "a part of another run than {}: {what}",
                    first_path.display()
                ),
            )
        };
        if let Some(d) = first_difference(&first_header.run, &h.run) {
            return Err(another(d));
        }
        if !same_pairing(r, first) {
            return Err(another(
                "the sides' pairing, pairs_total, formats or calibration differ".to_string(),
            ));
        }
        if let Some(other) = seen.insert(h.shard.index, path) {
            return Err(Error::file(
                path,
                format!(
                    "shard {}/{count} again (also {})",
                    h.shard.index,
                    other.display()
                ),
            ));
        }
    }
    missing_shards(&seen, count)
}

/// Whether two parts' sides paired alike and were read and calibrated alike.
fn same_pairing(r: &DatasetReport, first: &DatasetReport) -> bool {
    r.a == first.a
        && r.b == first.b
        && r.pairs_total == first.pairs_total
        && r.unpaired_a == first.unpaired_a
        && r.unpaired_b == first.unpaired_b
        && r.token_mismatches == first.token_mismatches
        && r.calibration == first.calibration
        && r.formats_a == first.formats_a
        && r.formats_b == first.formats_b
}

/// An error naming the shards of `count` that no part in `seen` is, if any.
fn missing_shards(seen: &BTreeMap<usize, &PathBuf>, count: usize) -> Result<()> {
    if seen.len() < count {
        let missing: Vec<String> = (0..count)
            .filter(|i| !seen.contains_key(i))
            .take(NAMED)
            .map(|i| i.to_string())
            .collect();
        let all = count - seen.len();
        let msg = match all {
            1 => format!("shard {}/{count} is missing", missing[0]),
            _ if all <= NAMED => format!("shards {} of {count} are missing", missing.join(", ")),
            _ => format!(
                "shards {}, … of {count} are missing ({all} in all)",
                missing.join(", ")
            ),
        };
        return Err(Error::argument("PART.json", msg));
    }
    Ok(())
}

/// The report of the whole run: the first part's pairing, every part's samples, each failed
/// file once; verdict and headline computed again.
fn join(parts: Vec<Part>) -> DatasetReport {
    let mut whole = parts[0].1.clone();
    whole.shard = None;
    whole.part = None;
    whole.command = None;
    whole.samples = Vec::new();
    whole.failed = Vec::new();
    // Files that failed to open are found by every shard: each is kept once (a set, so that
    // parts listing many such files merge in linear time).
    let mut failed_seen = BTreeSet::new();
    for (_, r, _) in parts {
        whole.samples.extend(r.samples);
        for f in r.failed {
            let key = (
                f.id.clone(),
                f.file_a.clone(),
                f.file_b.clone(),
                f.error.clone(),
            );
            if failed_seen.insert(key) {
                whole.failed.push(f);
            }
        }
    }
    aggregate::finish(&mut whole);
    whole
}
