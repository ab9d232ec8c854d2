//! The options `bench core` and `bench forward` share, checked into the bench's [`Plan`] before
//! anything runs, in this order: dtypes, threads, calls per case, the PyTorch side, `--skip`.

use candle_core::DType;

use super::args::CommonArgs;
use super::skip::skip_list;
use crate::commands::bench::plan::{Plan, TorchSide};
use crate::error::{Error, Result};
use crate::util::limits::THREADS_MAX;

/// The most timed (or warm-up) calls per case: more is a hang, not a measurement.
const CALLS_MAX: usize = 100_000;

/// The plan of `c`, timing `default_repeats` calls per case without `--repeats`.
pub fn checked_plan(c: &CommonArgs, default_repeats: usize) -> Result<Plan> {
    let dtypes: Vec<DType> = c.dtypes.iter().map(|d| d.0).collect();
    for &d in &dtypes {
        refuse_served_fp8(d)?;
    }
    let threads = match c.threads {
        Some(0) => return Err(Error::argument("--threads", "must be positive")),
        Some(n) if n > THREADS_MAX => {
            return Err(Error::argument(
                "--threads",
                format!("{n} is more than {THREADS_MAX} threads"),
            ));
        }
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let repeats = c.repeats.unwrap_or(default_repeats);
    if repeats == 0 {
        return Err(Error::argument("--repeats", "must be positive"));
    }
    for (option, n) in [("--repeats", repeats), ("--warmup", c.warmup)] {
        if n > CALLS_MAX {
            return Err(Error::argument(
                option,
                format!("{n} calls per case is more than {CALLS_MAX}"),
            ));
        }
    }
    let torch = torch_side(c)?;
    Ok(Plan {
        backends: c.backends.clone(),
        dtypes,
        repeats,
        warmup: c.warmup,
        threads,
        skips: skip_list(&c.skip)?,
        torch,
        seed: c.seed,
        work_dir: c.work_dir.clone(),
        keep: c.keep,
    })
}

/// The served FP8 dtypes run an FP8 checkpoint's quantised Linears, which the bench's inputs
/// (random kernel inputs, a bf16 bench model) do not have.
fn refuse_served_fp8(d: DType) -> Result<()> {
    if crate::fp8::serving::act_scale(d).is_some() {
        return Err(Error::argument(
            "--dtypes",
            "fp8 / fp8-ue8m0 serve an FP8 checkpoint's Linear layers; the bench cases have none",
        ));
    }
    Ok(())
}

/// transformers' side with `--torch PYTHON`: a `--torch-script` given must exist (none: the
/// script built into the binary runs).
fn torch_side(c: &CommonArgs) -> Result<Option<TorchSide>> {
    match (&c.torch, &c.torch_script) {
        (Some(python), Some(script)) if !script.is_file() => Err(Error::file(
            script,
            format!(
                "the PyTorch side of --torch {} is missing (see --torch-script)",
                python.display()
            ),
        )),
        (Some(python), script) => Ok(Some(TorchSide {
            python: python.clone(),
            script: script.clone(),
        })),
        (None, _) => Ok(None),
    }
}

/// The option an argument error names.
#[cfg(test)]
pub fn option_of(e: Error) -> String {
    match e {
        Error::Argument { option, .. } => option,
        other => panic!("not an argument error: {other}"),
    }
}

#[cfg(test)]
mod tests;
