//! `hsdiff selftest`: one run that proves a build works on a device (docs/cuda.md).
//!
//! 1. [`kernels`]: the fused kernels of that device (CPU: `fused::cpu`; CUDA: `fused::cuda`) on
//!    fresh seeded random inputs against the f64 truth (`fused::cpu::truth`), with the cases and
//!    bounds of [`crate::backends::cases`] (shared with tests/kernels/fused_cpu_kernels.rs); outputs
//!    NaN-poisoned first, so an unwritten element fails; the standalone delta rule must equal the
//!    fused one bit for bit.
//! 2. [`golden`]: the built-in model on the device, every backend, f32 (≤ 1e-5) and f64
//!    (≤ 1e-10) against the float64 golden states (`golden/states/qwen3_5_tiny`).
//! 3. The live run `hsdiff --a fused --b reference --dtype f32 --device D` on the built-in model
//!    ([`crate::commands::live`]), its report written to a temporary file the line names.
//! 4. `cuda_bench` (CUDA builds): both delta-rule kernels (tensor-core and exact) at
//!    Qwen3.5-27B and Qwen3.5-397B-like linear-layer geometry: time, GB/s, nominal TFLOP/s,
//!    error vs f64 truth; with `--bench-dir` its inputs, outputs and timings, every file named
//!    and reserved up front by [`bench_dir`].
//!
//! Each check prints its line as it finishes; [`run`] returns the exit code: 0 when everything
//! passed, 1 when something failed.

mod bench_dir;
#[cfg(feature = "cuda")]
mod cuda_bench;
mod golden;
mod kernels;

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use half::{bf16, f16};

use crate::backends::{BackendKind, backend_by_name};
use crate::commands::live::{self, LiveRun, Mode};
use crate::error::{Error, Result};
use crate::job::session::{RunInput, Session, SessionSpec};
use crate::printer::Format;
use crate::printer::emit::{EnvList, FailOn, ReportOptions, emit};

/// What to check, and where.
pub struct Options {
    pub device: Device,
    /// The device as the user named it (`cpu`, `cuda:1`), for the headings.
    pub device_name: String,
    /// Folder of the golden states (the repository's golden/states).
    pub golden: PathBuf,
    /// Skip the long (T = 1000) kernel cases.
    pub quick: bool,
    /// Time the delta-rule kernels (CUDA builds, a CUDA device).
    pub bench: Option<BenchOptions>,
}

/// The CUDA bench: sequence lengths, and where to write its inputs, outputs and timings.
pub struct BenchOptions {
    pub seqs: Vec<usize>,
    pub dir: Option<PathBuf>,
}

/// What the live run reported: its exit code and where its report went.
struct LiveOutcome {
    exit_code: i32,
    report: PathBuf,
}

/// `hsdiff --a fused --b reference --dtype f32 --device D` on the built-in model and the default
/// prompt, with the truth and floor; the report (a terminal table) goes to a temporary file.
fn live_run(device_name: &str) -> Result<LiveOutcome> {
    let session = Session::open(&SessionSpec {
        model: None,
        random_weights: None,
        input: RunInput::default(),
        dtype: DType::F32,
        device: crate::util::device::DeviceName::parse(device_name)?,
    })?;
    let report = live::report(
        &session,
        &LiveRun {
            a: BackendKind::Fused,
            b: BackendKind::Reference,
            mode: Mode::Propagate,
            ops: false,
            no_floor: false,
            layers: None,
            command: Some(format!(
                "hsdiff --a fused --b reference --dtype f32 --device {device_name}"
            )),
        },
    )?;
    let path =
        std::env::temp_dir().join(format!("hsdiff-selftest-diff-{}.txt", std::process::id()));
    let options = ReportOptions {
        format: Format::Table,
        out: Some(path.clone()),
        fail_on: FailOn::Mismatch,
        env: EnvList::Ran,
        plot: None,
    };
    Ok(LiveOutcome {
        exit_code: emit(&report, &options)?,
        report: path,
    })
}

/// One line of the result list.
struct Check {
    name: String,
    measured: f64,
    bound: f64,
    pass: bool,
    note: String,
}

/// The checks so far, each printed as it is recorded.
#[derive(Default)]
struct Checklist {
    checks: Vec<Check>,
}

impl Checklist {
    /// Records `measured ≤ bound` (NaN fails).
    fn bound(&mut self, name: String, measured: f64, bound: f64) {
        self.bound_note(name, measured, bound, String::new());
    }
    fn bound_note(&mut self, name: String, measured: f64, bound: f64, note: String) {
        let pass = measured <= bound;
        self.push(Check {
            name,
            measured,
            bound,
            pass,
            note,
        });
    }
    fn flag(&mut self, name: String, pass: bool, note: String) {
        self.push(Check {
            name,
            measured: f64::NAN,
            bound: f64::NAN,
            pass,
            note,
        });
    }
    fn error(&mut self, name: String, e: &Error) {
        self.flag(name, false, format!("error: {e}"));
    }
    fn push(&mut self, check: Check) {
        println!("{}", line(&check));
        self.checks.push(check);
    }
    fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.pass).count()
    }
}

/// `PASS  name  measured ≤ bound note`, or `PASS  name note` for a check without a number.
fn line(c: &Check) -> String {
    let verdict = if c.pass { "PASS" } else { "FAIL" };
    if c.measured.is_nan() && c.bound.is_nan() {
        format!("{verdict}  {:<58} {}", c.name, c.note)
    } else {
        format!(
            "{verdict}  {:<58} {:>10.3e} ≤ {:<8.0e} {}",
            c.name, c.measured, c.bound, c.note
        )
    }
}

/// Runs every check (the bench only on a CUDA device: the command line checks it), printing each
/// line as it finishes, and returns the exit code (0 all passed, 1 something failed).
pub fn run(opts: &Options) -> Result<i32> {
    let device = &opts.device;
    if let Some(BenchOptions {
        seqs,
        dir: Some(dir),
    }) = &opts.bench
    {
        // Before any check: none of the bench's files may land on the golden states.
        bench_dir::reserve(dir, seqs, &[&opts.golden])?;
    }
    println!(
        "hsdiff selftest on {} — fused backend: {}",
        opts.device_name,
        backend_by_name("fused", device)
            .map(|b| b.implementation(device))
            .unwrap_or_else(|e| format!("unavailable ({e})"))
    );
    let started = Instant::now();
    let mut list = Checklist::default();

    println!("\n== kernels vs the f64 truth ==");
    match backend_by_name("fused", device) {
        // An empty section would read as nothing wrong.
        Err(e) => list.error("fused kernels vs the f64 truth".into(), &e),
        Ok(_) => {
            kernels::check::<f64>(device, opts.quick, &mut list);
            kernels::check::<f32>(device, opts.quick, &mut list);
            kernels::check::<bf16>(device, opts.quick, &mut list);
            kernels::check::<f16>(device, opts.quick, &mut list);
        }
    }

    println!("\n== whole model vs the golden float64 states ==");
    if let Err(e) = golden::check(device, &opts.golden, &mut list) {
        list.error("golden parity".into(), &e);
    }

    println!(
        "\n== hsdiff --a fused --b reference --device {} ==",
        opts.device_name
    );
    match live_run(&opts.device_name) {
        Ok(run) => list.flag(
            "library diff fused vs reference (built-in model)".into(),
            run.exit_code == 0,
            format!("exit {}; report in {}", run.exit_code, run.report.display()),
        ),
        Err(e) => list.error("library diff fused vs reference".into(), &e),
    }

    if let Some(bench) = &opts.bench {
        println!("\n== bench ==");
        #[cfg(feature = "cuda")]
        if let Err(e) = cuda_bench::run(device, &bench.seqs, bench.dir.as_deref(), &mut list) {
            list.error("bench".into(), &e);
        }
        // A CUDA device (checked above) exists only in CUDA builds.
        #[cfg(not(feature = "cuda"))]
        let _ = bench;
    }

    let fails = list.failures();
    println!(
        "\nselftest: {} passed, {} failed ({:.1} s)",
        list.checks.len() - fails,
        fails,
        started.elapsed().as_secs_f64()
    );
    Ok(if fails == 0 { 0 } else { 1 })
}

/// A tensor's values as f64, on the host.
fn host(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(measured: f64, bound: f64) -> Check {
        Check {
            name: "gdn f32 B1 T1".into(),
            measured,
            bound,
            pass: measured <= bound,
            note: String::new(),
        }
    }

    #[test]
    fn nan_never_passes_a_bound() {
        let mut list = Checklist::default();
        list.bound("nan".into(), f64::NAN, 1e-5);
        list.bound("inside".into(), 3e-6, 1e-5);
        assert_eq!(list.failures(), 1);
        assert!(!list.checks[0].pass);
    }

    #[test]
    fn lines_show_measured_and_bound_or_the_note() {
        assert_eq!(
            line(&check(2.5e-6, 1e-5)),
            format!("PASS  {:<58}   2.500e-6 ≤ 1e-5     ", "gdn f32 B1 T1")
        );
        let mut flagged = check(f64::NAN, f64::NAN);
        flagged.pass = false;
        flagged.note = "differs".into();
        assert_eq!(
            line(&flagged),
            format!("FAIL  {:<58} differs", "gdn f32 B1 T1")
        );
    }
}
