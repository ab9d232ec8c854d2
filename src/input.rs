//! What to feed the model: a prompt (literal, `@FILE`, or a built-in name) tokenised with the
//! checkpoint's tokenizer.json, or token ids given directly. Batch 1, no special tokens added
//! (these models have no BOS).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Built-in prompts: short coding tasks. The texts live in `prompts/` so that the golden-file
/// script reads the very same bytes.
pub const BUILTIN_PROMPTS: &[(&str, &str)] = &[
    ("fizzbuzz", include_str!("../prompts/fizzbuzz.txt")),
    (
        "binary_search",
        include_str!("../prompts/binary_search.txt"),
    ),
    (
        "reverse_words",
        include_str!("../prompts/reverse_words.txt"),
    ),
    ("fibonacci", include_str!("../prompts/fibonacci.txt")),
];

pub fn builtin_prompt(name: &str) -> Option<&'static str> {
    BUILTIN_PROMPTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// The `--prompt` value, resolved: `@FILE` reads a file, a built-in name selects that prompt,
/// anything else is the text itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    Builtin(String),
    File(PathBuf),
    Text,
}

pub fn resolve_prompt(arg: &str) -> Result<(String, PromptSource)> {
    let (text, source) = if let Some(path) = arg.strip_prefix('@') {
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e.to_string()))?;
        (text, PromptSource::File(PathBuf::from(path)))
    } else if let Some(text) = builtin_prompt(arg) {
        (text.to_string(), PromptSource::Builtin(arg.to_string()))
    } else {
        (arg.to_string(), PromptSource::Text)
    };
    if text.is_empty() {
        return Err(match &source {
            PromptSource::File(path) => Error::file(path, "the prompt file is empty"),
            _ => Error::Input("the prompt is empty".to_string()),
        });
    }
    Ok((text, source))
}

/// `--tokens 1,2,3` → ids.
pub fn parse_token_list(arg: &str) -> Result<Vec<u32>> {
    let ids: Vec<u32> = arg
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>().map_err(|_| {
                Error::Input(format!(
                    "`{s}` in --tokens is not a non-negative integer token id"
                ))
            })
        })
        .collect::<Result<_>>()?;
    if ids.is_empty() {
        return Err(Error::Input("--tokens lists no token ids".to_string()));
    }
    Ok(ids)
}

/// A Hugging Face `tokenizer.json`, through the `tokenizers` crate.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source: PathBuf,
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::file(path, e.to_string()))?;
        Self::from_bytes(path, &bytes)
    }

    /// `name` stands in for the path in messages.
    pub fn from_bytes(name: &Path, bytes: &[u8]) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| Error::file(name, format!("not a usable tokenizer.json: {e}")))?;
        Ok(Tokenizer {
            inner,
            source: name.to_path_buf(),
        })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::file(&self.source, format!("tokenisation failed: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }
}
