//! Options shared by every command that runs the model, and their resolution into a session.

use std::path::PathBuf;

use clap::Args;

use crate::builtin;
use crate::device::{parse_device, parse_dtype};
use crate::error::{Error, Result};
use crate::input::{PromptSource, Tokenizer, parse_token_list, resolve_prompt};
use crate::model::Model;
use crate::session::Session;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json). Default: the
    /// built-in tiny Qwen3.5 model.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Prompt text, @FILE, or a built-in prompt name (see `hsdiff prompts`).
    #[arg(long, value_name = "TEXT|@FILE|NAME", conflicts_with = "tokens")]
    pub prompt: Option<String>,

    /// Token ids, comma-separated, bypassing the tokenizer.
    #[arg(long, value_name = "IDS")]
    pub tokens: Option<String>,

    /// Compute dtype: f64 (true float64 everywhere), f32, bf16, f16.
    #[arg(long, default_value = "f32", value_name = "DTYPE")]
    pub dtype: String,

    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,

    /// Generate every weight from SEED with the golden recipe instead of reading safetensors:
    /// --model then needs only config.json (give --tokens when it has no tokenizer.json).
    #[arg(long, value_name = "SEED", requires = "model")]
    pub random_weights: Option<u64>,
}

impl RunArgs {
    /// The files and folders this run reads (model folder, prompt file), for output checks.
    pub fn input_paths(&self) -> Vec<&std::path::Path> {
        let prompt = self
            .prompt
            .as_deref()
            .and_then(|p| p.strip_prefix('@'))
            .map(std::path::Path::new);
        self.model.as_deref().into_iter().chain(prompt).collect()
    }

    pub fn resolve(&self) -> Result<Session> {
        let dtype = parse_dtype(&self.dtype)?;
        let device = parse_device(&self.device)?;
        // The input first: a bad token list or prompt file is refused before the model loads.
        let given = match (&self.tokens, &self.prompt) {
            (Some(list), _) => Given::Ids(parse_token_list(list)?),
            (None, arg) => {
                let (text, source) = resolve_prompt(arg.as_deref().unwrap_or("fizzbuzz"))?;
                Given::Prompt(text, source)
            }
        };
        let model = match (&self.model, self.random_weights) {
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
                let tokenizer = match &self.model {
                    Some(dir)
                        if self.random_weights.is_some()
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
            return Err(Error::Prompt(
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

/// This process's command line, shell-quoted, for the "reproduce" line of reports.
pub fn command_line() -> String {
    let mut parts = vec!["hsdiff".to_string()];
    parts.extend(std::env::args().skip(1).map(|a| shell_quote(&a)));
    parts.join(" ")
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,:=@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `--layers 1,16,31` → layer indices.
pub fn parse_layer_list(arg: &str) -> Result<Vec<usize>> {
    arg.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Error::argument(
                "--layers",
                format!("expects comma-separated layer indices, got `{arg}`"),
            )
        })
}
