//! Command-line interface: clap definitions and wiring. Exit codes follow `diff`: 0 nothing
//! flagged, 1 divergence flagged, 2 trouble.

mod backends;
mod bench;
mod check;
pub mod common;
mod compare;
pub mod diff;
mod dump;
mod env;
mod paths;
mod selftest;

use clap::{Parser, Subcommand};

use crate::error::Result;
use crate::input::BUILTIN_PROMPTS;

#[derive(Parser, Debug)]
#[command(
    name = "hsdiff",
    version,
    about = "Do two ways of running a hybrid linear-attention LM give the same hidden states? If not, where do they part?"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// With no subcommand: compare two backends on identical inputs.
    #[command(flatten)]
    diff: diff::DiffArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one backend and write the captured hidden states to a safetensors dump.
    Dump(dump::DumpArgs),
    /// List the built-in prompts.
    Prompts,
    /// Check this build on a device: kernels vs the f64 truth, golden parity, fused vs
    /// reference; `--bench` times the CUDA delta-rule kernel (docs/cuda.md).
    Selftest(selftest::SelftestArgs),
    /// Compare two files of captured hidden states (hsdiff dumps, safetensors, torch.save,
    /// .npy/.npz).
    Compare(compare::CompareArgs),
    /// List the linear-attention backends and what each would run on each device kind.
    Backends,
    /// Benchmark the backends (and transformers) on the GDN core or the whole forward pass.
    Bench(bench::BenchArgs),
    /// Print this machine's fingerprint: what a dump made here records about the environment,
    /// and what every backend runs on each device.
    Env(env::EnvArgs),
    /// Compare execution paths of one backend with its full prefill: decode, prefill in
    /// pieces, packed documents, a left-padded batch, a low-precision stored state.
    Paths(paths::PathsArgs),
    /// Recompute a golden dump (default: the built-in golden set) in this environment and
    /// compare: exit 0 ok, 1 divergence, 2 trouble.
    Check(check::CheckArgs),
}

/// Parses the arguments, runs the command, and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hsdiff: error: {e}");
            2
        }
    }
}

fn dispatch(cli: &Cli) -> Result<i32> {
    match &cli.command {
        None => diff::run(&cli.diff),
        Some(Command::Dump(args)) => dump::run(args),
        Some(Command::Selftest(args)) => selftest::run(args),
        Some(Command::Compare(args)) => compare::run(args),
        Some(Command::Backends) => backends::run(),
        Some(Command::Bench(args)) => bench::run(args),
        Some(Command::Env(args)) => env::run(args),
        Some(Command::Check(args)) => check::run(args),
        Some(Command::Paths(args)) => paths::run(args),
        Some(Command::Prompts) => {
            for (name, text) in BUILTIN_PROMPTS {
                let first = text.lines().next().unwrap_or_default();
                println!("{name:<14} {first}");
            }
            Ok(0)
        }
    }
}
