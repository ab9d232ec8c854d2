//! config.json of every supported model type, read into one typed [`ModelConfig`].
//!
//! Vision-language configs (`qwen3_5`, `qwen3_5_moe`) keep the text model's fields under
//! `text_config`; the text-only types keep them at the top level. Fields that transformers does
//! not read (`attn_output_gate`, `mrope_interleaved`, `mamba_ssm_dtype`, `mtp_*`, …) are accepted
//! and ignored, as transformers does.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fp8::Fp8Scheme;
use crate::util::limits;

mod fields;
mod sections;

use fields::Fields;
use sections::{read_layer_types, read_moe, read_quantization, read_rope};

/// The architectures hsdiff reproduces. They share one forward pass and differ in the checkpoint
/// layout of the linear-attention projections and in the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `qwen3_next`: packed `in_proj_qkvz` / `in_proj_ba`, MoE or dense MLP per layer.
    Qwen3Next,
    /// `qwen3_5`, `qwen3_5_text`: split `in_proj_qkv` / `z` / `b` / `a`, dense MLP.
    Qwen35,
    /// `qwen3_5_moe`, `qwen3_5_moe_text`: split projections, every layer MoE.
    Qwen35Moe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerType {
    LinearAttention,
    FullAttention,
}

impl LayerType {
    pub fn as_str(self) -> &'static str {
        match self {
            LayerType::LinearAttention => "linear_attention",
            LayerType::FullAttention => "full_attention",
        }
    }
}

/// Geometry of the Gated DeltaNet layers.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttentionConfig {
    pub conv_kernel: usize,
    pub num_key_heads: usize,
    pub num_value_heads: usize,
    pub key_head_dim: usize,
    pub value_head_dim: usize,
}

impl LinearAttentionConfig {
    pub fn key_dim(&self) -> usize {
        self.num_key_heads * self.key_head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.num_value_heads * self.value_head_dim
    }
    /// Channels of the causal conv: `[q | k | v]`.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// Value heads served by each key head.
    pub fn heads_per_key_head(&self) -> usize {
        self.num_value_heads / self.num_key_heads
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
    pub norm_topk_prob: bool,
    pub decoder_sparse_step: usize,
    pub mlp_only_layers: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `model_type` at the top level of config.json.
    pub model_type: String,
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub partial_rotary_factor: f64,
    pub attention_bias: bool,
    pub layer_types: Vec<LayerType>,
    pub linear: LinearAttentionConfig,
    pub moe: Option<MoeConfig>,
    /// What config.json says; the checkpoint decides (a missing `lm_head.weight` means tied).
    pub tie_word_embeddings: bool,
    /// `quantization_config` of an FP8 checkpoint (`quant_method: fp8`); `None` without one.
    pub quantization: Option<Fp8Scheme>,
    /// SHA-256 of the config.json bytes, recorded in dumps and reports.
    pub sha256: String,
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = crate::util::input::read_regular(path, limits::get().json_bytes, "json-bytes")?;
        Self::from_bytes(&bytes, path)
    }

    /// `path` is only used to name the source in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::config(path, format!("not valid JSON: {e}")))?;
        let Value::Object(top) = &value else {
            return Err(Error::config(path, "top level must be a JSON object"));
        };
        let top = Fields { path, obj: top };
        let model_type = top.str_or("model_type", "")?.to_string();
        let (family, nested) = match model_type.as_str() {
            "qwen3_next" => (Family::Qwen3Next, false),
            "qwen3_5" => (Family::Qwen35, true),
            "qwen3_5_text" => (Family::Qwen35, false),
            "qwen3_5_moe" => (Family::Qwen35Moe, true),
            "qwen3_5_moe_text" => (Family::Qwen35Moe, false),
            "" => return Err(Error::config(path, "missing required field `model_type`")),
            other => {
                return Err(Error::config(
                    path,
                    format!(
                        "unknown model_type `{other}` (supported: qwen3_next, qwen3_5, \
                         qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text)"
                    ),
                ));
            }
        };
        let text = if nested {
            top.object("text_config")?.ok_or_else(|| {
                Error::config(
                    path,
                    format!("model_type `{model_type}` needs a `text_config` object"),
                )
            })?
        } else {
            Fields { path, obj: top.obj }
        };
        let mut sha = Sha256::new();
        sha.update(bytes);
        let sha256 = format!("{:x}", sha.finalize());
        Self::from_text_fields(&text, &top, model_type, family, sha256)
    }

    fn from_text_fields(
        text: &Fields,
        top: &Fields,
        model_type: String,
        family: Family,
        sha256: String,
    ) -> Result<Self> {
        let num_hidden_layers = text.usize("num_hidden_layers")?;
        // Checked here, before the per-layer lists below are built from it.
        let cap = limits::get().layers;
        if num_hidden_layers > cap {
            return Err(text.err(format!(
                "field `num_hidden_layers`: {}",
                limits::exceeded("it", num_hidden_layers, "layers", cap)
            )));
        }
        let hidden_size = text.usize("hidden_size")?;
        let num_attention_heads = text.usize("num_attention_heads")?;
        let linear = LinearAttentionConfig {
            conv_kernel: text.usize_or("linear_conv_kernel_dim", 4)?,
            num_key_heads: text.usize("linear_num_key_heads")?,
            num_value_heads: text.usize("linear_num_value_heads")?,
            key_head_dim: text.usize("linear_key_head_dim")?,
            value_head_dim: text.usize("linear_value_head_dim")?,
        };
        let layer_types = read_layer_types(text, num_hidden_layers)?;
        let (rope_theta, partial_rotary_factor) = read_rope(text)?;
        let moe = read_moe(text, family)?;
        let act = text.str_or("hidden_act", "silu")?;
        if act != "silu" {
            return Err(text.err(format!("hidden_act `{act}` is not supported (only silu)")));
        }
        if !text.bool_or("attn_output_gate", true)? {
            return Err(text.err(
                "attn_output_gate = false: transformers always applies the output gate; \
                 this checkpoint would not run as its config says"
                    .to_string(),
            ));
        }
        // Qwen3_5ForConditionalGeneration ties on the top-level flag, text-only classes on
        // their own config; the checkpoint (presence of lm_head.weight) decides in the end.
        let tie_word_embeddings = top.bool_or(
            "tie_word_embeddings",
            text.bool_or("tie_word_embeddings", false)?,
        )?;
        let cfg = ModelConfig {
            model_type,
            family,
            vocab_size: text.usize("vocab_size")?,
            hidden_size,
            intermediate_size: text.usize("intermediate_size")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: text.usize("num_key_value_heads")?,
            head_dim: text.usize_or("head_dim", hidden_size / num_attention_heads.max(1))?,
            rms_norm_eps: text.f64_or("rms_norm_eps", 1e-6)?,
            rope_theta,
            partial_rotary_factor,
            attention_bias: text.bool_or("attention_bias", false)?,
            layer_types,
            linear,
            moe,
            tie_word_embeddings,
            quantization: read_quantization(top, text)?,
            sha256,
        };
        cfg.validate(text)?;
        Ok(cfg)
    }

    /// The config's values are usable, in this order: every dimension > 0 and within the
    /// limits, the float fields in range, the head counts and rotary dims consistent, the MoE
    /// fields consistent; the first failure is the error.
    fn validate(&self, text: &Fields) -> Result<()> {
        self.validate_dims(text)?;
        self.validate_floats(text)?;
        self.validate_heads(text)?;
        self.validate_moe(text)
    }

    fn validate_dims(&self, text: &Fields) -> Result<()> {
        let lim = limits::get();
        let l = &self.linear;
        let mut dims = vec![
            ("num_hidden_layers", self.num_hidden_layers),
            ("hidden_size", self.hidden_size),
            ("vocab_size", self.vocab_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("linear_conv_kernel_dim", l.conv_kernel),
            ("linear_num_key_heads", l.num_key_heads),
            ("linear_num_value_heads", l.num_value_heads),
            ("linear_key_head_dim", l.key_head_dim),
            ("linear_value_head_dim", l.value_head_dim),
        ];
        if let Some(moe) = &self.moe {
            dims.extend([
                ("num_experts", moe.num_experts),
                ("moe_intermediate_size", moe.moe_intermediate_size),
            ]);
        }
        for (field, v) in dims {
            if v == 0 {
                return Err(text.err(format!("field `{field}` must be > 0, got 0")));
            }
            if v > lim.dim {
                return Err(text.err(format!(
                    "field `{field}`: {}",
                    limits::exceeded("it", v, "dim", lim.dim)
                )));
            }
        }
        Ok(())
    }

    /// Ranges that would otherwise turn the run into NaN or switch RoPE off without a word.
    fn validate_floats(&self, text: &Fields) -> Result<()> {
        let positive = [
            ("rms_norm_eps", self.rms_norm_eps),
            ("rope_theta", self.rope_theta),
            ("partial_rotary_factor", self.partial_rotary_factor),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(text.err(format!(
                    "field `{field}` must be a finite number > 0, got {v}"
                )));
            }
        }
        if self.rms_norm_eps >= 1.0 {
            return Err(text.err(format!(
                "field `rms_norm_eps` must be < 1 (a normalisation epsilon), got {}",
                self.rms_norm_eps
            )));
        }
        if self.partial_rotary_factor > 1.0 {
            return Err(text.err(format!(
                "field `partial_rotary_factor` must be in (0, 1], got {}",
                self.partial_rotary_factor
            )));
        }
        Ok(())
    }

    fn validate_heads(&self, text: &Fields) -> Result<()> {
        let l = &self.linear;
        require(
            text,
            self.num_key_value_heads > 0
                && self
                    .num_attention_heads
                    .is_multiple_of(self.num_key_value_heads),
            "num_attention_heads must be a multiple of num_key_value_heads",
        )?;
        require(
            text,
            l.num_key_heads > 0 && l.num_value_heads.is_multiple_of(l.num_key_heads),
            "linear_num_value_heads must be a multiple of linear_num_key_heads",
        )?;
        require(
            text,
            l.conv_kernel > 0 && l.key_head_dim > 0 && l.value_head_dim > 0,
            "linear head dims and conv kernel must be > 0",
        )?;
        let rot = self.rotary_dim();
        require(
            text,
            rot.is_multiple_of(2) && rot <= self.head_dim,
            "head_dim × partial_rotary_factor must be an even number ≤ head_dim",
        )?;
        require(
            text,
            rot > 0,
            "head_dim × partial_rotary_factor rounds to 0 rotary dims: RoPE would be off",
        )
    }

    fn validate_moe(&self, text: &Fields) -> Result<()> {
        let Some(moe) = &self.moe else {
            return Ok(());
        };
        require(
            text,
            moe.num_experts_per_tok > 0 && moe.num_experts_per_tok <= moe.num_experts,
            "num_experts_per_tok must be in 1..=num_experts",
        )?;
        if let Some(&bad) = moe
            .mlp_only_layers
            .iter()
            .find(|&&i| i >= self.num_hidden_layers)
        {
            return Err(text.err(format!(
                "field `mlp_only_layers` names layer {bad}, but num_hidden_layers is {}",
                self.num_hidden_layers
            )));
        }
        Ok(())
    }

    /// Number of leading dims of each attention head that RoPE rotates.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// Whether decoder layer `i` uses the sparse MoE block (else the dense MLP).
    pub fn is_moe_layer(&self, i: usize) -> bool {
        match (&self.moe, self.family) {
            (None, _) => false,
            (Some(_), Family::Qwen35Moe) => true,
            (Some(m), _) => {
                m.num_experts > 0
                    && !m.mlp_only_layers.contains(&i)
                    && m.decoder_sparse_step > 0
                    && (i + 1).is_multiple_of(m.decoder_sparse_step)
            }
        }
    }
}

/// `msg` as an error of the config's text section unless `ok`.
fn require(text: &Fields, ok: bool, msg: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(text.err(msg.to_string()))
    }
}
