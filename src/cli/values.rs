//! The command-line names of the library's typed values: backends, compute dtypes and the live
//! run's mode (devices are read by [`crate::device::DeviceName`]'s `FromStr`).

use candle_core::DType;
use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::backends::BackendKind;
use crate::device::{COMPUTE_DTYPES, dtype_aliases, dtype_label};
use crate::live::Mode;

impl ValueEnum for BackendKind {
    fn value_variants<'a>() -> &'a [Self] {
        &BackendKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

/// `--mode`'s values, with the library's descriptions.
impl ValueEnum for Mode {
    fn value_variants<'a>() -> &'a [Self] {
        &[Mode::Propagate, Mode::Isolate]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Mode::Propagate => PossibleValue::new("propagate").help(
                "Each backend carries its own residual stream (as in a real train/eval split)",
            ),
            Mode::Isolate => PossibleValue::new("isolate").help(
                "Each layer of B is fed A's input to that layer: the error a layer adds, apart \
                 from what it inherits",
            ),
        })
    }
}

/// A `--dtype` value: one of the library's compute dtypes, by its name or torch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtypeArg(pub DType);

const DTYPE_ARGS: [DtypeArg; COMPUTE_DTYPES.len()] = [
    DtypeArg(COMPUTE_DTYPES[0]),
    DtypeArg(COMPUTE_DTYPES[1]),
    DtypeArg(COMPUTE_DTYPES[2]),
    DtypeArg(COMPUTE_DTYPES[3]),
    DtypeArg(COMPUTE_DTYPES[4]),
    DtypeArg(COMPUTE_DTYPES[5]),
];

impl ValueEnum for DtypeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &DTYPE_ARGS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(dtype_label(self.0)).aliases(dtype_aliases(self.0).iter().copied()))
    }
}
