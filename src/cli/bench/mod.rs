//! `hsdiff bench`: the options of `bench core`, `bench forward` and the hidden `bench case`, and
//! their wiring to the library (`crate::commands::bench`, which documents what is measured and how).

use std::path::Path;

use clap::{Args, Subcommand};

mod args;
mod case;
mod gemm;
mod geometry;
mod plan;
mod skip;

use args::{CommonArgs, CoreArgs, ForwardArgs};
use case::{CaseArgs, GemmArgs, run_case_args};

use crate::commands::bench::delta_rule::CoreGeometry;
use crate::commands::bench::forward::ForwardBench;
use crate::commands::bench::gemm::{GemmJson, GemmTable};
use crate::commands::bench::plan::Plan;
use crate::commands::bench::render::renderer;
use crate::commands::bench::results::{BenchRow, exit_code};
use crate::commands::bench::runner::Bench;
use crate::error::Result;
use crate::printer::emit::write_stdout;
use crate::printer::{Format, Json, Render};
use crate::util::output::{reserve_all, write_bytes};

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

pub fn run(args: &BenchArgs) -> Result<i32> {
    match &args.what {
        BenchCommand::Core(a) => run_core(a),
        BenchCommand::Forward(a) => run_forward(a),
        BenchCommand::Gemm(a) => run_gemm(a),
        BenchCommand::Case(a) => run_case_args(a),
    }
}

fn run_core(args: &CoreArgs) -> Result<i32> {
    let plan = reserved_plan(&args.common, 3, &[])?;
    let geometry = CoreGeometry {
        lengths: args.lengths.clone(),
        key_heads: args.key_heads,
        value_heads: args.value_heads,
        head_dim: args.head_dim,
        torch_recurrent: args.torch_recurrent,
    };
    geometry::check_geometry(&geometry)?;
    let bench = Bench::prepare(plan)?;
    print!("{}", bench.header(&geometry.describe()));
    let rows = geometry.run(&bench)?;
    finish(bench, &rows, "core", &args.common)
}

fn run_forward(args: &ForwardArgs) -> Result<i32> {
    let plan = reserved_plan(&args.common, 2, &[&args.model])?;
    geometry::check_forward_seq(args.seq)?;
    let forward = ForwardBench::new(&args.model, args.seq)?;
    let bench = Bench::prepare(plan)?;
    print!("{}", bench.header(forward.describe()));
    let rows = forward.run(&bench)?;
    finish(bench, &rows, "forward", &args.common)
}

fn run_gemm(args: &GemmArgs) -> Result<i32> {
    let gemm = gemm::checked_gemm(args)?;
    if let Some(path) = &args.json {
        // Reserved before any product runs, by the one output policy.
        reserve_all(&[(path, "--json")], &[])?;
    }
    let results = gemm.run_and_report()?;
    let table = GemmTable {
        markdown: args.markdown,
    };
    write_stdout(&table.render(&results)?)?;
    if let Some(path) = &args.json {
        write_bytes(path, &Json.render(&GemmJson(&results))?)?;
    }
    Ok(0)
}

/// The checked plan of `core` or `forward` (`default_repeats` without `--repeats`); `--json`
/// is checked and reserved here too, before any case runs: it is none of `inputs` (the model
/// folder), the torch script or the work folder's files.
fn reserved_plan(c: &CommonArgs, default_repeats: usize, inputs: &[&Path]) -> Result<Plan> {
    let plan = plan::checked_plan(c, default_repeats)?;
    if let Some(path) = &c.json {
        let mut read: Vec<&Path> = inputs.to_vec();
        read.extend(c.torch_script.as_deref());
        read.extend(c.torch.as_deref());
        read.extend(c.work_dir.as_deref());
        reserve_all(&[(path, "--json")], &read)?;
    }
    Ok(plan)
}

fn finish(bench: Bench, rows: &[BenchRow], kind: &str, c: &CommonArgs) -> Result<i32> {
    let results = bench.results(rows, kind);
    let text = if c.markdown {
        Format::Markdown
    } else {
        Format::Table
    };
    write_stdout(&renderer(text).render(&results)?)?;
    if let Some(path) = &c.json {
        write_bytes(path, &Json.render(&results)?)?;
    }
    bench.close();
    Ok(exit_code(rows))
}
