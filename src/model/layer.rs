//! One decoder layer: `h + mixer(norm(h))`, then `+ ffn(norm(·))`.

use candle_core::Tensor;

use super::Weights;
use super::attention::Attention;
use super::gdn::{GatedDeltaNet, GdnCaptures};
use super::mlp::{Mlp, RouterChoice, SparseMoe};
use super::norm::RmsNorm;
use super::rope::Rope;
use crate::backends::LinearAttentionBackend;
use crate::config::{LayerType, ModelConfig};
use crate::error::Result;

enum Mixer {
    Linear(GatedDeltaNet),
    Full(Attention),
}

enum FeedForward<'a> {
    Dense(Mlp),
    Sparse(SparseMoe<'a>),
}

pub struct DecoderLayer<'a> {
    input_layernorm: RmsNorm,
    mixer: Mixer,
    post_attention_layernorm: RmsNorm,
    ffn: FeedForward<'a>,
}

/// What a layer can report besides its output.
#[derive(Default)]
pub struct LayerCaptures {
    pub gdn: Option<GdnCaptures>,
    pub router: Option<RouterChoice>,
}

impl<'a> DecoderLayer<'a> {
    /// `w` is rooted at the layer (`…layers.{index}.`); MoE experts are read from it later, in
    /// `forward`, when tokens are routed to them.
    pub fn new(cfg: &ModelConfig, index: usize, w: &Weights<'a>) -> Result<Self> {
        let h = cfg.hidden_size;
        let mixer = match cfg.layer_types[index] {
            LayerType::LinearAttention => {
                Mixer::Linear(GatedDeltaNet::new(cfg, &w.pp("linear_attn"))?)
            }
            LayerType::FullAttention => Mixer::Full(Attention::new(cfg, &w.pp("self_attn"))?),
        };
        let ffn = match &cfg.moe {
            Some(moe) if cfg.is_moe_layer(index) => {
                FeedForward::Sparse(SparseMoe::new(cfg, moe, &w.pp("mlp"))?)
            }
            _ => FeedForward::Dense(Mlp::new(&w.pp("mlp"), h, cfg.intermediate_size)?),
        };
        Ok(DecoderLayer {
            input_layernorm: RmsNorm::new(h, cfg.rms_norm_eps, &w.pp("input_layernorm"))?,
            mixer,
            post_attention_layernorm: RmsNorm::new(
                h,
                cfg.rms_norm_eps,
                &w.pp("post_attention_layernorm"),
            )?,
            ffn,
        })
    }

    pub fn forward(
        &self,
        x: &Tensor,
        rope: &Rope,
        backend: &dyn LinearAttentionBackend,
        capture_ops: bool,
    ) -> Result<(Tensor, LayerCaptures)> {
        let mut captures = LayerCaptures::default();
        let normed = self.input_layernorm.forward(x)?;
        let mixed = match &self.mixer {
            Mixer::Linear(gdn) => {
                let (out, caps) = gdn.forward(&normed, backend, capture_ops)?;
                captures.gdn = caps;
                out
            }
            Mixer::Full(attn) => attn.forward(&normed, rope)?,
        };
        let x = (x + mixed)?;
        let normed = self.post_attention_layernorm.forward(&x)?;
        let ff = match &self.ffn {
            FeedForward::Dense(mlp) => mlp.forward(&normed)?,
            FeedForward::Sparse(moe) => {
                let (out, choice) = moe.forward(&normed)?;
                captures.router = Some(choice);
                out
            }
        };
        Ok(((x + ff)?, captures))
    }
}
