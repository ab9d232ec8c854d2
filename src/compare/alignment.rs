//! Layer alignment: does B's layer i line up with A's layer i + k for some k ≠ 0?
//!
//! An off-by-one from including the embedding output (the `output_hidden_states` tuple read as
//! hook outputs), a different module path, a skipped layer: the two files then disagree at every
//! layer although the numbers are right. For k ∈ [−[`MAX_SHIFT`], [`MAX_SHIFT`]] the median rel L2
//! of (A layer i + k, B layer i) is computed over the layers both sides have (`embed` counts as
//! layer −1); a shift is reported when its median is [`FAR_BETTER`]× smaller than the diagonal's.
//! Only the first [`SAMPLE_TOKENS`] tokens are used: enough to tell layers apart, cheap on large
//! files.

use serde::{Deserialize, Serialize};

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::error::Result;
// The rel L2 here skips element pairs that are not finite on both sides: alignment asks which
// layers line up, and a few overflowed elements in one layer must not hide the answer (the
// comparison itself reports and judges them). On finite data it is `stats::rel_l2_tensors`.
use crate::compare::metrics::stats::{median, rel_l2_tensors_over_finite};

pub const MAX_SHIFT: i64 = 2;
/// A shift must beat the diagonal's median rel L2 by this factor to be reported.
pub const FAR_BETTER: f64 = 10.0;
pub const SAMPLE_TOKENS: usize = 256;

/// How B's layers line up with A's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alignment {
    /// B's layer i matches A's layer i + offset.
    pub offset: i64,
    /// Whether the comparison was made with this shift (`--shift`).
    pub applied: bool,
    pub evidence: Evidence,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Median rel L2 of (A layer i, B layer i).
    pub diagonal_median_rel_l2: f64,
    pub diagonal_pairs: usize,
    /// Median rel L2 of (A layer i + offset, B layer i).
    pub shifted_median_rel_l2: f64,
    pub shifted_pairs: usize,
    /// Every offset tried.
    pub offsets: Vec<OffsetScore>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetScore {
    pub offset: i64,
    pub median_rel_l2: f64,
    pub pairs: usize,
}

/// `embed` → −1, `layers.{i}` → i.
fn layer_index(key: Key) -> Option<i64> {
    match key {
        Key::Embed => Some(-1),
        Key::Layer(i) => Some(i as i64),
        _ => None,
    }
}

/// −1 → `embed`, i → `layers.{i}`.
fn layer_key(i: i64) -> Option<Key> {
    match i {
        -1 => Some(Key::Embed),
        i if i >= 0 => Some(Key::Layer(i as usize)),
        _ => None,
    }
}

/// Scores every offset; `ok` is the rel L2 under which the diagonal already agrees (then no
/// shifted pair is read, unless `full`). Returns the best offset (0 unless a shift is far
/// better) and the evidence; None when the diagonal agrees (and not `full`) or fewer than 2
/// layer pairs exist at every offset.
pub fn detect(
    a: &dyn TensorSource,
    b: &dyn TensorSource,
    ok: f64,
    full: bool,
) -> Result<Option<(i64, Evidence)>> {
    let mut scores = Scores::new(a, b);
    // The diagonal first: when it agrees, nothing else is read.
    scores.pass(&[0])?;
    let diag = median(&scores.rels[slot(0)]);
    let diag_pairs = scores.rels[slot(0)].len();
    if diag_pairs >= 2 && diag <= ok && !full {
        return Ok(None);
    }
    let shifted: Vec<i64> = (-MAX_SHIFT..=MAX_SHIFT).filter(|&k| k != 0).collect();
    scores.pass(&shifted)?;
    let offsets: Vec<OffsetScore> = (-MAX_SHIFT..=MAX_SHIFT)
        .map(|k| OffsetScore {
            offset: k,
            median_rel_l2: median(&scores.rels[slot(k)]),
            pairs: scores.rels[slot(k)].len(),
        })
        .collect();
    if offsets.iter().all(|o| o.pairs < 2) {
        return Ok(None);
    }
    let best = offsets
        .iter()
        .filter(|o| o.offset != 0 && o.pairs >= 2)
        .min_by(|x, y| x.median_rel_l2.total_cmp(&y.median_rel_l2));
    let (offset, shifted_median, shifted_pairs) = match best {
        Some(o) if diag_pairs < 2 || o.median_rel_l2 * FAR_BETTER < diag => {
            (o.offset, o.median_rel_l2, o.pairs)
        }
        _ => (0, diag, diag_pairs),
    };
    Ok(Some((
        offset,
        Evidence {
            diagonal_median_rel_l2: diag,
            diagonal_pairs: diag_pairs,
            shifted_median_rel_l2: shifted_median,
            shifted_pairs,
            offsets,
        },
    )))
}

/// The slot of offset `k` in [`Scores::rels`].
fn slot(k: i64) -> usize {
    (k + MAX_SHIFT) as usize
}

/// The rel L2 of each layer pair read so far, by offset.
struct Scores<'s> {
    a: &'s dyn TensorSource,
    b: &'s dyn TensorSource,
    a_layers: Vec<i64>,
    /// B's layers in increasing order.
    b_layers: Vec<i64>,
    /// Per offset ([`slot`]), the rel L2 of each pair (A layer i + k, B layer i) of equal shape.
    rels: Vec<Vec<f64>>,
}

impl<'s> Scores<'s> {
    fn new(a: &'s dyn TensorSource, b: &'s dyn TensorSource) -> Scores<'s> {
        let a_layers: Vec<i64> = a.keys().into_iter().filter_map(layer_index).collect();
        let mut b_layers: Vec<i64> = b.keys().into_iter().filter_map(layer_index).collect();
        b_layers.sort_unstable();
        Scores {
            a,
            b,
            a_layers,
            b_layers,
            rels: vec![Vec::new(); (2 * MAX_SHIFT + 1) as usize],
        }
    }

    /// Scores the pairs at `offsets`, B's layers in order, each B layer read once.
    fn pass(&mut self, offsets: &[i64]) -> Result<()> {
        let Scores {
            a,
            b,
            a_layers,
            b_layers,
            rels,
        } = self;
        for &i in b_layers.iter() {
            // Layer ids far apart (a drafter's 1,16,31,46,61) pair nothing at a small shift:
            // such a layer is not read at all.
            if !offsets.iter().any(|&k| a_layers.contains(&(i + k))) {
                continue;
            }
            let Some(bt) = head_of(*b, i)? else {
                continue;
            };
            for &k in offsets {
                if !a_layers.contains(&(i + k)) {
                    continue;
                }
                let Some(at) = head_of(*a, i + k)? else {
                    continue;
                };
                if at.dims() == bt.dims() {
                    rels[slot(k)].push(rel_l2_tensors_over_finite(&at, &bt)?);
                }
            }
        }
        Ok(())
    }
}

/// The first [`SAMPLE_TOKENS`] tokens of layer `i` (−1: `embed`) of `source`, where it has it.
fn head_of(source: &dyn TensorSource, i: i64) -> Result<Option<candle_core::Tensor>> {
    Ok(layer_key(i)
        .map(|k| source.tensor_head(k, SAMPLE_TOKENS))
        .transpose()?
        .flatten())
}

/// The evidence for comparing with B shifted by `k`: its scores against the diagonal's.
pub fn evidence_for(e: &Evidence, k: i64) -> Evidence {
    let score = |k: i64| e.offsets.iter().find(|o| o.offset == k);
    let (sm, sp) = score(k).map_or((f64::NAN, 0), |o| (o.median_rel_l2, o.pairs));
    let (dm, dp) = score(0).map_or((e.diagonal_median_rel_l2, e.diagonal_pairs), |o| {
        (o.median_rel_l2, o.pairs)
    });
    Evidence {
        diagonal_median_rel_l2: dm,
        diagonal_pairs: dp,
        shifted_median_rel_l2: sm,
        shifted_pairs: sp,
        offsets: e.offsets.clone(),
    }
}

/// "B looks shifted by +1 layer relative to A (median rel L2 3.1e-1 aligned vs 2.0e-3 shifted)".
pub fn describe(al: &Alignment) -> String {
    let e = &al.evidence;
    let layers = if al.offset.abs() == 1 {
        "layer"
    } else {
        "layers"
    };
    let how = format!(
        "median rel L2 {:.1e} over {} aligned layer pairs vs {:.1e} over {} pairs shifted by {:+}",
        e.diagonal_median_rel_l2,
        e.diagonal_pairs,
        e.shifted_median_rel_l2,
        e.shifted_pairs,
        al.offset
    );
    if al.applied {
        format!(
            "compared with --shift {}: B's layer i against A's layer i{:+} ({how})",
            al.offset, al.offset
        )
    } else {
        format!(
            "B looks shifted by {:+} {layers} relative to A ({how}); rerun with --shift {} to compare them aligned",
            al.offset, al.offset
        )
    }
}

/// How a file's bare layer indices were read, and the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexReading {
    /// Index N is `hidden_states[N]` (the input of layer N, = the output of layer N − 1, with
    /// index 0 the embedding output) rather than the output of layer N.
    pub input: bool,
    /// Median rel L2 against the reference under each reading, over `pairs` indices.
    pub output_median: f64,
    pub input_median: f64,
    pub pairs: usize,
}

impl IndexReading {
    /// "index N read as the output of layer N (median rel L2 4.0e-3 against the truth; as
    /// hidden_states[N], the input of layer N: 3.1e-1; 3 indices)".
    pub fn describe(&self, against: &str) -> String {
        let (chosen, other, cm, om) = if self.input {
            (
                "hidden_states[N], the input of layer N",
                "the output of layer N",
                self.input_median,
                self.output_median,
            )
        } else {
            (
                "the output of layer N",
                "hidden_states[N], the input of layer N",
                self.output_median,
                self.input_median,
            )
        };
        format!(
            "index N read as {chosen} (median rel L2 {cm:.1e} against {against}; read as {other}: \
             {om:.1e}; {} indices)",
            self.pairs
        )
    }
}

/// Decides whether the layers `src` names from bare indices (`layers.N` for now) are outputs
/// of layer N or inputs of it, by comparing both readings with `reference` (the truth, or the
/// other side's full capture). The input reading is chosen only when it is [`FAR_BETTER`]×
/// closer; None when no index can be paired under both readings.
pub fn index_reading(
    src: &dyn TensorSource,
    reference: &dyn TensorSource,
) -> Result<Option<IndexReading>> {
    let (mut out, mut inp) = (Vec::new(), Vec::new());
    for i in src.keys().into_iter().filter_map(Key::layer_output) {
        let key = Key::Layer(i);
        let Some(t) = src.tensor_head(key, SAMPLE_TOKENS)? else {
            continue;
        };
        let as_output = reference.tensor_head(key, SAMPLE_TOKENS)?;
        let as_input = match layer_key(i as i64 - 1) {
            Some(k) => reference.tensor_head(k, SAMPLE_TOKENS)?,
            None => None,
        };
        if let (Some(o), Some(p)) = (as_output, as_input)
            && o.dims() == t.dims()
            && p.dims() == t.dims()
        {
            out.push(rel_l2_tensors_over_finite(&t, &o)?);
            inp.push(rel_l2_tensors_over_finite(&t, &p)?);
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    let pairs = out.len();
    let (output_median, input_median) = (median(&out), median(&inp));
    Ok(Some(IndexReading {
        input: input_median * FAR_BETTER < output_median,
        output_median,
        input_median,
        pairs,
    }))
}

/// The last entry of a file whose indices were read as `hidden_states[N]`: with N = L (the
/// model's layer count) it is transformers' last `output_hidden_states` entry, which is *after*
/// the final norm — or, from a hand-made list, the last layer's raw output. Both readings are
/// compared with `truth` (its `layers.{L-1}` and `final_norm`); returns (final_norm is the
/// reading, rel L2 as final_norm, rel L2 as layers.{L-1}) when the two can be told apart.
pub fn last_entry_reading(
    src: &dyn TensorSource,
    truth: &dyn TensorSource,
) -> Result<Option<(bool, f64, f64)>> {
    let Some(last) = truth.keys().into_iter().filter_map(Key::layer_output).max() else {
        return Ok(None);
    };
    let key = Key::Layer(last);
    let (Some(t), Some(raw), Some(normed)) = (
        src.tensor_head(key, SAMPLE_TOKENS)?,
        truth.tensor_head(key, SAMPLE_TOKENS)?,
        truth.tensor_head(Key::FinalNorm, SAMPLE_TOKENS)?,
    ) else {
        return Ok(None);
    };
    if t.dims() != raw.dims() || t.dims() != normed.dims() {
        return Ok(None);
    }
    let (as_raw, as_norm) = (
        rel_l2_tensors_over_finite(&t, &raw)?,
        rel_l2_tensors_over_finite(&t, &normed)?,
    );
    Ok(Some((as_norm * FAR_BETTER < as_raw, as_norm, as_raw)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Captures;
    use candle_core::{Device, Tensor};

    fn caps(layers: &[(&str, f32)]) -> Captures {
        let mut c = Captures::new(vec![]);
        for (n, v) in layers {
            let t = Tensor::arange(0f32, 8f32, &Device::Cpu)
                .and_then(|t| t.affine(1.0, f64::from(*v) * 10.0))
                .and_then(|t| t.reshape((1, 2, 4)))
                .expect("tensor");
            c.insert(n.parse().expect("a key"), t);
        }
        c
    }

    #[test]
    fn detects_plus_one() {
        // A labels the embedding output as layers.0 (hidden_states read as hooks).
        let a = caps(&[
            ("layers.0", 0.0),
            ("layers.1", 1.0),
            ("layers.2", 2.0),
            ("layers.3", 3.0),
        ]);
        let b = caps(&[
            ("embed", 0.0),
            ("layers.0", 1.0),
            ("layers.1", 2.0),
            ("layers.2", 3.0),
        ]);
        let (k, e) = detect(&a, &b, 1e-5, false).expect("runs").expect("pairs");
        assert_eq!(k, 1, "{e:?}");
        assert_eq!(e.shifted_median_rel_l2, 0.0);
        assert_eq!(e.shifted_pairs, 4);
    }

    #[test]
    fn aligned_reads_nothing_more() {
        let a = caps(&[("layers.0", 0.0), ("layers.1", 1.0)]);
        let b = caps(&[("layers.0", 0.0), ("layers.1", 1.0)]);
        assert!(detect(&a, &b, 1e-5, false).expect("runs").is_none());
    }
}
