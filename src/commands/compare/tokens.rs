//! `compare --tokens IDS|@FILE` and `--prompt TEXT|@FILE|NAME`: the token ids of captures that
//! carry none (the team's `torch.save({1: h1, 3: h3})` has no `input_ids`). Without ids the truth
//! cannot be computed, so such a pair stays uncalibrated; given ids make it calibratable, checked
//! against what the files hold — their sequence length, and their own ids where they carry any.

use std::path::Path;

use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::util::input::{Tokenizer, parse_token_list, read_regular, resolve_prompt};
use crate::util::limits;

/// Token ids given on the command line, and how, for the report ("--tokens (32 ids)").
#[derive(Debug, Clone)]
pub struct GivenIds {
    pub ids: Vec<u32>,
    pub how: String,
}

/// `--tokens` (a comma-separated list, or @FILE holding one: commas, spaces or newlines between
/// the ids, optionally in brackets), or `--prompt`, tokenised with `model_dir`'s tokenizer.
pub fn given_ids(
    tokens: Option<&str>,
    prompt: Option<&str>,
    model_dir: Option<&Path>,
) -> Result<Option<GivenIds>> {
    if let Some(arg) = tokens {
        let list = match arg.strip_prefix('@') {
            Some(path) => {
                let bytes =
                    read_regular(Path::new(path), limits::get().prompt_bytes, "prompt-bytes")?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::file(path, "the token-id file is not UTF-8 text"))?;
                text.replace(|c: char| c.is_whitespace() || c == '[' || c == ']', ",")
            }
            None => arg.to_string(),
        };
        let ids = parse_token_list(&list)?;
        let how = format!("--tokens ({} ids)", ids.len());
        return Ok(Some(GivenIds { ids, how }));
    }
    let Some(arg) = prompt else {
        return Ok(None);
    };
    let Some(dir) = model_dir else {
        return Err(Error::argument(
            "--prompt",
            "needs the model's tokenizer: pass --model DIR too (or give the ids with --tokens)",
        ));
    };
    let (text, _) = resolve_prompt(arg)?;
    let ids = Tokenizer::from_file(&dir.join("tokenizer.json"))?.encode(&text)?;
    if ids.is_empty() {
        return Err(Error::argument("--prompt", "tokenises to zero tokens"));
    }
    let how = format!("--prompt {arg} ({} tokens)", ids.len());
    Ok(Some(GivenIds { ids, how }))
}

/// The number of tokens `src`'s hidden states hold (the `T` of `[1, T, D]`), if it has any.
pub fn sequence_length(src: &FileSource) -> Option<usize> {
    src.names()
        .iter()
        .filter(|n| {
            matches!(
                Key::of(n),
                Some(Key::Layer(_) | Key::Embed | Key::FinalNorm | Key::Logits)
            )
        })
        .find_map(|n| src.shape(n).and_then(|s| s.get(1).copied()))
}

/// The ids to compare on: the files' own (`from_files`, checked equal already), or the given
/// ones — which must fit the files' sequence length, and equal the files' ids when they carry
/// any. Returns the ids and, for given ids, a note saying where they came from.
pub fn reconcile(
    from_files: Vec<u32>,
    given: Option<GivenIds>,
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
