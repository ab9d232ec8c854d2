//! `hsdiff compare A B` without its command line: two files compared as one pair
//! ([`crate::commands::compare::pair`]), or two datasets — folders, globs, batched files — pair by pair
//! ([`crate::commands::compare::dataset`]); the options that apply to one kind only refused for the other, the
//! drafter pipelines' layer ids read for each side.

pub mod dataset;
pub mod disjoint;
mod engine_tokens;
pub mod layer_id_slip;
pub mod pair;
pub mod pair_steps;
pub mod plausibility;
mod positions;
pub mod recovered_routes;
pub mod routes;
pub mod token_difference;
pub mod tokens;

use std::path::{Path, PathBuf};

use candle_core::DType;

use crate::commands::compare::dataset::{DatasetOptions, DatasetRun, PartOptions};
use crate::commands::compare::pair::{PairOptions, TruthModel, compare_pair};
use crate::commands::compare::tokens::GivenIds;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::{self, IdsFrom, LayerIds, ReadOptions, layer_ids};
use crate::model::ModelFolder;
use crate::report::Report;
use crate::report::dataset::{DatasetReport, Shard};

/// What `hsdiff compare` was asked.
#[derive(Debug, Clone, Default)]
pub struct CompareRequest {
    pub a: PathBuf,
    pub b: PathBuf,
    /// `--map`, `--shift`, `--layers`, `--no-floor`, the reproduce line.
    pub pair: PairOptions,
    pub model: Option<PathBuf>,
    pub dtype_hint: Option<DType>,
    /// The drafter pipelines' layer ids for both sides, for side A only, for side B only.
    pub layer_ids: Option<Vec<usize>>,
    pub layer_ids_a: Option<Vec<usize>>,
    pub layer_ids_b: Option<Vec<usize>>,
    /// A drafter's config.json naming the layer ids for both sides (never with `layer_ids`).
    pub draft_config: Option<PathBuf>,
    pub calibrate: Option<u64>,
    pub shard: Option<Shard>,
    /// With `shard`: the part's identity beyond these options and where to resume from.
    pub part: Option<PartOptions>,
    /// The token ids of files that carry none (two files only).
    pub given_ids: Option<GivenIds>,
    /// `--allow-token-mismatch` (datasets).
    pub allow_token_mismatch: bool,
}

/// One pair's report, or a dataset's.
pub enum Compared {
    Pair(Box<Report>),
    Dataset(Box<DatasetReport>),
    /// A shard whose complete part was already at `--out`: its report, not rewritten.
    Resumed(Box<DatasetReport>),
}

impl CompareRequest {
    /// The files and folders the comparison reads, for the output policy.
    pub fn inputs(&self) -> Vec<&Path> {
        [
            Some(self.a.as_path()),
            Some(&self.b),
            self.model.as_deref(),
            self.draft_config.as_deref(),
            self.given_ids.as_ref().and_then(GivenIds::file),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Compares `req.a` with `req.b`.
pub fn compare(req: &CompareRequest) -> Result<Compared> {
    let (read_a, read_b, model) = read_options(req)?;
    let Some((a, b)) = open_pair(req, &read_a, &read_b)? else {
        if let Some(given) = &req.given_ids {
            return Err(Error::argument(
                given.option(),
                "applies to two files, not to datasets (each sample carries its own token ids)",
            ));
        }
        return Ok(match compare_datasets(req, (read_a, read_b), model)? {
            DatasetRun::Compared(r) => Compared::Dataset(Box::new(r)),
            DatasetRun::Resumed(r) => Compared::Resumed(Box::new(r)),
        });
    };
    if req.shard.is_some() || req.calibrate.is_some() || req.allow_token_mismatch {
        return Err(Error::argument(
            if req.shard.is_some() {
                "--shard"
            } else if req.calibrate.is_some() {
                "--calibrate"
            } else {
                "--allow-token-mismatch"
            },
            "applies to datasets (folders, globs or batched files), not to two files",
        ));
    }
    pipelines::check_ids_used(
        (&read_a, a.pipeline.is_some()),
        (&read_b, b.pipeline.is_some()),
    )?;
    let labels = pair_steps::labels(&req.a, &req.b);
    let pair = PairOptions {
        given_ids: tokens::resolve(req.given_ids.as_ref(), req.model.as_deref())?,
        verbose: true,
        ..req.pair.clone()
    };
    let truth = match model {
        Some(folder) => TruthModel::Folder(Box::new(folder)),
        None => TruthModel::Fingerprinted,
    };
    let outcome = compare_pair(a, b, labels, &pair, truth)?;
    Ok(Compared::Pair(Box::new(outcome.report)))
}

/// The two files of a pair, each opened once: the opening that finds a file to hold one
/// sample is the one compared. None when either side is a dataset (a folder, a glob, a file
/// holding a batch of samples), which is read sample by sample instead.
fn open_pair(
    req: &CompareRequest,
    read_a: &ReadOptions,
    read_b: &ReadOptions,
) -> Result<Option<(FileSource, FileSource)>> {
    if dataset::is_dataset(&req.a) || dataset::is_dataset(&req.b) {
        return Ok(None);
    }
    // Sample 0 of a file holding one sample is what the pair compares; of a batch, it tells
    // the batch is there.
    let open = |p: &PathBuf, read: &ReadOptions| -> Result<Option<FileSource>> {
        let first = ReadOptions {
            sample: Some(0),
            ..read.clone()
        };
        let src = FileSource::open_with(p, req.dtype_hint, &first)?;
        Ok((src.samples_held() <= 1).then_some(src))
    };
    let Some(a) = open(&req.a, read_a)? else {
        return Ok(None);
    };
    Ok(open(&req.b, read_b)?.map(|b| (a, b)))
}

/// Each side's layer ids (its own, else those for both sides: the list or the drafter's
/// config), and the model's size. Returns `--model`'s folder too, its config.json read (once for
/// the whole run).
fn read_options(req: &CompareRequest) -> Result<(ReadOptions, ReadOptions, Option<ModelFolder>)> {
    let given =
        |ids: &Option<Vec<usize>>, from: IdsFrom| ids.clone().map(|ids| LayerIds { ids, from });
    let draft = match &req.draft_config {
        Some(path) => {
            let (ids, key) = layer_ids::from_draft_config(path)?;
            let path = path.clone();
            Some(LayerIds {
                ids,
                from: IdsFrom::DraftConfig { path, key },
            })
        }
        None => None,
    };
    let common = given(&req.layer_ids, IdsFrom::BothSides).or(draft);
    let model = req.model.as_deref().map(ModelFolder::read).transpose()?;
    let (num_layers, hidden_size) = model
        .as_ref()
        .map(|m| (m.config.num_hidden_layers, m.config.hidden_size))
        .unzip();
    let num_experts = model
        .as_ref()
        .and_then(|m| m.config.moe.as_ref())
        .map(|moe| moe.num_experts);
    let side = |own: Option<LayerIds>| ReadOptions {
        layer_ids: own.or_else(|| common.clone()),
        num_layers,
        hidden_size,
        num_experts,
        sample: None,
    };
    Ok((
        side(given(&req.layer_ids_a, IdsFrom::SideA)),
        side(given(&req.layer_ids_b, IdsFrom::SideB)),
        model,
    ))
}

/// `req` of two datasets, each side read with its options, `--model`'s folder read once.
fn compare_datasets(
    req: &CompareRequest,
    (read_a, read_b): (ReadOptions, ReadOptions),
    model: Option<ModelFolder>,
) -> Result<DatasetRun> {
    if req.calibrate.is_some() && req.model.is_none() {
        return Err(Error::argument("--calibrate", "needs --model DIR"));
    }
    if req.calibrate.is_some() && req.pair.no_floor {
        return Err(Error::argument(
            "--calibrate",
            "measures floors, which --no-floor turns off: give one or the other",
        ));
    }
    let opts = DatasetOptions {
        pair: PairOptions {
            verbose: false,
            ..req.pair.clone()
        },
        read_a,
        read_b,
        dtype_hint: req.dtype_hint,
        model,
        calibrate: req
            .calibrate
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        shard: req.shard,
        part: req.part.clone(),
        allow_token_mismatch: req.allow_token_mismatch,
    };
    dataset::run(&req.a, &req.b, &opts)
}
