//! Command-line interface: clap definitions and wiring. Exit codes follow `diff`: 0 nothing
//! flagged, 1 divergence flagged, 2 trouble.

mod backends;
mod bench;
mod boundary;
mod check;
mod common;
mod compare;
mod diff;
mod dump;
mod env;
mod limits;
mod merge;
mod paths;
mod report_args;
mod selftest;
mod shard;
mod values;

use clap::{Parser, Subcommand};

use crate::error::Result;
use crate::util::input::BUILTIN_PROMPTS;
use boundary::{catch_panics, clap_line};

#[derive(Parser, Debug)]
#[command(
    name = "hsdiff",
    version,
    about = "Do two ways of running a hybrid linear-attention LM give the same hidden states? If not, where do they part?"
)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    /// Raise (or lower) a cap on input sizes, NAME=VALUE; repeatable. Names: tokens,
    /// prompt-bytes, layers, dim, json-bytes, pickle-bytes, pickle-depth, pickle-objects,
    /// inflated-bytes (docs/file-formats.md lists the defaults).
    #[arg(long = "limit", value_name = "NAME=VALUE", global = true)]
    limit: Vec<String>,

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
    /// .npy/.npz, drafter pipelines' samples), or two datasets of them (folders or globs).
    Compare(compare::CompareArgs),
    /// Join the parts of `compare … --shard I/N` runs, each verified, into the dataset's report.
    Merge(merge::MergeArgs),
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
    // Plain `hsdiff` is someone finding out what the tool does: the help, not an error about a
    // missing --a.
    if std::env::args_os().len() == 1 {
        use clap::CommandFactory;
        return match Cli::command().print_help() {
            Ok(()) => 0,
            Err(_) => 2,
        };
    }
    crate::util::output::clean_up_on_signals();
    let code = run_main();
    // Outputs reserved but not written (the command failed) leave no temp file behind.
    crate::util::output::discard_reservations();
    code
}

fn run_main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            eprintln!("hsdiff: error: {} (see --help)", clap_line(&e));
            return 2;
        }
    };
    match catch_panics(|| {
        crate::util::limits::set(limits::limits_from_args(&cli.limit)?);
        limits::check_threads_env()?;
        let code = dispatch(&cli)?;
        // An input truncated while it was read ends the run as trouble, whatever it printed.
        crate::util::mapped::check()?;
        Ok(code)
    }) {
        Ok(code) => code,
        Err(e) => {
            // One line, whatever names or messages from files it quotes.
            eprintln!(
                "hsdiff: error: {}",
                crate::util::escape::one_line(&e.to_string())
            );
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
        Some(Command::Merge(args)) => merge::run(args),
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
