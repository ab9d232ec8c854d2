//! `hsdiff compare DIR_A DIR_B`: two sets of samples (folders, globs, batched files) compared
//! pair by pair with the one-pair comparison ([`crate::commands::compare::pair`]), into one dataset report
//! (`hsdiff.dataset/v1`, [`crate::report::dataset`]). Samples are found (`discover`) and paired
//! (`match_samples`); before any pair is read, a plan decides which pairs are calibrated and
//! which are this shard's (`plan`). Then the pairs a model calibrates run one at a time, the
//! others concurrently within a memory bound (`workers`, never more than a few samples in
//! memory), and the rows are summed up in pairing order (`aggregate`). `--calibrate N`
//! measures floors on the first N pairs of the whole dataset (in every shard) and applies them
//! to the rest (`floors`); `--shard I/N` compares every N-th pair into a part that names its run
//! (`part`, `listing`) — or finds that part already at `--out` and stops — and `hsdiff merge`
//! joins verified parts into the report of the whole (`merge`).

mod aggregate;
mod discover;
mod entries;
mod floors;
mod keep_memory;
mod listing;
mod match_samples;
pub mod merge;
mod part;
mod plan;
mod prefetch;
mod prefix_hits;
mod workers;

pub use discover::is_dataset;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::DType;

use crate::commands::compare::pair::{PairOptions, TruthModel, compare_pair};
use crate::commands::compare::token_difference::token_difference;
use crate::compare::verdict::Verdict;
use crate::error::{Error, Result};
use crate::formats::pipelines::ReadOptions;
use crate::model::{Model, ModelFolder};
use crate::printer::emit::FailOn;
use crate::report::dataset::{DATASET_SCHEMA, DatasetReport, Failed, Shard, Unpaired};
use crate::util::escape::{one_line, path_text};
use discover::Sample;
use plan::{PairJob, PlanInputs, RunPlan};
use workers::Workers;

/// How a dataset is compared.
#[derive(Debug, Clone, Default)]
pub struct DatasetOptions {
    pub pair: PairOptions,
    pub read_a: ReadOptions,
    pub read_b: ReadOptions,
    pub dtype_hint: Option<DType>,
    /// `--model DIR`, its config.json read: the truth and floor of every pair (two forward
    /// passes each).
    pub model: Option<ModelFolder>,
    /// `--calibrate N`: floors measured on the first N pairs of the whole dataset, applied to
    /// all.
    pub calibrate: Option<usize>,
    pub shard: Option<Shard>,
    /// With `shard`: the part's header is stamped on the report (and resumed from).
    pub part: Option<PartOptions>,
    /// `--allow-token-mismatch`: pairs left out for their token ids do not fail the run.
    pub allow_token_mismatch: bool,
}

/// What a `--shard` run knows beyond the comparison: the rest of its part's identity, and where
/// an earlier run of it may have left its part.
#[derive(Debug, Clone)]
pub struct PartOptions {
    /// `--fail-on`: decides the shard's exit code, so it is part of the run.
    pub fail_on: FailOn,
    /// `--out` of a JSON part: resumed from when it already holds this run's part.
    pub resume_from: Option<PathBuf>,
}

/// A dataset run's result: compared now, or a complete part of the same run found at
/// `--out` (the shard was not run again).
pub enum DatasetRun {
    Compared(DatasetReport),
    Resumed(DatasetReport),
}

/// Compares the samples of `a` with those of `b`.
pub fn run(a: &Path, b: &Path, opts: &DatasetOptions) -> Result<DatasetRun> {
    keep_memory::keep_freed_buffers();
    let (side_a, failed_a) = discover::side(a, opts.dtype_hint, &opts.read_a)?;
    let (side_b, failed_b) = discover::side(b, opts.dtype_hint, &opts.read_b)?;
    crate::formats::pipelines::check_ids_used(
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
            "no sample of {} ({} samples) pairs with one of {} ({}): no id is on both sides and \
             no two samples carry the same token ids",
            path_text(a),
            side_a.samples.len(),
            path_text(b),
            side_b.samples.len()
        )));
    }
    // Said once the sides pair: an error before this is one line.
    for (name, spec, side) in [("A", a, &side_a), ("B", b, &side_b)] {
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
    let total = matching.pairs.len();
    if let Some(s) = opts.shard {
        part::check_fits(s, total)?;
    }
    let mut header = match (&opts.part, opts.shard) {
        (Some(p), Some(s)) => Some(part::header((&side_a, &side_b), opts, p, s)?),
        _ => None,
    };
    if let (Some(h), Some(path)) = (
        &header,
        opts.part.as_ref().and_then(|p| p.resume_from.as_ref()),
    ) && let Some(done) = part::resume(path, h)
    {
        return Ok(DatasetRun::Resumed(done));
    }
    let plan = RunPlan::new(
        &matching.pairs,
        PlanInputs {
            model: opts.model.as_ref().map(|m| m.dir.as_path()),
            no_floor: opts.pair.no_floor,
            calibrate: opts.calibrate,
            shard: opts.shard,
        },
    );

    let mut model = match (&opts.model, opts.pair.no_floor) {
        (Some(folder), false) => {
            let dir = &folder.dir;
            let m = Model::from_folder(folder.clone())?;
            eprintln!(
                "hsdiff: calibrating with --model {}: {}, each with the f64 truth and a floor run per \
                 dtype (two or three forward passes per pair)",
                one_line(&path_text(dir)),
                match opts.calibrate {
                    Some(n) => format!(
                        "the first {} pairs only, their floors applied to the rest",
                        n.min(total)
                    ),
                    None => format!("all {} pairs", plan.calibrated.len()),
                },
            );
            Some((m, format!("--model {}", dir.display())))
        }
        _ => None,
    };
    let mut failed: Vec<Failed> = Vec::new();
    // This shard's pairs that failed: with the rows, every pair of the shard (the part's check).
    let mut failed_pairs: Vec<usize> = Vec::new();
    for (path, e) in failed_a.iter().chain(&failed_b) {
        failed.push(Failed {
            id: crate::formats::pipelines::sample_id(path),
            file_a: path_text(path),
            file_b: String::new(),
            error: e.to_string(),
        });
    }
    let RunPlan {
        calibrated,
        rest,
        calibration: calibration_text,
    } = plan;
    if let (Some(shard), Some(n)) = (opts.shard, opts.calibrate.filter(|_| model.is_some())) {
        let own = calibrated.iter().filter(|j| j.keep).count();
        eprintln!(
            "hsdiff: --calibrate {n} with --shard {}/{}: this shard measures the floors on the \
             same first {} pairs as every shard (the unsharded run's), {own} of them its own: \
             {} calibrated pairs here instead of {own}",
            shard.index,
            shard.count,
            calibrated.len(),
            calibrated.len()
        );
    }
    // Pairs without a model run concurrently — unless a file's fingerprint may name a model
    // to calibrate with (hsdiff dumps), which would run once per worker.
    let may_find_model = model.is_none() && (side_a.fingerprinted || side_b.fingerprinted);
    let workers = if may_find_model {
        Workers {
            count: 1,
            per_pair: 0,
            budget: None,
        }
    } else {
        Workers::plan(
            rest.iter().map(|j| {
                (
                    side_a.samples[j.pair.a].path.as_path(),
                    side_b.samples[j.pair.b].path.as_path(),
                )
            }),
            rayon::current_num_threads(),
        )
    };
    if rest.len() > 1 && !may_find_model {
        eprintln!("hsdiff: {}", workers.describe());
    }

    let mut progress = Progress::new(calibrated.len() + rest.len());
    let mut samples = Vec::with_capacity(calibrated.len() + rest.len());
    let mut floors = floors::Floors::default();
    for job in &calibrated {
        let (sa, sb) = (&side_a.samples[job.pair.a], &side_b.samples[job.pair.b]);
        let outcome = compare_one(sa, sb, opts, TruthModel::Loaded(&mut model));
        if let Ok(o) = &outcome
            && opts.calibrate.is_some()
        {
            floors.learn(&o.report);
        }
        if job.keep {
            match outcome {
                Ok(o) => samples.push(row_of(job, sa, sb, &o)),
                Err(e) => {
                    failed_pairs.push(job.k);
                    failed.push(failed_of(sa, sb, e));
                }
            }
        }
        progress.tick(&sa.id);
    }
    let floors = opts.calibrate.is_some().then_some(&floors);
    let judge = |i: usize, job: &PairJob| {
        if let Some(next) = rest.get(i + workers.count.max(1)) {
            let (na, nb) = (&side_a.samples[next.pair.a], &side_b.samples[next.pair.b]);
            prefetch::read_ahead(vec![na.path.clone(), nb.path.clone()]);
        }
        let (sa, sb) = (&side_a.samples[job.pair.a], &side_b.samples[job.pair.b]);
        let calibration = match floors {
            Some(_) => TruthModel::Skip("floors from the calibration pairs".to_string()),
            None => TruthModel::Fingerprinted,
        };
        let outcome = compare_one(sa, sb, opts, calibration).map_err(|e| failed_of(sa, sb, e))?;
        let mut row = row_of(job, sa, sb, &outcome);
        if let Some(f) = floors {
            f.apply(&mut row, &outcome.report);
        }
        Ok(row)
    };
    workers::run_all(&rest, workers.count, judge, |i, row| {
        match row {
            Ok(row) => samples.push(row),
            Err(f) => {
                failed_pairs.push(rest[i].k);
                failed.push(f);
            }
        }
        let j = &rest[i];
        progress.tick(&side_a.samples[j.pair.a].id);
    });
    let unpaired = |side: &[Sample], idx: &[usize]| -> Vec<Unpaired> {
        idx.iter()
            .map(|&i| Unpaired {
                id: side[i].id.clone(),
                file: side[i].file_label(),
                other: None,
                why: None,
                kind: None,
            })
            .collect()
    };
    let mut notes = prefix_hits::notes(&prefix_hits, &side_a.samples, &side_b.samples);
    for (name, side) in [("A", &side_a), ("B", &side_b)] {
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
    }
    let mut report = DatasetReport {
        schema: DATASET_SCHEMA.to_string(),
        verdict: Verdict::Ok,
        summary: String::new(),
        a: path_text(a),
        b: path_text(b),
        formats_a: side_a.formats.clone(),
        formats_b: side_b.formats.clone(),
        metric: String::new(),
        calibration: calibration_text,
        samples,
        layers: Vec::new(),
        token_mismatches: matching
            .token_mismatches
            .iter()
            .map(|&(i, j)| token_mismatch(&side_a.samples[i], &side_b.samples[j], opts))
            .collect(),
        token_mismatches_allowed: opts.allow_token_mismatch,
        unpaired_a: unpaired(&side_a.samples, &matching.unpaired_a),
        unpaired_b: unpaired(&side_b.samples, &matching.unpaired_b),
        failed,
        shard: opts.shard,
        pairs_total: total,
        notes,
        sample_notes: Vec::new(),
        command: opts.pair.command.clone(),
        part: None,
    };
    aggregate::finish(&mut report);
    if let Some(h) = &mut header {
        failed_pairs.sort_unstable();
        h.failed_pairs = failed_pairs;
    }
    report.part = header;
    Ok(DatasetRun::Compared(report))
}

fn row_of(
    job: &PairJob,
    sa: &Sample,
    sb: &Sample,
    outcome: &crate::commands::compare::pair::PairOutcome,
) -> crate::report::dataset::SampleRow {
    aggregate::sample_row(
        job.k,
        (sa.id.clone(), (sa.id != sb.id).then(|| sb.id.clone())),
        job.pair.by_id,
        (sa.file_label(), sb.file_label()),
        outcome,
    )
}

fn failed_of(sa: &Sample, sb: &Sample, e: Error) -> Failed {
    Failed {
        id: sa.id.clone(),
        file_a: sa.file_label(),
        file_b: sb.file_label(),
        error: e.to_string(),
    }
}

/// The progress line on stderr: pairs done of all, with an ETA from the rate so far; the first
/// and last pair and at most one line per two seconds between.
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            last_line: Instant::now(),
        }
    }

    fn tick(&mut self, id: &str) {
        self.done += 1;
        let n = self.done;
        if n == self.total || n == 1 || self.last_line.elapsed().as_secs_f64() >= 2.0 {
            let per = self.started.elapsed().as_secs_f64() / n as f64;
            eprintln!(
                "hsdiff: {n}/{} pairs compared ({}), ETA {:.0} s",
                self.total,
                crate::util::escape::one_line(id),
                per * self.total.saturating_sub(n) as f64
            );
            self.last_line = Instant::now();
        }
    }
}

fn compare_one(
    a: &Sample,
    b: &Sample,
    opts: &DatasetOptions,
    truth: TruthModel,
) -> Result<crate::commands::compare::pair::PairOutcome> {
    let src_a = discover::open(&a.path, a.batch_index, opts.dtype_hint, &opts.read_a)?;
    let src_b = discover::open(&b.path, b.batch_index, opts.dtype_hint, &opts.read_b)?;
    compare_pair(
        src_a,
        src_b,
        (a.id.clone(), b.id.clone()),
        &opts.pair,
        truth,
    )
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

fn count_files(samples: &[Sample]) -> usize {
    let mut paths: Vec<&Path> = samples.iter().map(|s| s.path.as_path()).collect();
    paths.dedup();
    paths.len()
}

/// Exit code of a dataset report: 2 when a sample could not be compared, else as for one pair —
/// and 1 at least when a pair was left out for its token ids (a tokenisation difference is a
/// finding), unless `--allow-token-mismatch` said such pairs are expected.
pub fn exit_code(report: &DatasetReport, fail_on: crate::printer::emit::FailOn) -> i32 {
    if !report.failed.is_empty() {
        2
    } else if !report.token_mismatches.is_empty() && !report.token_mismatches_allowed {
        1
    } else {
        i32::from(fail_on.flags(report.verdict))
    }
}
