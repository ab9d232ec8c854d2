//! The crate's error: one type at the surface, made of one type per domain — what was read
//! ([`InputError`]), what is written ([`OutputError`]), what ran ([`RunError`]) — plus the
//! command line, the comparison and bugs. Every error renders as a single line that names the
//! file, tensor, option, backend or device at fault; the binary prints it and exits with code
//! 2. Where a lower-level error caused it (an I/O error, a candle error) it is kept as the
//! source, so a caller walking the chain sees it whole while the line stays short.

mod input;
mod output;
mod run;

use std::path::Path;

pub use input::{InputError, io_words};
pub use output::OutputError;
pub use run::RunError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),

    #[error(transparent)]
    Output(#[from] OutputError),

    #[error(transparent)]
    Run(#[from] RunError),

    /// A command-line option has an unusable value, or options do not fit together.
    #[error("{option}: {msg}")]
    Argument { option: String, msg: String },

    /// Two captures cannot be compared.
    #[error("compare: {0}")]
    Compare(String),

    /// A panic caught at the command boundary, or a state the code should never reach: a bug,
    /// in hsdiff or a dependency.
    #[error("internal error, please report it: {0}")]
    Internal(String),
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        let line = e.to_string().lines().next().unwrap_or_default().to_string();
        RunError::Candle {
            line,
            source: Box::new(e),
        }
        .into()
    }
}

impl Error {
    /// A file read is unusable: `msg` says how.
    pub fn file(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        InputError::File {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
        .into()
    }

    /// A file or folder read could not be opened, listed or read.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        InputError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
        .into()
    }

    pub fn tensor(path: impl AsRef<Path>, name: impl Into<String>, msg: impl Into<String>) -> Self {
        InputError::Tensor {
            path: path.as_ref().to_path_buf(),
            name: name.into(),
            msg: msg.into(),
        }
        .into()
    }

    pub fn config(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        InputError::Config {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
        .into()
    }

    pub fn prompt(msg: impl Into<String>) -> Self {
        InputError::Prompt(msg.into()).into()
    }

    /// An output refused before anything is written.
    pub fn output(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        OutputError::Refused {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
        .into()
    }

    /// Writing an output failed while `doing` (e.g. "cannot write").
    pub fn write(path: impl AsRef<Path>, doing: &'static str, source: std::io::Error) -> Self {
        OutputError::Io {
            path: path.as_ref().to_path_buf(),
            doing,
            source,
        }
        .into()
    }

    pub fn argument(option: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Argument {
            option: option.into(),
            msg: msg.into(),
        }
    }

    pub fn device(device: impl Into<String>, msg: impl Into<String>) -> Self {
        RunError::Device {
            device: device.into(),
            msg: msg.into(),
        }
        .into()
    }

    pub fn backend(backend: impl Into<String>, msg: impl Into<String>) -> Self {
        RunError::Backend {
            backend: backend.into(),
            msg: msg.into(),
        }
        .into()
    }

    pub fn process(program: impl Into<String>, msg: impl Into<String>) -> Self {
        RunError::Process {
            program: program.into(),
            msg: msg.into(),
        }
        .into()
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// A candle error reads as one line, and is kept whole as the source.
    #[test]
    fn candle_errors_keep_their_source() {
        let inner = candle_core::Error::Msg("first line\nsecond line".to_string());
        let e = Error::from(inner);
        assert_eq!(e.to_string(), "tensor op: first line");
        let source = e.source().expect("source");
        assert_eq!(source.to_string(), "first line\nsecond line");
    }

    /// An I/O error names the file in words, without `(os error N)`, and stays the source —
    /// on the reading side and the writing side.
    #[test]
    fn io_errors_name_the_file_and_keep_their_source() {
        let missing = std::fs::File::open("/nonexistent/hsdiff-error-test").unwrap_err();
        let raw = missing.to_string();
        let e = Error::io("/nonexistent/hsdiff-error-test", missing);
        assert_eq!(
            e.to_string(),
            "/nonexistent/hsdiff-error-test: no such file"
        );
        assert!(matches!(e, Error::Input(InputError::Io { .. })));
        assert_eq!(e.source().expect("source").to_string(), raw);

        let full = std::io::Error::from_raw_os_error(28); // ENOSPC
        let e = Error::write("/tmp/out.json", "cannot write", full);
        assert_eq!(
            e.to_string(),
            "/tmp/out.json: cannot write: No space left on device"
        );
        assert!(matches!(e, Error::Output(OutputError::Io { .. })));
        assert!(
            e.source()
                .expect("source")
                .to_string()
                .contains("os error 28")
        );
    }

    /// Each constructor lands in its domain and renders its subject first.
    #[test]
    fn constructors_land_in_their_domain() {
        let cases: Vec<(Error, &str)> = vec![
            (Error::file("a.pt", "truncated"), "a.pt: truncated"),
            (
                Error::tensor("a.pt", "layers.3", "NaN"),
                "a.pt: tensor `layers.3`: NaN",
            ),
            (Error::config("config.json", "bad"), "config.json: bad"),
            (Error::prompt("empty"), "input: empty"),
            (
                Error::output("m.safetensors", "is an input"),
                "m.safetensors: is an input",
            ),
            (Error::argument("--layers", "empty"), "--layers: empty"),
            (Error::device("cuda:0", "absent"), "device `cuda:0`: absent"),
            (Error::backend("fused", "absent"), "backend `fused`: absent"),
            (Error::process("python", "died"), "python: died"),
        ];
        for (e, line) in &cases {
            assert_eq!(e.to_string(), *line);
        }
        assert!(matches!(cases[0].0, Error::Input(_)));
        assert!(matches!(cases[4].0, Error::Output(_)));
        assert!(matches!(cases[6].0, Error::Run(RunError::Device { .. })));
    }
}
