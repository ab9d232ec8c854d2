//! vLLM's aux hidden-state ids (EAGLE-3, `extract_hidden_states`, speculators) count from
//! `idx + 1`: id N is collected after layer N − 1 runs, so it is that layer's output, and id 0 the
//! embedding. Pipelines that count "id N = output of layer N" (SpecForge's EAGLE-3 over SGLang,
//! which adds the 1 itself) store under the same ids the states one layer later, and drafters
//! trained with one convention are served with the other. A file read in vLLM's convention is
//! therefore checked against the f64 truth: the states under each declared id are compared with
//! the truth at that id and at the ids one before and one after; a shift that fits far better is
//! a finding naming the ids that fit.

use super::Pipeline;
use super::layer_ids::Convention;
use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::{median, rel_l2_tensors_over_finite};
use crate::error::Result;
use crate::formats::FileSource;

/// What the truth says of a vLLM file's layer ids.
#[derive(Debug, Clone, PartialEq)]
pub struct AuxIds {
    /// The ids as declared, in the file's column order.
    pub declared: Vec<usize>,
    /// The shift of the ids that fits the truth: 0 when the declared ids do.
    pub shift: i64,
    /// Median rel L2 against the truth of the declared reading and of the one chosen.
    pub declared_rel: f64,
    pub found_rel: f64,
}

impl AuxIds {
    /// The ids that fit the truth.
    pub fn found(&self) -> Vec<usize> {
        self.declared
            .iter()
            .map(|&id| (id as i64 + self.shift) as usize)
            .collect()
    }

    /// The note (or finding) for the report.
    pub fn describe(&self) -> String {
        let conv = Convention::HiddenStatesIndex.describe();
        if self.shift == 0 {
            return format!(
                "layer ids {} read in vLLM's convention ({conv}): median rel L2 {:.1e} against the truth",
                list(&self.declared),
                self.declared_rel
            );
        }
        let found = self.found();
        let why = if self.shift > 0 {
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
            list(&self.declared),
            list(&found),
            self.found_rel,
            self.declared_rel,
            list(&found)
        )
    }
}

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
    // The file's columns in order (entries are kept in the order of its parts).
    let mut columns: Vec<(usize, &String)> = src.names.iter().map(|(n, &i)| (i, n)).collect();
    columns.sort_unstable();
    let declared: Vec<(usize, &String)> = columns
        .into_iter()
        .filter_map(|(_, n)| match Key::of(n)? {
            Key::Embed => Some((0, n)),
            Key::Layer(i) => Some((i + 1, n)),
            _ => None,
        })
        .collect();
    const SHIFTS: [i64; 3] = [0, 1, -1];
    let mut rel: [Vec<f64>; 3] = Default::default();
    for (id, name) in &declared {
        let Some(t) = src.tensor_head(name, SAMPLE_TOKENS)? else {
            continue;
        };
        let mut row = [f64::NAN; 3];
        let mut complete = true;
        for (k, s) in SHIFTS.iter().enumerate() {
            let n = *id as i64 + s;
            if n < 0 || n as usize > num_layers {
                complete = false;
                break;
            }
            let want = Convention::HiddenStatesIndex.name(n as usize);
            match truth.tensor_head(&want, SAMPLE_TOKENS)? {
                Some(x) if x.dims() == t.dims() => row[k] = rel_l2_tensors_over_finite(&t, &x)?,
                _ => complete = false,
            }
        }
        if complete {
            for k in 0..3 {
                rel[k].push(row[k]);
            }
        }
    }
    if rel[0].is_empty() {
        return Ok(None);
    }
    let medians = rel.map(|r| median(&r));
    let best = (1..3)
        .filter(|&k| medians[k] * FAR_BETTER < medians[0])
        .min_by(|&x, &y| medians[x].total_cmp(&medians[y]));
    let (shift, found_rel) = match best {
        Some(k) => (SHIFTS[k], medians[k]),
        None => (0, medians[0]),
    };
    Ok(Some(AuxIds {
        declared: declared.iter().map(|(id, _)| *id).collect(),
        shift,
        declared_rel: medians[0],
        found_rel,
    }))
}

fn list(ids: &[usize]) -> String {
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_reading_names_the_ids_that_fit() {
        let found = AuxIds {
            declared: vec![2, 4, 5],
            shift: 1,
            declared_rel: 0.4,
            found_rel: 0.0,
        };
        assert_eq!(found.found(), vec![3, 5, 6]);
        let text = found.describe();
        assert!(text.contains("declared 2,4,5"), "{text}");
        assert!(
            text.contains("ids 3,5,6 (layers.2, layers.4, layers.5: "),
            "{text}"
        );
        assert!(text.ends_with("pass --layer-ids 3,5,6"), "{text}");
        let fits = AuxIds { shift: 0, ..found };
        assert!(
            fits.describe()
                .starts_with("layer ids 2,4,5 read in vLLM's convention")
        );
    }
}
