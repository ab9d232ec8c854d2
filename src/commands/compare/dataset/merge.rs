//! `hsdiff merge PART.json…`: the dataset reports of `--shard I/N` runs joined into the report
//! of the whole run — the same samples, per-layer rows, verdict and headline — after checking
//! that the parts are the N shards of one dataset, each once.

use std::path::PathBuf;

use super::aggregate;
use crate::error::{Error, Result};
use crate::report::dataset::{DATASET_SCHEMA, DatasetReport};

fn read(path: &PathBuf) -> Result<DatasetReport> {
    let bytes = crate::util::input::read_regular(
        path,
        crate::util::limits::get().json_bytes,
        "json-bytes",
    )?;
    let r: DatasetReport = serde_json::from_slice(&bytes).map_err(|e| {
        Error::file(
            path,
            format!("not a dataset report ({DATASET_SCHEMA}, from --format json): {e}"),
        )
    })?;
    if r.schema != DATASET_SCHEMA {
        return Err(Error::file(
            path,
            format!("schema `{}`, not {DATASET_SCHEMA}", r.schema),
        ));
    }
    Ok(r)
}

/// Joins the shard reports at `paths`.
pub fn merge(paths: &[PathBuf]) -> Result<DatasetReport> {
    let mut parts = Vec::with_capacity(paths.len());
    for p in paths {
        parts.push((p, read(p)?));
    }
    let Some((first_path, first)) = parts.first() else {
        return Err(Error::argument("PART.json", "no report to merge"));
    };
    let count = match first.shard {
        Some(s) => s.count,
        None => {
            return Err(Error::file(
                first_path,
                "not a shard's report (no `shard`): run with --shard I/N",
            ));
        }
    };
    let mut seen = vec![None; count];
    for (path, r) in &parts {
        let same = r.a == first.a
            && r.b == first.b
            && r.pairs_total == first.pairs_total
            && r.unpaired_a == first.unpaired_a
            && r.unpaired_b == first.unpaired_b
            && r.token_mismatches == first.token_mismatches
            && r.calibration == first.calibration;
        if !same {
            return Err(Error::file(
                path,
                format!(
                    "a shard of another comparison than {} (sides, pairs or calibration differ)",
                    first_path.display()
                ),
            ));
        }
        let s = r
            .shard
            .filter(|s| s.count == count && s.index < count)
            .ok_or_else(|| Error::file(path, format!("not one of {count} shards")))?;
        if let Some(other) = seen[s.index].replace(*path) {
            return Err(Error::file(
                path,
                format!("shard {}/{count} again (also {})", s.index, other.display()),
            ));
        }
    }
    if let Some(missing) = seen.iter().position(Option::is_none) {
        return Err(Error::argument(
            "PART.json",
            format!("shard {missing}/{count} is missing"),
        ));
    }
    let mut whole = first.clone();
    whole.shard = None;
    whole.command = None;
    whole.samples = Vec::new();
    whole.failed = Vec::new();
    for (_, r) in parts {
        whole.samples.extend(r.samples);
        for f in r.failed {
            // Files that failed to open are found by every shard.
            if !whole.failed.contains(&f) {
                whole.failed.push(f);
            }
        }
    }
    aggregate::finish(&mut whole);
    Ok(whole)
}
