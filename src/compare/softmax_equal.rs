//! Logits that differ by a constant at each position are the same next-token distribution
//! (softmax(x + c) = softmax(x)): a folded LayerNorm, or an lm_head fusion that drops a bias
//! shared by the whole vocabulary, gives such logits, and their raw |Δ| reads as a mismatch.
//! Here such a pair is detected, and the logits of every source are then seen as their
//! log-softmax, which the constant does not reach: what is left is the real difference.

use candle_core::{D, DType, Tensor};

use super::TensorSource;
use crate::capture::key::Key;
use crate::compare::metrics::StoredRows;
use crate::error::Result;

/// The share of the logits' squared difference that a per-position constant carries at or
/// above which the pair is read as offset (an honest pair's constant part is about 1/V of it).
const OFFSET_SHARE: f64 = 0.99;

/// A per-position constant between two sides' logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offset {
    /// The share of Σ(a − b)² the constants carry.
    pub share: f64,
    /// The largest |constant| over the positions.
    pub max_abs: f64,
}

/// The logits of `a` and `b` as `[T, V]`, when both hold logits of one shape.
fn logits_of(a: &dyn TensorSource, b: &dyn TensorSource) -> Result<Option<(Tensor, Tensor)>> {
    let (Some(x), Some(y)) = (a.tensor(Key::Logits)?, b.tensor(Key::Logits)?) else {
        return Ok(None);
    };
    if x.dims() != y.dims() || x.rank() < 2 || x.elem_count() == 0 {
        return Ok(None);
    }
    let v = x.dims()[x.rank() - 1];
    Ok(Some((x.reshape(((), v))?, y.reshape(((), v))?)))
}

/// The per-position constant between the two sides' logits, when it carries nearly all of
/// their difference; None when it does not, or either side lacks logits, or a value is not
/// finite (non-finite logits are judged as such, never explained away). One position's row
/// is widened to f64 at a time: a real vocabulary's logits are never copied whole.
pub fn offset(a: &dyn TensorSource, b: &dyn TensorSource) -> Result<Option<Offset>> {
    let Some((xa, xb)) = logits_of(a, b)? else {
        return Ok(None);
    };
    let (mut total, mut constant, mut max_abs) = (0.0, 0.0, 0.0_f64);
    for t in 0..xa.dim(0)? {
        let ra: Vec<f64> = xa.get(t)?.to_dtype(DType::F64)?.to_vec1()?;
        let rb: Vec<f64> = xb.get(t)?.to_dtype(DType::F64)?.to_vec1()?;
        if ra.iter().chain(&rb).any(|v| !v.is_finite()) {
            return Ok(None);
        }
        let n = ra.len() as f64;
        let mean = ra.iter().zip(&rb).map(|(x, y)| x - y).sum::<f64>() / n;
        total += ra
            .iter()
            .zip(&rb)
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f64>();
        constant += n * mean * mean;
        max_abs = max_abs.max(mean.abs());
    }
    if total == 0.0 {
        return Ok(None);
    }
    let share = constant / total;
    Ok((share >= OFFSET_SHARE).then_some(Offset { share, max_abs }))
}

/// `inner` with its logits seen as their log-softmax over the vocabulary (computed in f64,
/// kept in f64 for an f64 capture and in f32 otherwise); every other tensor as it is.
pub struct LogSoftmaxLogits<'s> {
    pub inner: &'s dyn TensorSource,
}

impl TensorSource for LogSoftmaxLogits<'_> {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        let t = self.inner.tensor(key)?;
        if key != Key::Logits {
            return Ok(t);
        }
        let Some(t) = t else { return Ok(None) };
        let keep = if t.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let ls = candle_nn::ops::log_softmax(&t.to_dtype(DType::F64)?, D::Minus1)?;
        Ok(Some(ls.to_dtype(keep)?))
    }

    fn keys(&self) -> Vec<Key> {
        self.inner.keys()
    }

    fn stored_rows(&self, key: Key) -> Result<Option<StoredRows<'_>>> {
        if key == Key::Logits {
            return Ok(None);
        }
        self.inner.stored_rows(key)
    }
}

/// The headline's clause for an offset pair.
pub fn clause(o: &Offset) -> String {
    format!(
        "logits differ by a per-position constant (up to {:.3e}, {:.1}% of their difference); softmax-equal: the logits row compares their log-softmax",
        o.max_abs,
        100.0 * o.share
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::cases::SplitMix;
    use candle_core::Device;

    struct Logits(Tensor);
    impl TensorSource for Logits {
        fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
            Ok((key == Key::Logits).then(|| self.0.clone()))
        }
        fn keys(&self) -> Vec<Key> {
            vec![Key::Logits]
        }
    }

    fn random(t: usize, v: usize, rng: &mut SplitMix) -> Vec<f32> {
        (0..t * v).map(|_| 4.0 * rng.normal() as f32).collect()
    }

    fn logits(values: Vec<f32>, t: usize, v: usize) -> Result<Logits> {
        Ok(Logits(Tensor::from_vec(values, (1, t, v), &Device::Cpu)?))
    }

    fn log_softmax_of(src: &Logits) -> Result<Tensor> {
        let seen = LogSoftmaxLogits { inner: src }.tensor(Key::Logits)?;
        Ok(seen.expect("the source holds logits"))
    }

    #[test]
    fn a_per_position_constant_is_found_and_log_softmax_removes_it() -> Result<()> {
        let (t, v) = (7, 97);
        let mut rng = SplitMix::new(0x5eed);
        let base = random(t, v, &mut rng);
        let shifts: Vec<f32> = (0..t).map(|_| 40.0 * rng.normal() as f32).collect();
        let shifted: Vec<f32> = base
            .iter()
            .enumerate()
            .map(|(i, x)| x + shifts[i / v])
            .collect();
        let (a, b) = (logits(base, t, v)?, logits(shifted, t, v)?);
        let o = offset(&a, &b)?.expect("an offset");
        assert!(o.share > 0.999, "{o:?}");
        let want = shifts
            .iter()
            .fold(0.0_f64, |m, s| m.max(f64::from(s.abs())));
        assert!(
            (o.max_abs - want).abs() < 1e-3 * want,
            "{} vs {want}",
            o.max_abs
        );
        let d = (log_softmax_of(&a)? - log_softmax_of(&b)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        // f32 inputs of magnitude ~100: their own rounding, nothing of the 40-sigma shift.
        assert!(d < 1e-4, "log-softmax still differs by {d}");
        Ok(())
    }

    #[test]
    fn random_noise_and_non_finite_logits_are_no_offset() -> Result<()> {
        let (t, v) = (5, 211);
        let mut rng = SplitMix::new(7);
        let base = random(t, v, &mut rng);
        let noisy: Vec<f32> = base
            .iter()
            .map(|x| x + 0.01 * rng.normal() as f32)
            .collect();
        assert_eq!(
            offset(&logits(base.clone(), t, v)?, &logits(noisy, t, v)?)?,
            None
        );
        let mut nan = base.iter().map(|x| x + 3.0).collect::<Vec<f32>>();
        nan[17] = f32::NAN;
        assert_eq!(offset(&logits(base, t, v)?, &logits(nan, t, v)?)?, None);
        Ok(())
    }
}
