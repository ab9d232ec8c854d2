//! Error type shared by every kernel.

use std::fmt;

/// Why a kernel refused to run. Kernels check every shape before touching any buffer, so an
/// error means no output was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// A dimension is zero where it must not be, or dimensions are inconsistent
    /// (for example `v_heads` not a multiple of `k_heads`).
    InvalidDims(String),
    /// A slice does not have the length its dimensions imply.
    LengthMismatch {
        /// Which argument.
        what: &'static str,
        /// Length implied by the dimensions.
        expected: usize,
        /// Length passed in.
        got: usize,
    },
    /// The dimensions multiply to more than `usize::MAX` elements.
    Overflow,
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::InvalidDims(msg) => write!(f, "invalid dimensions: {msg}"),
            KernelError::LengthMismatch {
                what,
                expected,
                got,
            } => write!(f, "`{what}` has {got} elements, expected {expected}"),
            KernelError::Overflow => write!(f, "dimensions overflow usize"),
        }
    }
}

impl std::error::Error for KernelError {}

/// Checks that `got == expected`, naming the argument in the error.
pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::LengthMismatch {
            what,
            expected,
            got,
        })
    }
}

/// Product of dimensions with overflow checking.
pub(crate) fn prod(dims: &[usize]) -> Result<usize, KernelError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(KernelError::Overflow)
}
