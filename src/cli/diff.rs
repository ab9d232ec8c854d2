//! The default command: `hsdiff --a BACKEND --b BACKEND …` runs both backends on identical
//! inputs (plus the f64 truth and the rounding floor), compares every capture and prints the
//! report.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::common::{RunArgs, Session, command_line, parse_layer_list};
use crate::backends::{LinearAttentionBackend, backend_by_name};
use crate::compare::plan_rows;
use crate::error::{Error, Result};
use crate::planner::{self, SideRun};
use crate::report::{
    Comparison, Render, Report, Side, TokenIds, build_report, json::Json, markdown::Markdown,
    table::Table,
};
use crate::run::{fingerprint_for, forward};
use crate::verdict::Verdict;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Each backend carries its own residual stream (as in a real train/eval split).
    Propagate,
    /// Each layer of B is fed A's input to that layer: the error a layer adds, apart from what
    /// it inherits.
    Isolate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnvList {
    Ran,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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
}

/// Options of the report, shared by the live run and `compare`.
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
    #[arg(long, value_name = "LIST")]
    pub layers: Option<String>,

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

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    /// Backend of side A (see `hsdiff backends`).
    #[arg(long = "a", value_name = "BACKEND")]
    pub a: Option<String>,

    /// Backend of side B.
    #[arg(long = "b", value_name = "BACKEND")]
    pub b: Option<String>,

    #[command(flatten)]
    pub run: RunArgs,

    #[arg(long, value_enum, default_value = "propagate")]
    pub mode: Mode,

    /// Also compare values inside linear-attention layers (conv out, q, k, v, beta, g, core
    /// out, gated-norm out, out_proj) to find the first divergent op.
    #[arg(long)]
    pub ops: bool,

    /// Skip the f64 truth and floor runs: verdicts then use the depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &DiffArgs) -> Result<i32> {
    let (Some(a_name), Some(b_name)) = (&args.a, &args.b) else {
        return Err(Error::Input(
            "name both backends: hsdiff --a BACKEND --b BACKEND (see `hsdiff backends`)".into(),
        ));
    };
    // Output targets are checked before the (long) runs.
    args.report.check_targets(&args.run.input_paths())?;
    let session = args.run.resolve()?;
    // A, B and the floor run read the same weights in the same dtype: convert them once.
    session.model.keep_weights(session.dtype, &session.device);
    let a = backend_by_name(a_name, &session.device)?;
    let b = backend_by_name(b_name, &session.device)?;
    let layers = args
        .report
        .layers
        .as_deref()
        .map(parse_layer_list)
        .transpose()?;
    if let Some(bad) = layers
        .iter()
        .flatten()
        .find(|&&l| l >= session.model.config.num_hidden_layers)
    {
        return Err(Error::Input(format!(
            "--layers names layer {bad}, but the model has {} layers",
            session.model.config.num_hidden_layers
        )));
    }

    let caps_a = forward(&session, a.as_ref(), session.dtype, args.ops, None)?;
    let isolate = args.mode == Mode::Isolate;
    let feed = isolate.then_some(&caps_a);
    let caps_b = forward(&session, b.as_ref(), session.dtype, args.ops, feed)?;
    let calibration = if args.no_floor {
        None
    } else {
        // The calibration runs are fed like B; A stands in for one only when nothing is fed.
        let plan = planner::plan(
            SideRun {
                dtype: session.dtype,
                is_reference_run: a.name() == "reference" && !isolate,
            },
            SideRun {
                dtype: session.dtype,
                is_reference_run: b.name() == "reference",
            },
        );
        Some(planner::execute(
            plan,
            &session.device,
            |backend, dtype| forward(&session, backend, dtype, args.ops, feed),
        )?)
    };

    let rows = plan_rows(
        &crate::compare::TensorSource::names(&caps_a),
        Some(&session.model.config.layer_types),
        layers.as_deref(),
    );
    let comparison = Comparison {
        a: &caps_a,
        b: &caps_b,
        a_side: side(&session, a.as_ref()),
        b_side: side(&session, b.as_ref()),
        calibration: calibration.as_ref().map(|cal| {
            cal.calibrated(
                &caps_a,
                &caps_b,
                (session.dtype, session.dtype),
                &session.model.source.to_string(),
            )
        }),
        floor_skipped: args.no_floor,
        rows,
        dtype: session.dtype,
        mode: match args.mode {
            Mode::Propagate => "propagate",
            Mode::Isolate => "isolate",
        }
        .to_string(),
        input_ids: session.ids.clone(),
        token_ids: TokenIds::Match,
        tokens: session.ids.len(),
        num_layers: Some(session.model.config.num_hidden_layers),
        command: Some(command_line()),
        alignment: None,
        notes: Vec::new(),
    };
    let report = build_report(&comparison)?;
    emit(&report, &args.report)
}

fn side(session: &Session, backend: &dyn LinearAttentionBackend) -> Side {
    let fingerprint = fingerprint_for(session, backend);
    Side {
        label: backend.name().to_string(),
        backend: fingerprint.backend.clone(),
        implementation: fingerprint.implementation.clone(),
        dtype: fingerprint.dtype.clone(),
        device: fingerprint.device.clone(),
        fingerprint,
    }
}

/// Renders the report where asked and turns its verdict into the exit code.
impl ReportArgs {
    /// `--out` and `--plot` can be written, and are none of `inputs`.
    pub fn check_targets(&self, inputs: &[&std::path::Path]) -> Result<()> {
        if let Some(path) = &self.plot {
            crate::report::plot::check_path(path)?;
        }
        crate::output::check_report_targets(self.out.as_deref(), self.plot.as_deref(), inputs)
    }
}

pub fn emit(report: &Report, args: &ReportArgs) -> Result<i32> {
    let to_terminal = args.out.is_none() && std::io::stdout().is_terminal();
    let text = match args.format {
        Format::Table => Table {
            color: to_terminal,
            env_all: args.env == EnvList::All,
        }
        .render(report),
        Format::Markdown => Markdown {
            env_all: args.env == EnvList::All,
        }
        .render(report),
        Format::Json => Json.render(report),
    };
    match &args.out {
        Some(path) => {
            crate::output::write_bytes(path, text.as_bytes())?;
            eprintln!("{}", report.summary);
        }
        None => print!("{text}"),
    }
    if let Some(path) = &args.plot {
        crate::report::plot::write_plot(report, path)?;
        eprintln!("hsdiff: plot written to {}", path.display());
    }
    Ok(i32::from(args.fail_on.flags(report.verdict)))
}
