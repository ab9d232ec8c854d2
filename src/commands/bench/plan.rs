//! What a bench run measures, checked before anything runs: backends, dtypes, repeats, threads,
//! the PyTorch side, and the `--skip` list (NAME[@QUALIFIER…]).

use std::path::PathBuf;

use candle_core::DType;

use crate::backends::{BackendKind, available_backends};
use crate::error::{Error, Result};
use crate::util::device::parse_dtype;

/// The most timed (or warm-up) calls per case: more is a hang, not a measurement.
const CALLS_MAX: usize = 100_000;

/// Rows of scripts/bench_torch.py that `--skip` can name besides the backends: `torch` (the
/// whole script) and `torch_recurrent` (its token-by-token rule).
const TORCH_CASES: &[&str] = &["torch", "torch_recurrent"];

/// One `--skip` spec: a case name, and qualifiers that must all match the case's sequence
/// length or dtype (none: every length and dtype).
#[derive(Debug, Clone, PartialEq)]
pub struct SkipSpec {
    pub name: String,
    pub lengths: Vec<usize>,
    pub dtypes: Vec<DType>,
}

impl SkipSpec {
    /// Parses `NAME[@QUALIFIER…]`, e.g. `reference@8192`, `torch@bf16`, `chunked`; an unknown
    /// name or qualifier is an error naming `--skip`, never a spec that silently matches nothing.
    pub fn parse(spec: &str) -> Result<Self> {
        let refuse = |msg: String| Error::argument("--skip", format!("`{spec}`: {msg}"));
        let mut parts = spec.split('@');
        let name = parts.next().unwrap_or_default();
        let known = skippable_cases();
        if !known.contains(&name) {
            return Err(refuse(format!(
                "unknown case `{name}` (known: {})",
                known.join(", ")
            )));
        }
        let (mut lengths, mut dtypes) = (Vec::new(), Vec::new());
        for q in parts {
            if let Ok(n) = q.parse::<usize>() {
                if n == 0 {
                    return Err(refuse("sequence length 0 names no case".into()));
                }
                lengths.push(n);
            } else if let Some(d) = parse_dtype(q)
                .ok()
                .filter(|d| crate::fp8::serving::act_scale(*d).is_none())
            {
                dtypes.push(d);
            } else {
                return Err(refuse(format!(
                    "qualifier `{q}` is neither a sequence length nor a dtype (f64, f32, bf16, f16)"
                )));
            }
        }
        Ok(SkipSpec {
            name: name.to_string(),
            lengths,
            dtypes,
        })
    }

    pub fn matches(&self, name: &str, seq: usize, dtype: DType) -> bool {
        self.name == name
            && self.lengths.iter().all(|&n| n == seq)
            && self.dtypes.iter().all(|&d| d == dtype)
    }
}

fn skippable_cases() -> Vec<&'static str> {
    let mut names: Vec<&str> = available_backends().iter().map(|b| b.name).collect();
    names.extend(TORCH_CASES);
    names
}

/// The `--skip` specs of a run, as given and as parsed.
#[derive(Debug, Clone, Default)]
pub struct SkipList {
    given: Vec<String>,
    specs: Vec<SkipSpec>,
}

impl SkipList {
    /// Empty specs (a trailing comma) are ignored.
    pub fn parse(specs: &[String]) -> Result<Self> {
        let given: Vec<String> = specs.iter().filter(|s| !s.is_empty()).cloned().collect();
        let specs = given
            .iter()
            .map(|s| SkipSpec::parse(s))
            .collect::<Result<_>>()?;
        Ok(SkipList { given, specs })
    }

    /// Whether some spec names this case.
    pub fn skips(&self, name: &str, seq: usize, dtype: DType) -> bool {
        self.specs.iter().any(|s| s.matches(name, seq, dtype))
    }

    /// The specs as the user wrote them.
    pub fn given(&self) -> &[String] {
        &self.given
    }
}

/// transformers' side of a run: a Python with torch + transformers, and the script it runs
/// (`--torch-script`; None: the one built in, [`super::torch_script`]).
#[derive(Debug, Clone)]
pub struct TorchSide {
    pub python: PathBuf,
    pub script: Option<PathBuf>,
}

/// The options of a run as given (`bench core` and `bench forward` share them).
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub backends: Vec<BackendKind>,
    pub dtypes: Vec<DType>,
    pub repeats: Option<usize>,
    /// Timed calls when `repeats` is not given.
    pub default_repeats: usize,
    pub warmup: usize,
    pub threads: Option<usize>,
    pub skip: Vec<String>,
    pub torch: Option<PathBuf>,
    pub torch_script: Option<PathBuf>,
    pub seed: u64,
    pub work_dir: Option<PathBuf>,
    pub keep: bool,
}

/// A checked run plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub backends: Vec<BackendKind>,
    pub dtypes: Vec<DType>,
    pub repeats: usize,
    pub warmup: usize,
    /// Threads of each hsdiff case (RAYON_NUM_THREADS) and of torch.
    pub threads: usize,
    pub skips: SkipList,
    pub torch: Option<TorchSide>,
    pub seed: u64,
    pub work_dir: Option<PathBuf>,
    pub keep: bool,
}

impl Plan {
    pub fn new(req: PlanRequest) -> Result<Self> {
        for &d in &req.dtypes {
            refuse_served_fp8(d)?;
        }
        let threads = match req.threads {
            Some(0) => return Err(Error::argument("--threads", "must be positive")),
            Some(n) if n > crate::util::limits::THREADS_MAX => {
                return Err(Error::argument(
                    "--threads",
                    format!(
                        "{n} is more than {} threads",
                        crate::util::limits::THREADS_MAX
                    ),
                ));
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let repeats = req.repeats.unwrap_or(req.default_repeats);
        if repeats == 0 {
            return Err(Error::argument("--repeats", "must be positive"));
        }
        for (option, n) in [("--repeats", repeats), ("--warmup", req.warmup)] {
            if n > CALLS_MAX {
                return Err(Error::argument(
                    option,
                    format!("{n} calls per case is more than {CALLS_MAX}"),
                ));
            }
        }
        let torch = match (req.torch, req.torch_script) {
            (Some(python), Some(script)) if !script.is_file() => {
                return Err(Error::file(
                    &script,
                    format!(
                        "the PyTorch side of --torch {} is missing (see --torch-script)",
                        python.display()
                    ),
                ));
            }
            (Some(python), script) => Some(TorchSide { python, script }),
            (None, _) => None,
        };
        Ok(Plan {
            backends: req.backends,
            dtypes: req.dtypes,
            repeats,
            warmup: req.warmup,
            threads,
            skips: SkipList::parse(&req.skip)?,
            torch,
            seed: req.seed,
            work_dir: req.work_dir,
            keep: req.keep,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn option_of(e: Error) -> String {
        match e {
            Error::Argument { option, .. } => option,
            other => panic!("not an argument error: {other}"),
        }
    }

    #[test]
    fn skip_specs_parse_names_lengths_and_dtypes() {
        let s = SkipSpec::parse("reference@8192").expect("valid");
        assert_eq!(
            (s.name.as_str(), s.lengths.as_slice()),
            ("reference", &[8192][..])
        );
        assert!(s.matches("reference", 8192, DType::F32));
        assert!(s.matches("reference", 8192, DType::BF16));
        assert!(!s.matches("reference", 512, DType::F32));
        assert!(!s.matches("chunked", 8192, DType::F32));

        let s = SkipSpec::parse("torch@bf16").expect("valid");
        assert_eq!(s.dtypes, vec![DType::BF16]);
        assert!(s.matches("torch", 1, DType::BF16) && !s.matches("torch", 1, DType::F32));

        let s = SkipSpec::parse("fused@512@f16").expect("valid");
        assert!(s.matches("fused", 512, DType::F16));
        assert!(!s.matches("fused", 512, DType::F32) && !s.matches("fused", 513, DType::F16));

        let s = SkipSpec::parse("chunked").expect("valid");
        assert!(s.matches("chunked", 7, DType::F64));
        assert!(SkipSpec::parse("torch_recurrent@2048").is_ok());
    }

    #[test]
    fn bad_skip_specs_are_errors_naming_the_option() {
        for (spec, words) in [
            ("refrence", "unknown case `refrence`"),
            ("", "unknown case ``"),
            ("@512", "unknown case ``"),
            ("reference@", "qualifier `` is neither"),
            ("reference@fp8", "qualifier `fp8` is neither"),
            ("reference@-3", "qualifier `-3` is neither"),
            ("reference@0", "sequence length 0"),
        ] {
            let e = SkipSpec::parse(spec).expect_err(spec);
            let line = e.to_string();
            assert!(line.contains(words), "{spec}: {line}");
            assert!(line.contains(&format!("`{spec}`")), "{spec}: {line}");
            assert_eq!(option_of(e), "--skip", "{spec}");
        }
    }

    #[test]
    fn skip_lists_ignore_empty_specs_and_match_any_spec() {
        let list = SkipList::parse(&["reference@512".into(), String::new(), "torch".into()])
            .expect("valid");
        assert_eq!(list.given(), ["reference@512", "torch"]);
        assert!(list.skips("reference", 512, DType::F32));
        assert!(list.skips("torch", 9, DType::BF16));
        assert!(!list.skips("reference", 2048, DType::F32));
        let e = SkipList::parse(&["chunked".into(), "nope@f32".into()]).expect_err("bad");
        assert_eq!(option_of(e), "--skip");
    }

    fn request() -> PlanRequest {
        PlanRequest {
            backends: vec![BackendKind::Reference, BackendKind::Fused],
            dtypes: vec![DType::F32, DType::BF16],
            repeats: None,
            default_repeats: 3,
            warmup: 1,
            threads: Some(2),
            skip: vec!["fused@bf16".into()],
            torch: None,
            torch_script: Some(PathBuf::from("/nonexistent/bench_torch.py")),
            seed: 7,
            work_dir: None,
            keep: false,
        }
    }

    #[test]
    fn plans_check_every_option_and_name_it() {
        let plan = Plan::new(request()).expect("valid");
        assert_eq!(plan.dtypes, vec![DType::F32, DType::BF16]);
        assert_eq!((plan.repeats, plan.threads), (3, 2));
        assert!(plan.skips.skips("fused", 64, DType::BF16));

        let bad = |edit: fn(&mut PlanRequest)| {
            let mut r = request();
            edit(&mut r);
            option_of(Plan::new(r).expect_err("refused"))
        };
        assert_eq!(
            bad(|r| r.dtypes.push(crate::fp8::serving::SERVED)),
            "--dtypes"
        );
        assert_eq!(bad(|r| r.threads = Some(0)), "--threads");
        assert_eq!(bad(|r| r.repeats = Some(0)), "--repeats");
        assert_eq!(bad(|r| r.skip.push("fused@zz".into())), "--skip");

        let mut r = request();
        r.torch = Some(PathBuf::from("python3"));
        let e = Plan::new(r.clone()).expect_err("script missing");
        assert!(e.to_string().contains("--torch-script"), "{e}");
        // Without --torch-script the built-in copy runs: nothing to find on disk.
        r.torch_script = None;
        let plan = Plan::new(r).expect("the built-in script");
        assert!(plan.torch.expect("torch side").script.is_none());
    }
}
