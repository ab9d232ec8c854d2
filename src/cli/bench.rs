//! `hsdiff bench`: speed and memory of the linear-attention backends, side by side with
//! transformers' PyTorch fallback, in one run.
//!
//! - `hsdiff bench core`: the gated delta rule (q/k L2 norm + scale inside) through
//!   [`LinearAttentionBackend::gated_delta_rule`] at Qwen3.5-27B's linear-layer geometry, on
//!   identical fresh random inputs; with `--torch PYTHON`, transformers'
//!   `torch_chunk_gated_delta_rule` on the very same inputs (scripts/bench_torch.py).
//! - `hsdiff bench forward --model DIR`: the whole prefill forward pass, per backend and dtype,
//!   and transformers' forward of the same checkpoint (scripts/make_bench_model.py writes one).
//!
//! Every measured case runs in a child process (`hsdiff bench case`, hidden), so that its peak
//! RSS (`VmHWM`) is its own; the random inputs travel to the children and to the PyTorch script
//! as a safetensors file, and the outputs come back the same way for the agreement check
//! (relative L2 against transformers' output). Timings are the median of `--repeats` calls
//! after `--warmup` calls; min and max are shown so that noise is visible.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use clap::{Args, Subcommand};
use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};
use comfy_table::{CellAlignment, Table};
use serde::{Deserialize, Serialize};

use crate::backends::{DeltaInputs, available_backends, backend_by_name};
use crate::capture::names;
use crate::config::LayerType;
use crate::device::{dtype_label, parse_dtype};
use crate::error::{Error, Result};
use crate::model::{Model, RunOptions};
use crate::progress::Progress;
use crate::testdata::SplitMix;

/// Marks the one stdout line of a child (or of scripts/bench_torch.py) that carries a result.
const RESULT_TAG: &str = "HSDIFF_BENCH_RESULT ";

/// The PyTorch results everything else is compared with: transformers' chunked rule (core) and
/// transformers' forward (forward).
const TORCH_REFERENCES: &[&str] = &["torch_chunk", "torch"];

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// The gated delta rule alone, at Qwen3.5-27B's linear-layer geometry.
    Core(CoreArgs),
    /// The whole prefill forward pass of a checkpoint (see scripts/make_bench_model.py).
    Forward(ForwardArgs),
    /// One measurement in this process (what `core` and `forward` run in child processes).
    #[command(hide = true)]
    Case(CaseArgs),
}

/// Options shared by `core` and `forward`.
#[derive(Args, Debug)]
struct CommonArgs {
    /// Backends to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "reference,chunked,fused")]
    backends: Vec<String>,

    /// Compute dtypes, comma-separated (f32, bf16, f16, f64).
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
    dtypes: Vec<String>,

    /// Timed calls per case (the median is reported).
    #[arg(long)]
    repeats: Option<usize>,

    /// Untimed calls before the timed ones.
    #[arg(long, default_value_t = 1)]
    warmup: usize,

    /// Threads for hsdiff (RAYON_NUM_THREADS of each child) and for torch (set_num_threads).
    /// Default: all available cores.
    #[arg(long)]
    threads: Option<usize>,

    /// Skip cases: NAME[@QUALIFIER…] where NAME is a backend or `torch` and each qualifier a
    /// sequence length or a dtype, e.g. `reference@8192`, `torch@bf16`, `chunked`. Repeatable.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,

    /// Also run transformers with this Python (which has torch + transformers, e.g.
    /// /work/venv-golden/bin/python).
    #[arg(long, value_name = "PYTHON")]
    torch: Option<PathBuf>,

    /// The PyTorch side.
    #[arg(long, value_name = "FILE", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench_torch.py"))]
    torch_script: PathBuf,

    /// Seed of the random inputs.
    #[arg(long, default_value_t = 20240917)]
    seed: u64,

    /// Folder for the input and output files (default: a fresh folder in the temp dir, removed
    /// afterwards unless --keep).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,

    /// Keep the input and output files.
    #[arg(long)]
    keep: bool,

    /// Print the table as Markdown.
    #[arg(long)]
    markdown: bool,

    /// Also write every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CoreArgs {
    /// Sequence lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "512,2048,8192")]
    lengths: Vec<usize>,

    /// Key heads (Qwen3.5-27B: 16).
    #[arg(long, default_value_t = 16)]
    key_heads: usize,

    /// Value heads (Qwen3.5-27B: 48).
    #[arg(long, default_value_t = 48)]
    value_heads: usize,

    /// Key and value head dim (Qwen3.5-27B: 128).
    #[arg(long, default_value_t = 128)]
    head_dim: usize,

    /// Also time transformers' `torch_recurrent_gated_delta_rule` (slow: one Python step per
    /// token).
    #[arg(long)]
    torch_recurrent: bool,

    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
struct ForwardArgs {
    /// Checkpoint folder (config.json + safetensors), e.g. written by
    /// scripts/make_bench_model.py.
    #[arg(long, value_name = "DIR")]
    model: PathBuf,

    /// Prompt length in tokens (random token ids).
    #[arg(long, default_value_t = 512)]
    seq: usize,

    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
struct CaseArgs {
    /// `core` or `forward`.
    #[arg(long)]
    kind: String,
    #[arg(long)]
    backend: String,
    /// The inputs file (core: q, k, v, g, beta; forward: input_ids).
    #[arg(long)]
    inputs: PathBuf,
    /// Where to write the output (core: `out`; forward: `logits`).
    #[arg(long)]
    out: PathBuf,
    /// Forward only: checkpoint folder.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Forward only: compute dtype.
    #[arg(long, default_value = "f32")]
    dtype: String,
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    #[arg(long, default_value_t = 1)]
    warmup: usize,
}

/// What one measured case reports (a child of hsdiff, or scripts/bench_torch.py).
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Measurement {
    /// Row label: a backend name, or `torch_chunk` / `torch_recurrent` / `torch`.
    name: String,
    /// What ran, e.g. `fused/cpu-rayon-2t-avx512` or `transformers 5.24.0 torch_chunk_gated_delta_rule`.
    implementation: String,
    times_ms: Vec<f64>,
    /// Resident set size after loading the inputs (and model, for torch forward), before the
    /// first call.
    rss_before_kib: Option<u64>,
    /// Peak resident set size of the process (`VmHWM`).
    peak_rss_kib: Option<u64>,
    /// Name of the output tensor in the output file.
    output: String,
    /// Threads the measurement ran with, as the process saw them.
    threads: Option<usize>,
}

impl Measurement {
    fn median_ms(&self) -> f64 {
        median(&self.times_ms)
    }
}

#[derive(Serialize, Debug)]
#[serde(tag = "status", rename_all = "lowercase")]
enum Outcome {
    Measured {
        #[serde(flatten)]
        m: Measurement,
        median_ms: f64,
        tokens_per_s: f64,
        /// transformers' median time / this one (> 1: faster than transformers).
        speedup_vs_torch: Option<f64>,
        rel_l2_vs_torch: Option<f64>,
    },
    Skipped {
        why: String,
    },
    Failed {
        why: String,
    },
}

#[derive(Serialize, Debug)]
struct Row {
    seq: usize,
    dtype: String,
    name: String,
    #[serde(flatten)]
    outcome: Outcome,
}

pub fn run(args: &BenchArgs) -> Result<i32> {
    match &args.what {
        BenchCommand::Core(a) => run_core(a),
        BenchCommand::Forward(a) => run_forward(a),
        BenchCommand::Case(a) => run_case(a),
    }
}

// ------------------------------------------------------------------------------------------------
// Parent: `bench core`
// ------------------------------------------------------------------------------------------------

fn run_core(args: &CoreArgs) -> Result<i32> {
    let c = &args.common;
    let plan = Plan::new(c, 3)?;
    if args.key_heads == 0
        || args.head_dim == 0
        || !args.value_heads.is_multiple_of(args.key_heads.max(1))
    {
        return Err(Error::argument(
            "--value-heads",
            format!(
                "{} value heads is not a positive multiple of {} key heads (head dim {})",
                args.value_heads, args.key_heads, args.head_dim
            ),
        ));
    }
    if args.lengths.contains(&0) {
        return Err(Error::argument(
            "--lengths",
            "sequence lengths must be positive",
        ));
    }
    plan.print_header(&format!(
        "GDN core (gated delta rule, q/k L2 norm inside): B 1, Hk {}, Hv {}, dk = dv = {}, \
         g = -exp(A_log)·softplus(a + dt_bias) with A_log ~ log U(0.05, 2), dt_bias ~ U(-3, 0.5), \
         a ~ N(0, 1); beta = sigmoid(N(0, 1)); q, k, v = SiLU(N(0, 1))",
        args.key_heads, args.value_heads, args.head_dim
    ));
    let mut rows = Vec::new();
    for &dtype in &plan.dtypes {
        for &t in &args.lengths {
            let tag = format!("core-t{t}-{}", dtype_label(dtype));
            let inputs = plan.work.join(format!("{tag}.inputs.safetensors"));
            write_core_inputs(&inputs, args, t, dtype, plan.seed)?;
            let case_rows = plan.run_case_group(
                t,
                dtype,
                &tag,
                &inputs,
                |name, out| {
                    let mut cmd = Command::new(&plan.exe);
                    cmd.args(["bench", "case", "--kind", "core", "--backend", name]);
                    cmd.arg("--inputs").arg(&inputs).arg("--out").arg(out);
                    cmd
                },
                |out| {
                    let python = plan.torch.as_ref()?;
                    let mut cmd = Command::new(python);
                    cmd.arg(&c.torch_script).arg("core");
                    cmd.arg("--inputs").arg(&inputs).arg("--out").arg(out);
                    if args.torch_recurrent && !plan.skipped("torch_recurrent", t, dtype) {
                        cmd.arg("--recurrent");
                    }
                    Some(cmd)
                },
            );
            if !c.keep {
                let _ = std::fs::remove_file(&inputs);
            }
            rows.extend(case_rows);
        }
    }
    plan.finish(&rows, "core")
}

fn write_core_inputs(
    path: &Path,
    args: &CoreArgs,
    t: usize,
    dtype: DType,
    seed: u64,
) -> Result<()> {
    let (hk, hv, d) = (args.key_heads, args.value_heads, args.head_dim);
    // One stream per tensor, keyed by what it is, so that T and dtype do not shift the others.
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let mut rng = SplitMix::new(seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut normal_silu =
        |n: usize| -> Vec<f32> { (0..n).map(|_| silu(rng.normal()) as f32).collect() };
    let q = normal_silu(t * hk * d);
    let k = normal_silu(t * hk * d);
    let v = normal_silu(t * hv * d);
    let mut rng = SplitMix::new(seed.wrapping_add(1));
    let a_log: Vec<f64> = (0..hv)
        .map(|_| (0.05 + 1.95 * rng.uniform()).ln())
        .collect();
    let dt_bias: Vec<f64> = (0..hv).map(|_| -3.0 + 3.5 * rng.uniform()).collect();
    let mut rng = SplitMix::new(seed.wrapping_add(2) ^ (t as u64).rotate_left(17));
    let softplus = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
    let mut g = Vec::with_capacity(t * hv);
    let mut beta = Vec::with_capacity(t * hv);
    for _ in 0..t {
        for h in 0..hv {
            let a = rng.normal();
            g.push((-a_log[h].exp() * softplus(a + dt_bias[h])) as f32);
            beta.push((1.0 / (1.0 + (-rng.normal()).exp())) as f32);
        }
    }
    let cpu = Device::Cpu;
    let mut map = HashMap::new();
    map.insert(
        "q".to_string(),
        Tensor::from_vec(q, (1, t, hk, d), &cpu)?.to_dtype(dtype)?,
    );
    map.insert(
        "k".to_string(),
        Tensor::from_vec(k, (1, t, hk, d), &cpu)?.to_dtype(dtype)?,
    );
    map.insert(
        "v".to_string(),
        Tensor::from_vec(v, (1, t, hv, d), &cpu)?.to_dtype(dtype)?,
    );
    // g stays at the accumulation precision, as the model hands it to the backends.
    map.insert(
        "g".to_string(),
        Tensor::from_vec(g, (1, t, hv), &cpu)?
            .to_dtype(crate::backends::accumulation_dtype(dtype))?,
    );
    map.insert(
        "beta".to_string(),
        Tensor::from_vec(beta, (1, t, hv), &cpu)?.to_dtype(dtype)?,
    );
    candle_core::safetensors::save(&map, path)
        .map_err(|e| Error::file(path, format!("cannot write inputs: {e}")))
}

// ------------------------------------------------------------------------------------------------
// Parent: `bench forward`
// ------------------------------------------------------------------------------------------------

fn run_forward(args: &ForwardArgs) -> Result<i32> {
    let c = &args.common;
    let plan = Plan::new(c, 2)?;
    let model = Model::load(&args.model)?;
    let cfg = &model.config;
    if args.seq == 0 {
        return Err(Error::argument("--seq", "must be positive"));
    }
    let linear = cfg
        .layer_types
        .iter()
        .map(|t| match t {
            LayerType::LinearAttention => "linear",
            LayerType::FullAttention => "full",
        })
        .collect::<Vec<_>>()
        .join(", ");
    plan.print_header(&format!(
        "whole prefill forward: {} ({} layers: {linear}; hidden {}, vocab {}), B 1, T {} random \
         token ids; hsdiff reads each layer's weights from the checkpoint (bf16 on disk → compute \
         dtype) inside the forward pass, transformers holds them in memory",
        args.model.display(),
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.vocab_size,
        args.seq
    ));
    let vocab = cfg.vocab_size;
    drop(model);
    let ids_path = plan.work.join("forward.ids.safetensors");
    let mut rng = SplitMix::new(plan.seed);
    let ids: Vec<i64> = (0..args.seq)
        .map(|_| (rng.next_u64() % vocab as u64) as i64)
        .collect();
    let ids_t = Tensor::from_vec(ids, (1, args.seq), &Device::Cpu)?;
    candle_core::safetensors::save(
        &HashMap::from([("input_ids".to_string(), ids_t)]),
        &ids_path,
    )
    .map_err(|e| Error::file(&ids_path, format!("cannot write inputs: {e}")))?;
    let mut rows = Vec::new();
    for &dtype in &plan.dtypes {
        let tag = format!("forward-t{}-{}", args.seq, dtype_label(dtype));
        let case_rows = plan.run_case_group(
            args.seq,
            dtype,
            &tag,
            &ids_path,
            |name, out| {
                let mut cmd = Command::new(&plan.exe);
                cmd.args(["bench", "case", "--kind", "forward", "--backend", name]);
                cmd.args(["--dtype", dtype_label(dtype)]);
                cmd.arg("--model").arg(&args.model);
                cmd.arg("--inputs").arg(&ids_path).arg("--out").arg(out);
                cmd
            },
            |out| {
                let python = plan.torch.as_ref()?;
                let mut cmd = Command::new(python);
                cmd.arg(&c.torch_script).arg("forward");
                cmd.arg("--model").arg(&args.model);
                cmd.args(["--dtype", dtype_label(dtype)]);
                cmd.arg("--inputs").arg(&ids_path).arg("--out").arg(out);
                Some(cmd)
            },
        );
        rows.extend(case_rows);
    }
    if !c.keep {
        let _ = std::fs::remove_file(&ids_path);
    }
    plan.finish(&rows, "forward")
}

// ------------------------------------------------------------------------------------------------
// What both parents share
// ------------------------------------------------------------------------------------------------

struct Plan<'a> {
    common: &'a CommonArgs,
    exe: PathBuf,
    torch: Option<PathBuf>,
    dtypes: Vec<DType>,
    threads: usize,
    repeats: usize,
    seed: u64,
    work: PathBuf,
    remove_work: bool,
    skips: Vec<Vec<String>>,
}

impl<'a> Plan<'a> {
    fn new(common: &'a CommonArgs, default_repeats: usize) -> Result<Self> {
        let known: Vec<&str> = available_backends().iter().map(|b| b.name).collect();
        for b in &common.backends {
            if !known.contains(&b.as_str()) {
                return Err(Error::backend(
                    b.as_str(),
                    format!("unknown backend (known: {})", known.join(", ")),
                ));
            }
        }
        let dtypes = common
            .dtypes
            .iter()
            .map(|d| parse_dtype(d))
            .collect::<Result<Vec<_>>>()?;
        let threads = match common.threads {
            Some(0) => return Err(Error::argument("--threads", "must be positive")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let repeats = common.repeats.unwrap_or(default_repeats);
        if repeats == 0 {
            return Err(Error::argument("--repeats", "must be positive"));
        }
        if let Some(python) = &common.torch
            && !common.torch_script.is_file()
        {
            return Err(Error::file(
                &common.torch_script,
                format!(
                    "the PyTorch side of --torch {} is missing (see --torch-script)",
                    python.display()
                ),
            ));
        }
        let exe = std::env::current_exe().map_err(|e| Error::Process {
            program: "hsdiff".into(),
            msg: format!("cannot find its own executable for the bench cases: {e}"),
        })?;
        let (work, remove_work) = match &common.work_dir {
            Some(dir) => (dir.clone(), false),
            None => (
                std::env::temp_dir().join(format!("hsdiff-bench-{}", std::process::id())),
                !common.keep,
            ),
        };
        std::fs::create_dir_all(&work)
            .map_err(|e| Error::file(&work, format!("cannot create the work folder: {e}")))?;
        let skips = common
            .skip
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.split('@').map(str::to_string).collect())
            .collect();
        Ok(Plan {
            common,
            exe,
            torch: common.torch.clone(),
            dtypes,
            threads,
            repeats,
            seed: common.seed,
            work,
            remove_work,
            skips,
        })
    }

    /// Whether `--skip` names this case: its name, and every qualifier matches.
    fn skipped(&self, name: &str, seq: usize, dtype: DType) -> bool {
        self.skips.iter().any(|spec| {
            spec.first().is_some_and(|n| n == name)
                && spec[1..].iter().all(|q| {
                    q.parse::<usize>()
                        .map_or_else(|_| parse_dtype(q).is_ok_and(|d| d == dtype), |n| n == seq)
                })
        })
    }

    fn print_header(&self, what: &str) {
        println!("hsdiff bench: {what}");
        println!(
            "machine: {}; hsdiff threads {} (RAYON_NUM_THREADS of each case), torch threads {}",
            machine_summary(),
            self.threads,
            self.threads
        );
        println!(
            "timing: median of {} calls after {} warm-up call(s), each case in its own process \
             (peak RSS = its VmHWM; Δ = peak − RSS after loading its inputs)",
            self.repeats, self.common.warmup
        );
        println!("load before the run: {}", load_average());
        if cfg!(debug_assertions) {
            println!("warning: this hsdiff is a debug build; build with --release to benchmark");
        }
        if self.torch.is_none() {
            println!("transformers: not run (pass --torch PYTHON to run scripts/bench_torch.py)");
        }
        if !self.common.skip.is_empty() {
            println!("skipped by --skip: {}", self.common.skip.join(", "));
        }
        println!();
    }

    /// Runs transformers (when asked) then every backend on one inputs file, and compares each
    /// output with transformers'.
    fn run_case_group(
        &self,
        seq: usize,
        dtype: DType,
        tag: &str,
        _inputs: &Path,
        backend_cmd: impl Fn(&str, &Path) -> Command,
        torch_cmd: impl Fn(&Path) -> Option<Command>,
    ) -> Vec<Row> {
        let mut rows = Vec::new();
        let row = |name: &str, outcome: Outcome| Row {
            seq,
            dtype: dtype_label(dtype).to_string(),
            name: name.to_string(),
            outcome,
        };
        let torch_out = self.work.join(format!("{tag}.torch.safetensors"));
        let mut torch_results: Vec<Measurement> = Vec::new();
        if self.torch.is_some() {
            if self.skipped("torch", seq, dtype) {
                rows.push(row(
                    "torch",
                    Outcome::Skipped {
                        why: "--skip".to_string(),
                    },
                ));
            } else if let Some(mut cmd) = torch_cmd(&torch_out) {
                eprintln!("hsdiff bench: {tag}: transformers …");
                cmd.args(["--threads", &self.threads.to_string()]);
                cmd.args(["--repeats", &self.repeats.to_string()]);
                cmd.args(["--warmup", &self.common.warmup.to_string()]);
                match self.spawn(cmd) {
                    Ok(ms) => torch_results = ms,
                    Err(why) => rows.push(row("torch", Outcome::Failed { why })),
                }
            }
        }
        // The chunked torch result is what everything is compared with.
        let torch_ref = torch_results
            .iter()
            .find(|m| TORCH_REFERENCES.contains(&m.name.as_str()));
        let torch_ms = torch_ref.map(Measurement::median_ms);
        let torch_tensor = torch_ref.and_then(|m| load_output(&torch_out, &m.output).ok());
        for m in &torch_results {
            let rel = torch_tensor.as_ref().and_then(|r| {
                load_output(&torch_out, &m.output)
                    .ok()
                    .and_then(|t| rel_l2(&t, r).ok())
            });
            rows.push(row(
                &m.name.clone(),
                measured(m.clone(), seq, torch_ms, rel),
            ));
        }
        for name in &self.common.backends {
            if self.skipped(name, seq, dtype) {
                rows.push(row(
                    name,
                    Outcome::Skipped {
                        why: "--skip".to_string(),
                    },
                ));
                continue;
            }
            eprintln!("hsdiff bench: {tag}: {name} …");
            let out = self.work.join(format!("{tag}.{name}.safetensors"));
            let mut cmd = backend_cmd(name, &out);
            cmd.args(["--repeats", &self.repeats.to_string()]);
            cmd.args(["--warmup", &self.common.warmup.to_string()]);
            cmd.env("RAYON_NUM_THREADS", self.threads.to_string());
            let outcome = match self.spawn(cmd).map(|mut ms| ms.pop()) {
                Ok(Some(m)) => {
                    let rel = match (&torch_tensor, load_output(&out, &m.output)) {
                        (Some(r), Ok(t)) => rel_l2(&t, r).ok(),
                        _ => None,
                    };
                    measured(m, seq, torch_ms, rel)
                }
                Ok(None) => Outcome::Failed {
                    why: "the case reported nothing".to_string(),
                },
                Err(why) => Outcome::Failed { why },
            };
            let _ = std::fs::remove_file(&out);
            rows.push(row(name, outcome));
        }
        let _ = std::fs::remove_file(&torch_out);
        rows
    }

    /// Runs a case process and collects its result lines; stderr passes through.
    fn spawn(&self, mut cmd: Command) -> std::result::Result<Vec<Measurement>, String> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
        let mut results = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                match line.strip_prefix(RESULT_TAG) {
                    Some(json) => match serde_json::from_str::<Measurement>(json) {
                        Ok(m) => results.push(m),
                        Err(e) => return Err(format!("unreadable result line ({e}): {json}")),
                    },
                    None => eprintln!("  | {line}"),
                }
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("waiting for the case: {e}"))?;
        if !status.success() {
            return Err(format!(
                "the case process failed ({status}); see its stderr above"
            ));
        }
        Ok(results)
    }

    fn finish(&self, rows: &[Row], kind: &str) -> Result<i32> {
        println!("{}", self.render(rows));
        println!("load after the run: {}", load_average());
        let skipped = rows
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Skipped { .. }))
            .count();
        if skipped > 0 {
            println!("{skipped} case(s) skipped by --skip (shown as `skipped`).");
        }
        if let Some(path) = &self.common.json {
            let doc = serde_json::json!({
                "kind": kind,
                "machine": machine_summary(),
                "threads": self.threads,
                "repeats": self.repeats,
                "warmup": self.common.warmup,
                "seed": self.seed,
                "load_after": load_average(),
                "rows": rows,
            });
            let text = serde_json::to_string_pretty(&doc)
                .map_err(|e| Error::Internal(format!("cannot serialise the results: {e}")))?;
            std::fs::write(path, text + "\n")
                .map_err(|e| Error::file(path, format!("cannot write: {e}")))?;
        }
        if self.remove_work {
            let _ = std::fs::remove_dir(&self.work);
        }
        let failed = rows
            .iter()
            .any(|r| matches!(r.outcome, Outcome::Failed { .. }));
        Ok(if failed { 2 } else { 0 })
    }

    fn render(&self, rows: &[Row]) -> String {
        let mut table = Table::new();
        table.load_preset(if self.common.markdown {
            ASCII_MARKDOWN
        } else {
            UTF8_FULL_CONDENSED
        });
        table.set_header(vec![
            "T",
            "dtype",
            "implementation",
            "ms/call (median)",
            "min–max ms",
            "tokens/s",
            "× transformers",
            "peak RSS MiB",
            "Δ RSS MiB",
            "rel L2 vs transformers",
        ]);
        for r in rows {
            let mut cells = vec![r.seq.to_string(), r.dtype.clone()];
            match &r.outcome {
                Outcome::Measured {
                    m,
                    median_ms,
                    tokens_per_s,
                    speedup_vs_torch,
                    rel_l2_vs_torch,
                } => {
                    let (lo, hi) = min_max(&m.times_ms);
                    cells.push(m.implementation.clone());
                    cells.push(fmt_ms(*median_ms));
                    cells.push(format!("{}–{}", fmt_ms(lo), fmt_ms(hi)));
                    cells.push(format!("{tokens_per_s:.0}"));
                    cells.push(speedup_vs_torch.map_or("—".to_string(), |s| format!("{s:.2}×")));
                    cells.push(
                        m.peak_rss_kib
                            .map_or("—".to_string(), |k| format!("{:.0}", k as f64 / 1024.0)),
                    );
                    cells.push(match (m.peak_rss_kib, m.rss_before_kib) {
                        (Some(p), Some(b)) => format!("{:.0}", p.saturating_sub(b) as f64 / 1024.0),
                        _ => "—".to_string(),
                    });
                    cells.push(if TORCH_REFERENCES.contains(&m.name.as_str()) {
                        "(reference)".to_string()
                    } else {
                        rel_l2_vs_torch.map_or("—".to_string(), |x| format!("{x:.2e}"))
                    });
                }
                Outcome::Skipped { why } => {
                    cells.push(format!("{}: skipped ({why})", r.name));
                    cells.extend(std::iter::repeat_n(String::new(), 7));
                }
                Outcome::Failed { why } => {
                    cells.push(format!("{}: FAILED: {why}", r.name));
                    cells.extend(std::iter::repeat_n(String::new(), 7));
                }
            }
            table.add_row(cells);
        }
        for i in [0, 3, 4, 5, 6, 7, 8, 9] {
            if let Some(col) = table.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        table.to_string()
    }
}

fn measured(m: Measurement, seq: usize, torch_ms: Option<f64>, rel: Option<f64>) -> Outcome {
    let median_ms = m.median_ms();
    Outcome::Measured {
        median_ms,
        tokens_per_s: seq as f64 / (median_ms / 1e3),
        speedup_vs_torch: torch_ms.map(|t| t / median_ms),
        rel_l2_vs_torch: rel,
        m,
    }
}

fn load_output(path: &Path, name: &str) -> Result<Tensor> {
    let mut map = candle_core::safetensors::load(path, &Device::Cpu)
        .map_err(|e| Error::file(path, format!("cannot read output: {e}")))?;
    map.remove(name)
        .ok_or_else(|| Error::tensor(path, name, "missing from the output file"))
}

/// ‖a − b‖ / ‖b‖ in f64.
fn rel_l2(a: &Tensor, b: &Tensor) -> Result<f64> {
    let a = a.to_dtype(DType::F64)?.flatten_all()?;
    let b = b.to_dtype(DType::F64)?.flatten_all()?;
    let num = (&a - &b)?.sqr()?.sum_all()?.to_scalar::<f64>()?;
    let den = b.sqr()?.sum_all()?.to_scalar::<f64>()?;
    Ok((num / den).sqrt())
}

/// Milliseconds with about three significant digits.
fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// /proc/loadavg's 1, 5 and 15 minute load averages (other work on the machine skews timings).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_string())
}

/// CPU model, core count and the SIMD flags that matter here, from /proc/cpuinfo.
fn machine_summary() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let model = field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let flags = field("flags").unwrap_or_default();
    let simd: Vec<&str> = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]
        .into_iter()
        .filter(|f| flags.split_whitespace().any(|x| x == *f))
        .collect();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|kib| format!(", {:.0} GiB RAM", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("{model}, {cpus} logical CPUs ({}){mem}", simd.join(" "))
}

// ------------------------------------------------------------------------------------------------
// Child: `bench case`
// ------------------------------------------------------------------------------------------------

fn run_case(args: &CaseArgs) -> Result<i32> {
    if args.repeats == 0 {
        return Err(Error::argument("--repeats", "must be positive"));
    }
    let cpu = Device::Cpu;
    let backend = backend_by_name(&args.backend, &cpu)?;
    let implementation = backend.implementation(&cpu);
    let (times_ms, rss_before_kib, output, out) = match args.kind.as_str() {
        "core" => {
            let mut map = candle_core::safetensors::load(&args.inputs, &cpu)
                .map_err(|e| Error::file(&args.inputs, format!("cannot read inputs: {e}")))?;
            let mut take = |name: &str| {
                map.remove(name)
                    .ok_or_else(|| Error::tensor(&args.inputs, name, "missing"))
            };
            let (q, k, v, g, beta) = (
                take("q")?,
                take("k")?,
                take("v")?,
                take("g")?,
                take("beta")?,
            );
            let rss_before = proc_status_kib("VmRSS");
            let mut times = Vec::with_capacity(args.repeats);
            let mut last = None;
            for i in 0..args.warmup + args.repeats {
                let start = Instant::now();
                let x = DeltaInputs {
                    q: &q,
                    k: &k,
                    v: &v,
                    g: &g,
                    beta: &beta,
                };
                let (out, _state) = backend.gated_delta_rule(x, None)?;
                let ms = start.elapsed().as_secs_f64() * 1e3;
                if i >= args.warmup {
                    times.push(ms);
                }
                last = Some(out);
            }
            (times, rss_before, "out", last)
        }
        "forward" => {
            let dir = args.model.as_ref().ok_or_else(|| {
                Error::argument("--model", "bench case --kind forward needs --model")
            })?;
            let dtype = parse_dtype(&args.dtype)?;
            let model = Model::load(dir)?;
            let map = candle_core::safetensors::load(&args.inputs, &cpu)
                .map_err(|e| Error::file(&args.inputs, format!("cannot read inputs: {e}")))?;
            let ids = map
                .get("input_ids")
                .ok_or_else(|| Error::tensor(&args.inputs, "input_ids", "missing"))?
                .flatten_all()?
                .to_vec1::<i64>()?;
            let ids = ids
                .iter()
                .map(|&i| u32::try_from(i))
                .collect::<std::result::Result<Vec<u32>, _>>()
                .map_err(|_| Error::tensor(&args.inputs, "input_ids", "ids out of u32 range"))?;
            let opts = RunOptions {
                dtype,
                device: cpu.clone(),
                backend: backend.as_ref(),
                capture_ops: false,
                feed: None,
            };
            let rss_before = proc_status_kib("VmRSS");
            let mut times = Vec::with_capacity(args.repeats);
            let mut last = None;
            for i in 0..args.warmup + args.repeats {
                let start = Instant::now();
                let caps = model.run(&ids, &opts, &Progress::hidden())?;
                let ms = start.elapsed().as_secs_f64() * 1e3;
                if i >= args.warmup {
                    times.push(ms);
                }
                last = caps.get(names::LOGITS).cloned();
            }
            (times, rss_before, "logits", last)
        }
        other => {
            return Err(Error::argument(
                "--kind",
                format!("unknown case kind `{other}` (core, forward)"),
            ));
        }
    };
    if let Some(out) = out {
        candle_core::safetensors::save(&HashMap::from([(output.to_string(), out)]), &args.out)
            .map_err(|e| Error::file(&args.out, format!("cannot write output: {e}")))?;
    }
    let m = Measurement {
        name: args.backend.clone(),
        implementation,
        times_ms,
        rss_before_kib,
        peak_rss_kib: proc_status_kib("VmHWM"),
        output: output.to_string(),
        threads: Some(candle_core::utils::get_num_threads()),
    };
    let json = serde_json::to_string(&m)
        .map_err(|e| Error::Internal(format!("cannot serialise the result: {e}")))?;
    println!("{RESULT_TAG}{json}");
    Ok(0)
}

/// A `kB` field of /proc/self/status (Linux), e.g. `VmRSS`, `VmHWM`.
fn proc_status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}
