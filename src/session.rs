//! A model, its input and where to run it: the session every model-running command resolves its
//! options into, and the model a capture's fingerprint names when a command needs one.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use crate::builtin;
use crate::error::{Error, Result};
use crate::model::Model;

/// A model, its input and where to run it: everything a run needs besides the backend.
pub struct Session {
    pub model: Model,
    pub ids: Vec<u32>,
    /// How the input was given, for fingerprints and reproduce lines.
    pub prompt_label: Option<String>,
    pub dtype: DType,
    pub device: Device,
}

/// Refuses a `--layers` entry at or past `count` (`what` names what has that many layers): a
/// layer that is not there would leave an empty report that reads as agreement.
pub fn check_layer_list(layers: &[usize], count: usize, what: &str) -> Result<()> {
    match layers.iter().find(|&&l| l >= count) {
        Some(bad) => Err(Error::argument(
            "--layers",
            format!("names layer {bad}, but {what} has {count} layers"),
        )),
        None => Ok(()),
    }
}

/// The model a capture's fingerprint names, when it can be had here: the built-in model when
/// `weights_digest` is its digest (or `model` is one of its names), else a folder holding
/// config.json at `model` as recorded, beside the file (`beside/{model}`), or in the golden
/// layout (`golden/states/{model}/…` → `golden/{model}`). Returns the model and how it was
/// found, for stderr and the report.
pub fn find_model(
    model: Option<&str>,
    weights_digest: Option<&str>,
    beside: Option<&Path>,
) -> Result<Option<(Model, String)>> {
    let builtin_digest = || builtin::model().ok().and_then(|m| m.weights.digest().ok());
    if let Some(want) = weights_digest
        && builtin_digest().as_deref() == Some(want)
    {
        return Ok(Some((
            builtin::model()?,
            "the built-in model (its weights digest is the one recorded)".to_string(),
        )));
    }
    let Some(name) = model else {
        return Ok(None);
    };
    let mut candidates = vec![PathBuf::from(name)];
    if let Some(dir) = beside {
        candidates.push(dir.join(name));
        candidates.push(dir.join("../..").join(name));
    }
    if let Some(dir) = candidates.iter().find(|p| p.join("config.json").is_file()) {
        return Ok(Some((
            Model::load(dir)?,
            format!(
                "the folder {} (the model the fingerprint names)",
                dir.display()
            ),
        )));
    }
    if BUILTIN_NAMES.contains(&name) {
        return Ok(Some((
            builtin::model()?,
            "the built-in model (named by the fingerprint)".to_string(),
        )));
    }
    Ok(None)
}

/// Model names (scripts/make_golden.py, hsdiff's own fingerprints) that are the built-in model.
const BUILTIN_NAMES: &[&str] = &["qwen3_5_tiny", "built-in tiny Qwen3.5"];
