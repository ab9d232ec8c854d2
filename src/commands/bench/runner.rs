//! The parent side of a bench run: the work folder, the case processes of each case group
//! (transformers first, then every backend, each in its own process), the rows they give, and
//! the lines around the table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Tensor};

use super::case::CaseKind;
use super::peak::Peaks;
use super::plan::Plan;
use super::protocol::{Measurement, spawn};
use super::render::BenchResults;
use super::results::{BenchRow, CaseOutcome, TORCH_REFERENCES, add_rates};
use super::stats::Timings;
use crate::compare::metrics::stats::rel_l2_tensors;
use crate::error::{Error, Result};
use crate::util::device::dtype_label;
use crate::util::sysinfo::{CpuInfo, load_average, mem_total_kib};
use crate::weights::safetensors_file::SafetensorsFile;

/// A prepared run: the plan, this executable (the cases run `hsdiff bench case`), the folder
/// the inputs and outputs go through, and this machine's FMA peak.
pub struct Bench {
    plan: Plan,
    peaks: Option<Peaks>,
    exe: PathBuf,
    work: PathBuf,
    remove_work: bool,
    /// The script `--torch` runs: `--torch-script`, or the built-in one written into `work`.
    torch_script: Option<PathBuf>,
}

/// Cases that share one inputs file: one sequence length and dtype.
pub struct CaseGroup<'a> {
    pub seq: usize,
    pub dtype: DType,
    /// Names the group's files and progress lines, e.g. `core-t512-bf16`.
    pub tag: &'a str,
    /// The inputs file every case of the group reads.
    pub inputs: &'a Path,
}

impl CaseGroup<'_> {
    /// The group's row of case `name`.
    fn row(&self, name: &str, outcome: CaseOutcome) -> BenchRow {
        BenchRow {
            seq: self.seq,
            dtype: dtype_label(self.dtype).to_string(),
            name: name.to_string(),
            outcome,
        }
    }
}

/// transformers' chunked result of a group, what every case is compared with: its median time
/// and its output, where it ran.
struct TorchReference {
    ms: Option<f64>,
    tensor: Option<Tensor>,
}

impl TorchReference {
    /// The reference among transformers' measurements, its output read from `torch_out`.
    fn of(results: &[Measurement], torch_out: &Path) -> TorchReference {
        let found = results
            .iter()
            .find(|m| TORCH_REFERENCES.contains(&m.name.as_str()));
        TorchReference {
            ms: found
                .and_then(|m| Timings::of(&m.times_ms).ok())
                .map(|t| t.median_ms),
            tensor: found.and_then(|m| load_output(torch_out, &m.output).ok()),
        }
    }

    /// The rel L2 of output `output` of the file at `path` against the reference.
    fn rel_to(&self, path: &Path, output: &str) -> Option<f64> {
        let reference = self.tensor.as_ref()?;
        let t = load_output(path, output).ok()?;
        rel_l2_tensors(&t, reference).ok()
    }
}

impl Bench {
    pub fn prepare(plan: Plan) -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| {
            Error::process(
                "hsdiff",
                format!("cannot find its own executable for the bench cases: {e}"),
            )
        })?;
        // Always a folder of its own, made here: the files of the run never replace (nor, when
        // removed, delete) a file that was in --work-dir before.
        let base = plan.work_dir.clone().unwrap_or_else(std::env::temp_dir);
        let work = fresh_folder(&base)?;
        let remove_work = !plan.keep;
        if plan.keep {
            eprintln!("hsdiff bench: work files kept in {}", work.display());
        }
        let torch_script = match plan.torch.as_ref().map(|t| &t.script) {
            Some(Some(given)) => Some(given.clone()),
            Some(None) => Some(super::torch_script::write_into(&work)?),
            None => None,
        };
        eprintln!("hsdiff bench: measuring the FMA peak …");
        Ok(Bench {
            peaks: Peaks::measure(plan.threads),
            plan,
            exe,
            work,
            remove_work,
            torch_script,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// `hsdiff bench case --kind KIND --backend NAME`, the rest of its arguments to add.
    pub fn case_command(&self, kind: CaseKind, backend: &str) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.args([
            "bench",
            "case",
            "--kind",
            kind.label(),
            "--backend",
            backend,
        ]);
        cmd
    }

    /// bench_torch.py `WHAT` when the run includes transformers.
    pub fn torch_command(&self, what: &str) -> Option<Command> {
        let torch = self.plan.torch.as_ref()?;
        let mut cmd = Command::new(&torch.python);
        cmd.arg(self.torch_script.as_ref()?).arg(what);
        Some(cmd)
    }

    /// A file in the work folder.
    pub fn work_file(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// Removes an inputs file unless `--keep`.
    pub fn discard_inputs(&self, path: &Path) {
        if !self.plan.keep {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The lines above the table: what is measured (`what`), on what machine, how.
    pub fn header(&self, what: &str) -> String {
        let p = &self.plan;
        let mut out = format!("hsdiff bench: {what}\n");
        out += &format!(
            "machine: {}; hsdiff threads {} (RAYON_NUM_THREADS of each case), torch threads {}\n",
            machine_summary(),
            p.threads,
            p.threads
        );
        out += &format!(
            "timing: median of {} calls after {} warm-up call(s), each case in its own process \
             (peak RSS = its VmHWM; Δ = peak − RSS after loading its inputs)\n",
            p.repeats, p.warmup
        );
        out += &match &self.peaks {
            Some(peaks) => peaks.describe(),
            None => "FMA peak: not measured (this CPU has neither AVX2 + FMA nor AVX-512F)".into(),
        };
        out += "\n";
        out += &format!("load before the run: {}\n", load_label());
        if cfg!(debug_assertions) {
            out += "warning: this hsdiff is a debug build; build with --release to benchmark\n";
        }
        if p.torch.is_none() {
            out += "transformers: not run (pass --torch PYTHON to run its PyTorch side, bench_torch.py)\n";
        }
        if !p.skips.given().is_empty() {
            out += &format!("skipped by --skip: {}\n", p.skips.given().join(", "));
        }
        out + "\n"
    }

    /// Runs transformers (when asked) then every backend on one inputs file, and compares each
    /// output with transformers'. `backend_cmd` is a backend's case command, `torch_cmd`
    /// transformers' (`None`: not run); both get `--inputs` and `--out` here.
    pub fn run_group(
        &self,
        group: &CaseGroup,
        backend_cmd: impl Fn(&str) -> Command,
        torch_cmd: impl Fn() -> Option<Command>,
    ) -> Vec<BenchRow> {
        let p = &self.plan;
        let mut rows = Vec::new();
        let torch_out = self.work.join(format!("{}.torch.safetensors", group.tag));
        let torch_results = self.run_torch(group, torch_cmd, &torch_out, &mut rows);
        let torch = TorchReference::of(&torch_results, &torch_out);
        for m in &torch_results {
            let rel = torch.rel_to(&torch_out, &m.output);
            let outcome = CaseOutcome::measured(m.clone(), group.seq, torch.ms, rel);
            rows.push(group.row(&m.name, outcome));
        }
        for name in p.backends.iter().map(|k| k.name()) {
            let outcome = if p.skips.skips(name, group.seq, group.dtype) {
                CaseOutcome::skipped_by_option()
            } else {
                self.run_backend(group, name, &backend_cmd, &torch)
            };
            rows.push(group.row(name, outcome));
        }
        let _ = std::fs::remove_file(&torch_out);
        add_rates(&mut rows, self.peaks.as_ref(), p.threads);
        rows
    }

    /// transformers' case process on the group's inputs, writing `torch_out`, where the run
    /// includes it: its measurements, or none with a row saying why (skipped or failed).
    fn run_torch(
        &self,
        group: &CaseGroup,
        torch_cmd: impl Fn() -> Option<Command>,
        torch_out: &Path,
        rows: &mut Vec<BenchRow>,
    ) -> Vec<Measurement> {
        let p = &self.plan;
        if p.torch.is_none() {
            return Vec::new();
        }
        if p.skips.skips("torch", group.seq, group.dtype) {
            rows.push(group.row("torch", CaseOutcome::skipped_by_option()));
            return Vec::new();
        }
        let Some(mut cmd) = torch_cmd() else {
            return Vec::new();
        };
        eprintln!("hsdiff bench: {}: transformers …", group.tag);
        cmd.arg("--inputs").arg(group.inputs);
        cmd.arg("--out").arg(torch_out);
        cmd.args(["--threads", &p.threads.to_string()]);
        cmd.args(["--repeats", &p.repeats.to_string()]);
        cmd.args(["--warmup", &p.warmup.to_string()]);
        match spawn(cmd) {
            Ok(ms) => ms,
            Err(why) => {
                rows.push(group.row("torch", CaseOutcome::Failed { why }));
                Vec::new()
            }
        }
    }

    /// Backend `name`'s case process on the group's inputs, its output compared with
    /// transformers'.
    fn run_backend(
        &self,
        group: &CaseGroup,
        name: &str,
        backend_cmd: impl Fn(&str) -> Command,
        torch: &TorchReference,
    ) -> CaseOutcome {
        let p = &self.plan;
        eprintln!("hsdiff bench: {}: {name} …", group.tag);
        let out = self.work.join(format!("{}.{name}.safetensors", group.tag));
        let mut cmd = backend_cmd(name);
        cmd.arg("--inputs").arg(group.inputs).arg("--out").arg(&out);
        cmd.args(["--repeats", &p.repeats.to_string()]);
        cmd.args(["--warmup", &p.warmup.to_string()]);
        cmd.env("RAYON_NUM_THREADS", p.threads.to_string());
        let outcome = match spawn(cmd).map(|mut ms| ms.pop()) {
            Ok(Some(m)) => {
                let rel = torch.rel_to(&out, &m.output);
                CaseOutcome::measured(m, group.seq, torch.ms, rel)
            }
            Ok(None) => CaseOutcome::Failed {
                why: "the case reported nothing".to_string(),
            },
            Err(why) => CaseOutcome::Failed { why },
        };
        let _ = std::fs::remove_file(&out);
        outcome
    }

    /// The run's results as one document (rendered by `render`), the load taken now.
    pub fn results<'a>(&'a self, rows: &'a [BenchRow], kind: &'a str) -> BenchResults<'a> {
        BenchResults {
            rows,
            kind,
            plan: &self.plan,
            machine: machine_summary(),
            peaks: self.peaks.as_ref(),
            load_after: load_label(),
        }
    }

    /// Removes the work folder when it was made for this run (and is empty by now but for the
    /// built-in script written there).
    pub fn close(self) {
        if self.remove_work {
            if self.plan.torch.as_ref().is_some_and(|t| t.script.is_none()) {
                let _ = std::fs::remove_file(self.work.join("bench_torch.py"));
            }
            let _ = std::fs::remove_dir(&self.work);
        }
    }
}

/// A new folder `hsdiff-bench-PID[-N]` in `base` (made with `create_dir`, so never one that
/// existed).
fn fresh_folder(base: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(base).map_err(|e| {
        Error::file(
            base,
            format!(
                "cannot create the work folder: {}",
                crate::error::io_words(&e)
            ),
        )
    })?;
    let pid = std::process::id();
    for n in 0..1000 {
        let name = match n {
            0 => format!("hsdiff-bench-{pid}"),
            n => format!("hsdiff-bench-{pid}-{n}"),
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Error::file(
                    base,
                    format!(
                        "cannot create the work folder in it: {}",
                        crate::error::io_words(&e)
                    ),
                ));
            }
        }
    }
    Err(Error::file(base, "cannot create a new work folder in it"))
}

/// Writes an inputs file through the atomic writer.
pub fn save_inputs(map: &HashMap<&str, Tensor>, path: &Path) -> Result<()> {
    let list: Vec<(&str, &Tensor)> = map.iter().map(|(n, t)| (*n, t)).collect();
    crate::util::output::write_with(path, |file| {
        crate::weights::safetensors_file::write_tensors(path, file, &list, None)
    })
}

fn load_output(path: &Path, name: &str) -> Result<Tensor> {
    SafetensorsFile::open(path)?.load(name)
}

fn load_label() -> String {
    load_average().unwrap_or_else(|| "unknown".to_string())
}

/// CPU model, core count, the SIMD flags that matter here, and memory.
pub fn machine_summary() -> String {
    let cpu = CpuInfo::read().unwrap_or_default();
    let model = cpu
        .model
        .clone()
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let simd: Vec<&str> = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]
        .into_iter()
        .filter(|f| cpu.has_flag(f))
        .collect();
    let mem = mem_total_kib()
        .map(|kib| format!(", {:.0} GiB RAM", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!(
        "{model}, {} logical CPUs ({}){mem}",
        cpu.logical_cpus,
        simd.join(" ")
    )
}
