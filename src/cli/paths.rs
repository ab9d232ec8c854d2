//! `hsdiff paths`: one backend, one dtype, several execution paths over the same tokens, each
//! compared with the full prefill (see [`crate::commands::exec_paths`]).

use clap::Args;

use super::common::RunArgs;
use crate::backends::BackendKind;
use crate::commands::exec_paths::{PathKind, plan_paths, render, run_paths};
use crate::error::{Error, Result};
use crate::printer::Format;
use crate::printer::emit::FailOn;

#[derive(Args, Debug)]
pub struct PathsArgs {
    /// Linear-attention backend (see `hsdiff backends`).
    #[arg(long, value_enum, default_value = "reference")]
    pub backend: BackendKind,

    #[command(flatten)]
    pub run: RunArgs,

    /// Paths to run, comma-separated: decode, chunked-prefill, packed, padded, state-dtype.
    #[arg(
        long,
        value_enum,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "decode,chunked-prefill,packed,padded,state-dtype"
    )]
    pub paths: Vec<PathKind>,

    /// Seed of the random split of chunked-prefill.
    #[arg(long, default_value_t = 12)]
    pub seed: u64,

    /// Output format (markdown is not offered here).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,

    /// Write the report to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,

    /// Which verdict makes the exit code 1.
    #[arg(long, value_enum, default_value = "mismatch")]
    pub fail_on: FailOn,
}

pub fn run(args: &PathsArgs) -> Result<i32> {
    // In the order given, each once.
    let mut kinds: Vec<PathKind> = Vec::new();
    for k in &args.paths {
        if !kinds.contains(k) {
            kinds.push(*k);
        }
    }
    // Checked before the paths run.
    let renderer = render::renderer(args.format)
        .ok_or_else(|| Error::argument("--format", "hsdiff paths writes --format table or json"))?;
    // The output target is checked before the (long) runs.
    if let Some(out) = &args.out {
        crate::util::output::reserve_all(&[(out, "--out")], &args.run.input_paths())?;
    }
    let session = args.run.resolve()?;
    let backend = args.backend.open(&session.device)?;
    let (plans, skipped) = plan_paths(&kinds, session.ids.len(), args.seed);
    if plans.is_empty() {
        let why: Vec<String> = skipped
            .iter()
            .map(|s| format!("{}: {}", s.path, s.reason))
            .collect();
        return Err(Error::prompt(format!(
            "no path can run on this input ({})",
            why.join("; ")
        )));
    }
    let report = run_paths(
        &session.model,
        &session.ids,
        backend.as_ref(),
        session.dtype,
        &session.device,
        &plans,
        skipped,
    )?;
    let text = renderer.render(&report)?;
    match &args.out {
        Some(path) => {
            crate::util::output::write_bytes(path, &text)?;
            eprintln!("{}", report.summary);
        }
        None => crate::printer::emit::write_stdout(&text)?,
    }
    Ok(i32::from(args.fail_on.flags(report.verdict)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::Cli;
    use crate::commands::exec_paths::PathKind;

    /// `--paths` takes a comma-separated list of the known names, and nothing else.
    #[test]
    fn paths_parse_as_a_list_of_known_names() {
        let cli = Cli::try_parse_from(["hsdiff", "paths", "--paths", "packed,decode"])
            .expect("a list of known names");
        let Some(super::super::Command::Paths(args)) = cli.command else {
            panic!("not the paths command")
        };
        assert_eq!(args.paths, [PathKind::Packed, PathKind::Decode]);
        let bad = Cli::try_parse_from(["hsdiff", "paths", "--paths", "decode,bogus"])
            .expect_err("an unknown name");
        assert!(bad.to_string().contains("bogus"), "{bad}");
    }
}
