//! Errors in what the user handed in: a file, a tensor in it, config.json, the prompt.

use std::path::PathBuf;

/// Something read from the user's input is unusable.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A file could not be read, or is not what it claims to be.
    #[error("{}: {msg}", path.display())]
    File { path: PathBuf, msg: String },

    /// A file or folder could not be opened, listed or read; the I/O error is the source.
    #[error("{}: {}", path.display(), io_words(source))]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A tensor in a file is missing, has the wrong shape or dtype, or holds bad values.
    #[error("{}: tensor `{name}`: {msg}", path.display())]
    Tensor {
        path: PathBuf,
        name: String,
        msg: String,
    },

    /// config.json is unusable.
    #[error("{}: {msg}", path.display())]
    Config { path: PathBuf, msg: String },

    /// The prompt or token ids are unusable for this model or this command.
    #[error("input: {0}")]
    Prompt(String),
}

/// An I/O error in words, without the `(os error N)` suffix.
pub fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "no such file".to_string(),
        K::PermissionDenied => "permission denied".to_string(),
        K::IsADirectory => "is a directory, not a regular file".to_string(),
        _ => {
            let text = e.to_string();
            match text.find(" (os error") {
                Some(i) => text[..i].to_string(),
                None => text,
            }
        }
    }
}
