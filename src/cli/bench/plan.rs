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
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::backends::BackendKind;
    use crate::cli::values::DtypeArg;

    fn args() -> CommonArgs {
        CommonArgs {
            backends: vec![BackendKind::Reference, BackendKind::Fused],
            dtypes: vec![DtypeArg(DType::F32), DtypeArg(DType::BF16)],
            repeats: None,
            warmup: 1,
            threads: Some(2),
            skip: vec!["fused@bf16".into()],
            torch: None,
            torch_script: Some(PathBuf::from("/nonexistent/bench_torch.py")),
            seed: 7,
            work_dir: None,
            keep: false,
            markdown: false,
            json: None,
        }
    }

    #[test]
    fn plans_check_every_option_and_name_it() {
        let plan = checked_plan(&args(), 3).expect("valid");
        assert_eq!(plan.dtypes, vec![DType::F32, DType::BF16]);
        assert_eq!((plan.repeats, plan.threads), (3, 2));
        assert!(plan.skips.skips("fused", 64, DType::BF16));

        let bad = |edit: fn(&mut CommonArgs)| {
            let mut a = args();
            edit(&mut a);
            option_of(checked_plan(&a, 3).expect_err("refused"))
        };
        assert_eq!(
            bad(|a| a.dtypes.push(DtypeArg(crate::fp8::serving::SERVED))),
            "--dtypes"
        );
        assert_eq!(bad(|a| a.threads = Some(0)), "--threads");
        assert_eq!(bad(|a| a.repeats = Some(0)), "--repeats");
        assert_eq!(bad(|a| a.skip.push("fused@zz".into())), "--skip");

        let mut a = args();
        a.torch = Some(PathBuf::from("python3"));
        let e = checked_plan(&a, 3).expect_err("script missing");
        assert!(e.to_string().contains("--torch-script"), "{e}");
        // Without --torch-script the built-in copy runs: nothing to find on disk.
        a.torch_script = None;
        let plan = checked_plan(&a, 3).expect("the built-in script");
        assert!(plan.torch.expect("torch side").script.is_none());
    }
}
