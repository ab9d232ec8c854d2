//! Calibration runs already made on a job's input — an earlier job's on the same files, the
//! truths routing recovery tried ([`crate::commands::compare::recovered_routes`]), the job's own
//! as it makes them — which a run takes instead of making again. Two runs recorded alike
//! ([`Recording`]) and routed alike are the same run, bit for bit: the later one is taken as
//! is. Two that route apart from some MoE layer on compute the same before it (a decoder
//! layer's output depends on its input alone), so the later one resumes the earlier there: the
//! embedding and the layers before are the earlier run's, and the pass starts at that layer
//! on its input. A pair whose sides route apart from the truth at a few tokens of late layers
//! then pays for the layers from the first flip on, not for whole runs.

use candle_core::DType;

use crate::backends::BackendKind;
use crate::capture::Captures;
use crate::model::Routes;

/// How a calibration run is recorded, apart from its routing: the same for two runs on one
/// input, the runs compute the same where they route alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recording {
    pub backend: BackendKind,
    pub dtype: DType,
    /// Stops after this decoder layer.
    pub through: Option<usize>,
    /// Also captures the values inside linear-attention layers.
    pub ops: bool,
}

/// What a run can take from the runs made before it.
pub enum Reuse<'p> {
    /// A run recorded and routed alike: its captures are the run's.
    Taken(&'p Captures),
    /// A run recorded alike that routes alike before this layer: the run resumes it there.
    Resumed(&'p Captures, usize),
    /// Nothing: the run is made whole.
    Fresh,
}

/// Unfed calibration runs made on one input, with how each was recorded and routed.
#[derive(Default)]
pub struct Prior {
    runs: Vec<(Recording, Option<Routes>, Captures)>,
}

impl Prior {
    /// Keeps `caps`, a run recorded as `recording` and routed by `routes` (None: its routers).
    pub fn add(&mut self, recording: Recording, routes: Option<&Routes>, caps: &Captures) {
        self.runs.push((recording, routes.cloned(), caps.clone()));
    }

    /// What a run recorded as `recording`, routed by `routes` and ending with decoder layer
    /// `last` can take: a run that routes alike through `last`, else the one that routes alike
    /// the longest (resumed where they part, when that is past layer 0).
    pub fn reuse(&self, recording: Recording, routes: Option<&Routes>, last: usize) -> Reuse<'_> {
        let mut best: Option<(&Captures, usize)> = None;
        for (made, made_routes, caps) in &self.runs {
            if *made != recording {
                continue;
            }
            match Routes::first_difference(routes, made_routes.as_ref()) {
                Some(at) if at <= last => {
                    if at > 0 && best.is_none_or(|(_, b)| at > b) {
                        best = Some((caps, at));
                    }
                }
                _ => return Reuse::Taken(caps),
            }
        }
        match best {
            Some((caps, at)) => Reuse::Resumed(caps, at),
            None => Reuse::Fresh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(dtype: DType) -> Recording {
        Recording {
            backend: BackendKind::Fused,
            dtype,
            through: None,
            ops: false,
        }
    }

    fn routes(layer: usize, rows: Vec<Vec<u32>>) -> Routes {
        let mut r = Routes::default();
        r.insert(layer, rows);
        r
    }

    fn which(reuse: Reuse, runs: &[&Captures]) -> (Option<usize>, Option<usize>) {
        let index = |c: &Captures| runs.iter().position(|r| std::ptr::eq(*r, c));
        match reuse {
            Reuse::Taken(c) => (index(c), None),
            Reuse::Resumed(c, at) => (index(c), Some(at)),
            Reuse::Fresh => (None, None),
        }
    }

    #[test]
    fn a_run_routed_alike_is_taken_and_one_that_parts_later_is_resumed_where_it_parts() {
        let (own, late) = (Captures::new(vec![1, 2]), Captures::new(vec![1, 2]));
        let mut prior = Prior::default();
        prior.add(recording(DType::F64), None, &own);
        let at_3 = routes(3, vec![vec![0, 1], vec![2, 4]]);
        prior.add(recording(DType::F64), Some(&at_3), &late);
        let [own, late] = [&prior.runs[0].2, &prior.runs[1].2];
        let f64_run = |r: Option<&Routes>, last| {
            which(prior.reuse(recording(DType::F64), r, last), &[own, late])
        };
        // Its own routers, or routes that force no layer: the unrouted run.
        assert_eq!(f64_run(None, 5), (Some(0), None));
        assert_eq!(f64_run(Some(&Routes::default()), 5), (Some(0), None));
        // The same forced layer: taken; a forced layer past the run's last: the unrouted run.
        assert_eq!(f64_run(Some(&at_3), 5), (Some(1), None));
        assert_eq!(f64_run(Some(&at_3), 2), (Some(0), None));
        // Another token forced at layer 5 as well: the routed run, resumed at 5.
        let mut more = at_3.clone();
        more.insert(5, vec![vec![3, 1], vec![2, 4]]);
        assert_eq!(f64_run(Some(&more), 5), (Some(1), Some(5)));
        // Layer 3 forced otherwise: both part at 3, the first found is resumed.
        let other = routes(3, vec![vec![0, 1], vec![2, 5]]);
        assert_eq!(f64_run(Some(&other), 5), (Some(0), Some(3)));
        // Parting at layer 0 shares nothing; another dtype is another run.
        let first = routes(0, vec![vec![0, 1], vec![2, 4]]);
        assert_eq!(f64_run(Some(&first), 5), (None, None));
        let bf16 = which(prior.reuse(recording(DType::BF16), None, 5), &[own, late]);
        assert_eq!(bf16, (None, None));
    }
}
