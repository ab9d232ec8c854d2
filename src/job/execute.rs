//! The one executor: a plan's runs made on a model's input, in order.

use candle_core::DType;

use super::plan::{Role, RoutedBy, Run, Source};
use super::prior::{Prior, Recording, Reuse};
use super::{Job, Spec};
use crate::backends::LinearAttentionBackend;
use crate::capture::Captures;
use crate::capture::fingerprint::Fingerprint;
use crate::error::{Error, Result};
use crate::job::session::ModelInput;
use crate::model::{Recorder, Routes, RunOptions};
use crate::report::{Calibrated, Floor};
use crate::util::device::dtype_label;
use crate::util::progress::Progress;
use crate::weights::non_finite::NonFiniteTensor;

/// A job whose runs are made: their captures, and the input they were made on.
pub struct Executed<'a> {
    pub job: Job,
    runs: Vec<Captures>,
    /// The backend that made each run.
    backends: Vec<Opened<'a>>,
    input: Option<ModelInput<'a>>,
    /// Its calibration runs and those it was given, for a later job on the same input.
    prior: Prior,
}

/// Backends that run a side in place of its kind's (fault injection in tests): A's, B's.
#[derive(Clone, Copy, Default)]
pub struct Instead<'a> {
    pub a: Option<&'a dyn LinearAttentionBackend>,
    pub b: Option<&'a dyn LinearAttentionBackend>,
}

enum Opened<'a> {
    Own(Box<dyn LinearAttentionBackend>),
    Lent(&'a dyn LinearAttentionBackend),
}

impl Opened<'_> {
    fn get(&self) -> &dyn LinearAttentionBackend {
        match self {
            Opened::Own(b) => b.as_ref(),
            Opened::Lent(b) => *b,
        }
    }
}

impl Job {
    /// Makes the plan's runs on `input` (None: a job with no runs, an uncalibrated comparison
    /// of files). Every backend is opened, and checked against the device, before the first
    /// run.
    pub fn execute(self, input: Option<ModelInput<'_>>) -> Result<Executed<'_>> {
        self.execute_instead(input, Instead::default())
    }

    /// [`Job::execute`] taking from or resuming `prior`'s runs what its calibration runs share
    /// with them ([`crate::job::prior`]).
    pub fn execute_after(
        self,
        input: Option<ModelInput<'_>>,
        prior: Prior,
    ) -> Result<Executed<'_>> {
        self.make_runs(input, Instead::default(), prior)
    }

    /// [`Job::execute`] with the sides' runs made by `instead`'s backends where it has one.
    pub fn execute_instead<'a>(
        self,
        input: Option<ModelInput<'a>>,
        instead: Instead<'a>,
    ) -> Result<Executed<'a>> {
        self.make_runs(input, instead, Prior::default())
    }

    fn make_runs<'a>(
        self,
        input: Option<ModelInput<'a>>,
        instead: Instead<'a>,
        mut prior: Prior,
    ) -> Result<Executed<'a>> {
        let open = |r: &Run, device| -> Result<Opened<'a>> {
            let lent = match r.role {
                Role::A => instead.a,
                Role::B => instead.b,
                Role::Calibration => None,
            };
            Ok(match lent {
                Some(b) => {
                    b.check_device(device)?;
                    Opened::Lent(b)
                }
                None => Opened::Own(r.backend.open(device)?),
            })
        };
        let backends = match (&input, self.plan.runs.is_empty()) {
            (_, true) => Vec::new(),
            (Some(input), false) => self
                .plan
                .runs
                .iter()
                .map(|r| open(r, input.device))
                .collect::<Result<Vec<_>>>()?,
            (None, false) => {
                return Err(Error::Internal(
                    "a job with runs to make was given no model".to_string(),
                ));
            }
        };
        let mut runs: Vec<Captures> = Vec::with_capacity(self.plan.runs.len());
        if let Some(input) = &input {
            // Runs of one dtype read the same weights in the same dtype: convert them once.
            if let Some(dtype) = shared_dtype(&self.plan.runs) {
                input.model.keep_weights(dtype, input.device);
            }
            for (run, backend) in self.plan.runs.iter().zip(&backends) {
                let feed = match (run.fed, self.plan.a) {
                    (false, _) => None,
                    (true, Source::Run(i)) if i < runs.len() => Some(&runs[i]),
                    (true, _) => {
                        return Err(Error::Internal(
                            "a fed run needs side A's run made before it".to_string(),
                        ));
                    }
                };
                let routes = routes_of(input, run)?;
                let made = match (run.role, feed) {
                    (Role::Calibration, None) => calibration(
                        input,
                        backend.get(),
                        (run, routes),
                        self.spec.ops,
                        &mut prior,
                    )?,
                    _ => forward(
                        input,
                        backend.get(),
                        (run, routes),
                        self.spec.ops,
                        feed,
                        None,
                    )?,
                };
                runs.push(made);
            }
        }
        Ok(Executed {
            job: self,
            runs,
            backends,
            input,
            prior,
        })
    }
}

/// The routes a run's MoE layers use (None: its routers').
fn routes_of<'i>(input: &ModelInput<'i>, run: &Run) -> Result<Option<&'i Routes>> {
    let missing = || {
        Error::Internal(format!(
            "a run routed by side {:?} was given no router choices of that side",
            run.routes
        ))
    };
    Ok(match run.routes {
        RoutedBy::Own => None,
        RoutedBy::A => Some(input.routes.a.ok_or_else(missing)?),
        RoutedBy::B => Some(input.routes.b.ok_or_else(missing)?),
    })
}

/// An unfed calibration run routed by `routes` (with ops when `ops`), taken from or resuming
/// `prior`'s runs where it can, and kept there for the runs after it.
fn calibration(
    input: &ModelInput,
    backend: &dyn LinearAttentionBackend,
    (run, routes): (&Run, Option<&Routes>),
    ops: bool,
    prior: &mut Prior,
) -> Result<Captures> {
    let recording = Recording {
        backend: run.backend,
        dtype: run.dtype,
        through: run.through,
        ops,
    };
    let layers = input.model.config.num_hidden_layers;
    let last = run.through.map_or(layers, |l| l + 1).min(layers) - 1;
    let made = match prior.reuse(recording, routes, last) {
        Reuse::Taken(caps) => return Ok(caps.clone()),
        Reuse::Resumed(caps, at) => {
            forward(input, backend, (run, routes), ops, None, Some((caps, at)))?
        }
        Reuse::Fresh => forward(input, backend, (run, routes), ops, None, None)?,
    };
    prior.add(recording, routes, &made);
    Ok(made)
}

/// The f64 truth on `input` routed by `routes`, made and recorded as a job's truth runs are
/// (by [`TRUTH_BACKEND`](super::TRUTH_BACKEND), stopped after `through`, with ops when `ops`),
/// taken from or resuming `prior`'s runs where it can, and kept there: routing recovery's
/// tries, which a later job on the same input then takes.
pub fn truth_run(
    input: &ModelInput,
    routes: Option<&Routes>,
    (through, ops): (Option<usize>, bool),
    prior: &mut Prior,
) -> Result<Captures> {
    let run = Run {
        backend: super::TRUTH_BACKEND,
        dtype: DType::F64,
        fed: false,
        through,
        role: Role::Calibration,
        routes: RoutedBy::Own,
    };
    let backend = run.backend.open(input.device)?;
    calibration(input, backend.as_ref(), (&run, routes), ops, prior)
}

/// The dtype two or more runs share (the first such, in run order), if any.
fn shared_dtype(runs: &[Run]) -> Option<DType> {
    runs.iter()
        .map(|r| r.dtype)
        .find(|d| runs.iter().filter(|r| r.dtype == *d).count() > 1)
}

/// One run routed by `routes`, resuming `resume` (a run and the layer it parts at) when given,
/// with a progress line on stderr.
fn forward(
    input: &ModelInput,
    backend: &dyn LinearAttentionBackend,
    (run, routes): (&Run, Option<&Routes>),
    capture_ops: bool,
    feed: Option<&Captures>,
    resume: Option<(&Captures, usize)>,
) -> Result<Captures> {
    let label = format!("{} {}", backend.name(), dtype_label(run.dtype));
    let layers = input.model.config.num_hidden_layers;
    let total = run.through.map_or(layers, |l| (l + 1).min(layers));
    let progress = Progress::new(&label, total as u64);
    let opts = RunOptions {
        dtype: run.dtype,
        device: input.device.clone(),
        backend,
    };
    let mut recorder = Recorder::new(input.ids)
        .with_ops(capture_ops)
        // The `state.layers.{i}.*` rows of the report.
        .with_states(true)
        // What routing recovery tries at a near-tie, from the truth.
        .with_router_logits(run.role == Role::Calibration && run.dtype == DType::F64)
        .fed_by(feed)
        .routed_by(routes)
        .resuming(resume);
    input
        .model
        .observe(input.ids, &opts, &mut recorder, &progress, run.through)?;
    Ok(recorder.into_captures())
}

impl<'a> Executed<'a> {
    pub fn spec(&self) -> &Spec {
        &self.job.spec
    }

    /// Its calibration runs, for a later job on the same input (it keeps none).
    pub fn take_prior(&mut self) -> Prior {
        std::mem::take(&mut self.prior)
    }

    /// The captures of a side that is a run (None: a given side).
    pub fn side(&self, role: Role) -> Option<&Captures> {
        match self.source(role) {
            Source::Run(i) => self.runs.get(i),
            Source::Given => None,
        }
    }

    fn source(&self, role: Role) -> Source {
        match role {
            Role::A => self.job.plan.a,
            Role::B => self.job.plan.b,
            Role::Calibration => Source::Given,
        }
    }

    /// What the run of a live side was: this machine, the model, the input, its backend and
    /// dtype (None: a given side).
    pub fn fingerprint(&self, role: Role) -> Option<Fingerprint> {
        let (Source::Run(i), Some(input)) = (self.source(role), &self.input) else {
            return None;
        };
        let run = self.job.plan.runs.get(i)?;
        Some(input.fingerprint(self.backends.get(i)?.get(), run.dtype))
    }

    /// The stored weights of the model the runs were made on that hold NaN or ±Inf (none
    /// without a model).
    pub fn non_finite_weights(&self) -> &[NonFiniteTensor] {
        self.input
            .as_ref()
            .map_or(&[], |input| input.model.weights.non_finite())
    }

    /// The name of the backend that made a live side's run (None: a given side).
    pub fn backend_name(&self, role: Role) -> Option<&'static str> {
        match self.source(role) {
            Source::Run(i) => self.backends.get(i).map(|b| b.get().name()),
            Source::Given => None,
        }
    }

    /// The f64 truth (None: uncalibrated).
    pub fn truth(&self) -> Option<&Captures> {
        let c = self.job.plan.calibration?;
        self.runs.get(c.truth)
    }

    /// The truth and each side's floor, as a report reads them (None: uncalibrated).
    pub fn calibrated(&self) -> Option<Calibrated<'_>> {
        let (c, input) = (self.job.plan.calibration?, self.input.as_ref()?);
        let (a, b) = (self.job.spec.a.dtype(), self.job.spec.b.dtype());
        let floor = |i: usize, dtype: DType| {
            Some(Floor {
                src: self.runs.get(i)?,
                dtype,
            })
        };
        let dtypes = if a == b {
            dtype_label(a).to_string()
        } else {
            format!("{} (A) and {} (B)", dtype_label(a), dtype_label(b))
        };
        let truth_backend = self.job.plan.runs.get(c.truth)?.backend.name();
        Some(Calibrated {
            truth: self.runs.get(c.truth)?,
            truth_b: if c.truth_b == c.truth {
                None
            } else {
                Some(self.runs.get(c.truth_b)?)
            },
            floor_a: floor(c.floor_a, a)?,
            floor_b: if c.floor_b == c.floor_a {
                None
            } else {
                Some(floor(c.floor_b, b)?)
            },
            source: format!(
                "{} backend at {dtypes} vs {truth_backend} at f64, same input, {}",
                super::plan::FLOOR_BACKEND.name(),
                input.model.source
            ),
        })
    }
}
