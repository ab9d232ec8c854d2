//! Which runs a comparison needs, and which capture already at hand can stand in for one.
//!
//! Every comparison — a live run, `check`, `compare` — is judged against the float64 truth (an
//! exact float64 forward on the same input) and, for each side, the rounding floor at that side's
//! dtype (the `reference` backend at that dtype, measured against the truth). This module is the
//! one place that decides which of those runs to make and with which backend:
//! - the truth is computed by [`TRUTH_BACKEND`] (`fused`) at f64. The `reference` backend stays the
//!   *definition* of the computation (one token at a time, transformers' recurrent form), but its
//!   token loop is the slowest part of a live run (3–4× a whole `fused` forward at T = 512). In
//!   f64 both are exact to the last few bits: every backend matches transformers' strict-float64
//!   captures of the golden models to ~1e-14 relative L2 (`tests/model/golden_parity.rs` holds them to
//!   1e-10, `selftest` checks fused against reference), six orders below the f32 floor and twelve
//!   below bf16's, so the truth is the same number whichever exact form computes it;
//! - a side that *is* such a run (the reference backend, on the same input, fed the same way as
//!   the calibration runs) stands in for it instead of running again — an f64 reference side
//!   stands in for the truth, being its definition;
//! - the floor at f64 is the truth itself (so `--dtype f64` makes one f64 run, not two);
//! - two sides of the same dtype share one floor run.
//!
//! The caller says what each side is ([`SideRun`]) and supplies the forward pass; [`execute`]
//! makes the planned runs in order and [`Calibration`] hands out the sources.

use candle_core::{DType, Device};

use crate::backends::{LinearAttentionBackend, backend_by_name};
use crate::capture::Captures;
use crate::compare::TensorSource;
use crate::device::dtype_label;
use crate::error::Result;
use crate::report::{Calibrated, Floor};
use crate::run::forward_through;
use crate::session::Session;

/// One side of a comparison, as far as calibration is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SideRun {
    /// The dtype the side was computed in (its floor's dtype).
    pub dtype: DType,
    /// Whether this side is a run of the `reference` backend on the comparison's input, fed like
    /// the calibration runs (false for files, and for an unfed side when the calibration runs
    /// are fed, as side A in isolate mode).
    pub is_reference_run: bool,
}

/// Where a calibration capture comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    SideA,
    SideB,
    /// The `i`-th planned run.
    Run(usize),
}

/// The runs to make and where the truth and each side's floor come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Dtypes of the reference runs to make, in order.
    pub runs: Vec<DType>,
    pub truth: Source,
    pub floor_a: Source,
    pub floor_b: Source,
}

/// The plan of a live run of backends named `a` and `b`, both at `dtype`: the calibration runs
/// are fed like B, so A's run stands in for one (when A is the reference backend) only when
/// nothing is `fed`.
pub fn plan_live(dtype: DType, a: &str, b: &str, fed: bool) -> Plan {
    plan(
        SideRun {
            dtype,
            is_reference_run: a == "reference" && !fed,
        },
        SideRun {
            dtype,
            is_reference_run: b == "reference",
        },
    )
}

/// Plans the truth and the two floors for sides `a` and `b`.
pub fn plan(a: SideRun, b: SideRun) -> Plan {
    let mut runs = Vec::new();
    let find = |dtype: DType, runs: &mut Vec<DType>| -> Source {
        if a.is_reference_run && a.dtype == dtype {
            Source::SideA
        } else if b.is_reference_run && b.dtype == dtype {
            Source::SideB
        } else if let Some(i) = runs.iter().position(|d| *d == dtype) {
            Source::Run(i)
        } else {
            runs.push(dtype);
            Source::Run(runs.len() - 1)
        }
    };
    let truth = find(DType::F64, &mut runs);
    let floor_a = find(a.dtype, &mut runs);
    let floor_b = find(b.dtype, &mut runs);
    Plan {
        runs,
        truth,
        floor_a,
        floor_b,
    }
}

/// The backend of the float64 truth run (see the module comment for why not `reference`).
pub const TRUTH_BACKEND: &str = "fused";

/// The backend of the rounding-floor runs: the reference at the side's dtype.
pub const FLOOR_BACKEND: &str = "reference";

/// The backend that makes a planned run at `dtype`: the truth's at f64, the floor's otherwise.
pub fn calibration_backend(dtype: DType) -> &'static str {
    if dtype == DType::F64 {
        TRUTH_BACKEND
    } else {
        FLOOR_BACKEND
    }
}

/// The planned runs, made.
pub struct Calibration {
    pub plan: Plan,
    runs: Vec<Captures>,
}

/// Makes the runs of `plan` on `device` with `run(backend, dtype)` (a forward pass of `backend` at
/// `dtype` on the comparison's input, fed as the caller's calibration runs are), each with
/// [`calibration_backend`]`(dtype)`.
pub fn execute(
    plan: Plan,
    device: &Device,
    mut run: impl FnMut(&dyn LinearAttentionBackend, DType) -> Result<Captures>,
) -> Result<Calibration> {
    let runs = plan
        .runs
        .iter()
        .map(|&d| run(backend_by_name(calibration_backend(d), device)?.as_ref(), d))
        .collect::<Result<Vec<_>>>()?;
    Ok(Calibration { plan, runs })
}

/// [`execute`] on `session`'s input: fed `feed`'s layer inputs when given (isolate mode),
/// stopping after decoder layer `last_layer` when given.
pub fn execute_on_session(
    plan: Plan,
    session: &Session,
    capture_ops: bool,
    feed: Option<&Captures>,
    last_layer: Option<usize>,
) -> Result<Calibration> {
    execute(plan, &session.device, |backend, dtype| {
        forward_through(session, backend, dtype, capture_ops, feed, last_layer)
    })
}

/// The calibration of two files computed in `dtypes` (neither a run made here), on `session`'s
/// input, stopping after decoder layer `last_layer` when given (`compare`).
pub fn calibrate_files(
    session: &Session,
    (a, b): (DType, DType),
    capture_ops: bool,
    last_layer: Option<usize>,
) -> Result<Calibration> {
    let side = |dtype| SideRun {
        dtype,
        is_reference_run: false,
    };
    execute_on_session(
        plan(side(a), side(b)),
        session,
        capture_ops,
        None,
        last_layer,
    )
}

impl Calibration {
    fn source<'s>(
        &'s self,
        s: Source,
        a: &'s dyn TensorSource,
        b: &'s dyn TensorSource,
    ) -> &'s dyn TensorSource {
        match s {
            Source::SideA => a,
            Source::SideB => b,
            Source::Run(i) => &self.runs[i],
        }
    }

    /// The truth, when it is a planned run rather than a side.
    pub fn truth_run(&self) -> Option<&Captures> {
        match self.plan.truth {
            Source::Run(i) => self.runs.get(i),
            _ => None,
        }
    }

    /// The truth and floors for a report on sides `a` (computed in `a_dtype`) and `b`;
    /// `model` says which model measured them.
    pub fn calibrated<'s>(
        &'s self,
        a: &'s dyn TensorSource,
        b: &'s dyn TensorSource,
        (a_dtype, b_dtype): (DType, DType),
        model: &str,
    ) -> Calibrated<'s> {
        let floor = |s: Source, dtype: DType| Floor {
            src: self.source(s, a, b),
            dtype,
        };
        let dtypes = if a_dtype == b_dtype {
            dtype_label(a_dtype).to_string()
        } else {
            format!(
                "{} (A) and {} (B)",
                dtype_label(a_dtype),
                dtype_label(b_dtype)
            )
        };
        // A reference side standing in for the truth is the reference at f64.
        let truth_backend = match self.plan.truth {
            Source::Run(_) => TRUTH_BACKEND,
            Source::SideA | Source::SideB => FLOOR_BACKEND,
        };
        Calibrated {
            truth: self.source(self.plan.truth, a, b),
            floor_a: floor(self.plan.floor_a, a_dtype),
            floor_b: (self.plan.floor_b != self.plan.floor_a)
                .then(|| floor(self.plan.floor_b, b_dtype)),
            source: format!(
                "{FLOOR_BACKEND} backend at {dtypes} vs {truth_backend} at f64, same input, {model}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(dtype: DType, is_reference_run: bool) -> SideRun {
        SideRun {
            dtype,
            is_reference_run,
        }
    }

    #[test]
    fn two_other_backends_need_the_truth_and_one_floor() {
        let p = plan(side(DType::BF16, false), side(DType::BF16, false));
        assert_eq!(p.runs, [DType::F64, DType::BF16]);
        assert_eq!(p.truth, Source::Run(0));
        assert_eq!((p.floor_a, p.floor_b), (Source::Run(1), Source::Run(1)));
    }

    #[test]
    fn f64_runs_the_reference_once() {
        let p = plan(side(DType::F64, false), side(DType::F64, false));
        assert_eq!(p.runs, [DType::F64]);
        assert_eq!((p.floor_a, p.floor_b), (Source::Run(0), Source::Run(0)));
        // …and not at all when a side is the f64 reference run.
        let p = plan(side(DType::F64, true), side(DType::F64, false));
        assert!(p.runs.is_empty());
        assert_eq!(p.truth, Source::SideA);
    }

    #[test]
    fn the_truth_is_run_by_the_fast_exact_backend_and_floors_by_the_reference() {
        assert_eq!(calibration_backend(DType::F64), TRUTH_BACKEND);
        for d in [DType::F32, DType::BF16, DType::F16] {
            assert_eq!(calibration_backend(d), "reference");
        }
        let plan = plan(side(DType::BF16, false), side(DType::BF16, false));
        let mut made = Vec::new();
        let cal = execute(plan, &Device::Cpu, |backend, dtype| {
            made.push((backend.name(), dtype));
            Ok(Captures::new(vec![1]))
        })
        .expect("planned runs");
        assert_eq!(made, [("fused", DType::F64), ("reference", DType::BF16)]);
        assert!(cal.truth_run().is_some());
    }

    #[test]
    fn a_reference_side_is_its_own_floor() {
        let p = plan(side(DType::F32, false), side(DType::F32, true));
        assert_eq!(p.runs, [DType::F64]);
        assert_eq!((p.floor_a, p.floor_b), (Source::SideB, Source::SideB));
    }

    #[test]
    fn files_of_two_dtypes_get_a_floor_each() {
        let p = plan(side(DType::F64, false), side(DType::BF16, false));
        assert_eq!(p.runs, [DType::F64, DType::BF16]);
        assert_eq!((p.floor_a, p.floor_b), (Source::Run(0), Source::Run(1)));
    }
}
