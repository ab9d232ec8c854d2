//! Command-line interface: clap definitions and wiring. Exit codes follow `diff`: 0 nothing
//! flagged, 1 divergence flagged, 2 trouble.

pub mod common;
pub mod diff;
mod dump;

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
        Some(Command::Prompts) => {
            for (name, text) in BUILTIN_PROMPTS {
                let first = text.lines().next().unwrap_or_default();
                println!("{name:<14} {first}");
            }
            Ok(0)
        }
    }
}
