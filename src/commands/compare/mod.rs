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
pub mod routes;
pub mod token_difference;
pub mod tokens;

use std::path::{Path, PathBuf};

use candle_core::DType;

use crate::commands::compare::dataset::{DatasetOptions, DatasetRun, PartOptions};
use crate::commands::compare::pair::{Calibration, PairOptions, Trained, compare_pair};
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::{self, LayerIds, ReadOptions, layer_ids};
use crate::report::Report;
use crate::report::dataset::{DatasetReport, Shard};
use crate::weights::config::ModelConfig;

/// What `hsdiff compare` was asked.
#[derive(Debug, Clone, Default)]
pub struct CompareRequest {
    pub a: PathBuf,
    pub b: PathBuf,
    /// `--map`, `--shift`, `--layers`, `--no-floor`, the reproduce line.
    pub pair: PairOptions,
    pub model: Option<PathBuf>,
    pub dtype_hint: Option<DType>,
    pub layer_ids: Option<String>,
    pub layer_ids_a: Option<String>,
    pub layer_ids_b: Option<String>,
    pub draft_config: Option<PathBuf>,
    pub calibrate: Option<u64>,
    pub shard: Option<Shard>,
    /// With `shard`: the part's identity beyond these options and where to resume from.
    pub part: Option<PartOptions>,
    pub tokens: Option<String>,
    pub prompt: Option<String>,
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
        [Some(self.a.as_path()), Some(&self.b), self.model.as_deref()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Compares `req.a` with `req.b`.
pub fn compare(req: &CompareRequest) -> Result<Compared> {
    let hint = req.dtype_hint;
    let (read_a, read_b) = read_options(req)?;
    let batched = |p: &PathBuf, read: &ReadOptions| -> Result<bool> {
        Ok(FileSource::open_with(
            p,
            hint,
            &ReadOptions {
                sample: Some(0),
                ..read.clone()
            },
        )?
        .samples_held()
            > 1)
    };
    if dataset::is_dataset(&req.a)
        || dataset::is_dataset(&req.b)
        || batched(&req.a, &read_a)?
        || batched(&req.b, &read_b)?
    {
        if req.tokens.is_some() || req.prompt.is_some() {
            return Err(Error::argument(
                if req.tokens.is_some() {
                    "--tokens"
                } else {
                    "--prompt"
                },
                "applies to two files, not to datasets (each sample carries its own token ids)",
            ));
        }
        return Ok(match compare_datasets(req, read_a, read_b)? {
            DatasetRun::Compared(r) => Compared::Dataset(Box::new(r)),
            DatasetRun::Resumed(r) => Compared::Resumed(Box::new(r)),
        });
    }
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
    let a = FileSource::open_with(&req.a, hint, &read_a)?;
    let b = FileSource::open_with(&req.b, hint, &read_b)?;
    pipelines::check_ids_used(
        (&read_a, a.pipeline.is_some()),
        (&read_b, b.pipeline.is_some()),
    )?;
    let labels = pair_steps::labels(&req.a, &req.b);
    let pair = PairOptions {
        given_ids: tokens::given_ids(
            req.tokens.as_deref(),
            req.prompt.as_deref(),
            req.model.as_deref(),
        )?,
        verbose: true,
        ..req.pair.clone()
    };
    let outcome = compare_pair(a, b, labels, &pair, Calibration::Find(req.model.as_deref()))?;
    let mut report = outcome.report;
    if let Some(t) = &outcome.trained {
        report.notes.push(trained_note(t));
    }
    Ok(Compared::Pair(Box::new(report)))
}

/// The figures of the positions `loss_mask` trains on, as a note under one pair's table.
fn trained_note(t: &Trained) -> String {
    let worst = t
        .report
        .tensors
        .iter()
        .filter_map(|r| r.judgement.ratio_to_floor.map(|x| (x, &r.name)))
        .max_by(|p, q| p.0.total_cmp(&q.0));
    let size = match worst {
        Some((x, name)) => format!("worst {x:.1}× the floor at {name}"),
        None => format!(
            "max rel L2 {:.2e}",
            t.report
                .tensors
                .iter()
                .map(|r| r.stats.rel_l2)
                .fold(0.0, f64::max)
        ),
    };
    format!(
        "trained positions (loss_mask): {} of {}: {} ({size})",
        t.positions,
        t.of,
        t.report.verdict.as_str()
    )
}

/// `--layer-ids`, `--layer-ids-a/-b`, `--draft-config`, and the model's size, for each side.
fn read_options(req: &CompareRequest) -> Result<(ReadOptions, ReadOptions)> {
    let given = |list: &Option<String>, option: &str| -> Result<Option<LayerIds>> {
        list.as_deref()
            .map(|l| {
                Ok(LayerIds {
                    ids: layer_ids::parse_list(l, option)?,
                    from: option.to_string(),
                })
            })
            .transpose()
    };
    let both = given(&req.layer_ids, "--layer-ids")?;
    let draft = match &req.draft_config {
        Some(path) => {
            let (ids, key) = layer_ids::from_draft_config(path)?;
            Some(LayerIds {
                ids,
                from: format!("--draft-config {} ({key})", path.display()),
            })
        }
        None => None,
    };
    if both.is_some() && draft.is_some() {
        return Err(Error::argument(
            "--draft-config",
            "give the layer ids once: --layer-ids or --draft-config",
        ));
    }
    let common = both.or(draft);
    let (num_layers, hidden_size) = match &req.model {
        Some(dir) => {
            let c = ModelConfig::from_file(&dir.join("config.json"))?;
            (Some(c.num_hidden_layers), Some(c.hidden_size))
        }
        None => (None, None),
    };
    let side = |own: Option<LayerIds>| ReadOptions {
        layer_ids: own.or_else(|| common.clone()),
        num_layers,
        hidden_size,
        sample: None,
    };
    Ok((
        side(given(&req.layer_ids_a, "--layer-ids-a")?),
        side(given(&req.layer_ids_b, "--layer-ids-b")?),
    ))
}

fn compare_datasets(
    req: &CompareRequest,
    read_a: ReadOptions,
    read_b: ReadOptions,
) -> Result<DatasetRun> {
    if req.calibrate.is_some() && req.model.is_none() {
        return Err(Error::argument("--calibrate", "needs --model DIR"));
    }
    let opts = DatasetOptions {
        pair: PairOptions {
            verbose: false,
            ..req.pair.clone()
        },
        read_a,
        read_b,
        dtype_hint: req.dtype_hint,
        model: req.model.clone(),
        calibrate: req
            .calibrate
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        shard: req.shard,
        part: req.part.clone(),
        allow_token_mismatch: req.allow_token_mismatch,
    };
    dataset::run(&req.a, &req.b, &opts)
}
