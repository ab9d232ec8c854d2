//! The report options every report-printing command takes (`--format`, `--out`, `--fail-on`,
//! `--layers`, `--env`, `--plot`), and the command-line names of the library's report enums.

use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, ValueEnum};

use crate::printer::Format;
use crate::printer::emit::{EnvList, FailOn, ReportOptions};

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,

    /// Write the report to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Which verdict makes the exit code 1.
    #[arg(long, value_enum, default_value = "mismatch")]
    pub fail_on: FailOn,

    /// Report only these decoder layers (the rest still run), e.g. 1,16,31.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = layer_index)]
    pub layers: Option<Vec<usize>>,

    /// Environment differences to list: `ran` (what ran differently: linear-attention
    /// implementations, kernel packages, dtype, attention implementation, device; the rest
    /// counted) or `all`. The JSON always holds all of them.
    #[arg(long, value_enum, default_value = "ran")]
    pub env: EnvList,

    /// Also draw the report to FILE.svg or FILE.png: rel L2 per tensor on a log scale with the
    /// floor and bands, and a layer × token heatmap of the per-token error.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// One entry of `--layers`.
fn layer_index(arg: &str) -> Result<usize, String> {
    arg.trim()
        .parse()
        .map_err(|_| "expects comma-separated layer indices, e.g. 1,16,31".to_string())
}

impl ReportArgs {
    /// How the report is written (everything but `--layers`, which selects what is compared).
    pub fn options(&self) -> ReportOptions {
        ReportOptions {
            format: self.format,
            out: self.out.clone(),
            fail_on: self.fail_on,
            env: self.env,
            plot: self.plot.clone(),
        }
    }
}

/// A library enum's values on the command line: `(value, name)` pairs, in the order `--help`
/// lists them.
macro_rules! value_names {
    ($ty:ty: $($variant:expr => $name:literal),+ $(,)?) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($variant),+]
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                let name = match self {
                    $(v if *v == $variant => $name,)+
                    _ => return None,
                };
                Some(PossibleValue::new(name))
            }
        }
    };
}

value_names!(Format: Format::Table => "table", Format::Markdown => "markdown", Format::Json => "json");
value_names!(EnvList: EnvList::Ran => "ran", EnvList::All => "all");
value_names!(FailOn: FailOn::Drift => "drift", FailOn::Mismatch => "mismatch", FailOn::Never => "never");
