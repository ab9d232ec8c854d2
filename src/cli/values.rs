//! The command-line names of the library's typed values: backends, compute dtypes and the live
//! run's mode (devices are read by [`crate::util::device::DeviceName`]'s `FromStr`).

use candle_core::DType;
use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::backends::BackendKind;
use crate::commands::exec_paths::PathKind;
use crate::commands::live::Mode;
use crate::error::{Error, Result};
use crate::util::device::{COMPUTE_DTYPES, dtype_aliases, dtype_label, dtype_named};

impl ValueEnum for BackendKind {
    fn value_variants<'a>() -> &'a [Self] {
        &BackendKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

impl ValueEnum for PathKind {
    fn value_variants<'a>() -> &'a [Self] {
        &PathKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
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

/// A `--dtype` value outside clap (the hidden `bench case`'s).
pub fn parse_dtype(arg: &str) -> Result<DType> {
    dtype_named(arg).ok_or_else(|| {
        Error::argument(
            "--dtype",
            format!("unknown dtype `{arg}` (expected f64, f32, bf16, f16, fp8 or fp8-ue8m0)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// (name, label or None for a near miss) from the list hsdiff-capture's tests read too
    /// (python/tests/test_pure.py), so the two sides cannot drift apart.
    fn golden_dtype_names() -> Vec<(&'static str, Option<&'static str>)> {
        include_str!("../../tests/fixtures/dtype_names.txt")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (name, label) = l.split_once(' ').expect("NAME LABEL");
                (name, (label != "-").then_some(label))
            })
            .collect()
    }

    #[test]
    fn dtype_names_are_the_golden_list() {
        let golden = golden_dtype_names();
        for &(name, label) in &golden {
            // `ignore_case = false`: clap's own matching of a `--dtype` value.
            let clap = DtypeArg::from_str(name, false)
                .ok()
                .map(|d| dtype_label(d.0));
            let lib = parse_dtype(name).ok().map(dtype_label);
            assert_eq!(crate::util::device::dtype_named(name).map(dtype_label), lib);
            assert_eq!(clap, label, "--dtype {name}");
            assert_eq!(lib, label, "parse_dtype({name})");
        }
        // Every name clap offers is in the list: a new alias fails here until the list has it.
        let offered: BTreeSet<String> = DtypeArg::value_variants()
            .iter()
            .flat_map(|d| {
                let v = d.to_possible_value().expect("a possible value");
                v.get_name_and_aliases()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        let listed: BTreeSet<String> = golden
            .iter()
            .filter(|(_, label)| label.is_some())
            .map(|(name, _)| (*name).to_owned())
            .collect();
        assert_eq!(offered, listed);
    }
}
