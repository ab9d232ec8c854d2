//! Where a finished report goes: rendered in the format asked for, written to `--out` or
//! stdout, drawn to `--plot`, and its verdict turned into the exit code. Shared by every
//! command that prints a report (the live run, `compare`, `check`); the CLI only fills in
//! [`ReportOptions`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::markdown::Markdown;
use super::table::TerminalTable;
use super::{Format, Json, Render, plot};
use crate::compare::verdict::Verdict;
use crate::error::Result;
use crate::report::Report;

/// Which environment differences the text formats list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvList {
    /// What ran differently (the rest counted).
    Ran,
    All,
}

/// The verdict from which the exit code is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    Drift,
    Mismatch,
    Never,
}

impl FailOn {
    /// Whether `verdict` makes the exit code 1.
    pub fn flags(self, verdict: Verdict) -> bool {
        match self {
            FailOn::Never => false,
            FailOn::Drift => verdict >= Verdict::Drift,
            FailOn::Mismatch => verdict == Verdict::Mismatch,
        }
    }

    /// The command line's name (`--fail-on NAME`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailOn::Drift => "drift",
            FailOn::Mismatch => "mismatch",
            FailOn::Never => "never",
        }
    }
}

/// How and where a report is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    pub format: Format,
    /// A file instead of stdout.
    pub out: Option<PathBuf>,
    pub fail_on: FailOn,
    pub env: EnvList,
    /// Also draw the report to this `.svg` or `.png` file.
    pub plot: Option<PathBuf>,
}

impl ReportOptions {
    /// `--out` and `--plot` can be written, are none of `inputs` and not one file: checked and
    /// reserved before any long run (see [`crate::util::output`]), so that a typo costs nothing.
    pub fn check_targets(&self, inputs: &[&Path]) -> Result<()> {
        if let Some(path) = &self.plot {
            plot::check_path(path)?;
        }
        let targets: Vec<(&Path, &str)> = [(&self.out, "--out"), (&self.plot, "--plot")]
            .into_iter()
            .filter_map(|(p, what)| p.as_deref().map(|p| (p, what)))
            .collect();
        crate::util::output::reserve_all(&targets, inputs)
    }

    /// The renderer of `format` (the terminal table coloured only when stdout is a terminal).
    pub fn renderer(&self) -> Box<dyn Render<Report>> {
        let env_all = self.env == EnvList::All;
        match self.format {
            Format::Table => Box::new(TerminalTable {
                color: self.out.is_none() && std::io::stdout().is_terminal(),
                env_all,
            }),
            Format::Markdown => Box::new(Markdown { env_all }),
            Format::Json => Box::new(Json),
        }
    }

    /// Writes `bytes` to `--out` (then says `lines` on stderr, as stdout carries nothing) or to
    /// stdout.
    pub fn write(&self, bytes: &[u8], lines: &[&str]) -> Result<()> {
        match &self.out {
            Some(path) => {
                crate::util::output::write_bytes(path, bytes)?;
                for line in lines {
                    eprintln!("{}", crate::util::escape::one_line(line));
                }
            }
            None => write_stdout(bytes)?,
        }
        Ok(())
    }
}

/// Writes `bytes` to stdout; a full device is an error line, not a panic. A closed pipe (the
/// reader left: `hsdiff … | head -1`) is no error: the rest was not wanted, and the run ends
/// quietly with the exit code its verdict makes.
pub fn write_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    // Nothing made from an input that changed while it was read is printed.
    crate::util::mapped::check()?;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done.map_err(|e| crate::error::Error::write("stdout", "cannot write", e)),
    }
}

/// Renders `report` as `options` ask, draws the plot if asked, and returns the exit code its
/// verdict makes (0 or 1).
pub fn emit(report: &Report, options: &ReportOptions) -> Result<i32> {
    let bytes = options.renderer().render(report)?;
    options.write(&bytes, &[&report.summary.to_string()])?;
    if let Some(path) = &options.plot {
        plot::write_plot(report, path)?;
        eprintln!(
            "hsdiff: plot written to {}",
            crate::util::escape::one_line(&path.display().to_string())
        );
    }
    Ok(i32::from(options.fail_on.flags(report.verdict)))
}
