//! The files drafter-training pipelines write, one sample per file (or a batch per file), with
//! the layers they train on concatenated along the hidden dimension or stacked on an axis:
//! SpecForge DFlash and EAGLE-3 (`specforge.rs`), vLLM speculators (`speculators.rs`), NVIDIA
//! Model-Optimizer (`modelopt.rs`) and EAGLE-1/2 `ge_data` (`ge_data.rs`); SGLang's own dumps
//! (`sglang/`: many files per sample, rebuilt into one in-memory source).
//!
//! A pipeline is told from the file's keys and shapes before any generic name convention runs
//! (a speculators `hidden_states [T, k+1, H]` is not an `output_hidden_states` stack). Its
//! tensors become [`View`]s of the stored ones, named by hsdiff's names through the pipeline's
//! id convention ([`layer_ids::Convention`]); a shape that fits no reading is refused with what
//! was seen. Padded positions (`attention_mask` = 0) are cut out of every view, so they are
//! never compared. docs/file-formats.md#drafter-pipelines describes the formats for users.

mod apply;
mod ge_data;
pub mod gzip;
pub mod held_positions;
mod last_state;
pub mod layer_ids;
mod modelopt;
pub mod sglang;
mod specforge;
mod speculators;
pub mod stored;
pub mod view;
mod zero_padding;

pub use held_positions::{HeldPositions, align_held_positions};
pub use last_state::check_last_state;
pub use zero_padding::{ZeroPadding, drop_zero_padding};

use std::path::{Path, PathBuf};

use candle_core::{DType, Tensor};

use super::{Entry, FileSource};
use crate::error::{Error, Result};
use layer_ids::Convention;
use view::{Op, View};

/// Layer ids given on the command line or in a drafter config, and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerIds {
    pub ids: Vec<usize>,
    pub from: IdsFrom,
}

/// Where given layer ids came from: a list for both sides or for one, or a drafter's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdsFrom {
    BothSides,
    SideA,
    SideB,
    /// A drafter's config.json and the key that held the ids.
    DraftConfig {
        path: PathBuf,
        key: String,
    },
}

impl IdsFrom {
    /// The option that gave the ids, as messages name it.
    pub fn option(&self) -> &'static str {
        match self {
            IdsFrom::BothSides => "--layer-ids",
            IdsFrom::SideA => "--layer-ids-a",
            IdsFrom::SideB => "--layer-ids-b",
            IdsFrom::DraftConfig { .. } => "--draft-config",
        }
    }

    /// Ids given for one side only.
    pub fn is_one_side(&self) -> bool {
        matches!(self, IdsFrom::SideA | IdsFrom::SideB)
    }
}

/// `--layer-ids`, `--draft-config FILE (dflash_config.target_layer_ids)`, …: the words messages
/// and a shard's part use.
impl std::fmt::Display for IdsFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdsFrom::DraftConfig { path, key } => {
                write!(f, "--draft-config {} ({key})", path.display())
            }
            other => f.write_str(other.option()),
        }
    }
}

/// What the reader of a pipeline file is told beyond the file itself.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    pub layer_ids: Option<LayerIds>,
    /// The model's decoder layers and hidden size, when a model is at hand: the pipelines'
    /// default ids and the shape checks.
    pub num_layers: Option<usize>,
    pub hidden_size: Option<usize>,
    /// The model's routed experts, when a model of experts is at hand: router expert ids are
    /// checked below it.
    pub num_experts: Option<usize>,
    /// Which sample of a batched file (`[B, T, …]`) to read; None: the file must hold one.
    pub sample: Option<usize>,
}

/// The pipelines hsdiff reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pipeline {
    SpecforgeDflash,
    SpecforgeEagle3,
    Speculators,
    ModelOptimizer,
    EagleGeData,
}

impl Pipeline {
    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::SpecforgeDflash => "specforge-dflash",
            Pipeline::SpecforgeEagle3 => "specforge-eagle3",
            Pipeline::Speculators => "vllm-speculators",
            Pipeline::ModelOptimizer => "modelopt",
            Pipeline::EagleGeData => "eagle-ge-data",
        }
    }

    /// How the pipeline counts its layer ids.
    pub fn convention(self) -> Convention {
        match self {
            Pipeline::Speculators => Convention::HiddenStatesIndex,
            _ => Convention::OutputOf,
        }
    }
}

/// What was read from a pipeline file, for the report.
#[derive(Debug, Clone)]
pub struct PipelineInfo {
    pub pipeline: Pipeline,
    /// "specforge-dflash: `hidden_states` [1, 230, 640] split into 5 layers by --layer-ids …".
    pub description: String,
    /// Samples the file holds (the batch size; 1 for per-sample files).
    pub batch: usize,
    /// The sample this source reads.
    pub sample: usize,
    /// Positions compared (the real ones) and positions stored.
    pub positions: usize,
    pub stored_positions: usize,
    /// The tensor that marked padded positions, if any.
    pub masked_by: Option<String>,
    /// Entry of `loss_mask` (viewed like the token ids), if the file has one.
    loss_mask: Option<usize>,
    /// The hsdiff name given to the pipeline's last state (`final_norm`, or the last layer's
    /// raw output), checked against the truth by [`check_last_state`].
    pub last_state: Option<String>,
}

/// The file's tensors by stored name: entry index and shape.
pub(super) struct Index<'a> {
    entries: &'a [Entry],
}

impl<'a> Index<'a> {
    fn get(&self, raw: &str) -> Option<(usize, &'a [usize])> {
        self.entries
            .iter()
            .position(|e| e.raw == raw && e.seq.is_none())
            .map(|i| (i, self.entries[i].shape.as_slice()))
    }
    fn has(&self, raw: &str) -> bool {
        self.get(raw).is_some()
    }
    fn shape(&self, raw: &str) -> Option<&'a [usize]> {
        self.get(raw).map(|(_, s)| s)
    }
}

/// One tensor a pipeline file is read as: a part of a stored tensor, under an hsdiff name.
struct Part {
    name: String,
    stored: &'static str,
    /// Ops after the sample and position selection (the layer cut).
    ops: Vec<Op>,
    /// How it is shown in messages: `hidden_states[..., 128:192]`.
    label: String,
}

/// A pipeline's reading of one file, before the sample and positions are chosen.
struct Plan {
    pipeline: Pipeline,
    /// The stored token-id tensor (`input_ids` / `token_ids`), `[T]` or `[B, T]`.
    ids: Option<&'static str>,
    loss_mask: Option<&'static str>,
    parts: Vec<Part>,
    /// Whether the hidden tensors are `[B, T, F]` (batch on axis 0) rather than `[T, …]`.
    batched: bool,
    batch: usize,
    positions: usize,
    description: String,
    last_state: Option<String>,
}

/// Which pipeline wrote the file, from its keys and shapes.
fn detect(index: &Index) -> Option<Pipeline> {
    [
        speculators::detect(index).then_some(Pipeline::Speculators),
        specforge::detect_eagle3(index).then_some(Pipeline::SpecforgeEagle3),
        specforge::detect_dflash(index).then_some(Pipeline::SpecforgeDflash),
        modelopt::detect(index).then_some(Pipeline::ModelOptimizer),
        ge_data::detect(index).then_some(Pipeline::EagleGeData),
    ]
    .into_iter()
    .flatten()
    .next()
}

impl FileSource {
    /// Reads the file as a drafter pipeline's dump when its keys say it is one. Returns false
    /// (and changes nothing) when no pipeline wrote it.
    pub(super) fn read_as_pipeline(&mut self, opts: &ReadOptions) -> Result<bool> {
        let index = Index {
            entries: &self.entries,
        };
        let Some(pipeline) = detect(&index) else {
            return Ok(false);
        };
        let refuse = |msg: String| Error::file(&self.path, format!("{}: {msg}", pipeline.as_str()));
        let plan = match pipeline {
            Pipeline::SpecforgeDflash => specforge::plan_dflash(&index, opts),
            Pipeline::SpecforgeEagle3 => specforge::plan_eagle3(&index, opts),
            Pipeline::Speculators => speculators::plan(&index, opts),
            Pipeline::ModelOptimizer => modelopt::plan(&index, opts),
            Pipeline::EagleGeData => ge_data::plan(&index, opts),
        }
        .map_err(refuse)?;
        let sample = match (opts.sample, plan.batch) {
            (Some(s), b) if s < b => s,
            (Some(s), b) => return Err(refuse(format!("holds {b} samples, not sample {s}"))),
            (None, 1) => 0,
            (None, b) => {
                return Err(refuse(format!(
                    "holds a batch of {b} samples: compare it as a dataset (each sample on its own)"
                )));
            }
        };
        let (positions, masked_by) = self.real_positions(&plan, sample).map_err(refuse)?;
        self.apply_plan(plan, sample, positions, masked_by)?;
        Ok(true)
    }

    /// The view of entry `idx` applied to its stored tensor (unchanged when it has none).
    pub(super) fn apply_view(&self, idx: usize, t: Tensor) -> Result<Tensor> {
        match self.views.get(&idx) {
            Some(v) => v.apply(t),
            None => Ok(t),
        }
    }

    pub(super) fn view(&self, idx: usize) -> Option<&View> {
        self.views.get(&idx)
    }

    /// The `loss_mask` of a pipeline file at the compared positions: true where the drafter
    /// trains. None when the file has none.
    pub fn loss_mask(&self) -> Result<Option<Vec<bool>>> {
        let Some(idx) = self.pipeline.as_ref().and_then(|p| p.loss_mask) else {
            return Ok(None);
        };
        let e = &self.entries[idx];
        let t = self.apply_view(idx, self.load_entry(e)?)?;
        let v: Vec<f64> = t
            .flatten_all()
            .and_then(|t| t.to_dtype(DType::F64))
            .and_then(|t| t.to_vec1())
            .map_err(|x| Error::tensor(&self.path, &e.raw, x.to_string()))?;
        Ok(Some(v.into_iter().map(|x| x != 0.0).collect()))
    }
}

/// Refuses layer ids that no side used (they name layers of a drafter pipeline's file, and
/// neither file is one): given ids are never silently ignored.
pub fn check_ids_used(
    (read_a, a_is_pipeline): (&ReadOptions, bool),
    (read_b, b_is_pipeline): (&ReadOptions, bool),
) -> Result<()> {
    let refuse = |ids: &LayerIds, which: &str| {
        Error::argument(
            ids.from.option(),
            format!(
                "{which} drafter pipeline's dump (SpecForge, vLLM speculators, Model-Optimizer, ge_data): the ids would name nothing"
            ),
        )
    };
    let own = |ids: &LayerIds| ids.from.is_one_side();
    // Ids for both sides beside one side's own: they apply to the other side alone, which
    // must then be a pipeline's dump (else which side they were meant for is a guess).
    let ambiguous = |common: &LayerIds, other: &LayerIds, side: &str| {
        let option = common.from.option();
        Error::argument(
            option,
            format!(
                "with {}: side {side} is no drafter pipeline's dump, so {option} would name nothing; \
                 give the pipeline side's ids once",
                other.from
            ),
        )
    };
    match (&read_a.layer_ids, &read_b.layer_ids) {
        (Some(x), Some(y)) if !own(x) && own(y) && !a_is_pipeline => Err(ambiguous(x, y, "A")),
        (Some(x), Some(y)) if own(x) && !own(y) && !b_is_pipeline => Err(ambiguous(y, x, "B")),
        (Some(x), Some(y)) if x == y && !a_is_pipeline && !b_is_pipeline => {
            Err(refuse(x, "neither side is a"))
        }
        (Some(x), _) if x.from == IdsFrom::SideA && !a_is_pipeline => {
            Err(refuse(x, "side A is no"))
        }
        (_, Some(y)) if y.from == IdsFrom::SideB && !b_is_pipeline => {
            Err(refuse(y, "side B is no"))
        }
        _ => Ok(()),
    }
}

/// Resolves the layer ids of a pipeline tensor holding `k` layers: the ids given, else the
/// pipeline's default for the model at hand; refused when neither fits.
fn resolve_ids(
    what: &str,
    k: usize,
    opts: &ReadOptions,
    default: Option<(Vec<usize>, &str)>,
    convention: Convention,
) -> std::result::Result<(Vec<usize>, String), String> {
    let (ids, from) = match (&opts.layer_ids, default) {
        (Some(given), _) => (given.ids.clone(), given.from.to_string()),
        (None, Some((ids, rule))) => (ids, format!("the default {rule}")),
        (None, None) => {
            return Err(format!(
                "{what} holds {k} layers: say which with --layer-ids LIST or --draft-config FILE \
                 ({})",
                convention.describe()
            ));
        }
    };
    if ids.len() != k {
        return Err(format!(
            "{what} holds {k} layers, but {from} names {} ({})",
            ids.len(),
            list(&ids)
        ));
    }
    let mut seen = ids.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != ids.len() {
        return Err(format!("{from} names a layer twice ({})", list(&ids)));
    }
    if let Some(l) = opts.num_layers
        && let Some(bad) = ids.iter().find(|&&i| i > convention.max_id(l))
    {
        return Err(format!(
            "{from} names id {bad}, past this model's {l} layers ({})",
            convention.describe()
        ));
    }
    Ok((ids, from))
}

/// `1,16,31`: layer ids as messages write them.
pub(crate) fn list(ids: &[usize]) -> String {
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The parts cutting `k` layers of width `h` out of `stored` along `axis` (concatenated), named
/// through `convention`.
fn concatenated(
    stored: &'static str,
    axis: usize,
    h: usize,
    ids: &[usize],
    convention: Convention,
) -> Vec<Part> {
    ids.iter()
        .enumerate()
        .map(|(j, &id)| Part {
            name: convention.name(id),
            stored,
            ops: vec![Op::Narrow {
                axis,
                start: j * h,
                len: h,
            }],
            label: format!("{stored}[…, {}:{}]", j * h, (j + 1) * h),
        })
        .collect()
}

/// `[1, T, F]` / `[B, T, F]` → (batch, T, F); `[T, F]` → (1, T, F) when `allow_2d`.
fn seq_shape(shape: &[usize], allow_2d: bool) -> Option<(usize, usize, usize, bool)> {
    match shape {
        [b, t, f] => Some((*b, *t, *f, true)),
        [t, f] if allow_2d => Some((1, *t, *f, false)),
        _ => None,
    }
}

/// The token count of an ids tensor (`[T]`, `[1, T]` or `[B, T]`) of a batch of `batch`.
fn ids_len(shape: &[usize], batch: usize) -> Option<usize> {
    match shape {
        [t] if batch == 1 => Some(*t),
        [b, t] if *b == batch || *b == 1 && batch == 1 => Some(*t),
        _ => None,
    }
}

/// Checks that the token ids and loss mask fit `positions` and `batch`.
fn check_ids(
    index: &Index,
    ids: &str,
    batch: usize,
    positions: usize,
) -> std::result::Result<(), String> {
    for raw in [ids, "loss_mask"] {
        if let Some(shape) = index.shape(raw)
            && ids_len(shape, batch) != Some(positions)
        {
            return Err(format!(
                "`{raw}` has shape {shape:?}, but the hidden states hold {batch} × {positions} positions"
            ));
        }
    }
    Ok(())
}

fn check_width(h: usize, opts: &ReadOptions, what: &str) -> std::result::Result<(), String> {
    match opts.hidden_size {
        Some(want) if want != h => Err(format!(
            "{what} is {h} wide, but the model's hidden size is {want}"
        )),
        _ => Ok(()),
    }
}

/// A sample's id from its file name: the stem without the pipelines' `data_` / `hs_` prefixes
/// and `.ckpt` of `.ckpt.gz`.
pub fn sample_id(path: &Path) -> String {
    if let Some(id) = sglang::sample_id(path) {
        return id;
    }
    let name = path
        .file_name()
        .map(|n| crate::util::escape::lossless(n).into_owned())
        .unwrap_or_default();
    let mut stem = name.as_str();
    for ext in [
        ".gz",
        ".ckpt",
        ".safetensors",
        ".pt",
        ".pth",
        ".npz",
        ".npy",
    ] {
        stem = stem.strip_suffix(ext).unwrap_or(stem);
    }
    for prefix in ["data_", "hs_"] {
        if let Some(rest) = stem.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return rest.to_string();
        }
    }
    stem.to_string()
}
