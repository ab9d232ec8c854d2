//! `compare --tokens IDS|@FILE` and `--prompt TEXT|@FILE|NAME`: the token ids of captures that
//! carry none (the team's `torch.save({1: h1, 3: h3})` has no `input_ids`). Without ids the truth
//! cannot be computed, so such a pair stays uncalibrated; given ids make it calibratable, checked
//! against what the files hold — their sequence length, and their own ids where they carry any.

use std::path::{Path, PathBuf};

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::util::input::{
    PromptSource, Tokenizer, read_token_file, resolve_prompt_file, resolve_prompt_text,
};

/// The token ids the command line gives for files that carry none: a list (`--tokens 1,2,3`),
/// a file holding one (`--tokens @FILE`), or a prompt to tokenise — text or a built-in
/// prompt's name (`--prompt TEXT|NAME`), or a file (`--prompt @FILE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GivenIds {
    Tokens(Vec<u32>),
    TokensFile(PathBuf),
    Prompt(String),
    PromptFile(PathBuf),
}

impl GivenIds {
    /// The file the ids are read from, if any (an input of the run).
    pub fn file(&self) -> Option<&Path> {
        match self {
            GivenIds::TokensFile(p) | GivenIds::PromptFile(p) => Some(p),
            GivenIds::Tokens(_) | GivenIds::Prompt(_) => None,
        }
    }

    /// The option that gave them, as messages name it.
    pub fn option(&self) -> &'static str {
        match self {
            GivenIds::Tokens(_) | GivenIds::TokensFile(_) => "--tokens",
            GivenIds::Prompt(_) | GivenIds::PromptFile(_) => "--prompt",
        }
    }
}

/// Given token ids read, and how they were given, for the report ("--tokens (32 ids)").
#[derive(Debug, Clone)]
pub struct ResolvedIds {
    pub ids: Vec<u32>,
    pub how: String,
}

/// The ids `given` names: a `--tokens` file read by [`read_token_file`]; a prompt is tokenised with `model_dir`'s tokenizer.
pub fn resolve(given: Option<&GivenIds>, model_dir: Option<&Path>) -> Result<Option<ResolvedIds>> {
    let ids = match given {
        None => return Ok(None),
        Some(GivenIds::Tokens(ids)) => ids.clone(),
        Some(GivenIds::TokensFile(path)) => read_token_file(path)?,
        Some(GivenIds::Prompt(text)) => {
            return tokenised(text, || resolve_prompt_text(text), model_dir).map(Some);
        }
        Some(GivenIds::PromptFile(path)) => {
            let arg = format!("@{}", path.display());
            return tokenised(&arg, || resolve_prompt_file(path), model_dir).map(Some);
        }
    };
    let how = format!("--tokens ({} ids)", ids.len());
    Ok(Some(ResolvedIds { ids, how }))
}

/// The ids of the prompt `read` reads (`arg` as given), by `model_dir`'s tokenizer, which is
/// asked for before the prompt is read.
fn tokenised(
    arg: &str,
    read: impl FnOnce() -> Result<(String, PromptSource)>,
    model_dir: Option<&Path>,
) -> Result<ResolvedIds> {
    let Some(dir) = model_dir else {
        return Err(Error::argument(
            "--prompt",
            "needs the model's tokenizer: pass --model DIR too (or give the ids with --tokens)",
        ));
    };
    let (text, _) = read()?;
    let ids = Tokenizer::from_file(&dir.join("tokenizer.json"))?.encode(&text)?;
    if ids.is_empty() {
        return Err(Error::argument("--prompt", "tokenises to zero tokens"));
    }
    let how = format!("--prompt {arg} ({} tokens)", ids.len());
    Ok(ResolvedIds { ids, how })
}

/// The number of tokens `src`'s hidden states hold (the `T` of `[1, T, D]`), if it has any.
pub fn sequence_length(src: &FileSource) -> Option<usize> {
    src.keys()
        .into_iter()
        .filter(|k| matches!(k, Key::Layer(_) | Key::Embed | Key::FinalNorm | Key::Logits))
        .find_map(|k| src.shape(&k.to_string()).and_then(|s| s.get(1).copied()))
}

/// The ids to compare on: the files' own (`from_files`, checked equal already), or the given
/// ones — which must fit the files' sequence length, and equal the files' ids when they carry
/// any. Returns the ids and, for given ids, a note saying where they came from.
pub fn reconcile(
    from_files: Vec<u32>,
    given: Option<ResolvedIds>,
    a: &FileSource,
    b: &FileSource,
) -> Result<(Vec<u32>, Option<String>)> {
    let Some(given) = given else {
        return Ok((from_files, None));
    };
    for src in [a, b] {
        if let Some(t) = sequence_length(src)
            && t != given.ids.len()
        {
            return Err(Error::file(
                src.path(),
                format!(
                    "holds {t} tokens, but {} gives {}: the ids must be those the capture was made on",
                    given.how,
                    given.ids.len()
                ),
            ));
        }
    }
    if !from_files.is_empty() {
        if from_files != given.ids {
            let pos = from_files
                .iter()
                .zip(&given.ids)
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            return Err(Error::Compare(format!(
                "{} differs from the token ids the files carry at position {pos} ({} there, {} given)",
                given.how, from_files[pos], given.ids[pos]
            )));
        }
        return Ok((
            from_files,
            Some(format!("token ids: {} equal the files' own", given.how)),
        ));
    }
    let note = format!(
        "token ids: {}, the files' length (the files carry none)",
        given.how
    );
    Ok((given.ids, Some(note)))
}
