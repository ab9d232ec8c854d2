//! Options shared by every command that runs the model, and their resolution into a session.

use std::path::PathBuf;

use clap::Args;

use super::values::DtypeArg;
use crate::error::{Error, Result};
use crate::job::session::{RunInput, Session, SessionSpec};
use crate::util::device::DeviceName;
use crate::util::input::{parse_token_list, read_token_file};

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json). Default: the
    /// built-in tiny Qwen3.5 model.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Prompt text, @FILE, or a built-in prompt name (see `hsdiff prompts`).
    #[arg(long, value_name = "TEXT|@FILE|NAME", conflicts_with = "tokens")]
    pub prompt: Option<String>,

    /// Token ids, comma-separated, or @FILE of them, bypassing the tokenizer.
    #[arg(long, value_name = "IDS|@FILE")]
    pub tokens: Option<String>,

    /// Compute dtype: f64 (true float64 everywhere), f32, bf16, f16; fp8 / fp8-ue8m0 (an FP8
    /// checkpoint served in W8A8 as vLLM / SGLang run it, bf16 between layers).
    #[arg(long, value_enum, default_value = "f32", value_name = "DTYPE")]
    pub dtype: DtypeArg,

    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: DeviceName,

    /// Generate every weight from SEED with the golden recipe instead of reading safetensors:
    /// --model then needs only config.json (give --tokens when it has no tokenizer.json).
    #[arg(long, value_name = "SEED", requires = "model")]
    pub random_weights: Option<u64>,
}

impl RunArgs {
    /// The files and folders this run reads (model folder, prompt or token-id file), for
    /// output checks.
    pub fn input_paths(&self) -> Vec<&std::path::Path> {
        let at_file = self
            .prompt
            .as_deref()
            .or(self.tokens.as_deref())
            .and_then(|p| p.strip_prefix('@'))
            // A bare `@` names no file ([`at_file`] refuses it).
            .filter(|p| !p.is_empty())
            .map(std::path::Path::new);
        self.model.as_deref().into_iter().chain(at_file).collect()
    }

    /// Loads the model and reads the input these options name.
    pub fn resolve(&self) -> Result<Session> {
        Session::open(&SessionSpec {
            model: self.model.as_deref(),
            random_weights: self.random_weights,
            input: self.input()?,
            dtype: self.dtype.0,
            device: self.device,
        })
    }

    /// `--tokens` or `--prompt` as typed input (clap lets only one through); neither: the
    /// default prompt.
    fn input(&self) -> Result<RunInput> {
        if let Some(list) = &self.tokens {
            return Ok(RunInput::Ids(
                match at_file(list, "--tokens", "the ids themselves")? {
                    Some(path) => read_token_file(&path)?,
                    None => parse_token_list(list)?,
                },
            ));
        }
        let Some(arg) = &self.prompt else {
            return Ok(RunInput::default());
        };
        Ok(match at_file(arg, "--prompt", "the prompt itself")? {
            Some(path) => RunInput::PromptFile(path),
            None => RunInput::Prompt(arg.clone()),
        })
    }
}

/// The file an `@FILE` value names; None for a value that is not one. A bare `@` names no
/// file: refused (`instead` says what else `option` takes), never read as the file "".
pub fn at_file(arg: &str, option: &str, instead: &str) -> Result<Option<PathBuf>> {
    match arg.strip_prefix('@') {
        Some("") => Err(Error::argument(
            option,
            format!("`@` names no file: give @FILE, or {instead}"),
        )),
        Some(path) => Ok(Some(PathBuf::from(path))),
        None => Ok(None),
    }
}

/// This process's command line, shell-quoted, for the "reproduce" line of reports. Arguments
/// that are not UTF-8 (file names) are written as bash `$'…'` strings with `\xNN` escapes, so
/// that the line still reproduces the run.
pub fn command_line() -> String {
    let mut parts = vec!["hsdiff".to_string()];
    parts.extend(std::env::args_os().skip(1).map(|a| shell_quote(&a)));
    parts.join(" ")
}

fn shell_quote(arg: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    match arg.to_str() {
        Some(s)
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./,:=@".contains(c)) =>
        {
            s.to_string()
        }
        Some(s) if !s.chars().any(char::is_control) => {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
        // Not UTF-8, or holding control characters: bash's $'…' with every other byte escaped.
        _ => {
            let escaped: String = arg
                .as_bytes()
                .iter()
                .map(|&b| match b {
                    b'\\' | b'\'' => format!("\\{}", b as char),
                    0x20..=0x7e => (b as char).to_string(),
                    _ => format!("\\x{b:02x}"),
                })
                .collect();
            format!("$'{escaped}'")
        }
    }
}
