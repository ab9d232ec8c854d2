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
//!   than [`IMPLAUSIBLE_FLOORS`] × that side's floor there;
//! - every captured decoder layer: each farther than [`IMPLAUSIBLE_REL`] or with a cosine
//!   below [`IMPLAUSIBLE_COSINE`], whatever the floor — a MoE model's floor (4.4e-2 in bf16)
//!   would let a dense model's files, 1.2 rel L2 away at every layer, through the first rule.
//!
//! A real bug can do either to one side (q/k L2 norm skipped: 0.78 at layers.1 on the golden
//! models; weights never loaded: far everywhere), so a refusal needs *both* sides to fail; then
//! the comparison stops with the evidence (exit 2). A side whose evidence is not finite (a NaN
//! run) is not judged here: non-finite values are the report's first finding, never blamed on
//! the model.

use candle_core::DType;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::metrics::stats::{rel_l2, rel_l2_tensors};
use crate::compare::verdict::thresholds;
use crate::error::{Error, Result};
use crate::report::Calibrated;
use crate::util::device::dtype_label;

/// A side this far (rel L2) from the truth at its first captured layer shares little with it:
/// the error is half the signal.
pub const IMPLAUSIBLE_REL: f64 = 0.5;

/// …and this many floors away, so that no dtype's rounding explains it.
pub const IMPLAUSIBLE_FLOORS: f64 = 100.0;

/// A layer whose cosine with the truth is below this points elsewhere as much as along it.
pub const IMPLAUSIBLE_COSINE: f64 = 0.5;

/// Every layer is compared on its first this many tokens: enough to tell a model from another.
const HEAD_TOKENS: usize = crate::compare::alignment::SAMPLE_TOKENS;

/// What one side's first comparable tensor says.
#[derive(Debug, Clone, PartialEq)]
pub struct SideEvidence {
    pub tensor: String,
    pub rel_l2: f64,
    /// The side's floor at that tensor (none for the embedding, whose floor is 0).
    pub floor: Option<f64>,
    /// Every captured layer far from the truth: how many, and the nearest of them.
    pub far_everywhere: Option<FarEverywhere>,
    pub plausible: bool,
}

/// Every layer of a side far from the truth (rel L2 above [`IMPLAUSIBLE_REL`] or cosine below
/// [`IMPLAUSIBLE_COSINE`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FarEverywhere {
    pub layers: usize,
    /// The smallest rel L2 and the largest cosine over those layers.
    pub min_rel_l2: f64,
    pub max_cosine: f64,
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
        match &self.far_everywhere {
            Some(far) => format!(
                "{side} is far from its truth at every one of its {} layers (rel L2 ≥ {:.2}, \
                 cosine ≤ {:.2}; {rel} at {}{floors})",
                far.layers, far.min_rel_l2, far.max_cosine, self.tensor
            ),
            None => format!(
                "{side} is {rel} rel L2 from its truth at {}{floors}",
                self.tensor
            ),
        }
    }
}

/// The first tensor of `side` the truth also holds: `embed`, else the lowest `layers.{i}`.
fn first_shared(side: &dyn TensorSource, truth: &dyn TensorSource) -> Option<Key> {
    let hidden = |src: &dyn TensorSource| -> Vec<Key> {
        src.keys()
            .into_iter()
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
    let (Some(x), Some(t)) = (side.tensor(key)?, truth.tensor(key)?) else {
        return Ok(None);
    };
    if x.dims() != t.dims() {
        // A shape that does not fit the model is its own evidence.
        return Ok(Some(SideEvidence {
            tensor: format!("{name} (shape {:?}, the model's {:?})", x.dims(), t.dims()),
            rel_l2: f64::INFINITY,
            floor: None,
            far_everywhere: None,
            plausible: false,
        }));
    }
    let rel = rel_l2_tensors(&x, &t)?;
    if rel.is_nan() {
        // Non-finite values: the report's first finding, not evidence of another model.
        return Ok(None);
    }
    if key == Key::Embed {
        return Ok(Some(SideEvidence {
            tensor: name,
            rel_l2: rel,
            floor: None,
            far_everywhere: None,
            plausible: rel <= thresholds(dtype).fail,
        }));
    }
    let floor = match floor.tensor(key)? {
        Some(f) if f.dims() == t.dims() => Some(rel_l2_tensors(&f, &t)?),
        _ => None,
    };
    let beyond_floor = floor.is_none_or(|f| rel > IMPLAUSIBLE_FLOORS * f);
    let far_everywhere = far_at_every_layer(side, truth)?;
    Ok(Some(SideEvidence {
        tensor: name,
        rel_l2: rel,
        floor,
        plausible: !(rel > IMPLAUSIBLE_REL && beyond_floor) && far_everywhere.is_none(),
        far_everywhere,
    }))
}

/// Some when every decoder layer `side` and the truth both hold is far from the truth (on the
/// first [`HEAD_TOKENS`] tokens); None when one is near, or a layer is not finite.
fn far_at_every_layer(
    side: &dyn TensorSource,
    truth: &dyn TensorSource,
) -> Result<Option<FarEverywhere>> {
    let in_truth = truth.keys();
    let mut far = FarEverywhere {
        layers: 0,
        min_rel_l2: f64::INFINITY,
        max_cosine: f64::NEG_INFINITY,
    };
    for key in side.keys() {
        if !matches!(key, Key::Layer(_)) || !in_truth.contains(&key) {
            continue;
        }
        let (Some(x), Some(t)) = (
            side.tensor_head(key, HEAD_TOKENS)?,
            truth.tensor_head(key, HEAD_TOKENS)?,
        ) else {
            continue;
        };
        if x.dims() != t.dims() {
            continue;
        }
        let x: Vec<f64> = x.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
        let t: Vec<f64> = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
        let (rel, cos) = (rel_l2(&x, &t), cosine(&x, &t));
        if !rel.is_finite() || !cos.is_finite() {
            return Ok(None);
        }
        if rel <= IMPLAUSIBLE_REL && cos >= IMPLAUSIBLE_COSINE {
            return Ok(None);
        }
        far.layers += 1;
        far.min_rel_l2 = far.min_rel_l2.min(rel);
        far.max_cosine = far.max_cosine.max(cos);
    }
    Ok((far.layers > 0).then_some(far))
}

/// cos(x, t) in f64; NaN when either is all zeros.
fn cosine(x: &[f64], t: &[f64]) -> f64 {
    let (mut xt, mut xx, mut tt) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(t) {
        xt += a * b;
        xx += a * a;
        tt += b * b;
    }
    xt / (xx * tt).sqrt()
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
