//! The checks that tie an FP8 checkpoint's tensors to its `quantization_config`, run when the
//! checkpoint is opened so that a loader bug is caught at load, by name: every FP8 tensor has its
//! block scales, of the right shape, and no module the config keeps in high precision is
//! quantised or carries scales. A quantised weight read without its scales is hundreds of times
//! off (unsloth #6200); hsdiff refuses it instead.

use safetensors::Dtype;

use super::{BlockScales, Fp8Format, Fp8Scheme};

/// The name of the block scales of the quantised tensor `name`: `X.weight` → `X.weight_scale_inv`
/// (Linear weights); any other `X` → `X_scales_inv` (transformers' fused expert tensors).
pub fn scale_name(name: &str) -> String {
    match name.strip_suffix(".weight") {
        Some(module) => format!("{module}.weight_scale_inv"),
        None => format!("{name}_scales_inv"),
    }
}

/// The quantised tensor whose scales `name` holds, when `name` is a scale tensor's name.
pub fn scaled_tensor(name: &str) -> Option<String> {
    if let Some(module) = name.strip_suffix(".weight_scale_inv") {
        return Some(format!("{module}.weight"));
    }
    name.strip_suffix("_scales_inv").map(str::to_string)
}

/// The module a tensor belongs to (its name without the last component).
fn module_of(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(m, _)| m)
}

/// A problem found: the tensor it is about and what is wrong, in words.
pub struct Problem {
    pub tensor: String,
    pub msg: String,
}

/// Checks every tensor `names` lists (`info` gives a listed tensor's dtype and shape) against the
/// scheme of config.json (`None`: the config has no `quantization_config`).
pub fn check<'a>(
    names: impl IntoIterator<Item = &'a str>,
    info: impl Fn(&str) -> Option<(Dtype, Vec<usize>)>,
    scheme: Option<&Fp8Scheme>,
) -> Result<(), Problem> {
    let problem = |tensor: &str, msg: String| Problem {
        tensor: tensor.to_string(),
        msg,
    };
    for name in names {
        let Some((dtype, shape)) = info(name) else {
            continue;
        };
        if let Some(format) = Fp8Format::of(dtype) {
            check_quantised(name, format, &shape, &info, scheme).map_err(|m| problem(name, m))?;
        } else if let Some(tensor) = scaled_tensor(name) {
            check_scales_owner(&tensor, &info, scheme).map_err(|m| problem(name, m))?;
        }
    }
    Ok(())
}

/// An FP8 tensor: the config says the checkpoint is quantised, does not keep its module in high
/// precision, and its scales are there with the shape the block size gives.
fn check_quantised(
    name: &str,
    format: Fp8Format,
    shape: &[usize],
    info: &impl Fn(&str) -> Option<(Dtype, Vec<usize>)>,
    scheme: Option<&Fp8Scheme>,
) -> Result<(), String> {
    let stored = format.name();
    let Some(scheme) = scheme else {
        return Err(format!(
            "stored as {stored}, but config.json has no quantization_config: an FP8 \
             checkpoint's block size comes from it (is this the bf16 model's config.json?)"
        ));
    };
    if format != scheme.fmt {
        return Err(format!(
            "stored as {stored}, but quantization_config.fmt is {}: the config and the weights \
             disagree (one format's codes read as the other's are other values)",
            scheme.fmt.config_name()
        ));
    }
    if let Some(entry) = scheme.not_converted_entry(module_of(name)) {
        return Err(format!(
            "stored as {stored}, but quantization_config.modules_to_not_convert keeps its module \
             in high precision (entry `{entry}`): the config and the weights disagree"
        ));
    }
    let Some(want) = BlockScales::expected_shape(shape, scheme.block) else {
        return Err(format!(
            "stored as {stored} with shape {shape:?}: block scales need a matrix"
        ));
    };
    let scales = scale_name(name);
    match info(&scales) {
        None => Err(format!(
            "stored as {stored} without its block scales `{scales}`: read without them the \
             weight is off by its scales (often 100× or more)"
        )),
        Some((dtype, _)) if !matches!(dtype, Dtype::BF16 | Dtype::F16 | Dtype::F32) => Err(
            format!("its block scales `{scales}` are {dtype}, not BF16, F16 or F32"),
        ),
        Some((_, have)) if have != want => Err(format!(
            "its block scales `{scales}` have shape {have:?}, expected {want:?} (shape {shape:?} \
             over weight_block_size {:?}, edge blocks partial)",
            scheme.block
        )),
        Some(_) => Ok(()),
    }
}

/// A scale tensor: its module is not one the config keeps in high precision, and the tensor it
/// scales is there and quantised.
fn check_scales_owner(
    tensor: &str,
    info: &impl Fn(&str) -> Option<(Dtype, Vec<usize>)>,
    scheme: Option<&Fp8Scheme>,
) -> Result<(), String> {
    if let Some(entry) = scheme.and_then(|s| s.not_converted_entry(module_of(tensor))) {
        return Err(format!(
            "block scales on a module that quantization_config.modules_to_not_convert keeps in \
             high precision (entry `{entry}`): the config and the weights disagree"
        ));
    }
    match info(tensor) {
        None => Err(format!(
            "block scales for `{tensor}`, which is not in the checkpoint"
        )),
        Some((dtype, _)) if Fp8Format::of(dtype).is_none() => Err(format!(
            "block scales for `{tensor}`, which is stored as {dtype}, not FP8: applying them \
             or not is ambiguous"
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn scheme() -> Fp8Scheme {
        Fp8Scheme {
            fmt: Fp8Format::E4M3,
            block: [128, 128],
            not_converted: vec!["lm_head".into(), "mlp.gate".into()],
        }
    }

    fn run(tensors: &[(&str, Dtype, &[usize])], scheme: Option<&Fp8Scheme>) -> Result<(), String> {
        let map: BTreeMap<&str, (Dtype, Vec<usize>)> = tensors
            .iter()
            .map(|(n, d, s)| (*n, (*d, s.to_vec())))
            .collect();
        check(map.keys().copied(), |n| map.get(n).cloned(), scheme)
            .map_err(|p| format!("{}: {}", p.tensor, p.msg))
    }

    /// Tensors listed: name, dtype, shape.
    type Listed<'a> = Vec<(&'a str, Dtype, &'a [usize])>;

    const W: &str = "model.layers.0.mlp.gate_proj.weight";
    const S: &str = "model.layers.0.mlp.gate_proj.weight_scale_inv";

    #[test]
    fn a_quantised_weight_with_its_scales_passes() {
        let ok = [
            (W, Dtype::F8_E4M3, &[300, 200][..]),
            (S, Dtype::BF16, &[3, 2][..]),
        ];
        assert!(run(&ok, Some(&scheme())).is_ok());
    }

    #[test]
    fn each_inconsistency_is_refused_naming_the_tensor() {
        let s = Some(scheme());
        let cases: Vec<(Listed, Option<&Fp8Scheme>, &str)> = vec![
            (
                vec![(W, Dtype::F8_E4M3, &[300, 200])],
                s.as_ref(),
                "without its block scales",
            ),
            (
                vec![(W, Dtype::F8_E4M3, &[300, 200]), (S, Dtype::BF16, &[2, 2])],
                s.as_ref(),
                "expected [3, 2]",
            ),
            (
                vec![(W, Dtype::F8_E4M3, &[300, 200]), (S, Dtype::BF16, &[3, 2])],
                None,
                "no quantization_config",
            ),
            (
                vec![(W, Dtype::BF16, &[300, 200]), (S, Dtype::BF16, &[3, 2])],
                s.as_ref(),
                "not FP8",
            ),
            (
                vec![(S, Dtype::BF16, &[3, 2])],
                s.as_ref(),
                "not in the checkpoint",
            ),
            (
                vec![
                    ("model.layers.0.mlp.gate.weight", Dtype::BF16, &[8, 200]),
                    (
                        "model.layers.0.mlp.gate.weight_scale_inv",
                        Dtype::BF16,
                        &[1, 2],
                    ),
                ],
                s.as_ref(),
                "entry `mlp.gate`",
            ),
            (
                vec![("lm_head.weight", Dtype::F8_E4M3, &[300, 200])],
                s.as_ref(),
                "entry `lm_head`",
            ),
            (
                vec![(W, Dtype::F8_E5M2, &[300, 200]), (S, Dtype::BF16, &[3, 2])],
                s.as_ref(),
                "stored as F8_E5M2, but quantization_config.fmt is e4m3",
            ),
            (
                vec![(W, Dtype::F8_E4M3, &[300, 200]), (S, Dtype::U8, &[3, 2])],
                s.as_ref(),
                "not BF16, F16 or F32",
            ),
        ];
        for (tensors, scheme, want) in cases {
            let err = run(&tensors, scheme).expect_err(want);
            assert!(err.contains(want), "{err}");
            assert!(
                err.starts_with("model.layers.0.") || err.starts_with("lm_head"),
                "{err}"
            );
        }
    }

    #[test]
    fn fused_expert_tensors_use_transformers_scale_names() {
        assert_eq!(
            scale_name("mlp.experts.gate_up_proj"),
            "mlp.experts.gate_up_proj_scales_inv"
        );
        assert_eq!(
            scaled_tensor("mlp.experts.gate_up_proj_scales_inv").as_deref(),
            Some("mlp.experts.gate_up_proj")
        );
        assert_eq!(scaled_tensor(S).as_deref(), Some(W));
        assert_eq!(scaled_tensor(W), None);
    }
}
