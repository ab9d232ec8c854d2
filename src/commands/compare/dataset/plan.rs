//! Which pairs of a dataset are calibrated and which are this run's, decided before any pair
//! is read: a dataset compare is a plan of one-pair jobs (each the `File` × `File` spec of
//! [`crate::commands::compare::pair`]), run by [`super::run`].
//!
//! With a model, each pair is calibrated on its own (truth and floor runs), one pair after
//! another since a forward pass uses every core. With `--calibrate N` only the first N pairs of
//! the whole dataset are, in every shard — so every shard judges with the floors the unsharded
//! run learns — and the floors they teach judge the rest. Without a model, no pair is
//! calibrated by the run (a file's fingerprint may still name a model for its own pair).

use std::path::Path;

use super::match_samples::Pair;
use crate::report::dataset::Shard;

/// One pair to compare: its place in the pairing order, and whether its row is this run's (a
/// calibration pair of another shard only teaches the floors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairJob {
    pub k: usize,
    pub pair: Pair,
    pub keep: bool,
}

/// The pairs of a run, in the order they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// Run first, one at a time, with the model's truth and floor runs.
    pub calibrated: Vec<PairJob>,
    /// Run after, concurrently: judged by the learned floors (`--calibrate`), or as a file of
    /// each names.
    pub rest: Vec<PairJob>,
    /// How the run is calibrated, for the report.
    pub calibration: String,
}

/// What the plan is made from: the options that decide it.
#[derive(Debug, Clone, Copy)]
pub struct PlanInputs<'a> {
    /// `--model DIR`, unless `--no-floor`.
    pub model: Option<&'a Path>,
    pub no_floor: bool,
    pub calibrate: Option<usize>,
    pub shard: Option<Shard>,
}

impl RunPlan {
    pub fn new(pairs: &[Pair], inputs: PlanInputs) -> RunPlan {
        let total = pairs.len();
        let in_shard = |k: usize| inputs.shard.is_none_or(|s| k % s.count == s.index);
        let job = |k: usize, keep: bool| PairJob {
            k,
            pair: pairs[k],
            keep,
        };
        let mine = || (0..total).filter(|&k| in_shard(k));
        let model = inputs.model.filter(|_| !inputs.no_floor);
        let (calibrated, rest) = match (model, inputs.calibrate) {
            (Some(_), Some(n)) => (
                (0..n.min(total)).map(|k| job(k, in_shard(k))).collect(),
                mine().filter(|&k| k >= n).map(|k| job(k, true)).collect(),
            ),
            (Some(_), None) => (mine().map(|k| job(k, true)).collect(), Vec::new()),
            (None, _) => (Vec::new(), mine().map(|k| job(k, true)).collect()),
        };
        let calibration = match (inputs.model, inputs.calibrate, inputs.no_floor) {
            (_, _, true) => "uncalibrated (--no-floor)".to_string(),
            (Some(dir), Some(n), _) => format!(
                "floors measured on {} pairs with --model {} and applied to all (median per row)",
                n.min(total),
                dir.display()
            ),
            (Some(dir), None, _) => {
                format!("truth and floor per sample with --model {}", dir.display())
            }
            (None, _, _) => "truth and floor per sample with the model a file's fingerprint \
                             names, where one does"
                .to_string(),
        };
        RunPlan {
            calibrated,
            rest,
            calibration,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(n: usize) -> Vec<Pair> {
        (0..n)
            .map(|i| Pair {
                a: i,
                b: n - 1 - i,
                by_id: true,
            })
            .collect()
    }

    fn ks(jobs: &[PairJob]) -> Vec<(usize, bool)> {
        jobs.iter().map(|j| (j.k, j.keep)).collect()
    }

    fn inputs(
        model: bool,
        calibrate: Option<usize>,
        shard: Option<(usize, usize)>,
    ) -> PlanInputs<'static> {
        PlanInputs {
            model: model.then_some(Path::new("/m")),
            no_floor: false,
            calibrate,
            shard: shard.map(|(index, count)| Shard { index, count }),
        }
    }

    #[test]
    fn a_model_calibrates_every_pair_of_the_shard() {
        let p = RunPlan::new(&pairs(5), inputs(true, None, Some((1, 2))));
        assert_eq!(ks(&p.calibrated), [(1, true), (3, true)]);
        assert!(p.rest.is_empty());
        assert_eq!(p.calibrated[0].pair, pairs(5)[1]);
        assert_eq!(p.calibration, "truth and floor per sample with --model /m");
    }

    /// Every shard calibrates on the same first N pairs, keeping rows only for its own; the
    /// rest of its own pairs are judged by the floors.
    #[test]
    fn calibrate_n_takes_the_first_pairs_of_the_whole_dataset_in_every_shard() {
        let p = RunPlan::new(&pairs(7), inputs(true, Some(3), Some((1, 3))));
        assert_eq!(ks(&p.calibrated), [(0, false), (1, true), (2, false)]);
        assert_eq!(ks(&p.rest), [(4, true)]);
        // More than the dataset holds: all of it calibrates, nothing is left to judge.
        let p = RunPlan::new(&pairs(2), inputs(true, Some(9), None));
        assert_eq!(ks(&p.calibrated), [(0, true), (1, true)]);
        assert!(p.rest.is_empty());
        assert!(p.calibration.starts_with("floors measured on 2 pairs"));
    }

    #[test]
    fn without_a_model_or_with_no_floor_nothing_is_calibrated_by_the_run() {
        for i in [
            inputs(false, Some(2), None),
            PlanInputs {
                no_floor: true,
                ..inputs(true, Some(2), None)
            },
        ] {
            let p = RunPlan::new(&pairs(4), i);
            assert!(p.calibrated.is_empty());
            assert_eq!(ks(&p.rest), [(0, true), (1, true), (2, true), (3, true)]);
        }
        let p = RunPlan::new(
            &pairs(4),
            PlanInputs {
                no_floor: true,
                ..inputs(true, None, None)
            },
        );
        assert_eq!(p.calibration, "uncalibrated (--no-floor)");
    }
}
