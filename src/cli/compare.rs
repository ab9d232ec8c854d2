//! `hsdiff compare A B`: compare two files of captured hidden states — hsdiff dumps, safetensors
//! written by PyTorch, `torch.save` files, numpy arrays — with the same table, verdicts and JSON
//! as a live run, plus the layer alignment and the environment differences. With the model at
//! hand (`--model`, or named by a fingerprint) the f64 truth and each side's floor are computed
//! on the files' token ids by the same run planner as live runs; without one the report is
//! "uncalibrated" and only the depth-scaled band can flag a row.

use std::path::PathBuf;

use candle_core::DType;
use clap::Args;

use super::common::command_line;
use super::report_args::ReportArgs;
use crate::compare_pair::{Calibration, PairOptions, compare_pair};
use crate::compare_tokens;
use crate::config::ModelConfig;
use crate::dataset::{self, DatasetOptions};
use crate::device::parse_dtype;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::formats::pipelines::{self, LayerIds, ReadOptions, layer_ids};
use crate::pairing;
use crate::report::dataset_render;
use crate::report::emit::emit;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Side A: an hsdiff dump, safetensors, torch.save (.pt/.pth/.ckpt, .ckpt.gz), .npy or
    /// .npz file, a drafter pipeline's sample (SpecForge, vLLM speculators, Model-Optimizer,
    /// EAGLE ge_data) — or a folder or glob of them (a dataset, compared pair by pair).
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// Side B.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Compare A's tensor A_NAME with B's tensor B_NAME (names as in the files, or hsdiff's
    /// names); repeatable.
    #[arg(long = "map", value_name = "A_NAME=B_NAME")]
    pub map: Vec<String>,

    /// Compare B's layer i with A's layer i+K (embed counts as layer −1), e.g. when one side
    /// counts the embedding output as a layer.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(-1024..=1024)
    )]
    pub shift: i64,

    /// Checkpoint folder of the model both files were captured from: hsdiff computes the f64
    /// truth and each side's rounding floor on the files' token ids and judges every row
    /// against them. Default: the model a fingerprint names (the built-in model by its weights
    /// digest, or a folder that exists here); without one the report is uncalibrated.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Skip the f64 truth and floor runs even when a model is at hand: verdicts then use the
    /// depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    /// Compute dtype of files that record none (f64, f32, bf16, f16): sets the thresholds, and
    /// lets 16-bit integer numpy arrays be read as bf16 bit patterns. Without it, a file stored
    /// as f32/f64 whose every value is bf16-exact (f16-exact) is read as a bf16 (f16) run.
    #[arg(long, value_name = "DTYPE")]
    pub dtype_hint: Option<String>,

    /// The layer ids a drafter pipeline concatenated (both sides), in its own convention
    /// (docs/file-formats.md#drafter-pipelines), e.g. 1,16,31,46,61.
    #[arg(long, value_name = "LIST")]
    pub layer_ids: Option<String>,

    /// Layer ids of side A only.
    #[arg(long, value_name = "LIST")]
    pub layer_ids_a: Option<String>,

    /// Layer ids of side B only.
    #[arg(long, value_name = "LIST")]
    pub layer_ids_b: Option<String>,

    /// A drafter's config.json naming the layer ids (`dflash_config.target_layer_ids`,
    /// `eagle_aux_hidden_state_layer_ids`, …).
    #[arg(long, value_name = "FILE")]
    pub draft_config: Option<PathBuf>,

    /// Datasets: measure the floors on the first N pairs (with --model) and apply them to all,
    /// instead of the truth and floor of every pair.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub calibrate: Option<u64>,

    /// Datasets: compare every N-th pair from the I-th (0-based), for `hsdiff merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Token ids the files were captured on, when they carry none (comma-separated, or @FILE):
    /// with a model they make the truth and the floor computable. Checked against the files'
    /// sequence length and against any ids they do carry. Two files only.
    #[arg(long, value_name = "IDS|@FILE", conflicts_with = "prompt")]
    pub tokens: Option<String>,

    /// The prompt the files were captured on (text, @FILE or a built-in prompt name),
    /// tokenised with --model's tokenizer; as --tokens otherwise.
    #[arg(long, value_name = "TEXT|@FILE|NAME")]
    pub prompt: Option<String>,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &CompareArgs) -> Result<i32> {
    let inputs = [Some(args.a.as_path()), Some(&args.b), args.model.as_deref()];
    args.report
        .options()
        .check_targets(&inputs.into_iter().flatten().collect::<Vec<_>>())?;
    let hint = args.dtype_hint.as_deref().map(parse_dtype).transpose()?;
    let (read_a, read_b) = read_options(args)?;
    let pair = PairOptions {
        maps: args.map.clone(),
        shift: args.shift,
        layers: args.report.layers()?,
        command: Some(command_line()),
        no_floor: args.no_floor,
        verbose: true,
        given_ids: None,
    };
    let batched = |p: &PathBuf, read: &ReadOptions| -> Result<bool> {
        Ok(FileSource::open_with(
            p,
            hint,
            &ReadOptions {
                sample: Some(0),
                ..read.clone()
            },
        )?
        .pipeline
        .is_some_and(|p| p.batch > 1))
    };
    if dataset::is_dataset(&args.a)
        || dataset::is_dataset(&args.b)
        || batched(&args.a, &read_a)?
        || batched(&args.b, &read_b)?
    {
        if args.tokens.is_some() || args.prompt.is_some() {
            return Err(Error::argument(
                if args.tokens.is_some() {
                    "--tokens"
                } else {
                    "--prompt"
                },
                "applies to two files, not to datasets (each sample carries its own token ids)",
            ));
        }
        return run_dataset(args, hint, pair, read_a, read_b);
    }
    if args.shard.is_some() || args.calibrate.is_some() {
        return Err(Error::argument(
            if args.shard.is_some() {
                "--shard"
            } else {
                "--calibrate"
            },
            "applies to datasets (folders, globs or batched files), not to two files",
        ));
    }
    let a = FileSource::open_with(&args.a, hint, &read_a)?;
    let b = FileSource::open_with(&args.b, hint, &read_b)?;
    pipelines::check_ids_used(
        (&read_a, a.pipeline.is_some()),
        (&read_b, b.pipeline.is_some()),
    )?;
    let labels = pairing::labels(&args.a, &args.b);
    let pair = PairOptions {
        given_ids: compare_tokens::given_ids(
            args.tokens.as_deref(),
            args.prompt.as_deref(),
            args.model.as_deref(),
        )?,
        ..pair
    };
    let outcome = compare_pair(
        a,
        b,
        labels,
        &pair,
        Calibration::Find(args.model.as_deref()),
    )?;
    let mut report = outcome.report;
    if let Some(t) = &outcome.trained {
        report.notes.push(trained_note(t));
    }
    emit(&report, &args.report.options())
}

/// The figures of the positions `loss_mask` trains on, as a note under one pair's table.
fn trained_note(t: &crate::compare_pair::Trained) -> String {
    let worst = t
        .report
        .tensors
        .iter()
        .filter_map(|r| r.ratio_to_floor.map(|x| (x, &r.name)))
        .max_by(|p, q| p.0.total_cmp(&q.0));
    let size = match worst {
        Some((x, name)) => format!("worst {x:.1}× the floor at {name}"),
        None => format!(
            "max rel L2 {:.2e}",
            t.report
                .tensors
                .iter()
                .map(|r| r.rel_l2)
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
fn read_options(args: &CompareArgs) -> Result<(ReadOptions, ReadOptions)> {
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
    let both = given(&args.layer_ids, "--layer-ids")?;
    let draft = match &args.draft_config {
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
    let (num_layers, hidden_size) = match &args.model {
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
        side(given(&args.layer_ids_a, "--layer-ids-a")?),
        side(given(&args.layer_ids_b, "--layer-ids-b")?),
    ))
}

fn run_dataset(
    args: &CompareArgs,
    dtype_hint: Option<DType>,
    mut pair: PairOptions,
    read_a: ReadOptions,
    read_b: ReadOptions,
) -> Result<i32> {
    let options = args.report.options();
    if args.calibrate.is_some() && args.model.is_none() {
        return Err(Error::argument("--calibrate", "needs --model DIR"));
    }
    pair.verbose = false;
    let opts = DatasetOptions {
        pair,
        read_a,
        read_b,
        dtype_hint,
        model: args.model.clone(),
        calibrate: args
            .calibrate
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        shard: args
            .shard
            .as_deref()
            .map(dataset::parse_shard)
            .transpose()?,
    };
    let report = dataset::run(&args.a, &args.b, &opts)?;
    dataset_render::emit(&report, &options)?;
    Ok(dataset::exit_code(&report, options.fail_on))
}
