//! Token alignment: are B's hidden states A's one position later (or earlier)?
//!
//! One pipeline dropped the first token, or ran with a BOS the other lacks: position t of one
//! side then holds the state of the other's t + 1, and every row disagrees although each side
//! may be right. Where both files carry token ids, the ids show this (`token_difference`);
//! where a side carries none, or its states are stored shifted against its ids, the states are
//! the evidence: over the decoder layers both hold (first [`SAMPLE_TOKENS`] + 1 positions), the
//! median rel L2 of (A[t + 1], B[t]) and of (A[t], B[t + 1]) against the unshifted (A[t], B[t]).
//! A shift is reported only when it is [`FAR_BETTER`]× closer than the unshifted reading, and
//! that reading does not already agree.

use candle_core::DType;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::{median, rel_l2};
use crate::error::Result;

/// Which side's states are one position later than the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Later {
    /// A[t + 1] is B[t]: A holds one leading position B lacks.
    A,
    /// B[t + 1] is A[t].
    B,
}

/// A one-token shift found in the states.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenShift {
    pub later: Later,
    /// Median rel L2 over the layers: unshifted, and at the shift.
    pub unshifted: f64,
    pub shifted: f64,
    pub layers: usize,
}

impl TokenShift {
    fn sides(&self) -> (&'static str, &'static str) {
        match self.later {
            Later::A => ("A", "B"),
            Later::B => ("B", "A"),
        }
    }

    /// The finding, the same words for every pair that shows it (a dataset groups them).
    pub fn finding(&self) -> String {
        let (later, earlier) = self.sides();
        format!(
            "{later}'s states are {earlier}'s one token later ({later}[t + 1] is {earlier}[t]) — \
             a BOS {earlier} lacks, or {earlier}'s dropped first token: the captures are of \
             inputs shifted by one position"
        )
    }

    /// The evidence for a note.
    pub fn evidence(&self) -> String {
        let (later, earlier) = self.sides();
        format!(
            "{later}[t + 1] matches {earlier}[t]: median rel L2 {:.2e} over {} layers, against \
             {:.2e} unshifted",
            self.shifted, self.layers, self.unshifted
        )
    }
}

/// A token row matrix `[T, H]` of `src`'s tensor `key` (its first `n` positions), when it is
/// one sequence of finite values.
fn rows(src: &dyn TensorSource, key: Key, n: usize) -> Result<Option<(usize, Vec<f64>)>> {
    let Some(t) = src.tensor_head(key, n)? else {
        return Ok(None);
    };
    let dims = t.dims();
    if dims.len() < 2 || dims[..dims.len() - 2].iter().product::<usize>() != 1 {
        return Ok(None);
    }
    let (tokens, width) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let values: Vec<f64> = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
    if width == 0 || values.iter().any(|v| !v.is_finite()) {
        return Ok(None);
    }
    Ok(Some((tokens, values)))
}

/// rel L2 of A's positions from `da` against B's from `db`, over the positions both hold.
fn rel_at(a: &(usize, Vec<f64>), b: &(usize, Vec<f64>), (da, db): (usize, usize)) -> Option<f64> {
    let width = a.1.len() / a.0.max(1);
    let m = a.0.checked_sub(da)?.min(b.0.checked_sub(db)?);
    // Two positions at least: one token agreeing by chance is no evidence.
    (m >= 2 && b.1.len() / b.0.max(1) == width).then(|| {
        rel_l2(
            &a.1[da * width..(da + m) * width],
            &b.1[db * width..(db + m) * width],
        )
    })
}

/// The one-token shift of B's states against A's, when the states show one; `ok` is the rel L2
/// under which the unshifted reading already agrees (then nothing is looked for).
pub fn detect(a: &dyn TensorSource, b: &dyn TensorSource, ok: f64) -> Result<Option<TokenShift>> {
    let b_keys = b.keys();
    let mut scores: [Vec<f64>; 3] = Default::default();
    for key in a.keys() {
        if !matches!(key, Key::Embed | Key::Layer(_)) || !b_keys.contains(&key) {
            continue;
        }
        let (Some(x), Some(y)) = (
            rows(a, key, SAMPLE_TOKENS + 1)?,
            rows(b, key, SAMPLE_TOKENS + 1)?,
        ) else {
            continue;
        };
        let at = [(0, 0), (1, 0), (0, 1)].map(|d| rel_at(&x, &y, d));
        if let [Some(u), Some(sa), Some(sb)] = at {
            for (s, v) in scores.iter_mut().zip([u, sa, sb]) {
                s.push(v);
            }
        }
    }
    let layers = scores[0].len();
    if layers == 0 {
        return Ok(None);
    }
    let [unshifted, a_later, b_later] = scores.map(|s| median(&s));
    if unshifted.is_nan() || unshifted <= ok {
        return Ok(None);
    }
    let (later, shifted) = if a_later <= b_later {
        (Later::A, a_later)
    } else {
        (Later::B, b_later)
    };
    Ok((shifted * FAR_BETTER < unshifted).then_some(TokenShift {
        later,
        unshifted,
        shifted,
        layers,
    }))
}
