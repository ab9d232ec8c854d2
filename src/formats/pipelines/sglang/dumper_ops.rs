//! The values inside a Gated DeltaNet layer that the dumper's all-modules mode
//! (`DUMPER_NON_INTRUSIVE_MODE=all`) writes, read as hsdiff's op captures (`layers.N.{op}`).
//!
//! In that mode every module's forward output is dumped as `non_intrusive__{module}.output`
//! (`.output.{i}` for a tuple of several tensors; a tuple holding one tensor, as a parallel
//! linear's `(output, None)`, is `.output`). Inside SGLang's `Qwen3GatedDeltaNet`
//! (`models/qwen3_5.py` @005fa711, `qwen3_next.py` @0201bc80) three submodules compute what
//! transformers' layer computes under the same meaning:
//!
//! - `linear_attn.attn` (`RadixLinearAttention`: conv, gates, the gated delta rule) returns the
//!   delta rule's output `[T, Hv, dv]` (or `[1, T, Hv, dv]`): `core_out`;
//! - `linear_attn.norm` (`RMSNormGated`) is called on the heads flattened into rows, its output
//!   `[T·Hv, dv]` reshaped to `[T, Hv·dv]` as the layer does before out_proj: `gated_norm_out`;
//! - `linear_attn.out_proj` returns the output projection `[T, H]`: `out_proj`.
//!
//! Not read, because their meaning is not transformers': the fused input projections
//! (`in_proj_qkvz`, `in_proj_ba`: the gates and q/k/v are computed from them inside the
//! attention kernel, the conv1d module is never called), the layer norms (`input_layernorm` /
//! `post_attention_layernorm` are SGLang's fused add-RMSNorm, whose `(normed, residual)` pair
//! is not transformers' norm output), `mlp` and `self_attn` (hsdiff has no op key for them).

use candle_core::Tensor;

use crate::capture::{Key, Op};

/// The op a dumped module output is, from the module path's components after `layers.N` and
/// what was dumped of it.
pub(super) fn op_of(inside_layer: &[&str], what: &str) -> Option<Op> {
    match (inside_layer, what) {
        (["linear_attn", "attn"], ".output") => Some(Op::CoreOut),
        (["linear_attn", "norm"], ".output") => Some(Op::GatedNormOut),
        (["linear_attn", "out_proj"], ".output") => Some(Op::OutProj),
        _ => None,
    }
}

/// The op tensor of layer `n` in hsdiff's layout, `[tokens, …]` (the batch axis is added when
/// the sample is assembled): `tokens` and `hidden` are the sample's hidden-state shape.
pub(super) fn shaped(
    name: &str,
    op: Op,
    t: &Tensor,
    (tokens, hidden): (usize, usize),
) -> Result<Tensor, String> {
    let dims = t.dims();
    let wrong = |want: &str| {
        format!("`{name}` has shape {dims:?}, not {want} (the hidden states hold {tokens} tokens)")
    };
    match op {
        Op::CoreOut => match dims {
            [t0, _, _] | [1, t0, _, _] if *t0 == tokens => {
                let (hv, dv) = (dims[dims.len() - 2], dims[dims.len() - 1]);
                t.reshape((tokens, hv, dv)).map_err(|e| e.to_string())
            }
            _ => Err(wrong("[tokens, v_heads, v_dim]")),
        },
        Op::GatedNormOut => match dims {
            [rows, dv] if tokens > 0 && *rows >= tokens && rows % tokens == 0 => t
                .reshape((tokens, rows / tokens * dv))
                .map_err(|e| e.to_string()),
            _ => Err(wrong("[tokens × v_heads, v_dim]")),
        },
        Op::OutProj => match dims {
            [t0, h] if *t0 == tokens && *h == hidden => Ok(t.clone()),
            _ => Err(wrong(&format!("[tokens, {hidden}]"))),
        },
        _ => Err(format!("`{name}`: hsdiff reads no {op} from the dumper")),
    }
}

/// The op captures, named as hsdiff names them, of the layers `with_output` holds (an op row is
/// compared only beside its layer's output): the ops of other layers are left out, by name.
pub(super) fn named(
    ops: Vec<(usize, Op, Tensor)>,
    with_output: impl Fn(usize) -> bool,
) -> (Vec<(String, Tensor)>, Vec<String>) {
    let mut out = Vec::new();
    let mut left = Vec::new();
    for (n, op, t) in ops {
        let key = Key::Op(n, op).to_string();
        if with_output(n) {
            out.push((key, t));
        } else {
            left.push(key);
        }
    }
    (out, left)
}

/// "ops read from the all-modules dump: layers.1.core_out, …" for the reading's description.
pub(super) fn described(names: &[(String, Tensor)], left: &[String]) -> Option<String> {
    if names.is_empty() {
        return None;
    }
    let ops: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    let mut s = format!(
        "ops from the all-modules dump (`linear_attn.attn` = core_out, `linear_attn.norm` = \
         gated_norm_out, `linear_attn.out_proj` = out_proj): {}",
        ops.join(", ")
    );
    if !left.is_empty() {
        s.push_str(&format!(
            " ({} left out: their layer's output is not dumped)",
            left.join(", ")
        ));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn op_names_and_shapes() -> candle_core::Result<()> {
        assert_eq!(
            op_of(&["linear_attn", "norm"], ".output"),
            Some(Op::GatedNormOut)
        );
        assert_eq!(
            op_of(&["linear_attn", "attn"], ".output"),
            Some(Op::CoreOut)
        );
        assert_eq!(
            op_of(&["linear_attn", "out_proj"], ".output"),
            Some(Op::OutProj)
        );
        assert_eq!(op_of(&["input_layernorm"], ".output.0"), None);
        assert_eq!(op_of(&["linear_attn", "in_proj_qkvz"], ".output"), None);
        assert_eq!(op_of(&["mlp"], ".output"), None);
        let dev = Device::Cpu;
        // A norm's rows are the tokens' heads in order: row t·Hv + h is token t, head h.
        let norm = Tensor::randn(0f32, 1., (5 * 4, 6), &dev)?;
        let got = shaped("n", Op::GatedNormOut, &norm, (5, 8)).expect("a [T·Hv, dv] norm regroups");
        assert_eq!(got.dims(), &[5, 24]);
        let row = |t: &Tensor, i: usize| t.get(i).and_then(|r| r.to_vec1::<f32>());
        let mut want = Vec::new();
        for h in 0..4 {
            want.extend(row(&norm, 4 + h)?);
        }
        assert_eq!(row(&got, 1)?, want);
        let core = Tensor::randn(0f32, 1., (1, 5, 4, 6), &dev)?.to_dtype(DType::BF16)?;
        assert_eq!(
            shaped("c", Op::CoreOut, &core, (5, 8))
                .expect("a [1, T, Hv, dv] core output is read")
                .dims(),
            &[5, 4, 6]
        );
        let short = Tensor::randn(0f32, 1., (4, 8), &dev)?;
        let e = shaped("o", Op::OutProj, &short, (5, 8)).unwrap_err();
        assert!(e.contains("`o` has shape [4, 8], not [tokens, 8]"), "{e}");
        let odd = Tensor::randn(0f32, 1., (7, 6), &dev)?;
        assert!(shaped("n", Op::GatedNormOut, &odd, (5, 8)).is_err());
        Ok(())
    }
}
