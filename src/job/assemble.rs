//! A comparison put together from a job's runs and the parts its command supplies, and its
//! report built: the one call of [`build_report`]. The spec decides the dtype whose bands
//! judge, the report's mode and whether the floor was skipped by request; the runs give the
//! live sides' captures, the truth and the floors.

use super::execute::Executed;
use super::plan::{Role, Source};
use super::spec::Calibration;
use crate::compare::softmax_equal::{LogSoftmaxLogits, Offset, offset};
use crate::compare::{PlannedRow, TensorSource};
use crate::error::{Error, Result};
use crate::report::{
    Alignment, Calibrated, ComparedInput, Comparison, DisjointLayers, Floor, Report, Side,
    build_report,
};
use crate::weights::non_finite::NonFiniteTensor;

/// What the command knows that the runs do not: the given sides' captures, how each side is
/// described, the rows and the input.
pub struct Parts<'a> {
    pub given: Given<'a>,
    pub a_side: Side,
    pub b_side: Side,
    pub rows: Vec<PlannedRow>,
    pub input: ComparedInput,
    pub command: Option<String>,
}

/// The captures of the sides the spec gives (a file, a golden file); a live side's are its
/// run's.
#[derive(Clone, Copy)]
pub enum Given<'a> {
    /// Both sides are live runs.
    Neither,
    /// Side A is given (a golden file), side B is a run.
    A(&'a dyn TensorSource),
    /// Both sides are files.
    Both(&'a dyn TensorSource, &'a dyn TensorSource),
}

impl<'a> Given<'a> {
    fn side(&self, role: Role) -> Option<&'a dyn TensorSource> {
        match (self, role) {
            (Given::A(a) | Given::Both(a, _), Role::A) => Some(*a),
            (Given::Both(_, b), Role::B) => Some(*b),
            _ => None,
        }
    }
}

/// What comparing two files found beyond their rows (a live run or a check finds none of it).
#[derive(Default)]
pub struct Findings {
    pub alignment: Option<Alignment>,
    /// How the files were read and calibrated, before the report's own notes.
    pub notes: Vec<String>,
    /// About other views of the same comparison (the trained positions), after the report's
    /// own notes.
    pub closing_notes: Vec<String>,
    /// Findings of how the files were read that lead the headline and make the verdict a
    /// mismatch (a drafter's declared layer ids the truth shows to be off).
    pub leading_findings: Vec<String>,
    /// Sides that record no router choices whose routing the calibration runs took from their
    /// states instead (`commands::compare::recovered_routes`).
    pub routing_recovered: Vec<String>,
    pub one_sided: Option<DisjointLayers>,
    /// Why there is no calibration, when it is not the generic "no model".
    pub uncalibrated_why: Option<String>,
}

/// The same tensors seen otherwise (e.g. at the positions a `loss_mask` trains on only).
pub type View<'v> = &'v dyn for<'s> Fn(&'s dyn TensorSource) -> Box<dyn TensorSource + 's>;

/// `f` as a [`View`] (closures take their higher-ranked signature from a bound).
pub fn view<F>(f: F) -> F
where
    F: for<'s> Fn(&'s dyn TensorSource) -> Box<dyn TensorSource + 's>,
{
    f
}

/// The truth, the floors and B's own truth of a calibration, each seen through a view.
type SeenCalibration<'s> = (
    Box<dyn TensorSource + 's>,
    Box<dyn TensorSource + 's>,
    Option<Box<dyn TensorSource + 's>>,
    Option<Box<dyn TensorSource + 's>>,
);

fn seen_sources<'s>(cal: &Option<Calibrated<'s>>, view: View) -> Option<SeenCalibration<'s>> {
    cal.as_ref().map(|c| {
        (
            view(c.truth),
            view(c.floor_a.src),
            c.floor_b.as_ref().map(|f| view(f.src)),
            c.truth_b.map(view),
        )
    })
}

/// `cal` with its sources replaced by the seen ones.
fn seen_calibration<'s>(
    cal: &Option<Calibrated>,
    seen: &'s Option<SeenCalibration>,
) -> Option<Calibrated<'s>> {
    match (cal, seen) {
        (Some(c), Some((t, fa, fb, tb))) => Some(Calibrated {
            truth: &**t,
            truth_b: tb.as_deref(),
            floor_a: Floor {
                src: &**fa,
                dtype: c.floor_a.dtype,
            },
            floor_b: match (&c.floor_b, fb) {
                (Some(f), Some(v)) => Some(Floor {
                    src: &**v,
                    dtype: f.dtype,
                }),
                _ => None,
            },
            source: c.source.clone(),
        }),
        _ => None,
    }
}

impl Executed<'_> {
    /// The report of this job's comparison of live runs (a check's golden file is given).
    pub fn report(&self, parts: Parts) -> Result<Report> {
        self.report_of_files(parts, Findings::default())
    }

    /// The report of this job's comparison with what comparing two files found.
    pub fn report_of_files(&self, parts: Parts, findings: Findings) -> Result<Report> {
        let (a, b) = self.sources(&parts.given)?;
        self.judged(parts, findings, a, b, self.calibrated())
    }

    /// The report of the same comparison with every source — both sides, the truth, the
    /// floors — seen through `view`.
    pub fn report_seen(&self, parts: Parts, findings: Findings, view: View) -> Result<Report> {
        let (a, b) = self.sources(&parts.given)?;
        let (va, vb) = (view(a), view(b));
        let cal = self.calibrated();
        let seen = seen_sources(&cal, view);
        self.judged(parts, findings, &*va, &*vb, seen_calibration(&cal, &seen))
    }

    /// The report, with every source's logits seen as their log-softmax when the two sides'
    /// logits differ by a per-position constant (softmax-equal: the constant is no finding).
    fn judged(
        &self,
        parts: Parts,
        findings: Findings,
        a: &dyn TensorSource,
        b: &dyn TensorSource,
        calibration: Option<Calibrated>,
    ) -> Result<Report> {
        let Some(found) = offset(a, b)? else {
            return self.build((parts, findings), a, b, calibration, None);
        };
        let log_softmax = view(|s| Box::new(LogSoftmaxLogits { inner: s }));
        let (la, lb) = (log_softmax(a), log_softmax(b));
        let seen = seen_sources(&calibration, &log_softmax);
        let cal = seen_calibration(&calibration, &seen);
        self.build((parts, findings), &*la, &*lb, cal, Some(found))
    }

    /// A live side as the report describes it: labelled with its backend's name and
    /// `suffix`, with its run's fingerprint.
    pub fn live_side(&self, role: Role, suffix: &str) -> Result<Side> {
        let not_run = || Error::Internal(format!("side {role:?} is not a run of this job"));
        let name = self.backend_name(role).ok_or_else(not_run)?;
        let fp = self.fingerprint(role).ok_or_else(not_run)?;
        Ok(Side::from_fingerprint(format!("{name}{suffix}"), fp))
    }

    /// Both sides' captures: their runs', or the ones `given` holds.
    fn sources<'s>(
        &'s self,
        given: &Given<'s>,
    ) -> Result<(&'s dyn TensorSource, &'s dyn TensorSource)> {
        Ok((
            self.source_of(Role::A, given.side(Role::A))?,
            self.source_of(Role::B, given.side(Role::B))?,
        ))
    }

    fn source_of<'s>(
        &'s self,
        role: Role,
        given: Option<&'s dyn TensorSource>,
    ) -> Result<&'s dyn TensorSource> {
        match (self.side(role), given) {
            (Some(run), None) => Ok(run),
            (None, Some(src)) => Ok(src),
            _ => Err(Error::Internal(format!(
                "side {role:?}: captures given for a live side, or none for a given one"
            ))),
        }
    }

    fn build(
        &self,
        (parts, findings): (Parts, Findings),
        a: &dyn TensorSource,
        b: &dyn TensorSource,
        calibration: Option<Calibrated>,
        logits_offset: Option<Offset>,
    ) -> Result<Report> {
        let spec = self.spec();
        debug_assert!(matches!(
            (self.job.plan.a, parts.given.side(Role::A).is_some()),
            (Source::Given, true) | (Source::Run(_), false)
        ));
        let mut notes = findings.notes;
        notes.extend(non_finite_note(self.non_finite_weights()));
        build_report(&Comparison {
            a,
            b,
            a_side: parts.a_side,
            b_side: parts.b_side,
            calibration,
            floor_skipped: spec.calibration == Calibration::NoFloor,
            uncalibrated_why: findings.uncalibrated_why,
            rows: parts.rows,
            dtype: spec.dtype(),
            mode: spec.mode(),
            input: parts.input,
            command: parts.command,
            alignment: findings.alignment,
            notes,
            closing_notes: findings.closing_notes,
            leading_findings: findings.leading_findings,
            routing_recovered: findings.routing_recovered,
            disjoint: findings.one_sided,
            logits_offset,
        })
    }
}

/// Tensors named in full by the note on non-finite weights; the rest are counted.
const NON_FINITE_SHOWN: usize = 4;

/// The note on weights stored with NaN or ±Inf: a run reads only its tokens' embedding rows and
/// its routed experts, so its rows can be finite and its verdict benign while the checkpoint
/// gives NaN to every input that reads them.
fn non_finite_note(found: &[NonFiniteTensor]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let shown: Vec<String> = (found.iter().take(NON_FINITE_SHOWN))
        .map(NonFiniteTensor::describe)
        .collect();
    let more = match found.len().saturating_sub(NON_FINITE_SHOWN) {
        0 => String::new(),
        n => format!("; and {n} more tensor(s)"),
    };
    Some(format!(
        "the checkpoint stores non-finite weights: {}{more}. A run whose input reads them \
         computes NaN; where this run's rows are finite, its input never did",
        shown.join("; ")
    ))
}
