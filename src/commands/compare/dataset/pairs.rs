//! A dataset's planned pairs compared: the calibrated ones first, one at a time with the model,
//! then the rest concurrently within memory (`workers`), each pair opened by the caller's
//! [`Opener`] and compared through [`crate::commands::compare::pair`]; `--calibrate N`'s floors
//! learned from the first and applied to the rest. The rows come back in the order they are
//! done; the report puts them in pairing order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::discover::Sample;
use super::match_samples::Pair;
use super::plan::{PairJob, RunPlan};
use super::workers::{self, Workers};
use super::{DatasetOptions, floors, prefetch};
use crate::commands::compare::pair::{PairOutcome, TruthModel, compare_pair};
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::model::Model;
use crate::report::dataset::{Failed, SampleRow};
use crate::util::escape::{one_line, path_text};

/// One pair's two files, opened for comparison, or why they are not compared.
pub enum Opening {
    Ready(Box<(FileSource, FileSource)>),
    /// A file of the pair could not be opened: the pair failed.
    Failed(Error),
    /// The pair is not what pairing by name took it for (why, for stderr): the whole run is
    /// given up, to be paired by token ids.
    NotByName(String),
    /// Equal ids whose token ids differ: not compared, as pairing by id leaves such a pair out
    /// (the report names it).
    LeftOut,
}

/// Opens the files of a pair (of A's sample and B's).
pub type Opener<'a> = dyn Fn(Pair) -> Opening + Sync + 'a;

/// The pairs compared: a row for each pair of this run compared, the pairs that failed.
#[derive(Default)]
pub struct Ran {
    pub samples: Vec<SampleRow>,
    pub failed: Vec<Failed>,
    /// Their places in the pairing order (a shard's part checks them against its rows).
    pub failed_pairs: Vec<usize>,
    /// The places of the pairs left out for their token ids.
    pub left_out: Vec<usize>,
}

/// What became of one pair.
enum Judged {
    Row(Box<SampleRow>),
    Failed(Failed),
    LeftOut,
}

impl Ran {
    fn done(&mut self, job: &PairJob, judged: Judged) {
        match judged {
            Judged::Row(row) => self.samples.push(*row),
            Judged::Failed(f) => {
                self.failed_pairs.push(job.k);
                self.failed.push(f);
            }
            Judged::LeftOut => self.left_out.push(job.k),
        }
    }
}

/// A pair compared, or why not.
fn judged(outcome: Result<SampleRow>, (sa, sb): (&Sample, &Sample)) -> Judged {
    match outcome {
        Ok(row) => Judged::Row(Box::new(row)),
        Err(e) => Judged::Failed(failed_of(sa, sb, e)),
    }
}

/// What the pairs are compared with: the samples the plan's pairs index, the options, the
/// workers of the uncalibrated pairs, how a pair's files are opened.
pub struct Compare<'a> {
    pub samples: (&'a [Sample], &'a [Sample]),
    pub opts: &'a DatasetOptions,
    pub workers: Workers,
    pub open: &'a Opener<'a>,
}

/// Compares the plan's pairs, the calibrated ones with `model`; `Err(why)` when the opener
/// gave the run up.
pub fn run(
    plan: &RunPlan,
    with: &Compare,
    model: &mut Option<(Model, String)>,
) -> std::result::Result<Ran, String> {
    let mut progress = Progress::new(plan.calibrated.len() + plan.rest.len());
    let mut ran = Ran::default();
    let mut floors = floors::Floors::default();
    let (a, b) = with.samples;
    for job in &plan.calibrated {
        let (sa, sb) = (&a[job.pair.a], &b[job.pair.b]);
        let outcome = match (with.open)(job.pair) {
            Opening::Ready(xy) => compare(*xy, (sa, sb), with, TruthModel::Loaded(model)),
            Opening::Failed(e) => Err(e),
            Opening::NotByName(why) => return Err(why),
            Opening::LeftOut => {
                ran.done(job, Judged::LeftOut);
                progress.left_out();
                continue;
            }
        };
        if let Ok(o) = &outcome
            && with.opts.calibrate.is_some()
        {
            floors.learn(&o.report);
        }
        if job.keep {
            ran.done(
                job,
                judged(outcome.map(|o| row_of(job, sa, sb, &o)), (sa, sb)),
            );
        }
        progress.tick(&sa.id);
    }
    let floors = with.opts.calibrate.is_some().then_some(&floors);
    run_rest(plan, with, floors, &mut ran, &mut progress)?;
    Ok(ran)
}

/// The pairs no model calibrates, on the workers: judged by the learned floors, or as a file
/// of each names.
fn run_rest(
    plan: &RunPlan,
    with: &Compare,
    floors: Option<&floors::Floors>,
    ran: &mut Ran,
    progress: &mut Progress,
) -> std::result::Result<(), String> {
    let (a, b) = with.samples;
    let rest = &plan.rest;
    // Set when a pair gives the run up: the pairs not started yet are not opened.
    let given_up = AtomicBool::new(false);
    let judge = |i: usize, job: &PairJob| {
        if given_up.load(Ordering::Relaxed) {
            return Err(None);
        }
        if let Some(next) = rest.get(i + with.workers.count.max(1)) {
            let (na, nb) = (&a[next.pair.a], &b[next.pair.b]);
            prefetch::read_ahead(vec![na.path.clone(), nb.path.clone()]);
        }
        let (sa, sb) = (&a[job.pair.a], &b[job.pair.b]);
        let truth = match floors {
            Some(_) => TruthModel::Skip("floors from the calibration pairs".to_string()),
            None => TruthModel::Fingerprinted,
        };
        let outcome = match (with.open)(job.pair) {
            Opening::Ready(xy) => compare(*xy, (sa, sb), with, truth),
            Opening::Failed(e) => Err(e),
            Opening::NotByName(why) => {
                given_up.store(true, Ordering::Relaxed);
                return Err(Some(why));
            }
            Opening::LeftOut => return Ok(Judged::LeftOut),
        };
        let row = outcome.map(|o| {
            let mut row = row_of(job, sa, sb, &o);
            if let Some(f) = floors {
                f.apply(&mut row, &o.report);
            }
            row
        });
        Ok(judged(row, (sa, sb)))
    };
    let mut why_given_up = None;
    workers::run_all(rest, with.workers.count, judge, |i, row| match row {
        Ok(row) => {
            let left_out = matches!(row, Judged::LeftOut);
            ran.done(&rest[i], row);
            if left_out {
                progress.left_out();
            } else {
                progress.tick(&a[rest[i].pair.a].id);
            }
        }
        Err(why) => why_given_up = why_given_up.take().or(why),
    });
    why_given_up.map_or(Ok(()), Err)
}

fn compare(
    (x, y): (FileSource, FileSource),
    (sa, sb): (&Sample, &Sample),
    with: &Compare,
    truth: TruthModel,
) -> Result<PairOutcome> {
    compare_pair(x, y, (sa.id.clone(), sb.id.clone()), &with.opts.pair, truth)
}

fn row_of(job: &PairJob, sa: &Sample, sb: &Sample, outcome: &PairOutcome) -> SampleRow {
    super::aggregate::sample_row(
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

/// The model of the calibrated pairs (`--model`, unless `--no-floor`), loaded, with the line
/// that says how the run is calibrated.
pub fn load_model(
    opts: &DatasetOptions,
    plan: &RunPlan,
    total: usize,
) -> Result<Option<(Model, String)>> {
    let (Some(folder), false) = (&opts.model, opts.pair.no_floor) else {
        return Ok(None);
    };
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
    Ok(Some((m, format!("--model {}", dir.display()))))
}

/// The workers of the plan's uncalibrated pairs, said on stderr when there are several pairs.
/// One when a file's fingerprint may name a model to calibrate with (hsdiff dumps), which
/// would run once per worker. `may_be_gzip`: as for [`Workers::plan`].
pub fn workers_for(
    plan: &RunPlan,
    (a, b): (&[Sample], &[Sample]),
    may_find_model: bool,
    may_be_gzip: (bool, bool),
) -> Workers {
    if may_find_model {
        return Workers {
            count: 1,
            per_pair: 0,
            budget: None,
        };
    }
    let workers = Workers::plan(
        plan.rest
            .iter()
            .map(|j| (a[j.pair.a].path.as_path(), b[j.pair.b].path.as_path())),
        rayon::current_num_threads(),
        may_be_gzip,
    );
    if plan.rest.len() > 1 {
        eprintln!("hsdiff: {}", workers.describe());
    }
    workers
}

/// The progress line on stderr: pairs done of all, with an ETA from the rate so far; the first
/// and last pair and at most one line per two seconds between. A pair found to be left out for
/// its token ids is not one of all.
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    last_line: Instant,
    last_id: String,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            last_line: Instant::now(),
            last_id: String::new(),
        }
    }

    fn tick(&mut self, id: &str) {
        self.done += 1;
        id.clone_into(&mut self.last_id);
        self.say(self.done == 1 || self.last_line.elapsed().as_secs_f64() >= 2.0);
    }

    fn left_out(&mut self) {
        self.total = self.total.saturating_sub(1);
        self.say(false);
    }

    /// The line, when `now` or all pairs are done.
    fn say(&mut self, now: bool) {
        let n = self.done;
        if n > 0 && (now || n == self.total) {
            let per = self.started.elapsed().as_secs_f64() / n as f64;
            eprintln!(
                "hsdiff: {n}/{} pairs compared ({}), ETA {:.0} s",
                self.total,
                one_line(&self.last_id),
                per * self.total.saturating_sub(n) as f64
            );
            self.last_line = Instant::now();
        }
    }
}
