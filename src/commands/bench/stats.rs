//! Statistics of one measured case: the median, min and max of its timed calls (the median from
//! `metrics::stats`), and the throughput and speedup derived from them.

use crate::compare::metrics::stats::median;

/// Median, min and max of a case's timed calls, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl Timings {
    /// Summarises `times_ms`; no time, or a time that is not a finite non-negative number (a
    /// broken clock or a broken case process), is refused with the reason, never averaged in.
    pub fn of(times_ms: &[f64]) -> Result<Self, String> {
        if times_ms.is_empty() {
            return Err("the case reported no timed call".to_string());
        }
        if let Some(bad) = times_ms.iter().find(|t| !t.is_finite() || **t < 0.0) {
            return Err(format!("the case reported a time of {bad} ms"));
        }
        let (min_ms, max_ms) = times_ms
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &t| {
                (lo.min(t), hi.max(t))
            });
        Ok(Timings {
            median_ms: median(times_ms),
            min_ms,
            max_ms,
        })
    }

    /// Tokens per second at `seq` tokens per call.
    pub fn tokens_per_s(&self, seq: usize) -> f64 {
        seq as f64 / (self.median_ms / 1e3)
    }

    /// `reference_ms` / this median: > 1 is faster than the reference.
    pub fn speedup_over(&self, reference_ms: f64) -> f64 {
        reference_ms / self.median_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::cases::SplitMix;

    /// The definition, written out: sort, take the middle one or the mean of the middle two.
    fn plain_median(xs: &[f64]) -> f64 {
        let mut v = xs.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    #[test]
    fn timings_match_the_definition_on_random_samples() {
        let mut rng = SplitMix::new(0xbe9c_0015);
        for n in 1..=12 {
            for _ in 0..20 {
                // Log-normal times around 5 ms, as timings spread.
                let xs: Vec<f64> = (0..n).map(|_| 5.0 * (0.5 * rng.normal()).exp()).collect();
                let t = Timings::of(&xs).expect("valid times");
                assert_eq!(t.median_ms, plain_median(&xs), "n = {n}: {xs:?}");
                let mut sorted = xs.clone();
                sorted.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
                assert_eq!((t.min_ms, t.max_ms), (sorted[0], sorted[n - 1]), "n = {n}");
                assert!(t.min_ms <= t.median_ms && t.median_ms <= t.max_ms);
            }
        }
    }

    #[test]
    fn even_counts_take_the_mean_of_the_middle_two() {
        let t = Timings::of(&[4.0, 1.0, 3.0, 2.0]).expect("valid");
        assert_eq!((t.median_ms, t.min_ms, t.max_ms), (2.5, 1.0, 4.0));
        let t = Timings::of(&[4.0, 1.0, 3.0]).expect("valid");
        assert_eq!(t.median_ms, 3.0);
    }

    #[test]
    fn nan_infinite_negative_or_missing_times_are_refused() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
            let why = Timings::of(&[1.0, bad, 2.0]).expect_err("refused");
            assert!(why.contains(&format!("{bad}")), "{why}");
        }
        assert!(Timings::of(&[]).is_err());
    }

    #[test]
    fn throughput_and_speedup_follow_the_median() {
        let t = Timings::of(&[2.0, 4.0, 3.0]).expect("valid");
        assert_eq!(t.tokens_per_s(512), 512.0 / 0.003);
        assert_eq!(t.speedup_over(6.0), 2.0);
    }
}
