//! One error type for the whole crate. Every variant renders as a single line that names the
//! file, tensor or option at fault; the binary prints it and exits with code 2.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read, or is not what it claims to be.
    #[error("{}: {msg}", path.display())]
    File { path: PathBuf, msg: String },

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

    /// A command-line option has an unusable value, or options do not fit together.
    #[error("{option}: {msg}")]
    Argument { option: String, msg: String },

    /// The prompt or token ids are unusable for this model or this command.
    #[error("input: {0}")]
    Prompt(String),

    /// A helper process (a bench case, the PyTorch side) could not be started or failed.
    #[error("{program}: {msg}")]
    Process { program: String, msg: String },

    /// A backend is unknown, unavailable on the requested device, or was handed bad tensors.
    #[error("backend `{backend}`: {msg}")]
    Backend { backend: String, msg: String },

    /// The requested device is not available in this build or on this machine.
    #[error("device `{device}`: {msg}")]
    Device { device: String, msg: String },

    /// Two captures cannot be compared.
    #[error("compare: {0}")]
    Compare(String),

    /// A panic caught at the command boundary: a bug, in hsdiff or a dependency.
    #[error("internal error, please report it: {0}")]
    Internal(String),

    /// An error inside candle that no more specific variant explains: its first line (candle
    /// errors can span several — backtraces — and the report keeps to one), and the error
    /// itself as the source, for a caller that walks the chain.
    #[error("tensor op: {line}")]
    Candle {
        line: String,
        #[source]
        source: Box<candle_core::Error>,
    },
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        let line = e.to_string().lines().next().unwrap_or_default().to_string();
        Error::Candle {
            line,
            source: Box::new(e),
        }
    }
}

impl Error {
    pub fn file(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::File {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }

    pub fn tensor(path: impl AsRef<Path>, name: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Tensor {
            path: path.as_ref().to_path_buf(),
            name: name.into(),
            msg: msg.into(),
        }
    }

    pub fn config(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::Config {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }

    pub fn argument(option: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Argument {
            option: option.into(),
            msg: msg.into(),
        }
    }

    pub fn device(device: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Device {
            device: device.into(),
            msg: msg.into(),
        }
    }

    pub fn backend(backend: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Backend {
            backend: backend.into(),
            msg: msg.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A candle error reads as one line, and is kept whole as the source.
    #[test]
    fn candle_errors_keep_their_source() {
        let inner = candle_core::Error::Msg("first line\nsecond line".to_string());
        let e = Error::from(inner);
        assert_eq!(e.to_string(), "tensor op: first line");
        let source = std::error::Error::source(&e).expect("source");
        assert_eq!(source.to_string(), "first line\nsecond line");
    }
}
