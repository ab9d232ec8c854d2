//! Pairing by name, each file opened once. When every file of A has one file of B with its
//! sample id and B has no other, the pairs are known before any file is opened: each pair's
//! files are opened by the pair itself, which checks there what pairing by id needs — one
//! sample in each file, no request served after a prefix-cache hit, equal token ids (or none
//! on a side) — and compares them. A pair that is not so (a batched file, token ids that
//! differ, a file that cannot be read, layer ids that name nothing in it, a fingerprint that
//! may name a model without `--model`) gives the run up with a line on stderr, and the dataset
//! is paired by token ids instead (`sides`), each file opened again. What each side holds is
//! said once its files are read, after the pairs. Not for a shard: its pairs' places in the
//! pairing order are those of the whole dataset's pairing by token ids.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use super::discover::{self, Facts, Listed, Sample};
use super::match_samples::{Matching, Pair};
use super::pairs::{self, Compare, Opening};
use super::plan::RunPlan;
use super::prefix_hits::PrefixHits;
use super::sides::{self, Found};
use super::{DatasetOptions, assemble};
use crate::error::Result;
use crate::formats::FileSource;
use crate::formats::pipelines::check_ids_used;
use crate::report::dataset::DatasetReport;
use crate::util::escape::one_line;

/// The report of `a` against `b` paired by name, or None when they are to be paired by token
/// ids.
pub fn run(
    specs: (&Path, &Path),
    (listed_a, listed_b): (&Listed, &Listed),
    opts: &DatasetOptions,
) -> Result<Option<DatasetReport>> {
    let Some((samples_a, samples_b, pairs)) = pair_by_name(listed_a, listed_b) else {
        return Ok(None);
    };
    let plan = RunPlan::new(&pairs, super::plan_inputs(opts));
    let mut model = pairs::load_model(opts, &plan, pairs.len())?;
    let samples = (samples_a.as_slice(), samples_b.as_slice());
    let workers = pairs::workers_for(&plan, samples, false);
    let may_find_model = model.is_none();
    let facts = (
        Mutex::new(vec![None; samples_a.len()]),
        Mutex::new(vec![None; samples_b.len()]),
    );
    let open = |p: Pair| {
        let opening = open_pair((&samples_a[p.a], &samples_b[p.b]), opts, may_find_model);
        if let Opening::Ready(x, y) = &opening {
            lock(&facts.0)[p.a] = Some(Facts::of(x));
            lock(&facts.1)[p.b] = Some(Facts::of(y));
        }
        opening
    };
    let with = Compare {
        samples,
        opts,
        workers,
        open: &open,
    };
    let ran = match pairs::run(&plan, &with, &mut model) {
        Ok(ran) => ran,
        Err(why) => {
            eprintln!(
                "hsdiff: {}: pairing every sample by its token ids instead (each file read again)",
                one_line(&why)
            );
            return Ok(None);
        }
    };
    let mut sides = (listed_a.side(), listed_b.side());
    sides.0.samples = samples_a;
    sides.1.samples = samples_b;
    for (side, facts) in [(&mut sides.0, facts.0), (&mut sides.1, facts.1)] {
        for f in lock_owned(facts).into_iter().flatten() {
            side.learn(f);
        }
    }
    sides::tell(specs, (&sides.0, &sides.1));
    let found = Found {
        a: sides.0,
        b: sides.1,
        matching: Matching {
            pairs,
            ..Matching::default()
        },
        prefix_hits: PrefixHits::default(),
        failed: Vec::new(),
    };
    let total = found.matching.pairs.len();
    Ok(Some(assemble::report(
        specs,
        found,
        ran,
        (plan.calibration, total),
        opts,
    )))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_owned<T>(m: Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Each file of A with the file of B of its sample id, when the ids pair one to one: the
/// samples of each side (in its files' order) and the pairs (in A's).
fn pair_by_name(a: &Listed, b: &Listed) -> Option<(Vec<Sample>, Vec<Sample>, Vec<Pair>)> {
    let (ids_a, ids_b) = (a.ids(), b.ids());
    if ids_a.len() != ids_b.len() {
        return None;
    }
    let of_b: HashMap<&str, usize> = ids_b
        .iter()
        .enumerate()
        .map(|(j, id)| (id.as_str(), j))
        .collect();
    // Ids are unique on a side: as many on each, every one of A's in B, is one to one.
    let pairs = ids_a
        .iter()
        .enumerate()
        .map(|(i, id)| {
            of_b.get(id.as_str()).map(|&j| Pair {
                a: i,
                b: j,
                by_id: true,
            })
        })
        .collect::<Option<Vec<Pair>>>()?;
    let samples = |l: &Listed, ids: Vec<String>| -> Vec<Sample> {
        l.files
            .iter()
            .zip(ids)
            .map(|(path, id)| Sample {
                id,
                path: path.clone(),
                batch_index: None,
                tokens: None,
                held_from: 0,
            })
            .collect()
    };
    Some((samples(a, ids_a), samples(b, ids_b), pairs))
}

/// A named pair's files opened as discovery opens them (sample 0), and checked to be what
/// pairing by id takes them for.
fn open_pair((sa, sb): (&Sample, &Sample), opts: &DatasetOptions, may_find_model: bool) -> Opening {
    let open = |s: &Sample, read| discover::open(&s.path, Some(0), opts.dtype_hint, read);
    let (x, y) = match (open(sa, &opts.read_a), open(sb, &opts.read_b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Opening::NotByName(format!("{}: {e}", sa.id)),
    };
    match not_by_id(&x, &y, opts, may_find_model) {
        Some(why) => Opening::NotByName(format!("{}: {why}", sa.id)),
        None => Opening::Ready(x, y),
    }
}

/// Why two files of one name are not a pair by id, if they are not.
fn not_by_id(
    x: &FileSource,
    y: &FileSource,
    opts: &DatasetOptions,
    may_find_model: bool,
) -> Option<String> {
    for (side, src) in [("A", x), ("B", y)] {
        if src.samples_held() != 1 {
            return Some(format!(
                "{side}'s file holds {} samples",
                src.samples_held()
            ));
        }
        if src.held_from > 0 {
            return Some(format!(
                "{side}'s is a request served after a prefix-cache hit"
            ));
        }
        // Such pairs run one at a time (`pairs::workers_for`), which only a run that has read
        // every file knows to do.
        if src.fingerprint.is_some() && may_find_model {
            return Some(format!(
                "{side}'s file carries a fingerprint, which may name a model to calibrate with"
            ));
        }
    }
    if let Err(e) = check_ids_used(
        (&opts.read_a, x.pipeline.is_some()),
        (&opts.read_b, y.pipeline.is_some()),
    ) {
        return Some(e.to_string());
    }
    let ids = (x.input_ids(), y.input_ids());
    match ids {
        (Ok(Some(p)), Ok(Some(q))) if p != q => Some("token ids differ".to_string()),
        (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
        _ => None,
    }
}
