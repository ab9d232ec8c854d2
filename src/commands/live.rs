//! A live run as a job: two backends on one session's input (B fed A's layer inputs in isolate
//! mode), the f64 truth and each side's floor as the plan asks, and the report. The default
//! command and `selftest` run it; the command line is the caller's business.

use crate::backends::BackendKind;
use crate::compare::TensorSource;
use crate::error::{Error, Result};
use crate::job::session::{Session, check_layer_list};
use crate::job::{
    Calibration, Given, Instead, Job, Live, Parts, Role, RowMode, RowsFrom, SideSpec, Spec,
    plan_rows,
};
use crate::report::Report;

/// How side B is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each backend carries its own residual stream (as in a real train/eval split).
    Propagate,
    /// Each layer of B is fed A's input to that layer: the error a layer adds, apart from what
    /// it inherits.
    Isolate,
}

/// What to run besides the session: the two backends and what to capture and measure.
pub struct LiveRun {
    pub a: BackendKind,
    pub b: BackendKind,
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

impl LiveRun {
    /// The job: A and B at the session's dtype, B fed in isolate mode.
    pub fn spec(&self, session: &Session) -> Spec {
        let side = |backend, fed| {
            SideSpec::Live(Live {
                backend,
                dtype: session.dtype,
                fed,
            })
        };
        Spec {
            a: side(self.a, false),
            b: side(self.b, self.mode == Mode::Isolate),
            calibration: if self.no_floor {
                Calibration::NoFloor
            } else {
                Calibration::Measure
            },
            ops: self.ops,
            through: None,
            routing: crate::job::Routing::Own,
        }
    }
}

/// Runs A, B and the calibration runs on `session` and builds the report.
pub fn report(session: &Session, run: &LiveRun) -> Result<Report> {
    report_instead(session, run, Instead::default())
}

/// [`report`] with a side run by another backend than its kind's (tests inject faults so).
pub fn report_instead(session: &Session, run: &LiveRun, instead: Instead) -> Result<Report> {
    if let Some(layers) = &run.layers {
        check_layer_list(layers, session.model.config.num_hidden_layers, "the model")?;
    }
    let input = session.input();
    let done = Job::plan(run.spec(session)).execute_instead(Some(input), instead)?;
    let caps_a = done
        .side(Role::A)
        .ok_or_else(|| Error::Internal("live run: side A is not a run".to_string()))?;
    let held = TensorSource::keys(caps_a);
    let from = RowsFrom {
        held: &held,
        layer_types: Some(&session.model.config.layer_types),
        layers: run.layers.as_deref(),
    };
    let rows = plan_rows(from, RowMode::Every);
    done.report(Parts {
        given: Given::Neither,
        a_side: done.live_side(Role::A, "")?,
        b_side: done.live_side(Role::B, "")?,
        rows,
        input: input.compared_input(),
        command: run.command.clone(),
    })
}
