//! Pairing by name, each file opened once. When every file of A has one file of B with its
//! sample id and B has no other, the pairs are known before any file is opened: each pair's
//! files are opened by the pair itself, which checks there what pairing by id needs — one
//! sample in each file, no request served after a prefix-cache hit, equal token ids (or none
//! on a side), a file read as its side's first file is — and compares them. The first pair is
//! opened before anything is said: a dataset it is not so for (batched files, an SGLang pass,
//! token ids that differ, a file that cannot be read) is paired by token ids instead
//! (`sides`), as if this had not been tried; its files tell how each side is read (the side
//! lines on stderr). A later pair that is not so gives the run up with a line on stderr, and
//! the dataset is paired by token ids, each file opened again. Not for a shard: its pairs'
//! places in the pairing order are those of the whole dataset's pairing by token ids.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use super::discover::{self, Facts, Listed, Sample};
use super::match_samples::{Matching, Pair};
use super::pairs::{self, Compare, Opening, Ran};
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
    let Some((first, facts)) = open_first(&samples_a, &samples_b, &pairs, opts) else {
        return Ok(None);
    };
    let mut sides = (listed_a.side(), listed_b.side());
    sides.0.learn(facts.0.clone());
    sides.1.learn(facts.1.clone());
    sides.0.samples = samples_a;
    sides.1.samples = samples_b;
    sides::tell(specs, (&sides.0, &sides.1));
    let plan = RunPlan::new(&pairs, super::plan_inputs(opts));
    let mut model = pairs::load_model(opts, &plan, pairs.len())?;
    let samples = (sides.0.samples.as_slice(), sides.1.samples.as_slice());
    let may_find_model = model.is_none() && (facts.0.fingerprinted || facts.1.fingerprinted);
    // The first pair's files, opened above, are compared by its job.
    let first = Mutex::new(Some(first));
    let differing = Mutex::new(Vec::new());
    let open = |p: Pair| match p.a {
        0 => match lock(&first).take() {
            Some(xy) => Opening::Ready(Box::new(xy)),
            None => Opening::NotByName(format!("{}: its pair opened twice", samples.0[0].id)),
        },
        _ => open_later((p, samples), &facts, &differing, opts),
    };
    let with = Compare {
        samples,
        opts,
        workers: pairs::workers_for(
            &plan,
            samples,
            may_find_model,
            (facts.0.inflated, facts.1.inflated),
        ),
        open: &open,
    };
    let mut ran = match pairs::run(&plan, &with, &mut model) {
        Ok(ran) => ran,
        Err(why) => {
            eprintln!(
                "hsdiff: {}: pairing every sample by its token ids instead (each file read again)",
                one_line(&why)
            );
            return Ok(None);
        }
    };
    let Some(matching) = left_out(pairs, &mut ran, lock_owned(differing), samples) else {
        return Ok(None);
    };
    let total = matching.pairs.len();
    let found = Found {
        a: sides.0,
        b: sides.1,
        matching,
        prefix_hits: PrefixHits::default(),
        failed: Vec::new(),
    };
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

/// A sample's token ids as pairing compares them: their digest and count.
type Tokens = ([u8; 32], usize);

/// A pair of equal ids whose token ids differ: the pair, A's token ids, B's.
type Differing = (Pair, Tokens, Tokens);

/// The pairing by id of the pairs by name, those of `differing` left out for their token ids
/// (`ran`'s rows renumbered to the pairs left), as [`super::match_samples`] pairs them; None
/// (said on stderr) when it would pair a sample of them with another's partner by its token
/// ids instead.
fn left_out(
    pairs: Vec<Pair>,
    ran: &mut Ran,
    mut differing: Vec<Differing>,
    (a, _): (&[Sample], &[Sample]),
) -> Option<Matching> {
    differing.sort_by_key(|d| d.0.a);
    for (p, ids_a, _) in &differing {
        if let Some((q, ..)) = differing
            .iter()
            .find(|(q, _, ids_b)| q.a != p.a && ids_b == ids_a)
        {
            eprintln!(
                "hsdiff: {}: its token ids are those of {}'s partner in B: pairing every sample \
                 by its token ids instead (each file read again)",
                one_line(&a[p.a].id),
                one_line(&a[q.a].id)
            );
            return None;
        }
    }
    ran.left_out.sort_unstable();
    for row in &mut ran.samples {
        row.pair -= ran.left_out.iter().filter(|&&k| k < row.pair).count();
    }
    let kept = pairs
        .into_iter()
        .enumerate()
        .filter(|(k, _)| ran.left_out.binary_search(k).is_err())
        .map(|(_, p)| p)
        .collect();
    Some(Matching {
        pairs: kept,
        token_mismatches: differing.iter().map(|(p, ..)| (p.a, p.b)).collect(),
        ..Matching::default()
    })
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

/// The files of the first pair (A's first file and its partner), opened, and what they tell of
/// their sides; None when the dataset is not to be paired by name.
fn open_first(
    a: &[Sample],
    b: &[Sample],
    pairs: &[Pair],
    opts: &DatasetOptions,
) -> Option<((FileSource, FileSource), (Facts, Facts))> {
    let p = pairs.first()?;
    let (x, y) = open_both((&a[p.a], &b[p.b]), opts).ok()?;
    if not_by_id(&x, &y).is_some()
        || !matches!(token_ids_differ(&x, &y), Ok(None))
        || check_ids_used(
            (&opts.read_a, x.pipeline.is_some()),
            (&opts.read_b, y.pipeline.is_some()),
        )
        .is_err()
    {
        return None;
    }
    let facts = (Facts::of(&x), Facts::of(&y));
    Some(((x, y), facts))
}

/// A later pair's files, opened as discovery opens them (sample 0), and checked to be what
/// pairing by id takes them for and read as their sides' first files are. A pair whose token
/// ids differ is left out (noted in `differing`), unless `--calibrate` learns its floors from
/// the first pairs, which are then others than pairing by id's.
fn open_later(
    (p, (a, b)): (Pair, (&[Sample], &[Sample])),
    first: &(Facts, Facts),
    differing: &Mutex<Vec<Differing>>,
    opts: &DatasetOptions,
) -> Opening {
    let id = &a[p.a].id;
    let (x, y) = match open_both((&a[p.a], &b[p.b]), opts) {
        Ok(both) => both,
        Err(e) => return Opening::NotByName(format!("{id}: {e}")),
    };
    let read_otherwise = if Facts::of(&x) != first.0 {
        Some("A's file is read otherwise than A's first file".to_string())
    } else if Facts::of(&y) != first.1 {
        Some("B's file is read otherwise than B's first file".to_string())
    } else {
        None
    };
    match read_otherwise.or_else(|| not_by_id(&x, &y)) {
        Some(why) => Opening::NotByName(format!("{id}: {why}")),
        None => match token_ids_differ(&x, &y) {
            Ok(None) => Opening::Ready(Box::new((x, y))),
            Ok(Some(_)) if opts.calibrate.is_some() => {
                Opening::NotByName(format!("{id}: token ids differ"))
            }
            Ok(Some((da, db))) => {
                lock(differing).push((p, da, db));
                Opening::LeftOut
            }
            Err(e) => Opening::NotByName(format!("{id}: {e}")),
        },
    }
}

fn open_both(
    (sa, sb): (&Sample, &Sample),
    opts: &DatasetOptions,
) -> Result<(FileSource, FileSource)> {
    let open = |s: &Sample, read| discover::open(&s.path, Some(0), opts.dtype_hint, read);
    Ok((open(sa, &opts.read_a)?, open(sb, &opts.read_b)?))
}

/// Why two files of one name are not a pair by id (token ids aside), if they are not.
fn not_by_id(x: &FileSource, y: &FileSource) -> Option<String> {
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
    }
    None
}

/// The digests of the two files' token ids when both carry them and they differ.
fn token_ids_differ(x: &FileSource, y: &FileSource) -> Result<Option<(Tokens, Tokens)>> {
    Ok(match (x.input_ids()?, y.input_ids()?) {
        (Some(p), Some(q)) if p != q => Some((
            (discover::digest(&p), p.len()),
            (discover::digest(&q), q.len()),
        )),
        _ => None,
    })
}
