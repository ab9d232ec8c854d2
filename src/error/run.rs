//! Errors while running: a backend, a device, a helper process, a tensor operation.

/// The forward pass or a backend could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A backend is unknown, unavailable on the requested device, or was handed bad tensors.
    #[error("backend `{backend}`: {msg}")]
    Backend { backend: String, msg: String },

    /// The requested device is not available in this build or on this machine.
    #[error("device `{device}`: {msg}")]
    Device { device: String, msg: String },

    /// A helper process (a bench case, the PyTorch side) could not be started or failed.
    #[error("{program}: {msg}")]
    Process { program: String, msg: String },

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
