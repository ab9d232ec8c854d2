//! What config.json's `quantization_config` says about an FP8 checkpoint (`quant_method: fp8`,
//! the format of the official Qwen FP8 releases, DeepSeek-V3 and transformers'
//! `FineGrainedFP8Config`): the format, the block of one weight scale, and the modules kept in
//! high precision. Parsed by `config`; used to check and dequantise the checkpoint.

use super::Fp8Format;

#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Scheme {
    /// `fmt`: what the weights were quantised to; every FP8 tensor must be stored in it.
    pub fmt: Fp8Format,
    /// `weight_block_size`: `[rows, cols]` of the weight block one scale covers (the output rows
    /// and input columns of a Linear); edge blocks are partial.
    pub block: [usize; 2],
    /// `modules_to_not_convert`: modules kept in high precision.
    pub not_converted: Vec<String>,
}

impl Fp8Scheme {
    /// The `modules_to_not_convert` entry that names `module` (a tensor name without its last
    /// component, e.g. `model.layers.3.mlp.gate`), if one does.
    ///
    /// An entry names a module when it equals a run of whole dot-separated components of the
    /// module's name, `*` standing for any one component (`model.layers.*.mlp.gate`). Not a
    /// substring match: `mlp.gate` names `layers.3.mlp.gate`, never `layers.3.mlp.gate_proj`
    /// (that confusion is how a loader leaves a quantised `gate_proj` unscaled — unsloth #6200).
    pub fn not_converted_entry(&self, module: &str) -> Option<&str> {
        let parts: Vec<&str> = module.split('.').collect();
        self.not_converted
            .iter()
            .find(|entry| names_run_of(entry, &parts))
            .map(String::as_str)
    }
}

/// Whether `entry`'s components equal some run of `parts` (`*` matching any one component).
fn names_run_of(entry: &str, parts: &[&str]) -> bool {
    let want: Vec<&str> = entry.split('.').collect();
    if want.is_empty() || want.len() > parts.len() {
        return false;
    }
    parts.windows(want.len()).any(|run| {
        run.iter()
            .zip(&want)
            .all(|(have, want)| *want == "*" || have == want)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme(entries: &[&str]) -> Fp8Scheme {
        Fp8Scheme {
            fmt: Fp8Format::E4M3,
            block: [128, 128],
            not_converted: entries.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn entries_name_whole_components_never_a_prefix_of_one() {
        let s = scheme(&[
            "mlp.gate",
            "lm_head",
            "model.layers.*.linear_attn.in_proj_a",
        ]);
        assert_eq!(
            s.not_converted_entry("model.layers.3.mlp.gate"),
            Some("mlp.gate")
        );
        assert_eq!(s.not_converted_entry("model.layers.3.mlp.gate_proj"), None);
        assert_eq!(s.not_converted_entry("lm_head"), Some("lm_head"));
        assert_eq!(
            s.not_converted_entry("model.layers.12.linear_attn.in_proj_a"),
            Some("model.layers.*.linear_attn.in_proj_a")
        );
        assert_eq!(
            s.not_converted_entry("model.layers.12.linear_attn.in_proj_b"),
            None
        );
        // The nested (vision-language) layout: a full name is a run of components too.
        let full = scheme(&["model.language_model.layers.0.mlp.gate"]);
        assert!(
            full.not_converted_entry("model.language_model.layers.0.mlp.gate")
                .is_some()
        );
        assert!(
            full.not_converted_entry("model.language_model.layers.10.mlp.gate")
                .is_none()
        );
    }
}
