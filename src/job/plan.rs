//! Which forward passes a job needs, and which one stands in for which — decided from the
//! [`Spec`] alone, before anything runs.
//!
//! Every comparison is judged against the float64 truth (an exact float64 forward on the same
//! input) and, for each side, the rounding floor at that side's dtype (the `reference` backend
//! at that dtype, measured against the truth). The rules, in one place:
//! - a live side is a run, made first (A, then B; B fed A's layer inputs in isolate mode);
//! - the calibration runs are fed as B is, so that they measure what B was given;
//! - the truth is computed by [`TRUTH_BACKEND`] (`fused`) at f64. The `reference` backend stays
//!   the *definition* of the computation (one token at a time, transformers' recurrent form),
//!   but its token loop is the slowest part of a live run (3–4× a whole `fused` forward at
//!   T = 512). In f64 both are exact to the last few bits: every backend matches transformers'
//!   strict-float64 captures of the golden models to ~1e-14 relative L2
//!   (`tests/model/golden_parity.rs` holds them to 1e-10, `selftest` checks fused against reference),
//!   six orders below the f32 floor and twelve below bf16's, so the truth is the same number
//!   whichever exact form computes it;
//! - a run already planned stands in for a calibration run it equals (same dtype, same feed,
//!   same last layer): a `reference` side, being the definition, for the truth (at f64) or its
//!   dtype's floor; a calibration run for another role of the same backend and dtype — so the
//!   floor at f64 is the truth itself, and two sides of one dtype share one floor run. A side
//!   of another backend is what is under test, and never stands in;
//! - on an MoE model whose files record their router choices at every MoE layer, the
//!   calibration runs route as the sides did ([`Routing`]): one truth and floor under both sides'
//!   choices when they agree, else a truth and floor per side under its own, so that a side's
//!   distance from its truth measures arithmetic only (a live side routes itself, and stands in
//!   for no routed run).

use candle_core::DType;

use super::spec::{Calibration, Routing, SideSpec, Spec};
use crate::backends::BackendKind;

/// The backend of the float64 truth run (see the module comment for why not `reference`).
pub const TRUTH_BACKEND: BackendKind = BackendKind::Fused;

/// The backend of the rounding-floor runs: the reference at the side's dtype.
pub const FLOOR_BACKEND: BackendKind = BackendKind::Reference;

/// The backend that makes a calibration run at `dtype`: the truth's at f64, the floor's
/// otherwise.
pub fn calibration_backend(dtype: DType) -> BackendKind {
    if dtype == DType::F64 {
        TRUTH_BACKEND
    } else {
        FLOOR_BACKEND
    }
}

/// Why a run is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Side A, a live run.
    A,
    /// Side B, a live run.
    B,
    /// The truth or a floor.
    Calibration,
}

/// One forward pass on the job's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub backend: BackendKind,
    pub dtype: DType,
    /// Fed side A's run's layer inputs.
    pub fed: bool,
    /// Stops after this decoder layer.
    pub through: Option<usize>,
    pub role: Role,
    /// Whose recorded router choices the run's MoE layers use.
    pub routes: RoutedBy,
}

/// Whose router choices a run uses at MoE layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutedBy {
    /// Its own router's.
    Own,
    /// Side A's recorded choices.
    A,
    /// Side B's recorded choices.
    B,
}

impl Run {
    /// Whether this run's captures are those of `want`, a calibration run (module comment).
    fn stands_in_for(&self, want: &Run) -> bool {
        let same_input = self.dtype == want.dtype
            && self.fed == want.fed
            && self.through == want.through
            && self.routes == want.routes;
        same_input
            && match self.role {
                Role::Calibration => self.backend == want.backend,
                Role::A | Role::B => self.backend == BackendKind::Reference,
            }
    }
}

/// Where a side's captures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Handed to the job (a file, a golden file).
    Given,
    /// The `i`-th run of the plan.
    Run(usize),
}

/// The runs that give the truth and each side's floor (indices into [`Plan::runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationPlan {
    pub truth: usize,
    pub floor_a: usize,
    pub floor_b: usize,
    /// The truth B is judged against: `truth`, unless B routes otherwise than A
    /// ([`Routing::EachSide`]).
    pub truth_b: usize,
}

/// Every run of a job, in the order they are made, and what each side and calibration role
/// reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub runs: Vec<Run>,
    pub a: Source,
    pub b: Source,
    /// None: uncalibrated.
    pub calibration: Option<CalibrationPlan>,
}

/// Plans `spec` (module comment).
pub fn plan(spec: &Spec) -> Plan {
    let mut runs = Vec::new();
    let mut side = |s: SideSpec, role: Role| match s {
        SideSpec::Live(l) => {
            runs.push(Run {
                backend: l.backend,
                dtype: l.dtype,
                fed: l.fed,
                through: None,
                role,
                routes: RoutedBy::Own,
            });
            Source::Run(runs.len() - 1)
        }
        SideSpec::File { .. } | SideSpec::Golden { .. } => Source::Given,
    };
    let a = side(spec.a, Role::A);
    let b = side(spec.b, Role::B);
    let calibration = (spec.calibration == Calibration::Measure).then(|| {
        let fed = matches!(spec.b, SideSpec::Live(l) if l.fed);
        let mut find = |dtype: DType, routes: RoutedBy| {
            let want = Run {
                backend: calibration_backend(dtype),
                dtype,
                fed,
                through: spec.through,
                role: Role::Calibration,
                routes,
            };
            match runs.iter().position(|r| r.stands_in_for(&want)) {
                Some(i) => i,
                None => {
                    runs.push(want);
                    runs.len() - 1
                }
            }
        };
        let (a_routes, b_routes) = match spec.routing {
            Routing::Own => (RoutedBy::Own, RoutedBy::Own),
            Routing::Shared => (RoutedBy::A, RoutedBy::A),
            Routing::EachSide => (RoutedBy::A, RoutedBy::B),
        };
        CalibrationPlan {
            truth: find(DType::F64, a_routes),
            floor_a: find(spec.a.dtype(), a_routes),
            floor_b: find(spec.b.dtype(), b_routes),
            truth_b: find(DType::F64, b_routes),
        }
    });
    Plan {
        runs,
        a,
        b,
        calibration,
    }
}

#[cfg(test)]
mod tests {
    use super::super::spec::Live;
    use super::*;

    fn live(backend: BackendKind, dtype: DType, fed: bool) -> SideSpec {
        SideSpec::Live(Live {
            backend,
            dtype,
            fed,
        })
    }

    fn file(dtype: DType) -> SideSpec {
        SideSpec::File { dtype }
    }

    fn planned(a: SideSpec, b: SideSpec) -> Plan {
        plan(&Spec {
            a,
            b,
            calibration: Calibration::Measure,
            ops: false,
            through: None,
            routing: Routing::Own,
        })
    }

    /// (backend, dtype) of each planned run.
    fn made(p: &Plan) -> Vec<(BackendKind, DType)> {
        p.runs.iter().map(|r| (r.backend, r.dtype)).collect()
    }

    fn cal(p: &Plan) -> (usize, usize, usize) {
        let c = p.calibration.expect("calibrated");
        (c.truth, c.floor_a, c.floor_b)
    }

    use BackendKind::{Chunked, Fused, Reference};

    #[test]
    fn two_files_need_the_truth_and_one_floor() {
        let p = planned(file(DType::BF16), file(DType::BF16));
        assert_eq!(made(&p), [(Fused, DType::F64), (Reference, DType::BF16)]);
        assert_eq!((p.a, p.b), (Source::Given, Source::Given));
        assert_eq!(cal(&p), (0, 1, 1));
    }

    #[test]
    fn files_of_two_dtypes_get_a_floor_each() {
        let p = planned(file(DType::F64), file(DType::BF16));
        assert_eq!(made(&p), [(Fused, DType::F64), (Reference, DType::BF16)]);
        assert_eq!(cal(&p), (0, 0, 1), "the floor at f64 is the truth");
    }

    #[test]
    fn live_sides_run_first_and_a_reference_side_is_its_own_floor() {
        let p = planned(
            live(Fused, DType::F32, false),
            live(Reference, DType::F32, false),
        );
        assert_eq!(
            made(&p),
            [
                (Fused, DType::F32),
                (Reference, DType::F32),
                (Fused, DType::F64)
            ]
        );
        assert_eq!((p.a, p.b), (Source::Run(0), Source::Run(1)));
        assert_eq!(cal(&p), (2, 1, 1));
    }

    #[test]
    fn an_f64_reference_side_is_the_truth_and_a_fused_one_is_not() {
        let p = planned(
            live(Reference, DType::F64, false),
            live(Chunked, DType::F64, false),
        );
        assert_eq!(p.runs.len(), 2, "{:?}", p.runs);
        assert_eq!(cal(&p), (0, 0, 0));
        // A fused side is under test: the truth is run again, by the truth's backend.
        let p = planned(
            live(Fused, DType::F64, false),
            live(Chunked, DType::F64, false),
        );
        assert_eq!(made(&p)[2], (Fused, DType::F64));
        assert_eq!(cal(&p), (2, 2, 2));
    }

    #[test]
    fn in_isolate_mode_only_the_fed_side_can_stand_in() {
        // A is unfed, the calibration runs are fed like B: A's reference run is not theirs.
        let p = planned(
            live(Reference, DType::BF16, false),
            live(Fused, DType::BF16, true),
        );
        assert_eq!(
            made(&p)[2..],
            [(Fused, DType::F64), (Reference, DType::BF16)]
        );
        assert!(p.runs[2..].iter().all(|r| r.fed));
        let p = planned(
            live(Fused, DType::BF16, false),
            live(Reference, DType::BF16, true),
        );
        assert_eq!(cal(&p), (2, 1, 1));
    }

    #[test]
    fn a_golden_file_against_a_reference_run_needs_the_truth_only() {
        let p = planned(
            SideSpec::Golden { dtype: DType::F32 },
            live(Reference, DType::F32, false),
        );
        assert_eq!(made(&p), [(Reference, DType::F32), (Fused, DType::F64)]);
        assert_eq!((p.a, p.b), (Source::Given, Source::Run(0)));
        assert_eq!(cal(&p), (1, 0, 0));
    }

    #[test]
    fn the_served_fp8_dtype_gets_a_floor_like_any_dtype() {
        use crate::fp8::serving::SERVED;
        let p = planned(live(Fused, SERVED, false), live(Reference, SERVED, false));
        assert_eq!(
            made(&p)[2..],
            [(Fused, DType::F64)],
            "B is the fp8 floor run"
        );
        assert_eq!(cal(&p), (2, 1, 1));
        let p = planned(file(SERVED), file(DType::BF16));
        assert_eq!(
            made(&p),
            [
                (Fused, DType::F64),
                (Reference, SERVED),
                (Reference, DType::BF16)
            ]
        );
    }

    #[test]
    fn nothing_runs_for_uncalibrated_files_and_runs_stop_where_asked() {
        let spec = Spec {
            a: file(DType::F32),
            b: file(DType::F32),
            calibration: Calibration::NoFloor,
            ops: false,
            through: Some(3),
            routing: Routing::Own,
        };
        let p = plan(&spec);
        assert!(p.runs.is_empty() && p.calibration.is_none());
        let p = plan(&Spec {
            calibration: Calibration::Measure,
            ..spec
        });
        assert!(p.runs.iter().all(|r| r.through == Some(3)));
    }

    #[test]
    fn sides_that_route_apart_get_a_truth_and_floor_each() {
        let spec = |routing| Spec {
            a: file(DType::BF16),
            b: file(DType::BF16),
            calibration: Calibration::Measure,
            ops: false,
            through: None,
            routing,
        };
        let p = plan(&spec(Routing::Shared));
        assert_eq!(made(&p), [(Fused, DType::F64), (Reference, DType::BF16)]);
        assert!(p.runs.iter().all(|r| r.routes == RoutedBy::A));
        assert_eq!(p.calibration.map(|c| c.truth_b), Some(0));
        let p = plan(&spec(Routing::EachSide));
        let routes: Vec<RoutedBy> = p.runs.iter().map(|r| r.routes).collect();
        assert_eq!(
            routes,
            [RoutedBy::A, RoutedBy::A, RoutedBy::B, RoutedBy::B],
            "{:?}",
            p.runs
        );
        let c = p.calibration.expect("calibrated");
        assert_eq!((c.truth, c.floor_a, c.floor_b, c.truth_b), (0, 1, 2, 3));
        // A live reference side routes itself: it stands in for no routed run.
        let p = plan(&Spec {
            a: SideSpec::Live(Live {
                backend: Reference,
                dtype: DType::BF16,
                fed: false,
            }),
            ..spec(Routing::Shared)
        });
        assert_eq!(p.runs.len(), 3, "{:?}", p.runs);
    }
}
