//! A shard's part: the header a `--shard` run stamps on its report, the check that a part file
//! is a whole, untampered part whose rows are the pairs its index selects (shared by resume and
//! `hsdiff merge`), and resume itself: a part of this very run already at `--out` is the
//! shard's result, anything else there is redone.

use std::path::Path;

use super::aggregate;
use super::discover::Side;
use super::{DatasetOptions, PartOptions};
use crate::error::{Error, Result};
use crate::formats::pipelines::LayerIds;
use crate::report::dataset::{DATASET_SCHEMA, DatasetReport, MAX_SHARDS, Shard};
use crate::report::dataset_part::{
    LayerIdsUsed, PART_SCHEMA, PartHeader, RunIdentity, RunOptions, check_digest, first_difference,
    unstamped,
};

/// `--shard I/N` against the dataset: at most one shard per pair.
pub fn check_fits(shard: Shard, pairs: usize) -> Result<()> {
    if shard.count == 0 || shard.count > MAX_SHARDS || shard.index >= shard.count {
        return Err(Error::argument(
            "--shard",
            format!(
                "{}/{} is no shard: 0 ≤ I < N ≤ {MAX_SHARDS}",
                shard.index, shard.count
            ),
        ));
    }
    if shard.count > pairs {
        return Err(Error::argument(
            "--shard",
            format!(
                "{}/{}: {} shards of a dataset of {pairs} pairs; give N ≤ {pairs}",
                shard.index, shard.count, shard.count
            ),
        ));
    }
    Ok(())
}

/// The header of this run's part (digest unstamped, no failed pairs yet).
pub fn header(
    sides: (&Side, &Side),
    opts: &DatasetOptions,
    part: &PartOptions,
    shard: Shard,
) -> Result<PartHeader> {
    let used = |l: &Option<LayerIds>| {
        l.as_ref().map(|l| LayerIdsUsed {
            ids: l.ids.clone(),
            from: l.from.to_string(),
        })
    };
    let model = match &opts.model {
        Some(folder) => Some(super::listing::of_folder(&folder.dir)?),
        None => None,
    };
    Ok(PartHeader {
        schema: PART_SCHEMA.to_string(),
        run: RunIdentity {
            hsdiff: env!("CARGO_PKG_VERSION").to_string(),
            a: sides.0.listing.clone(),
            b: sides.1.listing.clone(),
            model,
            options: RunOptions {
                dtype_hint: opts.dtype_hint.map(|d| d.as_str().to_string()),
                layer_ids_a: used(&opts.read_a.layer_ids),
                layer_ids_b: used(&opts.read_b.layer_ids),
                layers: opts.pair.layers.clone(),
                map: opts.pair.maps.iter().map(ToString::to_string).collect(),
                shift: opts.pair.shift,
                no_floor: opts.pair.no_floor,
                calibrate: opts.calibrate,
                fail_on: part.fail_on.as_str().to_string(),
                allow_token_mismatch: opts.allow_token_mismatch,
            },
            shards: shard.count,
        },
        shard,
        failed_pairs: Vec::new(),
        digest: unstamped(),
    })
}

/// The part in `bytes`, checked whole: its schema and header, its digest, and its rows against
/// its shard. The error says what is wrong (the caller names the file).
pub fn parse(bytes: &[u8]) -> std::result::Result<(DatasetReport, PartHeader), String> {
    let r: DatasetReport = serde_json::from_slice(bytes).map_err(|e| {
        format!("not a whole dataset report ({DATASET_SCHEMA}, from --format json): {e}")
    })?;
    if r.schema != DATASET_SCHEMA {
        return Err(format!("schema `{}`, not {DATASET_SCHEMA}", r.schema));
    }
    let Some(h) = r.part.clone() else {
        return Err(
            "not a shard's part (no `part` header: made without --shard I/N, or by an \
                    hsdiff before parts had one)"
                .to_string(),
        );
    };
    if h.schema != PART_SCHEMA {
        return Err(format!("part schema `{}`, not {PART_SCHEMA}", h.schema));
    }
    check_digest(bytes, &h.digest)?;
    check_rows(&r, &h)?;
    Ok((r, h))
}

/// The rows of a part are the pairs its shard selects — each once, none past `pairs_total` —
/// and its verdict and headline follow from them.
fn check_rows(r: &DatasetReport, h: &PartHeader) -> std::result::Result<(), String> {
    let s = h.shard;
    if r.shard != Some(s) || h.run.shards != s.count {
        return Err("its `shard` and its header's disagree".to_string());
    }
    check_fits(s, r.pairs_total).map_err(|e| format!("its shard: {e}"))?;
    let mut pairs: Vec<(usize, &str)> = r
        .samples
        .iter()
        .map(|x| (x.pair, x.id.as_str()))
        .chain(
            h.failed_pairs
                .iter()
                .map(|&k| (k, "(could not be compared)")),
        )
        .collect();
    pairs.sort_unstable();
    for w in pairs.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(format!("pair {} is in it twice", w[0].0));
        }
    }
    for &(k, id) in &pairs {
        if k >= r.pairs_total {
            return Err(format!(
                "sample {id} is pair {k}, past pairs_total {}",
                r.pairs_total
            ));
        }
        if k % s.count != s.index {
            return Err(format!(
                "sample {id} is pair {k}, not one of shard {}/{}'s pairs (those with pair mod {} \
                 = {})",
                s.index, s.count, s.count, s.index
            ));
        }
    }
    let selected = (r.pairs_total - s.index).div_ceil(s.count);
    if pairs.len() != selected {
        return Err(format!(
            "it holds {} of the {selected} pairs shard {}/{} selects of pairs_total {}",
            pairs.len(),
            s.index,
            s.count,
            r.pairs_total
        ));
    }
    if h.failed_pairs.len() > r.failed.len() {
        return Err("failed_pairs names more pairs than `failed` lists".to_string());
    }
    let mut again = r.clone();
    aggregate::finish(&mut again);
    if again.verdict != r.verdict || again.summary != r.summary {
        return Err(format!(
            "its verdict and headline do not follow from its rows (they give: {})",
            again.summary
        ));
    }
    Ok(())
}

/// The report of `path` when it is a complete part of the run `want` — the shard is then done
/// — else `None` (and stderr says why it is redone; nothing when there is no file).
pub fn resume(path: &Path, want: &PartHeader) -> Option<DatasetReport> {
    if std::fs::symlink_metadata(path).is_err() {
        return None;
    }
    let shown = crate::util::escape::one_line(&path.display().to_string());
    let bytes = crate::util::input::read_previous_output(
        path,
        crate::util::limits::get().json_bytes,
        "json-bytes",
    );
    let why = match bytes.map_err(|e| e.to_string()).and_then(|b| parse(&b)) {
        Err(why) => why,
        Ok((_, h)) if h.shard != want.shard => format!(
            "a part of shard {}/{}, not {}/{}",
            h.shard.index, h.shard.count, want.shard.index, want.shard.count
        ),
        Ok((r, h)) => match first_difference(&h.run, &want.run) {
            Some(d) => format!("a part of another run: {d}"),
            None => {
                eprintln!(
                    "hsdiff: {shown}: a complete part of this run (shard {}/{}, digest \
                     verified): skipped",
                    h.shard.index, h.shard.count
                );
                return Some(r);
            }
        },
    };
    eprintln!(
        "hsdiff: {shown}: redone: {}",
        crate::util::escape::one_line(&why)
    );
    None
}
