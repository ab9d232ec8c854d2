//! What to feed the model: a prompt (literal, `@FILE`, or a built-in name) tokenised with the
//! checkpoint's tokenizer.json, or token ids given directly. Batch 1, no special tokens added
//! (these models have no BOS).

use std::fs::File;
use std::io::Read;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::util::limits;

/// Opens `path` for reading only if it is a regular file (after following links): a FIFO would
/// block the open, a device or `/dev/zero` would never end, a directory is not data.
pub fn open_regular(path: &Path) -> Result<File> {
    let (file, meta) = open_checked(path)?;
    record_opened(path, &meta);
    Ok(file)
}

fn open_checked(path: &Path) -> Result<(File, std::fs::Metadata)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    check_regular(path, &meta.file_type())?;
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    // The path may have been swapped between the two calls: check what was opened.
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    check_regular(path, &meta.file_type())?;
    Ok((file, meta))
}

/// Every file opened through [`open_regular`]: its identity (device, inode) and resolved path.
/// A set: a dataset opens tens of thousands of files (an SGLang dumper folder's one per tensor
/// and pass), and a list searched per opening made that quadratic.
static OPENED: Mutex<std::collections::BTreeSet<((u64, u64), PathBuf)>> =
    Mutex::new(std::collections::BTreeSet::new());

fn record_opened(path: &Path, meta: &std::fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut list = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    let entry = ((meta.dev(), meta.ino()), real);
    list.insert(entry);
}

/// The files this process has opened for reading so far (identity and resolved path): outputs
/// must not land on them ([`crate::util::output`]).
pub fn opened_files() -> Vec<((u64, u64), PathBuf)> {
    OPENED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect()
}

fn check_regular(path: &Path, kind: &std::fs::FileType) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(Error::file(
        path,
        format!("is {what}, not a regular file: give a file"),
    ))
}

/// The whole of a regular file, refused up front if it is longer than `cap` bytes (`limit`
/// names the `--limit` that raises the cap).
pub fn read_regular(path: &Path, cap: usize, limit: &str) -> Result<Vec<u8>> {
    read_bounded(path, open_regular(path)?, cap, limit)
}

/// As [`read_regular`], a file an earlier run of this command wrote where this one writes (a
/// shard's part at `--out`, read to resume it): not recorded as an input, since this run may
/// replace it.
pub fn read_previous_output(path: &Path, cap: usize, limit: &str) -> Result<Vec<u8>> {
    read_bounded(path, open_checked(path)?.0, cap, limit)
}

fn read_bounded(path: &Path, file: File, cap: usize, limit: &str) -> Result<Vec<u8>> {
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > cap {
        return Err(Error::file(
            path,
            limits::exceeded("its size in bytes", len, limit, cap),
        ));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| Error::file(path, format!("cannot allocate {len} bytes to read it")))?;
    // At most cap + 1 bytes: a file that grew since it was measured is still bounded.
    file.take((cap as u64).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::io(path, e))?;
    if out.len() > cap {
        return Err(Error::file(path, "grew while it was read"));
    }
    Ok(out)
}

/// Runs `f`, turning a panic inside a dependency into an error line made by `err` (the panic
/// message stays off stderr).
pub fn no_panic<T>(f: impl FnOnce() -> Result<T>, err: impl FnOnce() -> Error) -> Result<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    out.unwrap_or_else(|_| Err(err()))
}

/// Built-in prompts: short coding tasks. The texts live in `prompts/` so that the golden-file
/// script reads the very same bytes.
pub const BUILTIN_PROMPTS: &[(&str, &str)] = &[
    ("fizzbuzz", include_str!("../../prompts/fizzbuzz.txt")),
    (
        "binary_search",
        include_str!("../../prompts/binary_search.txt"),
    ),
    (
        "reverse_words",
        include_str!("../../prompts/reverse_words.txt"),
    ),
    ("fibonacci", include_str!("../../prompts/fibonacci.txt")),
];

pub fn builtin_prompt(name: &str) -> Option<&'static str> {
    BUILTIN_PROMPTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// Where a prompt's text came from: a file (`@FILE`), a built-in prompt's name, or the text
/// itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    Builtin(String),
    File(PathBuf),
    Text,
}

/// A prompt file's text.
pub fn resolve_prompt_file(path: &Path) -> Result<(String, PromptSource)> {
    let bytes = read_regular(path, limits::get().prompt_bytes, "prompt-bytes")?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::file(path, "the prompt file is not UTF-8 text"))?;
    checked_prompt(text, PromptSource::File(path.to_path_buf()))
}

/// A built-in prompt by its name, or else the text itself.
pub fn resolve_prompt_text(arg: &str) -> Result<(String, PromptSource)> {
    match builtin_prompt(arg) {
        Some(text) => checked_prompt(text.to_string(), PromptSource::Builtin(arg.to_string())),
        None => checked_prompt(arg.to_string(), PromptSource::Text),
    }
}

/// Refuses a prompt over the `prompt-bytes` limit, or an empty one.
fn checked_prompt(text: String, source: PromptSource) -> Result<(String, PromptSource)> {
    let cap = limits::get().prompt_bytes;
    if text.len() > cap {
        return Err(Error::prompt(limits::exceeded(
            "the prompt's length in bytes",
            text.len(),
            "prompt-bytes",
            cap,
        )));
    }
    if text.is_empty() {
        return Err(match &source {
            PromptSource::File(path) => Error::file(path, "the prompt file is empty"),
            _ => Error::prompt("the prompt is empty".to_string()),
        });
    }
    Ok((text, source))
}

/// The ids of a `--tokens @FILE` file: a list with commas, spaces or newlines between the ids,
/// optionally in brackets.
pub fn read_token_file(path: &Path) -> Result<Vec<u32>> {
    let bytes = read_regular(path, limits::get().prompt_bytes, "prompt-bytes")?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::file(path, "the token-id file is not UTF-8 text"))?;
    parse_token_list(&text.replace(|c: char| c.is_whitespace() || c == '[' || c == ']', ","))
}

/// `--tokens 1,2,3` → ids.
pub fn parse_token_list(arg: &str) -> Result<Vec<u32>> {
    let ids: Vec<u32> = arg
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>().map_err(|_| {
                Error::argument(
                    "--tokens",
                    format!("`{s}` is not a non-negative integer token id"),
                )
            })
        })
        .collect::<Result<_>>()?;
    if ids.is_empty() {
        return Err(Error::argument("--tokens", "lists no token ids"));
    }
    check_length(ids.len())?;
    Ok(ids)
}

/// Refuses a sequence longer than the `tokens` limit (the attention scores are T × T per head).
pub fn check_length(t: usize) -> Result<()> {
    let cap = limits::get().tokens;
    if t > cap {
        return Err(Error::prompt(limits::exceeded(
            "the sequence length (tokens)",
            t,
            "tokens",
            cap,
        )));
    }
    Ok(())
}

/// A Hugging Face `tokenizer.json`, through the `tokenizers` crate.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source: PathBuf,
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = read_regular(path, limits::get().json_bytes, "json-bytes")?;
        Self::from_bytes(path, &bytes)
    }

    /// `name` stands in for the path in messages.
    pub fn from_bytes(name: &Path, bytes: &[u8]) -> Result<Self> {
        let inner = no_panic(
            || {
                tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| {
                    Error::file(
                        name,
                        format!(
                            "not a usable tokenizer.json: {}",
                            first_line(&e.to_string())
                        ),
                    )
                })
            },
            || {
                Error::file(
                    name,
                    "not a usable tokenizer.json (the tokenizers library failed on it)",
                )
            },
        )?;
        // The prompt is tokenised as transformers' fast tokenizers do by default: no padding and
        // no truncation, whatever the file's settings (a fixed padding of 10⁹ tokens would be a
        // 4 GB allocation; a truncation would silently drop part of the prompt).
        let mut inner = inner;
        inner.with_padding(None);
        let _ = inner.with_truncation(None);
        Ok(Tokenizer {
            inner,
            source: name.to_path_buf(),
        })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = no_panic(
            || {
                self.inner.encode(text, false).map_err(|e| {
                    Error::file(
                        &self.source,
                        format!("tokenisation failed: {}", first_line(&e.to_string())),
                    )
                })
            },
            || {
                Error::file(
                    &self.source,
                    "tokenisation failed inside the tokenizers library (a pattern in this tokenizer.json hit its regex engine's limits on this prompt)",
                )
            },
        )?;
        check_length(enc.get_ids().len())?;
        Ok(enc.get_ids().to_vec())
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
