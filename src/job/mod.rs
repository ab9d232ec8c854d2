//! A comparison as a job: planned, then run.
//!
//! A [`Spec`] says what each side is — a live run of a backend ([`Live`]), a file, a golden
//! file — and whether the truth and floors are measured. [`Job::plan`] turns it into a [`Plan`]
//! before anything runs: every forward pass the job needs (the live sides, the f64 truth, a
//! floor per side dtype), in order, and which run stands in for which (a `reference` side is
//! the definition the truth and its dtype's floor would be run from). [`Job::execute`] makes
//! the runs on a model's input; [`Executed::report`] puts the comparison together and builds
//! its report — the one place a report is assembled (`tests/cli/architecture.rs` holds every other
//! module to it). The live run, `check`, `compare` of two files and each pair of a dataset are
//! specs (`crate::commands::live`, `crate::commands::check`, `crate::commands::compare::pair`).

mod assemble;
mod execute;
mod plan;
pub mod prior;
mod rows;
pub mod session;
mod spec;

pub use assemble::{Findings, Given, Parts, View, view};
pub use execute::{Executed, Instead, truth_run};
pub use plan::{
    CalibrationPlan, FLOOR_BACKEND, Plan, Role, Run, Source, TRUTH_BACKEND, calibration_backend,
};
pub use rows::{RowMode, RowsFrom, plan as plan_rows};
pub use spec::{Calibration, Live, Routing, SideSpec, Spec};

/// A spec and its plan: what will run, decided before anything does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub spec: Spec,
    pub plan: Plan,
}

impl Job {
    /// Plans `spec`'s runs.
    pub fn plan(spec: Spec) -> Job {
        Job {
            plan: plan::plan(&spec),
            spec,
        }
    }
}
