//! The options of `bench gemm` and of the hidden `bench case`, and the case's wiring (see
//! [`super::bench`]).

use std::path::PathBuf;

use clap::Args;

use crate::cli::values::DtypeArg;
use crate::cli::values::parse_dtype;
use crate::commands::bench::case::{CaseKind, CaseRequest, run_case};
use crate::commands::bench::protocol::result_line;
use crate::error::{Error, Result};

#[derive(Args, Debug)]
pub struct GemmArgs {
    /// Rows of the input (prompt tokens).
    #[arg(long, default_value_t = 512)]
    pub seq: usize,

    /// Compute dtypes, comma-separated (f32, f64, bf16).
    #[arg(long, value_delimiter = ',', default_value = "f32,f64")]
    pub dtypes: Vec<DtypeArg>,

    /// Products to measure, comma-separated (default: all; an unknown name lists them).
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,

    /// Multiply only the first N output columns of each weight (same work per column).
    #[arg(long, value_name = "N")]
    pub columns: Option<usize>,

    /// Timed calls per product (the median is reported, and the best).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,

    /// Print the table as Markdown.
    #[arg(long)]
    pub markdown: bool,

    /// Also write every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CaseArgs {
    /// `core` or `forward`.
    #[arg(long)]
    pub kind: String,
    #[arg(long)]
    pub backend: String,
    /// The inputs file (core: q, k, v, g, beta; forward: input_ids).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Where to write the output (core: `out`; forward: `logits`).
    #[arg(long)]
    pub out: PathBuf,
    /// Forward only: checkpoint folder.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Forward only: compute dtype.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
}

pub fn run_case_args(args: &CaseArgs) -> Result<i32> {
    let req = CaseRequest {
        kind: case_kind(&args.kind)?,
        backend: args.backend.clone(),
        inputs: args.inputs.clone(),
        out: args.out.clone(),
        model: args.model.clone(),
        dtype: parse_dtype(&args.dtype)?,
        repeats: args.repeats,
        warmup: args.warmup,
    };
    if req.repeats == 0 {
        return Err(Error::argument("--repeats", "must be positive"));
    }
    println!("{}", result_line(&run_case(&req)?)?);
    Ok(0)
}

/// `--kind`, as the parent writes it ([`CaseKind::label`]).
fn case_kind(kind: &str) -> Result<CaseKind> {
    match kind {
        "core" => Ok(CaseKind::Core),
        "forward" => Ok(CaseKind::Forward),
        other => Err(Error::argument(
            "--kind",
            format!("unknown case kind `{other}` (core, forward)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_kinds_read_back_what_the_parent_writes() {
        for kind in [CaseKind::Core, CaseKind::Forward] {
            assert_eq!(case_kind(kind.label()).expect("known"), kind);
        }
        match case_kind("decode") {
            Err(Error::Argument { option, msg }) => {
                assert_eq!(option, "--kind");
                assert!(msg.contains("`decode`"), "{msg}");
            }
            other => panic!("not refused as an argument: {other:?}"),
        }
    }
}
