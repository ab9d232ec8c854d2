//! `hsdiff bench`: the options of `bench core`, `bench forward` and the hidden `bench case`, and
//! their wiring to the library (`crate::bench`, which documents what is measured and how).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::bench::case::{CaseKind, CaseRequest, run_case};
use crate::bench::delta_rule::CoreGeometry;
use crate::bench::forward::ForwardBench;
use crate::bench::gemm::{GemmBench, shapes_named};
use crate::bench::plan::{Plan, PlanRequest};
use crate::bench::protocol::result_line;
use crate::bench::results::{BenchRow, exit_code};
use crate::bench::runner::Bench;
use crate::device::parse_dtype;
use crate::error::Result;
use crate::output::{reserve_all, write_bytes};

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
    /// The linear layers' products alone at Qwen3.5-27B's shapes (hsdiff's, candle's) as GFLOP/s
    /// and as a fraction of the measured FMA peak, on RAYON_NUM_THREADS threads (default: all).
    Gemm(GemmArgs),
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

    /// Skip cases: NAME[@QUALIFIER…] where NAME is a backend, `torch` or `torch_recurrent` and
    /// each qualifier a sequence length or a dtype, e.g. `reference@8192`, `torch@bf16`,
    /// `chunked`. Repeatable.
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

    /// Folder in which the run makes its own folder (hsdiff-bench-PID) for the input and
    /// output files, removed afterwards unless --keep (default: the temp dir).
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
struct GemmArgs {
    /// Rows of the input (prompt tokens).
    #[arg(long, default_value_t = 512)]
    seq: usize,

    /// Compute dtypes, comma-separated (f32, f64, bf16).
    #[arg(long, value_delimiter = ',', default_value = "f32,f64")]
    dtypes: Vec<String>,

    /// Products to measure, comma-separated (default: all; an unknown name lists them).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,

    /// Multiply only the first N output columns of each weight (same work per column).
    #[arg(long, value_name = "N")]
    columns: Option<usize>,

    /// Timed calls per product (the median is reported, and the best).
    #[arg(long, default_value_t = 3)]
    repeats: usize,

    /// Print the table as Markdown.
    #[arg(long)]
    markdown: bool,

    /// Also write every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
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

pub fn run(args: &BenchArgs) -> Result<i32> {
    match &args.what {
        BenchCommand::Core(a) => run_core(a),
        BenchCommand::Forward(a) => run_forward(a),
        BenchCommand::Gemm(a) => run_gemm(a),
        BenchCommand::Case(a) => run_case_args(a),
    }
}

fn run_core(args: &CoreArgs) -> Result<i32> {
    let plan = plan(&args.common, 3, &[])?;
    let geometry = CoreGeometry {
        lengths: args.lengths.clone(),
        key_heads: args.key_heads,
        value_heads: args.value_heads,
        head_dim: args.head_dim,
        torch_recurrent: args.torch_recurrent,
    };
    geometry.check()?;
    let bench = Bench::prepare(plan)?;
    print!("{}", bench.header(&geometry.describe()));
    let rows = geometry.run(&bench)?;
    finish(bench, &rows, "core", &args.common)
}

fn run_forward(args: &ForwardArgs) -> Result<i32> {
    let plan = plan(&args.common, 2, &[&args.model])?;
    let forward = ForwardBench::new(&args.model, args.seq)?;
    let bench = Bench::prepare(plan)?;
    print!("{}", bench.header(forward.describe()));
    let rows = forward.run(&bench)?;
    finish(bench, &rows, "forward", &args.common)
}

fn run_gemm(args: &GemmArgs) -> Result<i32> {
    let gemm = GemmBench {
        seq: args.seq,
        shapes: shapes_named(&args.shapes)?,
        columns: args.columns,
        dtypes: args
            .dtypes
            .iter()
            .map(|d| parse_dtype(d))
            .collect::<Result<_>>()?,
        repeats: args.repeats,
        warmup: 1,
        seed: 20240917,
    };
    gemm.check()?;
    if let Some(path) = &args.json {
        // Reserved before any product runs, by the one output policy.
        reserve_all(&[(path, "--json")], &[])?;
    }
    gemm.run_and_print(args.markdown, args.json.as_deref())?;
    Ok(0)
}

/// The checked plan of `core` or `forward` (`default_repeats` without `--repeats`); `--json`
/// is checked and reserved here too, before any case runs: it is none of `inputs` (the model
/// folder), the torch script or the work folder's files.
fn plan(c: &CommonArgs, default_repeats: usize, inputs: &[&Path]) -> Result<Plan> {
    let plan = Plan::new(PlanRequest {
        backends: c.backends.clone(),
        dtypes: c.dtypes.clone(),
        repeats: c.repeats,
        default_repeats,
        warmup: c.warmup,
        threads: c.threads,
        skip: c.skip.clone(),
        torch: c.torch.clone(),
        torch_script: c.torch_script.clone(),
        seed: c.seed,
        work_dir: c.work_dir.clone(),
        keep: c.keep,
    })?;
    if let Some(path) = &c.json {
        let mut read: Vec<&Path> = inputs.to_vec();
        read.push(&c.torch_script);
        read.extend(c.torch.as_deref());
        read.extend(c.work_dir.as_deref());
        reserve_all(&[(path, "--json")], &read)?;
    }
    Ok(plan)
}

fn finish(bench: Bench, rows: &[BenchRow], kind: &str, c: &CommonArgs) -> Result<i32> {
    print!("{}", bench.summary(rows, c.markdown));
    if let Some(path) = &c.json {
        write_bytes(path, &bench.json(rows, kind)?)?;
    }
    bench.close();
    Ok(exit_code(rows))
}

fn run_case_args(args: &CaseArgs) -> Result<i32> {
    let m = run_case(&CaseRequest {
        kind: CaseKind::parse(&args.kind)?,
        backend: args.backend.clone(),
        inputs: args.inputs.clone(),
        out: args.out.clone(),
        model: args.model.clone(),
        dtype: parse_dtype(&args.dtype)?,
        repeats: args.repeats,
        warmup: args.warmup,
    })?;
    println!("{}", result_line(&m)?);
    Ok(0)
}
