//! The hybrid model: embedding, decoder layers (Gated DeltaNet or gated full attention, dense
//! MLP or MoE), final norm, lm_head. Weights are read (or generated) one layer at a time as the
//! forward pass reaches them, MoE experts only when a token is routed to them, the embedding only
//! for the rows the prompt uses and the lm_head in blocks of rows, so peak memory is about one
//! layer's weights in the compute dtype plus activations, whatever the size of the model.

mod attention;
mod bf16_gemm;
pub mod builtin;
mod cache;
mod cached;
mod decode;
mod gdn;
mod layer;
mod linear;
mod mlp;
mod norm;
mod observer;
mod rope;
mod source;
mod weight_cache;
mod weights;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use crate::backends::{GdnState, LinearAttentionBackend};
use crate::capture::fingerprint::{Fingerprint, sha256_hex};
use crate::capture::{Captures, Key, Op, RouterField, StateKind};
use crate::error::{Error, Result};
use crate::util::progress::Progress;
use crate::weights::checkpoint::{Checkpoint, KeyLayout};
use crate::weights::config::ModelConfig;
use crate::weights::random_weights::RandomWeights;
use layer::LayerCaptures;
use mlp::RouterChoice;

pub use bf16_gemm::{Kernel as Bf16Kernel, WideKernel};
pub use cache::{LayerCache, ModelCache};
pub use cached::TokenLayout;
pub use decode::{DecodePlan, push_states};
pub use gdn::GdnCaptures;
pub use layer::DecoderLayer;
pub use linear::{Linear, product_flops};
pub(crate) use mlp::flip_gap;
pub use observer::{Observer, Recorder, Routes};
pub use source::WeightSource;
pub use weight_cache::WeightCache;
pub use weights::Weights;

/// Where a model came from, for messages and fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Builtin,
    Dir(PathBuf),
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::Builtin => write!(f, "built-in tiny Qwen3.5"),
            ModelSource::Dir(p) => write!(f, "{}", p.display()),
        }
    }
}

pub struct Model {
    pub config: ModelConfig,
    pub weights: WeightSource,
    pub source: ModelSource,
    /// Weights kept across passes ([`Model::keep_weights`]); empty unless asked.
    pub cache: WeightCache,
}

/// How to run one forward pass.
pub struct RunOptions<'a> {
    pub dtype: DType,
    pub device: Device,
    pub backend: &'a dyn LinearAttentionBackend,
}

/// The built-in model's tokenizer, compiled in once: `builtin` loads it, the fingerprint digests it.
pub(crate) const BUILTIN_TOKENIZER: &[u8] =
    include_bytes!("../../golden/qwen3_5_tiny/tokenizer.json");

/// A model folder with its config.json read: what a command needs of the model before the
/// weights (a drafter file's reading needs the layer count), kept so that loading the model
/// ([`Model::from_folder`]) does not read config.json again.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    pub dir: PathBuf,
    pub config: ModelConfig,
}

impl ModelFolder {
    /// Reads `dir`'s config.json.
    pub fn read(dir: &Path) -> Result<Self> {
        Ok(ModelFolder {
            dir: dir.to_path_buf(),
            config: ModelConfig::from_file(&dir.join("config.json"))?,
        })
    }
}

impl Model {
    pub fn load(dir: &Path) -> Result<Self> {
        check_model_dir(dir)?;
        Self::from_folder(ModelFolder::read(dir)?)
    }

    /// The model of a folder whose config.json is read: its checkpoint opened.
    pub fn from_folder(folder: ModelFolder) -> Result<Self> {
        let ModelFolder { dir, config } = folder;
        check_model_dir(&dir)?;
        let mut checkpoint = Checkpoint::open(&dir)?;
        checkpoint.check_quantization(config.quantization.as_ref())?;
        Ok(Model {
            config,
            weights: WeightSource::Checkpoint(checkpoint),
            source: ModelSource::Dir(dir),
            cache: WeightCache::default(),
        })
    }

    /// A model of `dir`'s config.json whose weights are generated from `seed`
    /// (`--random-weights`); any safetensors files in `dir` are not read.
    pub fn load_random(dir: &Path, seed: u64) -> Result<Self> {
        check_model_dir(dir)?;
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let weights = WeightSource::Random(RandomWeights::new(&config, seed)?);
        Ok(Model {
            config,
            weights,
            source: ModelSource::Dir(dir.to_path_buf()),
            cache: WeightCache::default(),
        })
    }

    pub fn layout(&self) -> &KeyLayout {
        self.weights.layout()
    }

    /// The model's part of a fingerprint: source, key layout and digests. A digest that cannot be
    /// computed (unreadable tokenizer.json, a tensor past the end of its file) is left out rather
    /// than failing the run; the run itself reports such files.
    pub fn fill_fingerprint(&self, fp: &mut Fingerprint) {
        fp.model = Some(self.source.to_string());
        fp.key_layout = Some(format!("{}layers.*", self.layout().root()));
        fp.config_sha256 = Some(self.config.sha256.clone());
        fp.num_experts = self.config.moe.as_ref().map(|m| m.num_experts);
        fp.num_experts_per_tok = self.config.moe.as_ref().map(|m| m.num_experts_per_tok);
        fp.weights_digest = self.weights.digest().ok();
        fp.tokenizer_sha256 = match &self.source {
            ModelSource::Builtin => Some(sha256_hex(BUILTIN_TOKENIZER)),
            ModelSource::Dir(dir) => std::fs::read(dir.join("tokenizer.json"))
                .ok()
                .map(|b| sha256_hex(&b)),
        };
    }

    /// Whether the logits use the embedding matrix (no `lm_head.weight` in the checkpoint).
    pub fn tied_embeddings(&self) -> bool {
        !self.weights.contains("lm_head.weight")
    }

    /// Keep the weights read in `dtype` on `device` for later passes of this run (A, B and the
    /// floor run of a live run share them) when the whole model in `dtype` fits in half of the
    /// memory available now on `device`. Returns whether they will be kept.
    pub fn keep_weights(&self, dtype: DType, device: &Device) -> bool {
        let dtype = crate::fp8::serving::compute_dtype(dtype);
        let bytes = self.weights.element_count() * dtype.size_in_bytes() as u64;
        self.cache.keep(dtype, device, bytes)
    }

    /// A served FP8 dtype (`--dtype fp8`) runs an FP8 checkpoint's quantised weights; refused,
    /// naming the model, for any other model (never a silent bf16 run, never weights quantised
    /// on the fly).
    pub fn check_dtype(&self, dtype: DType) -> Result<()> {
        if crate::fp8::serving::act_scale(dtype).is_none() {
            return Ok(());
        }
        let why = if self.weights.is_generated() {
            "--random-weights generates bf16 weights, not an FP8 checkpoint's"
        } else if self.config.quantization.is_none() {
            "its config.json has no quantization_config: not an FP8 checkpoint"
        } else if !self.weights.holds_fp8() {
            "its config.json has a quantization_config, but no weight is stored in FP8 (an FP8 \
             model's config.json beside bf16 weights?)"
        } else {
            return Ok(());
        };
        Err(Error::argument(
            "--dtype",
            format!(
                "{} runs an FP8 checkpoint's quantised Linear layers as vLLM / SGLang serve \
                 them; {} cannot: {why}",
                crate::util::device::dtype_label(dtype),
                self.source
            ),
        ))
    }

    /// The model's tensors under the text model's root (`model.` or `model.language_model.`).
    fn view<'a>(&'a self, dtype: DType, device: &'a Device) -> Weights<'a> {
        Weights::new(&self.weights, &self.cache, dtype, device).root(self.layout().root())
    }

    /// Checks token ids against the vocabulary.
    pub fn check_tokens(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::prompt(
                "no tokens to run (empty prompt?)".to_string(),
            ));
        }
        let v = self.config.vocab_size;
        if let Some((pos, id)) = ids.iter().enumerate().find(|(_, id)| **id as usize >= v) {
            return Err(Error::prompt(format!(
                "token id {id} at position {pos} is out of range for vocab_size {v}"
            )));
        }
        Ok(())
    }

    /// Runs the prefill forward pass over `ids` (batch 1), capturing `embed`, every
    /// `layers.{i}`, the router choices, `final_norm` and `logits`.
    pub fn run(&self, ids: &[u32], opts: &RunOptions, progress: &Progress) -> Result<Captures> {
        let mut recorder = Recorder::new(ids);
        self.observe(ids, opts, &mut recorder, progress, None)?;
        Ok(recorder.into_captures())
    }

    /// The prefill forward pass over `ids` (batch 1), handing `observer` what it wants (ops and
    /// final states computed only then) and running each layer on the input it feeds. Stops
    /// after decoder layer `last_layer` when one is given and it is not the last: no
    /// `final_norm` or `logits` then. A calibration run for a few early layers of a deep model
    /// (`compare --layers 1,3`) costs those layers only.
    pub fn observe(
        &self,
        ids: &[u32],
        opts: &RunOptions,
        observer: &mut dyn Observer,
        progress: &Progress,
        last_layer: Option<usize>,
    ) -> Result<()> {
        self.check_tokens(ids)?;
        self.check_dtype(opts.dtype)?;
        let cfg = &self.config;
        let device = &opts.device;
        let w = self.view(opts.dtype, device);
        let dtype = w.dtype();
        let t = ids.len();
        progress.begin(t);

        let start = observer.resume_at();
        let mut x = match start {
            0 => {
                let x = self.embed(&w, ids, 1)?;
                hand(observer, Key::Embed, &x);
                x
            }
            at => self.resumed_input(observer, at, last_layer)?,
        };

        let rope = rope::Rope::new(cfg.rope_theta, cfg.rotary_dim(), t, dtype, device)?;
        for i in start..cfg.num_hidden_layers {
            if let Some(fed) = observer.feed(i)? {
                x = fed.to_dtype(dtype)?.to_device(device)?;
            }
            let ops = Op::ALL.iter().any(|&op| observer.wants(Key::Op(i, op)));
            let states = StateKind::ALL
                .iter()
                .any(|&kind| observer.wants(Key::State(i, kind)));
            let layer = DecoderLayer::new(cfg, i, &w.pp("layers").pp(i))?;
            let route = observer.route(i);
            let (out, layer_caps) = layer.forward(&x, &rope, opts.backend, ops, states, route)?;
            // A GPU runs ahead of the host: a fault surfaces here, and the progress line's
            // per-layer timing stays true.
            crate::util::device::check_device(device, &format!("during layer {i}"))?;
            hand_layer(observer, i, layer_caps, &out, device)?;
            x = out;
            progress.layer_done(i as u64 + 1);
            if last_layer.is_some_and(|last| i == last && last + 1 < cfg.num_hidden_layers) {
                progress.finish();
                return Ok(());
            }
        }
        if let Some(fed) = observer.feed(cfg.num_hidden_layers)? {
            x = fed.to_dtype(dtype)?.to_device(device)?;
        }
        let (normed, logits) = self.head(&w, &x)?;
        hand(observer, Key::FinalNorm, &normed);
        hand(observer, Key::Logits, &logits);
        progress.finish();
        Ok(())
    }

    /// The input of decoder layer `at`, where a resumed pass starts (the observer holds the
    /// layers before it); refused unless the pass runs that layer.
    fn resumed_input(
        &self,
        observer: &dyn Observer,
        at: usize,
        last_layer: Option<usize>,
    ) -> Result<Tensor> {
        let last = last_layer.map_or(self.config.num_hidden_layers, |l| l + 1);
        if at >= last.min(self.config.num_hidden_layers) {
            return Err(Error::Internal(format!(
                "a pass resumed at layer {at} would run no layer"
            )));
        }
        observer.feed(at)?.ok_or_else(|| {
            Error::Internal(format!("a pass resumed at layer {at} was fed no input"))
        })
    }

    /// The embedding rows of `ids` (`B` sequences of equal length, concatenated) as
    /// `[B, T, hidden]`.
    fn embed(&self, w: &Weights, ids: &[u32], batch: usize) -> Result<Tensor> {
        let cfg = &self.config;
        let rows: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
        let t = ids.len() / batch.max(1);
        Ok(
            w.get_rows("embed_tokens.weight", &self.vocab_shape(), &rows)?
                .reshape((batch, t, cfg.hidden_size))?,
        )
    }

    /// The final norm and the lm_head (the embedding when tied) over the last layer's output
    /// `x`: (`final_norm`, `logits`).
    fn head(&self, w: &Weights, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let cfg = &self.config;
        let norm = norm::RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, &w.pp("norm"))?;
        let normed = norm.forward(x)?;
        let (head, head_name) = if self.tied_embeddings() {
            (w.clone(), "embed_tokens.weight")
        } else {
            (w.root(""), "lm_head.weight")
        };
        let logits = blocked_logits(&normed, &head, head_name, &self.vocab_shape())?;
        Ok((normed, logits))
    }

    fn vocab_shape(&self) -> [usize; 2] {
        [self.config.vocab_size, self.config.hidden_size]
    }
}
/// What decoder layer `i` reported, in the observer's order: its ops, its router's choices, its
/// output `out`, its final states.
fn hand_layer(
    observer: &mut dyn Observer,
    i: usize,
    caps: LayerCaptures,
    out: &Tensor,
    device: &Device,
) -> Result<()> {
    if let Some(gdn) = caps.gdn {
        for (op, t) in gdn.named() {
            hand(observer, Key::Op(i, op), &t);
        }
    }
    if let Some(choice) = caps.router {
        hand_router(observer, i, choice, device)?;
    }
    hand(observer, Key::Layer(i), out);
    if let Some(state) = &caps.state {
        hand(observer, Key::State(i, StateKind::Conv), &state.conv);
        hand(
            observer,
            Key::State(i, StateKind::Recurrent),
            &state.recurrent,
        );
    }
    Ok(())
}

/// Layer `i`'s router choices, each field only where the observer wants it.
fn hand_router(
    observer: &mut dyn Observer,
    i: usize,
    choice: RouterChoice,
    device: &Device,
) -> Result<()> {
    let topk = Key::Router(i, RouterField::TopkIds);
    if observer.wants(topk) {
        observer.record(topk, router_tensor(&choice.experts, device)?);
    }
    let margin = Key::Router(i, RouterField::Margin);
    if observer.wants(margin) {
        let t = choice.margins.len();
        observer.record(margin, Tensor::from_vec(choice.margins, (1, t), device)?);
    }
    let logits = Key::Router(i, RouterField::Logits);
    if observer.wants(logits) {
        observer.record(logits, choice.logits.to_dtype(DType::F64)?.unsqueeze(0)?);
    }
    let gap = Key::Router(i, RouterField::FlipGap);
    if let Some(gaps) = choice.flip_gaps
        && observer.wants(gap)
    {
        let t = gaps.len();
        observer.record(gap, Tensor::from_vec(gaps, (1, t), device)?);
    }
    Ok(())
}

/// Hands `key`'s tensor to `observer` when it wants it.
fn hand(observer: &mut dyn Observer, key: Key, t: &Tensor) {
    if observer.wants(key) {
        observer.record(key, t.clone());
    }
}

/// Adds layer `i`'s `state.layers.{i}.conv` / `.recurrent`.
pub(crate) fn push_state(caps: &mut Captures, i: usize, state: &GdnState) {
    caps.insert(Key::State(i, StateKind::Conv), state.conv.clone());
    caps.insert(Key::State(i, StateKind::Recurrent), state.recurrent.clone());
}

/// Bytes of one block of lm_head rows in the compute dtype: the vocabulary is applied block by
/// block so that the whole `[vocab, hidden]` matrix (10 GB in f64 at vocab 248320, hidden 5120)
/// is never in memory at once.
const LM_HEAD_BLOCK_BYTES: usize = 128 << 20;

/// `normed · headᵀ` over the vocabulary, `head` read `LM_HEAD_BLOCK_BYTES` of rows at a time.
fn blocked_logits(
    normed: &Tensor,
    head: &Weights,
    name: &str,
    shape: &[usize; 2],
) -> Result<Tensor> {
    let [vocab, hidden] = *shape;
    let row_bytes = hidden * normed.dtype().size_in_bytes();
    let block = (LM_HEAD_BLOCK_BYTES / row_bytes.max(1)).clamp(1, vocab.max(1));
    let mut parts = Vec::with_capacity(vocab.div_ceil(block));
    for start in (0..vocab).step_by(block) {
        let rows: Vec<usize> = (start..(start + block).min(vocab)).collect();
        let w = linear::Linear::from_weight(head.get_rows(name, shape, &rows)?)?;
        parts.push(w.forward(normed)?);
    }
    Ok(Tensor::cat(&parts, normed.rank() - 1)?)
}

/// `dir` must be an existing folder.
fn check_model_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let msg = if dir.exists() {
        "not a folder (--model takes a checkpoint folder)"
    } else {
        "no such model folder"
    };
    Err(Error::file(dir, msg))
}

fn router_tensor(choice: &[Vec<u32>], device: &Device) -> Result<Tensor> {
    let t = choice.len();
    let k = choice.first().map(Vec::len).unwrap_or(0);
    let flat: Vec<i64> = choice.iter().flatten().map(|&e| i64::from(e)).collect();
    Ok(Tensor::from_vec(flat, (1, t, k), device)?)
}
