//! The parts of config.json read on their own: the layer types, RoPE, the MoE block and FP8
//! quantisation, each checked against the rest of the config.

use serde_json::Value;

use super::fields::Fields;
use super::{Family, LayerType, MoeConfig};
use crate::error::Result;
use crate::fp8::{Fp8Format, Fp8Scheme};

pub(super) fn read_layer_types(text: &Fields, n: usize) -> Result<Vec<LayerType>> {
    if let Some(Value::Array(items)) = text.obj.get("layer_types") {
        if items.len() != n {
            return Err(text.err(format!(
                "layer_types has {} entries but num_hidden_layers is {n}",
                items.len()
            )));
        }
        return items
            .iter()
            .map(|v| match v.as_str() {
                Some("linear_attention") => Ok(LayerType::LinearAttention),
                Some("full_attention") => Ok(LayerType::FullAttention),
                _ => Err(text.err(format!("unknown layer type {v} in layer_types"))),
            })
            .collect();
    }
    let interval = text.usize_or("full_attention_interval", 4)?;
    if interval == 0 {
        return Err(text.err("full_attention_interval must be > 0".to_string()));
    }
    Ok((0..n)
        .map(|i| {
            if (i + 1).is_multiple_of(interval) {
                LayerType::FullAttention
            } else {
                LayerType::LinearAttention
            }
        })
        .collect())
}

/// RoPE settings from `rope_parameters` (transformers 5) or the legacy top-level fields.
/// transformers' defaults when absent: theta 10000, partial rotary factor 0.25.
pub(super) fn read_rope(text: &Fields) -> Result<(f64, f64)> {
    let legacy_theta = text.f64_or("rope_theta", 10000.0)?;
    let legacy_factor = text.f64_or("partial_rotary_factor", 0.25)?;
    match text
        .object("rope_parameters")?
        .or(text.object("rope_scaling")?)
    {
        Some(rope) => {
            let kind = rope.str_or("rope_type", rope.str_or("type", "default")?)?;
            if kind != "default" {
                return Err(text.err(format!(
                    "rope_type `{kind}` is not supported (only default)"
                )));
            }
            Ok((
                rope.f64_or("rope_theta", legacy_theta)?,
                rope.f64_or("partial_rotary_factor", legacy_factor)?,
            ))
        }
        None => Ok((legacy_theta, legacy_factor)),
    }
}

pub(super) fn read_moe(text: &Fields, family: Family) -> Result<Option<MoeConfig>> {
    let moe = match family {
        Family::Qwen35 => return Ok(None),
        Family::Qwen3Next => {
            let sizes = moe_sizes(text, 512, 10)?;
            MoeConfig {
                norm_topk_prob: text.bool_or("norm_topk_prob", true)?,
                decoder_sparse_step: text.usize_or("decoder_sparse_step", 1)?,
                mlp_only_layers: text.usize_list_or("mlp_only_layers")?,
                ..sizes
            }
        }
        Family::Qwen35Moe => moe_sizes(text, 256, 8)?,
    };
    if moe.num_experts == 0 {
        return Ok(None);
    }
    Ok(Some(moe))
}

/// The expert counts and sizes of an MoE config (`experts` and `per_token` its family's
/// defaults), with the routing of Qwen3.5-MoE, which always renormalises the top-k weights and
/// has an MoE block in every layer.
fn moe_sizes(text: &Fields, experts: usize, per_token: usize) -> Result<MoeConfig> {
    Ok(MoeConfig {
        num_experts: text.usize_or("num_experts", experts)?,
        num_experts_per_tok: text.usize_or("num_experts_per_tok", per_token)?,
        moe_intermediate_size: text.usize_or("moe_intermediate_size", 512)?,
        shared_expert_intermediate_size: text.usize_or("shared_expert_intermediate_size", 512)?,
        norm_topk_prob: true,
        decoder_sparse_step: 1,
        mlp_only_layers: Vec::new(),
    })
}

/// Largest side of an FP8 weight block: a block's dot product of fp8 values stays exact in f64
/// up to 2¹⁷ columns (`fp8::w8a8`), and no checkpoint uses blocks near it.
const MAX_FP8_BLOCK: usize = 1 << 16;

/// `quantization_config` (at the top level, or in `text_config`): only FP8 block quantisation
/// is read; any other method, and FP8 variants hsdiff does not run, are refused by name.
pub(super) fn read_quantization(top: &Fields, text: &Fields) -> Result<Option<Fp8Scheme>> {
    let Some(q) = top
        .object("quantization_config")?
        .or(text.object("quantization_config")?)
    else {
        return Ok(None);
    };
    let field = |name: &str, msg: String| q.err(format!("quantization_config.{name}: {msg}"));
    let method = q.str_or("quant_method", "")?;
    if method != "fp8" {
        return Err(field(
            "quant_method",
            format!(
                "`{method}` is not supported (hsdiff reads FP8 block-quantised checkpoints, quant_method `fp8`)"
            ),
        ));
    }
    let fmt = match q.str_or("fmt", "e4m3")? {
        "e4m3" | "float8_e4m3fn" => Fp8Format::E4M3,
        "e5m2" | "float8_e5m2" => Fp8Format::E5M2,
        other => return Err(field("fmt", format!("`{other}` is not e4m3 or e5m2"))),
    };
    let scheme = q.str_or("activation_scheme", "dynamic")?;
    if scheme != "dynamic" {
        return Err(field(
            "activation_scheme",
            format!(
                "`{scheme}` is not supported: block-quantised FP8 checkpoints quantise activations dynamically (no input_scale tensors)"
            ),
        ));
    }
    let block = q.usize_list_or("weight_block_size")?;
    let block: [usize; 2] = match block[..] {
        [rows, cols]
            if (1..=MAX_FP8_BLOCK).contains(&rows) && (1..=MAX_FP8_BLOCK).contains(&cols) =>
        {
            [rows, cols]
        }
        [] => {
            return Err(field(
                "weight_block_size",
                "missing: per-tensor FP8 (one weight_scale per tensor) is not supported, only block scales (weight_scale_inv)".to_string(),
            ));
        }
        _ => {
            return Err(field(
                "weight_block_size",
                format!("{block:?} is not two block sides from 1 to {MAX_FP8_BLOCK}"),
            ));
        }
    };
    let not_converted = match q.obj.get("modules_to_not_convert") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    field(
                        "modules_to_not_convert",
                        format!("must list module names, got {v}"),
                    )
                })
            })
            .collect::<Result<_>>()?,
        Some(v) => {
            return Err(field(
                "modules_to_not_convert",
                format!("must be a list, got {v}"),
            ));
        }
    };
    Ok(Some(Fp8Scheme {
        fmt,
        block,
        not_converted,
    }))
}
