//! vLLM's aux hidden-state ids (EAGLE-3, `extract_hidden_states`, speculators) count from
//! `idx + 1`: id N is collected after layer N − 1 runs, so it is that layer's output, and id 0 the
//! embedding. Pipelines that count "id N = output of layer N" (SpecForge's EAGLE-3 over SGLang,
//! which adds the 1 itself) store under the same ids the states one layer later, and drafters
//! trained with one convention are served with the other. A file read in vLLM's convention is
//! therefore checked against the f64 truth: the states under each declared id are compared with
//! the truth at that id and at the ids one before and one after; a shift that fits far better is
//! a finding naming the ids that fit ([`super::id_shift`]).

use super::id_shift::{IdShift, far_better, rel_to_truth};
use super::layer_ids::Convention;
use super::{Pipeline, list};
use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::SAMPLE_TOKENS;
use crate::compare::metrics::stats::median;
use crate::error::Result;
use crate::formats::FileSource;

/// What the truth says of a vLLM file's layer ids (its columns' ids, in the file's order).
#[derive(Debug, Clone, PartialEq)]
pub struct AuxIds(pub IdShift);

impl AuxIds {
    /// The note (or finding) for the report.
    pub fn describe(&self) -> String {
        let ids = &self.0;
        let conv = Convention::HiddenStatesIndex.describe();
        if ids.shift == 0 {
            return format!(
                "layer ids {} read in vLLM's convention ({conv}): median rel L2 {:.1e} against the truth",
                list(&ids.declared),
                ids.as_declared
            );
        }
        let found = ids.found();
        let why = if ids.shift > 0 {
            "one layer later than declared, as a capture counting \"id N = output of layer N\" \
             (SpecForge over SGLang) stores them; vLLM counts from idx + 1"
        } else {
            "one layer earlier than declared"
        };
        let states = found
            .iter()
            .map(|&n| Convention::HiddenStatesIndex.name(n))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "layer ids declared {} in vLLM's convention ({conv}), but the states are ids {} \
             ({states}: {why}; median rel L2 {:.1e} against the truth read so, {:.1e} as \
             declared): an off-by-one in the ids — pass --layer-ids {}",
            list(&ids.declared),
            list(&found),
            ids.as_found,
            ids.as_declared,
            list(&found)
        )
    }
}

/// The shifts tried: as declared first.
const SHIFTS: [i64; 3] = [0, 1, -1];

/// Checks the ids of a vLLM aux-hidden-state file (`src`, of a model of `num_layers` layers)
/// against `truth`. None for other files, or when no id can be read under every shift.
pub fn check_aux_ids(
    src: &FileSource,
    truth: &dyn TensorSource,
    num_layers: usize,
) -> Result<Option<AuxIds>> {
    if src.pipeline.as_ref().map(|p| p.pipeline) != Some(Pipeline::Speculators) {
        return Ok(None);
    }
    let declared = declared_columns(src);
    let mut rel: [Vec<f64>; 3] = Default::default();
    for (id, name) in &declared {
        let Some(t) = src.get_head(name, SAMPLE_TOKENS)? else {
            continue;
        };
        if let Some(row) = rel_under_shifts(&t, *id, truth, num_layers)? {
            for k in 0..3 {
                rel[k].push(row[k]);
            }
        }
    }
    if rel[0].is_empty() {
        return Ok(None);
    }
    let medians = rel.map(|r| median(&r));
    let shifted = (1..3).map(|k| (SHIFTS[k], medians[k]));
    let (shift, as_found) = far_better(medians[0], shifted).unwrap_or((0, medians[0]));
    Ok(Some(AuxIds(IdShift {
        declared: declared.iter().map(|(id, _)| *id).collect(),
        shift,
        as_declared: medians[0],
        as_found,
    })))
}

/// The file's columns in order (entries are kept in the order of its parts), each with its id
/// in vLLM's convention.
fn declared_columns(src: &FileSource) -> Vec<(usize, &String)> {
    let mut columns: Vec<(usize, &String)> = src.names.iter().map(|(n, &i)| (i, n)).collect();
    columns.sort_unstable();
    columns
        .into_iter()
        .filter_map(|(_, n)| match Key::of(n)? {
            Key::Embed => Some((0, n)),
            Key::Layer(i) => Some((i + 1, n)),
            _ => None,
        })
        .collect()
}

/// rel L2 of state `t`, declared as id `id`, against the truth at each of [`SHIFTS`]; None
/// unless every shifted id is one of the model's and the truth holds it alike.
fn rel_under_shifts(
    t: &candle_core::Tensor,
    id: usize,
    truth: &dyn TensorSource,
    num_layers: usize,
) -> Result<Option<[f64; 3]>> {
    let mut row = [f64::NAN; 3];
    for (k, s) in SHIFTS.iter().enumerate() {
        let n = id as i64 + s;
        if n < 0 || n as usize > num_layers {
            return Ok(None);
        }
        let want = Convention::HiddenStatesIndex.key(n as usize);
        match rel_to_truth(t, truth, want)? {
            Some(r) => row[k] = r,
            None => return Ok(None),
        }
    }
    Ok(Some(row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_reading_names_the_ids_that_fit() {
        let found = AuxIds(IdShift {
            declared: vec![2, 4, 5],
            shift: 1,
            as_declared: 0.4,
            as_found: 0.0,
        });
        assert_eq!(found.0.found(), vec![3, 5, 6]);
        let text = found.describe();
        assert!(text.contains("declared 2,4,5"), "{text}");
        assert!(
            text.contains("ids 3,5,6 (layers.2, layers.4, layers.5: "),
            "{text}"
        );
        assert!(text.ends_with("pass --layer-ids 3,5,6"), "{text}");
        let fits = AuxIds(IdShift {
            shift: 0,
            ..found.0
        });
        assert!(
            fits.describe()
                .starts_with("layer ids 2,4,5 read in vLLM's convention")
        );
    }
}
