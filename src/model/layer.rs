//! One decoder layer: `h + mixer(norm(h))`, then `+ ffn(norm(·))`.

use candle_core::Tensor;

use super::Weights;
use super::attention::Attention;
use super::cache::{CallContext, LayerCache};
use super::gdn::{GatedDeltaNet, GdnCaptures, GdnStep};
use super::mlp::{Mlp, RouterChoice, SparseMoe};
use super::norm::RmsNorm;
use super::rope::Rope;
use crate::backends::{GdnState, LinearAttentionBackend};
use crate::error::Result;
use crate::weights::config::{LayerType, ModelConfig};

enum Mixer {
    Linear(GatedDeltaNet),
    Full(Attention),
}

enum FeedForward<'a> {
    Dense(Mlp),
    Sparse(Box<SparseMoe<'a>>),
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
    /// A linear-attention layer's state after the last token, when asked.
    pub state: Option<GdnState>,
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
                FeedForward::Sparse(Box::new(SparseMoe::new(cfg, moe, &w.pp("mlp"))?))
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
        capture_state: bool,
        route: Option<&[Vec<u32>]>,
    ) -> Result<(Tensor, LayerCaptures)> {
        self.residual(x, route, |mixer, normed| match mixer {
            Mixer::Linear(gdn) => {
                let (out, gdn, state) = gdn.forward(normed, backend, capture_ops, capture_state)?;
                let captures = LayerCaptures {
                    gdn,
                    state,
                    ..LayerCaptures::default()
                };
                Ok((out, captures))
            }
            Mixer::Full(attn) => Ok((attn.forward(normed, rope)?, LayerCaptures::default())),
        })
    }

    /// The cached form: `call` says where the tokens sit, `entry` is this layer's cache entry
    /// (read and replaced).
    pub fn forward_cached(
        &self,
        x: &Tensor,
        call: &CallContext,
        backend: &dyn LinearAttentionBackend,
        entry: &mut LayerCache,
        capture_ops: bool,
    ) -> Result<(Tensor, LayerCaptures)> {
        self.residual(x, None, |mixer, normed| match mixer {
            Mixer::Linear(gdn) => {
                let step = match (call.doc_starts, call.real) {
                    (Some(starts), _) => GdnStep::Packed(starts),
                    (None, Some(real)) => GdnStep::Padded(real),
                    (None, None) => GdnStep::Continue(entry.linear()),
                };
                let (out, gdn, state) = gdn.forward_cached(normed, backend, step, capture_ops)?;
                if let Some(state) = state {
                    *entry = LayerCache::Linear(state);
                }
                let captures = LayerCaptures {
                    gdn,
                    ..LayerCaptures::default()
                };
                Ok((out, captures))
            }
            Mixer::Full(attn) => {
                let mut kv = entry.take_kv();
                let out = attn.forward_cached(normed, call.rope, call.mask, &mut kv)?;
                if let Some(kv) = kv {
                    *entry = LayerCache::Attention(kv);
                }
                Ok((out, LayerCaptures::default()))
            }
        })
    }

    /// The whole layer around its mixer: `h = x + mix(norm(x))`, then `h + ffn(norm(h))`; `mix`
    /// runs the mixer on the normed input and hands back its captures (Gated DeltaNet values and
    /// state, if any); the router's choice is added here. `route`: the experts each token
    /// must use, when this layer's routing is forced (ignored by a dense layer).
    fn residual(
        &self,
        x: &Tensor,
        route: Option<&[Vec<u32>]>,
        mix: impl FnOnce(&Mixer, &Tensor) -> Result<(Tensor, LayerCaptures)>,
    ) -> Result<(Tensor, LayerCaptures)> {
        let normed = self.input_layernorm.forward(x)?;
        let (mixed, mut captures) = mix(&self.mixer, &normed)?;
        let x = (x + mixed)?;
        let normed = self.post_attention_layernorm.forward(&x)?;
        let ff = match &self.ffn {
            FeedForward::Dense(mlp) => mlp.forward(&normed)?,
            FeedForward::Sparse(moe) => {
                let (out, choice) = moe.forward(&normed, route)?;
                captures.router = Some(choice);
                out
            }
        };
        Ok(((x + ff)?, captures))
    }
}
