//! Errors in what hsdiff writes: a report, a dump, a plot, stdout.

use std::path::PathBuf;

use super::input::io_words;

/// An output cannot be written, or is refused before anything is written (it would land on an
/// input, or on something that is not a file).
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Refused before writing; `msg` says why.
    #[error("{}: {msg}", path.display())]
    Refused { path: PathBuf, msg: String },

    /// Writing failed part-way (`doing` says at which step); the I/O error is the source.
    #[error("{}: {doing}: {}", path.display(), io_words(source))]
    Io {
        path: PathBuf,
        doing: &'static str,
        #[source]
        source: std::io::Error,
    },
}
