//! A model, its input and where to run it: the session every model-running command resolves its
//! options into, and the model a capture's fingerprint names when a command needs one.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use crate::backends::LinearAttentionBackend;
use crate::capture::fingerprint::{Fingerprint, run_fingerprint};
use crate::error::{Error, Result};
use crate::model::builtin;
use crate::model::{Model, Routes};
use crate::report::{ComparedInput, TokenIds};
use crate::util::device::DeviceName;
use crate::util::input::{PromptSource, Tokenizer, resolve_prompt_file, resolve_prompt_text};

/// A model, its input and where to run it: everything a run needs besides the backend.
pub struct Session {
    pub model: Model,
    pub ids: Vec<u32>,
    /// How the input was given, for fingerprints and reproduce lines.
    pub prompt_label: Option<String>,
    pub dtype: DType,
    pub device: Device,
}

/// What a model-running command was asked to run, before anything is loaded.
#[derive(Debug, Clone)]
pub struct SessionSpec<'a> {
    /// A checkpoint folder; `None`: the built-in tiny Qwen3.5 model.
    pub model: Option<&'a Path>,
    /// Generate every weight from this seed (the folder then needs only config.json).
    pub random_weights: Option<u64>,
    pub input: RunInput,
    pub dtype: DType,
    pub device: DeviceName,
}

/// The input of a run as the command line gives it (`--tokens`, `--prompt`).
#[derive(Debug, Clone, PartialEq)]
pub enum RunInput {
    /// Token ids, bypassing the tokenizer.
    Ids(Vec<u32>),
    /// Prompt text, or a built-in prompt's name.
    Prompt(String),
    /// A file holding the prompt text.
    PromptFile(PathBuf),
}

impl Default for RunInput {
    /// The `fizzbuzz` prompt.
    fn default() -> Self {
        RunInput::Prompt("fizzbuzz".to_string())
    }
}

/// What the runs of a job are fed: a model, its token ids and where it runs — a [`Session`]'s
/// (without its dtype: each run has its own), or a model a `check` or `compare` found and the
/// ids its files hold.
#[derive(Clone, Copy)]
pub struct ModelInput<'a> {
    pub model: &'a Model,
    pub ids: &'a [u32],
    /// How the input was given, for fingerprints.
    pub prompt_label: Option<&'a str>,
    pub device: &'a Device,
    /// Each side's recorded router choices, for calibration runs told to use them
    /// ([`crate::job::Routing`]).
    pub routes: SideRoutes<'a>,
}

/// Side A's and side B's router choices, where recorded.
#[derive(Debug, Clone, Copy, Default)]
pub struct SideRoutes<'a> {
    pub a: Option<&'a Routes>,
    pub b: Option<&'a Routes>,
}

impl ModelInput<'_> {
    /// The input both sides of a live run or check are fed: these token ids, as given.
    pub fn compared_input(&self) -> ComparedInput {
        ComparedInput {
            input_ids: self.ids.to_vec(),
            token_ids: TokenIds::Match,
            tokens: self.ids.len(),
            num_layers: Some(self.model.config.num_hidden_layers),
        }
    }

    /// What a run of `backend` at `dtype` on this input is: this machine, the model, the input.
    pub fn fingerprint(&self, backend: &dyn LinearAttentionBackend, dtype: DType) -> Fingerprint {
        let mut fp = run_fingerprint(
            backend,
            self.device,
            dtype,
            self.ids,
            self.prompt_label.map(str::to_string),
        );
        self.model.fill_fingerprint(&mut fp);
        fp
    }
}

impl Session {
    /// This session's model, ids and device, as the runs of a job are fed them.
    pub fn input(&self) -> ModelInput<'_> {
        ModelInput {
            model: &self.model,
            ids: &self.ids,
            prompt_label: self.prompt_label.as_deref(),
            device: &self.device,
            routes: SideRoutes::default(),
        }
    }

    /// Loads the model and reads the input `spec` names: the input first, so that a bad token
    /// list or prompt file is refused before the model loads.
    pub fn open(spec: &SessionSpec) -> Result<Session> {
        let dtype = spec.dtype;
        let device = spec.device.open()?;
        let given = match &spec.input {
            RunInput::Ids(ids) => Given::Ids(ids.clone()),
            RunInput::Prompt(arg) => {
                let (text, source) = resolve_prompt_text(arg)?;
                Given::Prompt(text, source)
            }
            RunInput::PromptFile(path) => {
                let (text, source) = resolve_prompt_file(path)?;
                Given::Prompt(text, source)
            }
        };
        let model = match (spec.model, spec.random_weights) {
            (Some(dir), Some(seed)) => Model::load_random(dir, seed)?,
            (Some(dir), None) => Model::load(dir)?,
            (None, _) => {
                eprintln!("hsdiff: no --model given; using the built-in tiny Qwen3.5 model");
                builtin::model()?
            }
        };
        let (ids, prompt_label) = match given {
            Given::Ids(ids) => (ids, None),
            Given::Prompt(text, source) => {
                let tokenizer = match spec.model {
                    Some(dir)
                        if spec.random_weights.is_some()
                            && !dir.join("tokenizer.json").exists() =>
                    {
                        return Err(Error::file(
                            dir.join("tokenizer.json"),
                            "missing (with --random-weights and only a config.json, give the \
                             input as token ids with --tokens)",
                        ));
                    }
                    Some(dir) => Tokenizer::from_file(&dir.join("tokenizer.json"))?,
                    None => builtin::tokenizer()?,
                };
                let label = match source {
                    PromptSource::Builtin(name) => name,
                    PromptSource::File(path) => format!("@{}", path.display()),
                    PromptSource::Text => text.clone(),
                };
                (tokenizer.encode(&text)?, Some(label))
            }
        };
        if ids.is_empty() {
            return Err(Error::prompt(
                "the prompt tokenised to zero tokens".to_string(),
            ));
        }
        model.check_tokens(&ids)?;
        Ok(Session {
            model,
            ids,
            prompt_label,
            dtype,
            device,
        })
    }
}

/// The input as given: token ids, or a prompt still to be tokenised.
enum Given {
    Ids(Vec<u32>),
    Prompt(String, PromptSource),
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

/// Model names (golden/make.py, hsdiff's own fingerprints) that are the built-in model.
const BUILTIN_NAMES: &[&str] = &["qwen3_5_tiny", "built-in tiny Qwen3.5"];

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(input: RunInput) -> SessionSpec<'static> {
        SessionSpec {
            model: None,
            random_weights: None,
            input,
            dtype: DType::BF16,
            device: DeviceName::Cpu,
        }
    }

    #[test]
    fn opens_the_builtin_model_on_token_ids() {
        let s = Session::open(&spec(RunInput::Ids(vec![3, 1, 4]))).expect("session");
        assert_eq!(s.ids, vec![3, 1, 4]);
        assert_eq!(s.dtype, DType::BF16);
        assert!(s.prompt_label.is_none());
    }

    #[test]
    fn refuses_bad_input_before_the_model_loads() {
        // A model folder that does not exist: the missing prompt file is refused first.
        let prompt = PathBuf::from("/nonexistent/hsdiff-prompt.txt");
        let bad = SessionSpec {
            model: Some(Path::new("/nonexistent/hsdiff-model")),
            ..spec(RunInput::PromptFile(prompt))
        };
        let err = Session::open(&bad).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("hsdiff-prompt.txt") && !e.contains("hsdiff-model")),
            "{err:?}"
        );
    }

    #[test]
    fn refuses_layers_past_the_end() {
        assert!(check_layer_list(&[0, 2], 3, "the model").is_ok());
        let err = check_layer_list(&[0, 3], 3, "the model").expect_err("layer 3 of 3");
        assert_eq!(
            err.to_string(),
            "--layers: names layer 3, but the model has 3 layers"
        );
    }
}
