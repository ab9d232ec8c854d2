//! Whether two files are plausibly runs of the model that calibrates them. `compare --model DIR`
//! (or a model a fingerprint names) judges both files against that model's f64 truth; if the
//! files came from another model, every row is "equally far from the truth" and the floor rule
//! reads two unrelated runs as agreeing. So before judging, each side is checked against the
//! truth at the first tensor both hold:
//!
//! - the embedding output (`embed`), when captured: the token ids' embedding rows are the model's
//!   own weights, exact up to the side's storage dtype — more than the dtype's `fail` band off
//!   means other weights;
//! - the first captured decoder layer: farther than [`IMPLAUSIBLE_REL`] from the truth and more
//!   than [`IMPLAUSIBLE_FLOORS`] × that side's floor there. A real bug can do that to one side
//!   (q/k L2 norm skipped: 0.78 at layers.1 on the golden models), so a refusal needs *both*
//!   sides to fail; then the comparison stops with the evidence (exit 2).

use candle_core::DType;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::metrics::stats::rel_l2_tensors;
use crate::compare::verdict::thresholds;
use crate::error::{Error, Result};
use crate::report::Calibrated;
use crate::util::device::dtype_label;

/// A side this far (rel L2) from the truth at its first captured layer shares little with it:
/// the error is half the signal.
pub const IMPLAUSIBLE_REL: f64 = 0.5;

/// …and this many floors away, so that no dtype's rounding explains it.
pub const IMPLAUSIBLE_FLOORS: f64 = 100.0;

/// What one side's first comparable tensor says.
#[derive(Debug, Clone, PartialEq)]
pub struct SideEvidence {
    pub tensor: String,
    pub rel_l2: f64,
    /// The side's floor at that tensor (none for the embedding, whose floor is 0).
    pub floor: Option<f64>,
    pub plausible: bool,
}

impl SideEvidence {
    fn describe(&self, side: &str, dtype: DType) -> String {
        let floors = match self.floor.filter(|f| *f > 0.0) {
            Some(f) => format!(
                ", {:.1e}× the {} floor",
                self.rel_l2 / f,
                dtype_label(dtype)
            ),
            None => String::new(),
        };
        let rel = if self.rel_l2 >= 0.1 {
            format!("{:.2}", self.rel_l2)
        } else {
            format!("{:.2e}", self.rel_l2)
        };
        format!(
            "{side} is {rel} rel L2 from its truth at {}{floors}",
            self.tensor
        )
    }
}

/// The first tensor of `side` the truth also holds: `embed`, else the lowest `layers.{i}`.
fn first_shared(side: &dyn TensorSource, truth: &dyn TensorSource) -> Option<Key> {
    let hidden = |src: &dyn TensorSource| -> Vec<Key> {
        src.names()
            .iter()
            .filter_map(|n| Key::of(n))
            .filter(|k| matches!(k, Key::Embed | Key::Layer(_)))
            .collect()
    };
    let in_truth = hidden(truth);
    // Forward order: `embed` before every layer.
    hidden(side)
        .into_iter()
        .filter(|k| in_truth.contains(k))
        .min()
}

/// One side against the truth, with its floor source; None when nothing can be compared.
fn evidence(
    side: &dyn TensorSource,
    dtype: DType,
    truth: &dyn TensorSource,
    floor: &dyn TensorSource,
) -> Result<Option<SideEvidence>> {
    let Some(key) = first_shared(side, truth) else {
        return Ok(None);
    };
    let name = key.to_string();
    let (Some(x), Some(t)) = (side.tensor(&name)?, truth.tensor(&name)?) else {
        return Ok(None);
    };
    if x.dims() != t.dims() {
        // A shape that does not fit the model is its own evidence.
        return Ok(Some(SideEvidence {
            tensor: format!("{name} (shape {:?}, the model's {:?})", x.dims(), t.dims()),
            rel_l2: f64::INFINITY,
            floor: None,
            plausible: false,
        }));
    }
    let rel = rel_l2_tensors(&x, &t)?;
    if key == Key::Embed {
        return Ok(Some(SideEvidence {
            tensor: name,
            rel_l2: rel,
            floor: None,
            plausible: rel <= thresholds(dtype).fail,
        }));
    }
    let floor = match floor.tensor(&name)? {
        Some(f) if f.dims() == t.dims() => Some(rel_l2_tensors(&f, &t)?),
        _ => None,
    };
    let beyond_floor = floor.is_none_or(|f| rel > IMPLAUSIBLE_FLOORS * f);
    Ok(Some(SideEvidence {
        tensor: name,
        rel_l2: rel,
        floor,
        plausible: !(rel > IMPLAUSIBLE_REL && beyond_floor),
    }))
}

/// Checks sides `a` and `b` (computed in `dtypes`) against the truth of `cal` (`how` names the
/// model): an error (exit 2) when neither is plausibly a run of it, a note with the evidence
/// when one is not, nothing when both are.
pub fn check(
    cal: &Calibrated,
    a: &dyn TensorSource,
    b: &dyn TensorSource,
    (a_dtype, b_dtype): (DType, DType),
    how: &str,
) -> Result<Option<String>> {
    let floor_b = cal.floor_b.as_ref().unwrap_or(&cal.floor_a);
    let ea = evidence(a, a_dtype, cal.truth, cal.floor_a.src)?;
    let eb = evidence(b, b_dtype, cal.truth, floor_b.src)?;
    match (&ea, &eb) {
        (Some(x), Some(y)) if !x.plausible && !y.plausible => Err(Error::Compare(format!(
            "neither file matches this model ({how}): {}; {} — give --model the checkpoint they \
             were captured from (or --no-floor to compare them uncalibrated)",
            x.describe("A", a_dtype),
            y.describe("B", b_dtype)
        ))),
        _ => Ok([("A", &ea, a_dtype), ("B", &eb, b_dtype)]
            .into_iter()
            .find_map(|(s, e, d)| e.as_ref().filter(|e| !e.plausible).map(|e| (s, e, d)))
            .map(|(s, e, d)| {
                format!(
                    "{s} is not plausibly a correct run of this model ({}); the other side is",
                    e.describe(s, d)
                )
            })),
    }
}
