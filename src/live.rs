//! A live run: two backends on one session's input (B fed A's layer inputs in isolate mode),
//! the f64 truth and each side's floor as the planner asks, and the report. The default command
//! and `selftest` run it; the command line is the caller's business.

use crate::backends::LinearAttentionBackend;
use crate::compare::{TensorSource, plan_rows};
use crate::error::Result;
use crate::planner;
use crate::report::{Comparison, Report, Side, build_report};
use crate::run::{fingerprint_for, forward};
use crate::session::{Session, check_layer_list};

/// How side B is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each backend carries its own residual stream (as in a real train/eval split).
    Propagate,
    /// Each layer of B is fed A's input to that layer: the error a layer adds, apart from what
    /// it inherits.
    Isolate,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Propagate => "propagate",
            Mode::Isolate => "isolate",
        }
    }
}

/// What to run besides the session: the two backends and what to capture and measure.
pub struct LiveRun<'a> {
    pub a: &'a dyn LinearAttentionBackend,
    pub b: &'a dyn LinearAttentionBackend,
    pub mode: Mode,
    /// Also capture the values inside linear-attention layers.
    pub ops: bool,
    /// Skip the truth and floor runs (the report is then uncalibrated, by request).
    pub no_floor: bool,
    /// Report only these decoder layers (all of them still run).
    pub layers: Option<Vec<usize>>,
    /// The command line for the report's reproduce line.
    pub command: Option<String>,
}

/// Runs A, B and the calibration runs on `session` and builds the report.
pub fn report(session: &Session, run: &LiveRun) -> Result<Report> {
    if let Some(layers) = &run.layers {
        check_layer_list(layers, session.model.config.num_hidden_layers, "the model")?;
    }
    // A, B and the floor run read the same weights in the same dtype: convert them once.
    session.model.keep_weights(session.dtype, &session.device);
    let (a, b) = (run.a, run.b);
    let caps_a = forward(session, a, session.dtype, run.ops, None)?;
    let isolate = run.mode == Mode::Isolate;
    let feed = isolate.then_some(&caps_a);
    let caps_b = forward(session, b, session.dtype, run.ops, feed)?;
    let calibration = if run.no_floor {
        None
    } else {
        let plan = planner::plan_live(session.dtype, a.name(), b.name(), isolate);
        Some(planner::execute_on_session(
            plan, session, run.ops, feed, None,
        )?)
    };

    let rows = plan_rows(
        &TensorSource::names(&caps_a),
        Some(&session.model.config.layer_types),
        run.layers.as_deref(),
    );
    let side = |backend: &dyn LinearAttentionBackend| {
        Side::from_fingerprint(
            backend.name().to_string(),
            fingerprint_for(session, backend),
        )
    };
    let comparison = Comparison {
        a: &caps_a,
        b: &caps_b,
        a_side: side(a),
        b_side: side(b),
        calibration: calibration.as_ref().map(|cal| {
            cal.calibrated(
                &caps_a,
                &caps_b,
                (session.dtype, session.dtype),
                &session.model.source.to_string(),
            )
        }),
        floor_skipped: run.no_floor,
        uncalibrated_why: None,
        one_sided: None,
        rows,
        dtype: session.dtype,
        mode: run.mode.label().to_string(),
        input: session.compared_input(),
        command: run.command.clone(),
        alignment: None,
        notes: Vec::new(),
    };
    build_report(&comparison)
}
