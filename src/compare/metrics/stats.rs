//! Small statistics shared by the commands that measure (bench, selftest, alignment): the median
//! of samples and the relative L2 error of two value lists. NaN never hides: a NaN or infinite
//! input makes the result NaN, which fails every bound (the one exception, named as such, is
//! [`rel_l2_tensors_over_finite`], for alignment's search).

use candle_core::{DType, Tensor};

use super::kernel::{self, NonFinite};
use super::rows::Rows;
use crate::error::Result;

/// Elements read at a time.
const CHUNK: usize = 1 << 20;

/// The median of `xs` (mean of the two middle values for an even count); NaN when `xs` is empty
/// or holds a NaN.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() || xs.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// Running sums of ‖a − b‖² and ‖b‖² in f64.
#[derive(Default)]
struct RelL2Sums {
    num: f64,
    den: f64,
    non_finite: bool,
}

impl RelL2Sums {
    fn add(&mut self, a: &[f64], b: &[f64]) {
        for (x, y) in a.iter().zip(b) {
            if !x.is_finite() || !y.is_finite() {
                self.non_finite = true;
            }
            self.num += (x - y) * (x - y);
            self.den += y * y;
        }
    }

    fn value(&self) -> f64 {
        if self.non_finite {
            f64::NAN
        } else if self.num == 0.0 {
            0.0
        } else if self.den == 0.0 {
            f64::INFINITY
        } else {
            (self.num / self.den).sqrt()
        }
    }
}

/// ‖a − b‖₂ / ‖b‖₂ in f64; NaN when the lengths differ or either side has a non-finite element;
/// 0 when equal, +∞ when `b` is all zeros and `a` is not.
pub fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let mut sums = RelL2Sums::default();
    sums.add(a, b);
    sums.value()
}

/// [`rel_l2`] of two tensors of the same element count, read in f64 a million elements at a time
/// (no full f64 copy of a large tensor); NaN when the element counts differ.
pub fn rel_l2_tensors(a: &Tensor, b: &Tensor) -> Result<f64> {
    let a = a.flatten_all()?;
    let b = b.flatten_all()?;
    let n = a.dim(0)?;
    if b.dim(0)? != n {
        return Ok(f64::NAN);
    }
    let mut sums = RelL2Sums::default();
    let mut off = 0;
    while off < n {
        let len = CHUNK.min(n - off);
        let xa: Vec<f64> = a.narrow(0, off, len)?.to_dtype(DType::F64)?.to_vec1()?;
        let xb: Vec<f64> = b.narrow(0, off, len)?.to_dtype(DType::F64)?.to_vec1()?;
        sums.add(&xa, &xb);
        off += len;
    }
    Ok(sums.value())
}

/// [`rel_l2_tensors`] over the element pairs where both sides are finite, the rest skipped: for
/// callers that must see past a few overflowed elements rather than judge them (alignment asks
/// which layers line up, not whether they agree). Never use it for a verdict. Summed by
/// [`super::kernel`] from the stored values, a million elements at a time (the order of the
/// sums differs from [`rel_l2`]'s: equal to rounding).
pub fn rel_l2_tensors_over_finite(a: &Tensor, b: &Tensor) -> Result<f64> {
    let a = a.flatten_all()?;
    let b = b.flatten_all()?;
    let n = a.dim(0)?;
    if b.dim(0)? != n {
        return Ok(f64::NAN);
    }
    let (mut num, mut den) = (0.0, 0.0);
    let mut off = 0;
    while off < n {
        let len = CHUNK.min(n - off);
        let xa = a.narrow(0, off, len)?.reshape((1, len))?;
        let xb = b.narrow(0, off, len)?.reshape((1, len))?;
        let (mut ra, mut rb) = (Rows::of(&xa)?, Rows::of(&xb)?);
        let mut skipped = NonFinite::default();
        let sums = kernel::row(ra.row(0)?, rb.row(0)?, 0, f64::INFINITY, &mut skipped);
        num += sums.sq_diff;
        den += sums.sq_b;
        off += len;
    }
    Ok(RelL2Sums {
        num,
        den,
        non_finite: false,
    }
    .value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::cases::SplitMix;

    #[test]
    fn median_matches_the_definition_on_random_samples() {
        let mut rng = SplitMix::new(0x5eed_0001);
        for n in 1..=9 {
            let xs: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
            let mut sorted = xs.clone();
            sorted.sort_by(f64::total_cmp);
            let want = if n % 2 == 1 {
                sorted[n / 2]
            } else {
                (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
            };
            assert_eq!(median(&xs), want, "n = {n}");
        }
    }

    #[test]
    fn median_of_nothing_or_nan_is_nan() {
        assert!(median(&[]).is_nan());
        assert!(median(&[1.0, f64::NAN, 3.0]).is_nan());
    }

    #[test]
    fn rel_l2_matches_the_definition_and_never_passes_nan() -> Result<()> {
        let mut rng = SplitMix::new(0x5eed_0002);
        let b: Vec<f64> = (0..1000).map(|_| rng.normal()).collect();
        let a: Vec<f64> = b.iter().map(|y| y + 1e-3 * rng.normal()).collect();
        let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| y * y).sum();
        let want = (num / den).sqrt();
        assert!((rel_l2(&a, &b) - want).abs() <= 1e-15 * want);
        let ta = Tensor::new(a.as_slice(), &candle_core::Device::Cpu)?;
        let tb = Tensor::new(b.as_slice(), &candle_core::Device::Cpu)?;
        assert_eq!(rel_l2_tensors(&ta, &tb)?, rel_l2(&a, &b));

        let mut bad = a.clone();
        bad[17] = f64::NAN;
        assert!(rel_l2(&bad, &b).is_nan());
        bad[17] = f64::INFINITY;
        assert!(rel_l2(&bad, &b).is_nan());
        assert!(rel_l2(&a[..10], &b).is_nan());
        assert_eq!(rel_l2(&b, &b), 0.0);
        assert_eq!(rel_l2(&[1.0], &[0.0]), f64::INFINITY);
        Ok(())
    }

    #[test]
    fn rel_l2_over_finite_skips_exactly_the_non_finite_pairs() -> Result<()> {
        let mut rng = SplitMix::new(0x5eed_0003);
        let b: Vec<f64> = (0..1000).map(|_| rng.normal()).collect();
        let a: Vec<f64> = b.iter().map(|y| y + 1e-3 * rng.normal()).collect();
        let cpu = &candle_core::Device::Cpu;
        let tensor = |x: &[f64]| Tensor::new(x, cpu);
        // Two orders of summing n non-negative terms differ by at most 2γ_n relative (Higham
        // §4.2); the square roots halve that, the division and roots add an ulp or two.
        let n = a.len() as f64 * f64::EPSILON / 2.0;
        let bound = 2.0 * n / (1.0 - n) + 2.0 * f64::EPSILON;
        let near = |got: f64, want: f64| (got - want).abs() <= bound * want;
        // On finite data it is rel_l2 itself, to rounding.
        let over_finite = rel_l2_tensors_over_finite(&tensor(&a)?, &tensor(&b)?)?;
        assert!(
            near(over_finite, rel_l2(&a, &b)),
            "{over_finite} vs {}",
            rel_l2(&a, &b)
        );
        // A non-finite element on either side drops that pair and only that pair.
        let (mut bad_a, mut bad_b) = (a.clone(), b.clone());
        bad_a[3] = f64::NAN;
        bad_b[700] = f64::INFINITY;
        let keep = |i: &usize| *i != 3 && *i != 700;
        let kept_a: Vec<f64> = (0..a.len()).filter(keep).map(|i| a[i]).collect();
        let kept_b: Vec<f64> = (0..b.len()).filter(keep).map(|i| b[i]).collect();
        let (bad_a, bad_b) = (tensor(&bad_a)?, tensor(&bad_b)?);
        let got = rel_l2_tensors_over_finite(&bad_a, &bad_b)?;
        assert!(near(got, rel_l2(&kept_a, &kept_b)), "{got}");
        // Dropping any one finite pair instead moves it by far more than rounding.
        assert!(!near(got, rel_l2(&kept_a[1..], &kept_b[1..])));
        assert!(rel_l2_tensors(&bad_a, &bad_b)?.is_nan());
        Ok(())
    }
}
