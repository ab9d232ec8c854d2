//! The names and shapes of every tensor of the text model a checkpoint of a config holds: what
//! `--random-weights` generates, and what a real checkpoint is expected to hold.

use std::collections::BTreeMap;

use crate::weights::checkpoint::KeyLayout;
use crate::weights::config::{Family, LayerType, ModelConfig};

/// Tensor names and their shapes.
type Tensors = BTreeMap<String, Vec<usize>>;

/// Every tensor of the text model a checkpoint of `cfg` holds in `layout`, with its shape, in
/// the names transformers writes (experts per expert, as on disk; no vision tower, no `mtp.*`).
pub fn checkpoint_tensors(cfg: &ModelConfig, layout: &KeyLayout) -> Tensors {
    let mut out = BTreeMap::new();
    let root = layout.root();
    let h = cfg.hidden_size;
    out.insert(
        format!("{root}embed_tokens.weight"),
        vec![cfg.vocab_size, h],
    );
    out.insert(format!("{root}norm.weight"), vec![h]);
    if !cfg.tie_word_embeddings {
        out.insert("lm_head.weight".to_string(), vec![cfg.vocab_size, h]);
    }
    for (i, kind) in cfg.layer_types.iter().enumerate() {
        let p = format!("{root}layers.{i}.");
        out.insert(format!("{p}input_layernorm.weight"), vec![h]);
        out.insert(format!("{p}post_attention_layernorm.weight"), vec![h]);
        match kind {
            LayerType::LinearAttention => {
                linear_attention(cfg, &format!("{p}linear_attn."), &mut out)
            }
            LayerType::FullAttention => full_attention(cfg, &format!("{p}self_attn."), &mut out),
        }
        mlp_block(cfg, i, &format!("{p}mlp."), &mut out);
    }
    out
}

/// The tensors of a Gated DeltaNet layer under `a` (`….linear_attn.`).
fn linear_attention(cfg: &ModelConfig, a: &str, out: &mut Tensors) {
    let h = cfg.hidden_size;
    let l = &cfg.linear;
    let hv = l.num_value_heads;
    let mut add = |name: String, shape: Vec<usize>| {
        out.insert(name, shape);
    };
    match cfg.family {
        Family::Qwen3Next => {
            let r = l.heads_per_key_head();
            let group = 2 * l.key_head_dim + 2 * r * l.value_head_dim;
            add(
                format!("{a}in_proj_qkvz.weight"),
                vec![l.num_key_heads * group, h],
            );
            add(
                format!("{a}in_proj_ba.weight"),
                vec![l.num_key_heads * 2 * r, h],
            );
        }
        Family::Qwen35 | Family::Qwen35Moe => {
            add(format!("{a}in_proj_qkv.weight"), vec![l.conv_dim(), h]);
            add(format!("{a}in_proj_z.weight"), vec![l.value_dim(), h]);
            add(format!("{a}in_proj_b.weight"), vec![hv, h]);
            add(format!("{a}in_proj_a.weight"), vec![hv, h]);
        }
    }
    add(
        format!("{a}conv1d.weight"),
        vec![l.conv_dim(), 1, l.conv_kernel],
    );
    add(format!("{a}A_log"), vec![hv]);
    add(format!("{a}dt_bias"), vec![hv]);
    add(format!("{a}norm.weight"), vec![l.value_head_dim]);
    add(format!("{a}out_proj.weight"), vec![h, l.value_dim()]);
}

/// The tensors of a full-attention layer under `s` (`….self_attn.`).
fn full_attention(cfg: &ModelConfig, s: &str, out: &mut Tensors) {
    let h = cfg.hidden_size;
    let (hq, hkv, d) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    for (proj, out_f, in_f) in [
        ("q_proj", 2 * hq * d, h),
        ("k_proj", hkv * d, h),
        ("v_proj", hkv * d, h),
        ("o_proj", h, hq * d),
    ] {
        out.insert(format!("{s}{proj}.weight"), vec![out_f, in_f]);
        if cfg.attention_bias {
            out.insert(format!("{s}{proj}.bias"), vec![out_f]);
        }
    }
    out.insert(format!("{s}q_norm.weight"), vec![d]);
    out.insert(format!("{s}k_norm.weight"), vec![d]);
}

/// The tensors of layer `i`'s MLP under `m` (`….mlp.`): the dense MLP, or the experts, the
/// shared expert and the router of an MoE layer.
fn mlp_block(cfg: &ModelConfig, i: usize, m: &str, out: &mut Tensors) {
    let h = cfg.hidden_size;
    let mlp = |out: &mut Tensors, prefix: &str, inter: usize| {
        out.insert(format!("{prefix}gate_proj.weight"), vec![inter, h]);
        out.insert(format!("{prefix}up_proj.weight"), vec![inter, h]);
        out.insert(format!("{prefix}down_proj.weight"), vec![h, inter]);
    };
    match &cfg.moe {
        Some(moe) if cfg.is_moe_layer(i) => {
            for x in 0..moe.num_experts {
                mlp(out, &format!("{m}experts.{x}."), moe.moe_intermediate_size);
            }
            mlp(
                out,
                &format!("{m}shared_expert."),
                moe.shared_expert_intermediate_size,
            );
            out.insert(format!("{m}gate.weight"), vec![moe.num_experts, h]);
            out.insert(format!("{m}shared_expert_gate.weight"), vec![1, h]);
        }
        _ => mlp(out, m, cfg.intermediate_size),
    }
}

/// The key layout a checkpoint of `cfg` is written in: vision-language configs nest the text
/// model under `model.language_model.`.
pub fn layout_for(cfg: &ModelConfig) -> KeyLayout {
    match cfg.model_type.as_str() {
        "qwen3_5" | "qwen3_5_moe" => KeyLayout::VisionLanguage,
        _ => KeyLayout::TextOnly,
    }
}
