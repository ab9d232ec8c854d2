//! `hsdiff compare DIR_A DIR_B`: two sets of samples (folders, globs, batched files) compared
//! pair by pair with the one-pair comparison ([`crate::compare_pair`]), into one dataset report
//! (`hsdiff.dataset/v1`, [`crate::report::dataset`]). Samples are found (`discover`), paired
//! (`match_samples`), compared one pair at a time — never more than a few samples in memory —
//! and summed up (`aggregate`). `--calibrate N` measures floors on N pairs and applies them to
//! the rest (`floors`); `--shard I/N` compares every N-th pair, and `hsdiff merge` joins the
//! shards' reports into the report of the whole (`merge`).

mod aggregate;
mod discover;
mod floors;
mod match_samples;
pub mod merge;

pub use discover::is_dataset;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::DType;

use crate::compare_pair::{Calibration, PairOptions, compare_pair};
use crate::error::{Error, Result};
use crate::formats::pipelines::ReadOptions;
use crate::model::Model;
use crate::report::dataset::{DATASET_SCHEMA, DatasetReport, Failed, Shard, Unpaired};
use crate::verdict::Verdict;
use discover::Sample;

/// How a dataset is compared.
#[derive(Debug, Clone, Default)]
pub struct DatasetOptions {
    pub pair: PairOptions,
    pub read_a: ReadOptions,
    pub read_b: ReadOptions,
    pub dtype_hint: Option<DType>,
    /// `--model DIR`: the truth and floor of every pair (two forward passes each).
    pub model: Option<PathBuf>,
    /// `--calibrate N`: floors measured on the first N pairs, applied to all.
    pub calibrate: Option<usize>,
    pub shard: Option<Shard>,
}

/// `--shard I/N`.
pub fn parse_shard(arg: &str) -> Result<Shard> {
    let bad = || {
        Error::argument(
            "--shard",
            format!("expects I/N with 0 ≤ I < N, got `{arg}`"),
        )
    };
    let (i, n) = arg.split_once('/').ok_or_else(bad)?;
    let (index, count): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// Compares the samples of `a` with those of `b`.
pub fn run(a: &Path, b: &Path, opts: &DatasetOptions) -> Result<DatasetReport> {
    let (side_a, failed_a) = discover::side(a, opts.dtype_hint, &opts.read_a)?;
    let (side_b, failed_b) = discover::side(b, opts.dtype_hint, &opts.read_b)?;
    crate::formats::pipelines::check_ids_used(
        (&opts.read_a, side_a.pipeline),
        (&opts.read_b, side_b.pipeline),
    )?;
    let matching = match_samples::match_samples(&side_a.samples, &side_b.samples);
    if matching.pairs.is_empty() {
        return Err(Error::Compare(format!(
            "no sample of {} ({} samples) pairs with one of {} ({}): neither their ids nor their token ids match",
            a.display(),
            side_a.samples.len(),
            b.display(),
            side_b.samples.len()
        )));
    }
    // Said once the sides pair: an error before this is one line.
    for (name, spec, side) in [("A", a, &side_a), ("B", b, &side_b)] {
        eprintln!(
            "hsdiff: {name} ({}): {} samples in {} files",
            spec.display(),
            side.samples.len(),
            count_files(&side.samples)
        );
        for f in &side.formats {
            eprintln!("hsdiff: {name}: {f}");
        }
    }
    let total = matching.pairs.len();
    let mine: Vec<(usize, match_samples::Pair)> = matching
        .pairs
        .iter()
        .copied()
        .enumerate()
        .filter(|(k, _)| opts.shard.is_none_or(|s| k % s.count == s.index))
        .collect();

    let mut model = match (&opts.model, opts.pair.no_floor) {
        (Some(dir), false) => {
            let m = Model::load(dir)?;
            eprintln!(
                "hsdiff: calibrating with --model {}: {}, each with the f64 truth and a floor run per \
                 dtype (two or three forward passes per pair)",
                dir.display(),
                match opts.calibrate {
                    Some(n) =>
                        format!("the first {n} pairs only, their floors applied to the rest"),
                    None => format!("all {} pairs", mine.len()),
                },
            );
            Some((m, format!("--model {}", dir.display())))
        }
        _ => None,
    };
    let calibration_text = match (&opts.model, opts.calibrate, opts.pair.no_floor) {
        (_, _, true) => "uncalibrated (--no-floor)".to_string(),
        (Some(dir), Some(n), _) => format!(
            "floors measured on {} pairs with --model {} and applied to all (median per row)",
            n.min(mine.len()),
            dir.display()
        ),
        (Some(dir), None, _) => {
            format!("truth and floor per sample with --model {}", dir.display())
        }
        (None, _, _) => {
            "truth and floor per sample with the model a file's fingerprint names, where one does"
                .to_string()
        }
    };

    let mut samples = Vec::with_capacity(mine.len());
    let mut failed: Vec<Failed> = Vec::new();
    for (path, e) in failed_a.iter().chain(&failed_b) {
        failed.push(Failed {
            id: crate::formats::pipelines::sample_id(path),
            file_a: path.display().to_string(),
            file_b: String::new(),
            error: e.to_string(),
        });
    }
    let mut floors = floors::Floors::default();
    // Samples whose all-zero positions on both sides were left out as padding.
    let mut padded: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut last_line = Instant::now();
    for (done, (k, pair)) in mine.iter().enumerate() {
        let (sa, sb) = (&side_a.samples[pair.a], &side_b.samples[pair.b]);
        let calibrate_this = opts.calibrate.is_none_or(|n| done < n);
        let calibration = if model.is_none() {
            Calibration::Find(None)
        } else if calibrate_this {
            Calibration::Loaded(&mut model)
        } else {
            Calibration::Skip("floors from the calibration pairs".to_string())
        };
        let outcome = compare_one(sa, sb, opts, calibration);
        match outcome {
            Ok(outcome) => {
                if let Some(p) = &outcome.zero_padding {
                    padded.push(format!("{} {} of {}", sa.id, p.left_out, p.of));
                }
                let mut row = aggregate::sample_row(
                    *k,
                    (sa.id.clone(), (sa.id != sb.id).then(|| sb.id.clone())),
                    pair.by_id,
                    (sa.file_label(), sb.file_label()),
                    &outcome,
                );
                if opts.calibrate.is_some() {
                    if calibrate_this {
                        floors.learn(&outcome.report);
                    } else {
                        floors.apply(&mut row, &outcome.report);
                    }
                }
                samples.push(row);
            }
            Err(e) => failed.push(Failed {
                id: sa.id.clone(),
                file_a: sa.file_label(),
                file_b: sb.file_label(),
                error: e.to_string(),
            }),
        }
        let n = done + 1;
        if n == mine.len() || last_line.elapsed().as_secs_f64() >= 2.0 || n == 1 {
            let per = started.elapsed().as_secs_f64() / n as f64;
            eprintln!(
                "hsdiff: {n}/{} pairs compared ({}), ETA {:.0} s",
                mine.len(),
                sa.id,
                per * (mine.len() - n) as f64
            );
            last_line = Instant::now();
        }
    }
    let unpaired = |side: &[Sample], idx: &[usize]| -> Vec<Unpaired> {
        idx.iter()
            .map(|&i| Unpaired {
                id: side[i].id.clone(),
                file: side[i].file_label(),
                other: None,
                why: None,
            })
            .collect()
    };
    let mut notes = Vec::new();
    for (name, side) in [("A", &side_a), ("B", &side_b)] {
        if !side.skipped.is_empty() {
            notes.push(format!(
                "{name}: {} file(s) not read, not captures by name: {}",
                side.skipped.len(),
                side.skipped
                    .iter()
                    .take(3)
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if !padded.is_empty() {
        notes.push(format!(
            "zero padding left out in {} sample(s) (positions zero in every hidden state of both \
             sides, no attention_mask: no forward writes an all-zero hidden state): {}",
            padded.len(),
            padded.join(", ")
        ));
    }
    let mut report = DatasetReport {
        schema: DATASET_SCHEMA.to_string(),
        verdict: Verdict::Ok,
        summary: String::new(),
        a: a.display().to_string(),
        b: b.display().to_string(),
        formats_a: side_a.formats.clone(),
        formats_b: side_b.formats.clone(),
        metric: String::new(),
        calibration: calibration_text,
        samples,
        layers: Vec::new(),
        token_mismatches: matching
            .token_mismatches
            .iter()
            .map(|&(i, j)| Unpaired {
                id: side_a.samples[i].id.clone(),
                file: side_a.samples[i].file_label(),
                other: Some(side_b.samples[j].file_label()),
                why: Some(token_difference(&side_a.samples[i], &side_b.samples[j])),
            })
            .collect(),
        unpaired_a: unpaired(&side_a.samples, &matching.unpaired_a),
        unpaired_b: unpaired(&side_b.samples, &matching.unpaired_b),
        failed,
        shard: opts.shard,
        pairs_total: total,
        notes,
        command: opts.pair.command.clone(),
    };
    aggregate::finish(&mut report);
    Ok(report)
}

fn compare_one(
    a: &Sample,
    b: &Sample,
    opts: &DatasetOptions,
    calibration: Calibration,
) -> Result<crate::compare_pair::PairOutcome> {
    let src_a = discover::open(&a.path, a.batch_index, opts.dtype_hint, &opts.read_a)?;
    let src_b = discover::open(&b.path, b.batch_index, opts.dtype_hint, &opts.read_b)?;
    compare_pair(
        src_a,
        src_b,
        (a.id.clone(), b.id.clone()),
        &opts.pair,
        calibration,
    )
}

fn token_difference(a: &Sample, b: &Sample) -> String {
    match (a.tokens, b.tokens) {
        (Some((_, x)), Some((_, y))) if x != y => format!("{x} vs {y} token ids"),
        _ => "same length, different token ids".to_string(),
    }
}

fn count_files(samples: &[Sample]) -> usize {
    let mut paths: Vec<&Path> = samples.iter().map(|s| s.path.as_path()).collect();
    paths.dedup();
    paths.len()
}

/// Exit code of a dataset report: 2 when a sample could not be compared, else as for one pair.
pub fn exit_code(report: &DatasetReport, fail_on: crate::report::emit::FailOn) -> i32 {
    if !report.failed.is_empty() {
        2
    } else {
        i32::from(fail_on.flags(report.verdict))
    }
}
