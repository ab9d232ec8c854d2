//! `hsdiff compare DIR_A DIR_B`: two sets of samples (folders, globs, batched files) compared
//! pair by pair with the one-pair comparison ([`crate::commands::compare::pair`]), into one dataset report
//! (`hsdiff.dataset/v1`, [`crate::report::dataset`]). The sides' files are listed
//! (`discover`); when their names pair one to one, each pair's files are opened once, by the
//! pair (`by_name`); else every sample is found and paired by id and token ids first (`sides`,
//! `match_samples`, `prefix_hits`). Before any pair is read, a plan decides which pairs are
//! calibrated and which are this shard's (`plan`). Then the pairs a model calibrates run one at
//! a time, the others concurrently within a memory bound (`pairs`, `workers`: never more than a
//! few samples in memory), and the rows are summed up in pairing order (`assemble`,
//! `aggregate`). `--calibrate N` measures floors on the first N pairs of the whole dataset (in
//! every shard) and applies them to the rest (`floors`); `--shard I/N` compares every N-th pair
//! into a part that names its run (`part`, `listing`) — or finds that part already at `--out`
//! and stops — and `hsdiff merge` joins verified parts into the report of the whole (`merge`).

mod aggregate;
mod assemble;
mod by_name;
mod discover;
mod entries;
mod floors;
mod headline;
mod keep_memory;
mod listing;
mod match_samples;
pub mod merge;
mod pairs;
mod part;
mod plan;
mod prefetch;
mod prefix_hits;
mod sides;
mod workers;

pub use discover::is_dataset;

use std::path::{Path, PathBuf};

use candle_core::DType;

use crate::commands::compare::pair::PairOptions;
use crate::error::{Error, Result};
use crate::formats::pipelines::ReadOptions;
use crate::model::ModelFolder;
use crate::printer::emit::FailOn;
use crate::report::dataset::{DatasetReport, Shard};
use match_samples::Pair;
use pairs::{Compare, Opening};
use plan::{PlanInputs, RunPlan};
use sides::Found;

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
    let listed_a = discover::files(a)?;
    let listed_b = discover::files(b);
    if opts.shard.is_none()
        && let Ok(listed_b) = &listed_b
        && let Some(report) = by_name::run((a, b), (&listed_a, listed_b), opts)?
    {
        return Ok(DatasetRun::Compared(report));
    }
    let found = sides::find((a, b), (&listed_a, listed_b), opts)?;
    by_token_ids((a, b), found, opts)
}

/// The dataset paired by token ids (`sides`): its shard's part found at `--out`, or its pairs
/// compared, each sample's file opened again by its pair.
fn by_token_ids(specs: (&Path, &Path), found: Found, opts: &DatasetOptions) -> Result<DatasetRun> {
    let total = found.matching.pairs.len();
    if let Some(s) = opts.shard {
        part::check_fits(s, total)?;
    }
    let mut header = match (&opts.part, opts.shard) {
        (Some(p), Some(s)) => Some(part::header((&found.a, &found.b), opts, p, s)?),
        _ => None,
    };
    if let (Some(h), Some(path)) = (
        &header,
        opts.part.as_ref().and_then(|p| p.resume_from.as_ref()),
    ) && let Some(done) = part::resume(path, h)
    {
        return Ok(DatasetRun::Resumed(done));
    }
    let plan = RunPlan::new(&found.matching.pairs, plan_inputs(opts));
    let mut model = pairs::load_model(opts, &plan, total)?;
    if model.is_some() {
        tell_shard_calibration(opts, &plan);
    }
    let samples = (found.a.samples.as_slice(), found.b.samples.as_slice());
    let may_find_model = model.is_none() && (found.a.fingerprinted || found.b.fingerprinted);
    let open = |p: Pair| {
        let (sa, sb) = (&samples.0[p.a], &samples.1[p.b]);
        let open = |s: &discover::Sample, read| {
            discover::open(&s.path, s.batch_index, opts.dtype_hint, read)
        };
        match open(sa, &opts.read_a).and_then(|x| Ok((x, open(sb, &opts.read_b)?))) {
            Ok(xy) => Opening::Ready(Box::new(xy)),
            Err(e) => Opening::Failed(e),
        }
    };
    let with = Compare {
        samples,
        opts,
        workers: pairs::workers_for(&plan, samples, may_find_model, (true, true)),
        open: &open,
    };
    // Only pairing by name gives a run up.
    let mut ran = pairs::run(&plan, &with, &mut model).map_err(Error::Internal)?;
    let mut failed_pairs = std::mem::take(&mut ran.failed_pairs);
    let mut report = assemble::report(specs, found, ran, (plan.calibration, total), opts);
    if let Some(h) = &mut header {
        failed_pairs.sort_unstable();
        h.failed_pairs = failed_pairs;
    }
    report.part = header;
    Ok(DatasetRun::Compared(report))
}

/// What the plan of a run is made from.
fn plan_inputs(opts: &DatasetOptions) -> PlanInputs<'_> {
    PlanInputs {
        model: opts.model.as_ref().map(|m| m.dir.as_path()),
        no_floor: opts.pair.no_floor,
        calibrate: opts.calibrate,
        shard: opts.shard,
    }
}

/// Says that a shard calibrates on the first N pairs of the whole dataset, not of its own.
fn tell_shard_calibration(opts: &DatasetOptions, plan: &RunPlan) {
    let (Some(shard), Some(n)) = (opts.shard, opts.calibrate) else {
        return;
    };
    let own = plan.calibrated.iter().filter(|j| j.keep).count();
    eprintln!(
        "hsdiff: --calibrate {n} with --shard {}/{}: this shard measures the floors on the \
         same first {} pairs as every shard (the unsharded run's), {own} of them its own: \
         {} calibrated pairs here instead of {own}",
        shard.index,
        shard.count,
        plan.calibrated.len(),
        plan.calibrated.len()
    );
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
