//! Which layers a drafter pipeline concatenated, and what its ids mean.
//!
//! The ids come from a list the command line gives (for both sides or for one), from a
//! drafter's config.json, or from the pipeline's own default for a model of L layers. Each
//! pipeline counts in one of two ways ([`Convention`]); both are turned into hsdiff's names,
//! where `layers.N` is the output of decoder layer N.

use std::path::Path;

use serde_json::Value;

use crate::capture::Key;
use crate::error::{Error, Result};

/// What a pipeline's layer id means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    /// Id N is the output of decoder layer N (transformers' `hidden_states[N + 1]`): SpecForge
    /// (DFlash, EAGLE-3, whose SGLang capture adds the +1 itself) and Model-Optimizer.
    OutputOf,
    /// Id N is transformers' `hidden_states[N]`: 0 the embedding output, N the output of layer
    /// N − 1, and N = L the last layer's output *before* the final norm (vLLM and speculators).
    HiddenStatesIndex,
}

impl Convention {
    /// The hsdiff name of id `id`.
    pub fn name(self, id: usize) -> String {
        self.key(id).to_string()
    }

    /// The key of id `id` under this convention.
    pub fn key(self, id: usize) -> Key {
        match (self, id) {
            (Convention::OutputOf, n) => Key::Layer(n),
            (Convention::HiddenStatesIndex, 0) => Key::Embed,
            (Convention::HiddenStatesIndex, n) => Key::Layer(n - 1),
        }
    }

    /// The id of `key` under this convention; None for a key no id names (the embedding
    /// under [`Convention::OutputOf`]).
    pub fn id_of(self, key: Key) -> Option<usize> {
        match (self, key) {
            (Convention::OutputOf, Key::Layer(n)) => Some(n),
            (Convention::HiddenStatesIndex, Key::Embed) => Some(0),
            (Convention::HiddenStatesIndex, Key::Layer(n)) => Some(n + 1),
            _ => None,
        }
    }

    /// What an id means, in short.
    pub fn brief(self) -> &'static str {
        match self {
            Convention::OutputOf => "id N = output of layer N",
            Convention::HiddenStatesIndex => "id N = hidden_states[N]",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Convention::OutputOf => "id N = output of layer N",
            Convention::HiddenStatesIndex => {
                "id N = hidden_states[N] (output of layer N−1; N = L before the final norm)"
            }
        }
    }

    /// The largest id that names a layer of a model of `layers` layers.
    pub fn max_id(self, layers: usize) -> usize {
        match self {
            Convention::OutputOf => layers.saturating_sub(1),
            Convention::HiddenStatesIndex => layers,
        }
    }
}

/// Where a drafter's config.json keeps the target layers it was trained on, in order of
/// precedence (SpecForge DFlash, EAGLE-3 in speculators / vLLM / Model-Optimizer).
const DRAFT_KEYS: &[&[&str]] = &[
    &["dflash_config", "target_layer_ids"],
    &["target_layer_ids"],
    &["eagle_aux_hidden_state_layer_ids"],
    &["eagle_config", "eagle_aux_hidden_state_layer_ids"],
    &["speculators_config", "eagle_aux_hidden_state_layer_ids"],
    &["aux_hidden_state_layer_ids"],
];

/// The layer ids a drafter's config.json names, and the key they came from.
pub fn from_draft_config(path: &Path) -> Result<(Vec<usize>, String)> {
    let bytes = crate::util::input::read_regular(
        path,
        crate::util::limits::get().json_bytes,
        "json-bytes",
    )?;
    let json: Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::file(path, format!("not JSON: {e}")))?;
    for keys in DRAFT_KEYS {
        let mut v = &json;
        for k in *keys {
            match v.get(k) {
                Some(x) => v = x,
                None => {
                    v = &Value::Null;
                    break;
                }
            }
        }
        if v.is_null() {
            continue;
        }
        let key = keys.join(".");
        let ids: Option<Vec<usize>> = v.as_array().and_then(|a| {
            a.iter()
                .map(|x| x.as_u64().and_then(|n| usize::try_from(n).ok()))
                .collect()
        });
        return match ids {
            Some(ids) if !ids.is_empty() => Ok((ids, key)),
            _ => Err(Error::file(
                path,
                format!("`{key}` is not a list of layer ids"),
            )),
        };
    }
    Err(Error::file(
        path,
        format!(
            "no layer ids found (looked for {})",
            DRAFT_KEYS
                .iter()
                .map(|k| k.join("."))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_name_layers() {
        assert_eq!(Convention::OutputOf.name(16), "layers.16");
        assert_eq!(Convention::HiddenStatesIndex.name(0), "embed");
        assert_eq!(Convention::HiddenStatesIndex.name(16), "layers.15");
        assert_eq!(Convention::HiddenStatesIndex.max_id(8), 8);
        assert_eq!(Convention::OutputOf.max_id(8), 7);
        for c in [Convention::OutputOf, Convention::HiddenStatesIndex] {
            for id in 0..9 {
                let key = c.key(id);
                assert_eq!(c.id_of(key), Some(id), "{c:?} {key}");
            }
        }
        assert_eq!(Convention::OutputOf.id_of(Key::Embed), None);
    }
}
