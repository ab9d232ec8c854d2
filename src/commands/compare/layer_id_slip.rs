//! A drafter pipeline's declared layer ids against what its states are. Pipelines count ids two
//! ways ([`Convention`]): vLLM's aux ids from `idx + 1` (id N is the output of layer N − 1),
//! the others' as the layer itself. A capture counted one way and read the other, or a config
//! that names other layers than were captured, puts every state one or two layers off its id:
//! a dump whose config says 1,2,4,5,6 but whose states are the outputs of layers 0,1,3,4,5
//! trained the drafter on other layers than it declares, and a vLLM file under ids 2,4,5 that
//! holds ids 3,5,6 was counted "id N = output of layer N". With the truth at hand, the side's
//! states are compared with the truth's under the declared ids and under every id shifted by
//! ±1, ±2; a shift that fits [`FAR_BETTER`]× better is the finding. The comparison then pairs
//! the layers the states are (so the table is right), and the headline leads with the slip, the
//! side it is on, and the `--layer-ids` that reads the file as it is.

use candle_core::Tensor;

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::{median, rel_l2_tensors_over_finite};
use crate::error::Result;
use crate::formats::FileSource;
use crate::formats::pipelines::layer_ids::Convention;
use crate::formats::pipelines::{Pipeline, list};

/// The shifts looked for, in ids added to every declared one.
const SHIFTS: [i64; 4] = [-1, 1, -2, 2];

/// A pipeline side's layer ids measured against the f64 truth.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredIds {
    pub side: &'static str,
    pub pipeline: Pipeline,
    /// The ids as declared, in the file's order, in the pipeline's convention.
    pub ids: Vec<usize>,
    /// Median rel L2 of the side's states against the truth's as declared.
    pub as_declared: f64,
    /// The closest shifted reading (shift, median rel L2), when a shift names only ids whose
    /// layers the truth holds.
    pub nearest: Option<(i64, f64)>,
}

impl DeclaredIds {
    /// The shift the states fit [`FAR_BETTER`]× better than the ids as declared.
    pub fn slip(&self) -> Option<i64> {
        self.nearest
            .filter(|(_, m)| m * FAR_BETTER < self.as_declared)
            .map(|(s, _)| s)
    }

    /// The ids the states are under `shift`, one that [`fit`] measured: none falls below 0.
    fn found(&self, shift: i64) -> Vec<usize> {
        self.ids
            .iter()
            .map(|&id| (id as i64 + shift) as usize)
            .collect()
    }

    /// The headline's clause when the ids slipped.
    pub fn finding(&self) -> Option<String> {
        let shift = self.slip()?;
        let as_found = self.nearest.map_or(f64::NAN, |(_, m)| m);
        let found = list(&self.found(shift));
        let convention = self.pipeline.convention();
        Some(format!(
            "{side}: layer ids declared {} but the states are those of ids {found} ({}, {}: \
             median rel L2 {as_found:.1e} against the f64 truth, as declared {:.1e}{}) — the \
             drafter's data is of other layers than its config names: pass --layer-ids-{lower} \
             {found}",
            list(&self.ids),
            self.pipeline.as_str(),
            convention.brief(),
            self.as_declared,
            counted_otherwise(convention, shift),
            side = self.side,
            lower = self.side.to_ascii_lowercase(),
        ))
    }

    /// The report's note: the finding, or the evidence that the ids fit as declared.
    pub fn note(&self) -> String {
        if let Some(finding) = self.finding() {
            return finding;
        }
        let nearest = match self.nearest {
            Some((s, m)) => format!("the nearest shift, {s:+}: {m:.1e}"),
            None => "no shift of them names layers the truth holds".to_string(),
        };
        format!(
            "{}: layer ids {} fit the f64 truth as declared ({}, {}: median rel L2 {:.1e}; {nearest})",
            self.side,
            list(&self.ids),
            self.pipeline.as_str(),
            self.pipeline.convention().brief(),
            self.as_declared,
        )
    }
}

/// Why ids come out shifted by `shift` when it is the step between the two conventions: the
/// capture counted its ids the other way.
fn counted_otherwise(convention: Convention, shift: i64) -> &'static str {
    match (convention, shift) {
        (Convention::HiddenStatesIndex, 1) => {
            "; one layer later, as a capture counting \"id N = output of layer N\" (SpecForge \
             over SGLang) stores them"
        }
        (Convention::OutputOf, -1) => {
            "; one layer earlier, as a capture counting \"id N = hidden_states[N]\" (vLLM's aux \
             ids, from idx + 1) stores them"
        }
        _ => "",
    }
}

/// A state the pipeline named by an id.
struct IdState {
    id: usize,
    /// Its first [`SAMPLE_TOKENS`] tokens; None for a pipeline's last state, whose reading
    /// (after the final norm or not) is checked on its own, so it moves with the ids but is not
    /// measured.
    head: Option<Tensor>,
}

/// `src`'s pipeline ids measured against `truth`, of a model of `num_layers` layers; None for
/// a file no pipeline wrote, or when no state can be compared under every shift tried.
pub fn check(
    side: &'static str,
    src: &FileSource,
    truth: &dyn TensorSource,
    num_layers: usize,
) -> Result<Option<DeclaredIds>> {
    let Some(info) = &src.pipeline else {
        return Ok(None);
    };
    let convention = info.pipeline.convention();
    let mut states = Vec::new();
    for name in src.names_in_file_order() {
        let Some(id) = Key::of(&name).and_then(|k| convention.id_of(k)) else {
            continue;
        };
        let head = match info.last_state.as_deref() {
            Some(last) if last == name => None,
            _ => src.get_head(&name, SAMPLE_TOKENS)?,
        };
        states.push(IdState { id, head });
    }
    // A shift is a reading only when every id it gives, the last state's too, is one of the
    // model's.
    let max_id = convention.max_id(num_layers) as i64;
    let shifts: Vec<i64> = std::iter::once(0)
        .chain(SHIFTS)
        .filter(|s| (states.iter()).all(|st| (0..=max_id).contains(&(st.id as i64 + s))))
        .collect();
    let Some(medians) = fits(&states, truth, convention, &shifts)? else {
        return Ok(None);
    };
    let nearest = (shifts.iter().zip(&medians).skip(1)).fold(
        None::<(i64, f64)>,
        |best, (&s, &m)| match best {
            Some((_, b)) if b <= m => best,
            _ => Some((s, m)),
        },
    );
    Ok(Some(DeclaredIds {
        side,
        pipeline: info.pipeline,
        ids: states.iter().map(|s| s.id).collect(),
        as_declared: medians[0],
        nearest,
    }))
}

/// Median rel L2 of the measured states against the truth at their ids under each of `shifts`
/// (the first 0). Measured are the states the truth holds alike under every shift — a truth
/// that stops early (`--layers`) lacks the deep ones — so that every median is of the same
/// states; None when there is none, or when 0 is not among the shifts (ids past the model).
fn fits(
    states: &[IdState],
    truth: &dyn TensorSource,
    convention: Convention,
    shifts: &[i64],
) -> Result<Option<Vec<f64>>> {
    if shifts.first() != Some(&0) {
        return Ok(None);
    }
    let mut rels: Vec<Vec<f64>> = vec![Vec::new(); shifts.len()];
    'states: for state in states {
        let Some(x) = &state.head else {
            continue;
        };
        let mut row = Vec::with_capacity(shifts.len());
        for &s in shifts {
            let key = convention.key((state.id as i64 + s) as usize);
            match truth.tensor_head(key, SAMPLE_TOKENS)? {
                Some(t) if t.dims() == x.dims() => row.push(rel_l2_tensors_over_finite(x, &t)?),
                _ => continue 'states,
            }
        }
        for (r, v) in rels.iter_mut().zip(row) {
            r.push(v);
        }
    }
    if rels[0].is_empty() {
        return Ok(None);
    }
    Ok(Some(rels.iter().map(|r| median(r)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vllm(nearest: (i64, f64)) -> DeclaredIds {
        DeclaredIds {
            side: "B",
            pipeline: Pipeline::Speculators,
            ids: vec![2, 4, 5, 8],
            as_declared: 0.4,
            nearest: Some(nearest),
        }
    }

    #[test]
    fn a_far_better_shift_is_the_finding_with_every_id_moved() {
        let slipped = vllm((1, 0.02));
        assert_eq!(slipped.slip(), Some(1));
        let text = slipped.finding().expect("a slip");
        assert!(
            text.starts_with("B: layer ids declared 2,4,5,8 but the states are those of ids 3,5,6,9 (vllm-speculators, id N = hidden_states[N]: "),
            "{text}"
        );
        assert!(
            text.contains("one layer later, as a capture counting"),
            "{text}"
        );
        assert!(text.ends_with("pass --layer-ids-b 3,5,6,9"), "{text}");
        assert_eq!(slipped.note(), text);
    }

    #[test]
    fn a_shift_that_is_not_far_better_is_a_note_of_the_fit() {
        let fits = vllm((-1, 0.05));
        assert_eq!(fits.slip(), None);
        assert_eq!(fits.finding(), None);
        assert_eq!(
            fits.note(),
            "B: layer ids 2,4,5,8 fit the f64 truth as declared (vllm-speculators, id N = \
             hidden_states[N]: median rel L2 4.0e-1; the nearest shift, -1: 5.0e-2)"
        );
    }

    #[test]
    fn only_the_step_between_conventions_says_the_capture_counted_otherwise() {
        assert!(counted_otherwise(Convention::OutputOf, -1).contains("hidden_states[N]"));
        assert_eq!(counted_otherwise(Convention::OutputOf, 1), "");
        assert_eq!(counted_otherwise(Convention::HiddenStatesIndex, -1), "");
        assert_eq!(counted_otherwise(Convention::HiddenStatesIndex, 2), "");
    }
}
