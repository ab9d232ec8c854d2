//! Two files that hold different layers — the classic off-by-one: hooks on `layers[1, 3, 5]`
//! on one side, `hidden_states[1, 3, 5]` (the outputs of layers 0, 2, 4) on the other. Read
//! correctly, they have no layer in common, and pairing unrelated layers would be wrong. With
//! the truth at hand each side can still be judged: every layer of either side becomes a row,
//! compared with the f64 truth in place of the side that lacks it, judged against the floor as
//! any row is.

use candle_core::Tensor;

use crate::capture::Key;
use crate::compare::{PlannedRow, TensorSource};
use crate::error::Result;
use crate::job::{RowMode, RowsFrom, plan_rows};
use crate::report::DisjointLayers;
use crate::weights::config::LayerType;

/// One side, with the rows it lacks read from the truth.
pub struct TruthFilled<'a> {
    pub side: &'a dyn TensorSource,
    pub truth: &'a dyn TensorSource,
    /// The rows this side lacks, read from the truth.
    pub filled: Vec<Key>,
}

impl TensorSource for TruthFilled<'_> {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        if self.filled.contains(&key) {
            self.truth.tensor(key)
        } else {
            self.side.tensor(key)
        }
    }
    fn keys(&self) -> Vec<Key> {
        let mut k = self.side.keys();
        k.extend(&self.filled);
        k
    }
}

fn layers(src: &dyn TensorSource) -> Vec<usize> {
    let mut l: Vec<usize> = src.keys().iter().filter_map(|k| k.layer_output()).collect();
    l.sort_unstable();
    l.dedup();
    l
}

/// When `a` and `b` both hold decoder layers but none in common: the layers of each, for the
/// report ("A: 1, 3, 5; B: 0, 2, 4").
pub fn disjoint_layers(
    a: &dyn TensorSource,
    b: &dyn TensorSource,
) -> Option<(Vec<usize>, Vec<usize>)> {
    let (la, lb) = (layers(a), layers(b));
    (!la.is_empty() && !lb.is_empty() && !la.iter().any(|l| lb.contains(l))).then_some((la, lb))
}

/// Rows for every layer either side holds (and any other row both hold), in forward order, and
/// the two sides with what each lacks read from `truth`. Rows the truth lacks too are left out.
pub fn fill<'a>(
    a: &'a dyn TensorSource,
    b: &'a dyn TensorSource,
    truth: &'a dyn TensorSource,
    layer_types: Option<&[LayerType]>,
) -> (Vec<PlannedRow>, TruthFilled<'a>, TruthFilled<'a>) {
    let (na, nb, nt) = (a.keys(), b.keys(), truth.keys());
    let row_key = |k: &Key| matches!(k, Key::Embed | Key::Layer(_));
    let missing = |have: &[Key], other: &[Key]| -> Vec<Key> {
        other
            .iter()
            .filter(|k| row_key(k) && !have.contains(k) && nt.contains(k))
            .copied()
            .collect()
    };
    let (fill_a, fill_b) = (missing(&na, &nb), missing(&nb, &na));
    let mut union: Vec<Key> = na.iter().filter(|k| nb.contains(k)).copied().collect();
    union.extend(&fill_a);
    union.extend(&fill_b);
    let from = RowsFrom {
        held: &union,
        layer_types,
        layers: None,
    };
    let rows = plan_rows(from, RowMode::Disjoint);
    (
        rows,
        TruthFilled {
            side: a,
            truth,
            filled: fill_a,
        },
        TruthFilled {
            side: b,
            truth,
            filled: fill_b,
        },
    )
}

/// [`fill`] for `compare`: the rows, the two filled sides, what the report needs to know of
/// them, and a note saying which layers each side holds.
pub fn judged_against<'a>(
    a: &'a dyn TensorSource,
    b: &'a dyn TensorSource,
    truth: &'a dyn TensorSource,
    (la, lb): (Vec<usize>, Vec<usize>),
    layer_types: Option<&[LayerType]>,
) -> (
    Vec<PlannedRow>,
    TruthFilled<'a>,
    TruthFilled<'a>,
    DisjointLayers,
    String,
) {
    let (rows, fa, fb) = fill(a, b, truth, layer_types);
    let note = format!(
        "A and B hold different layers (A: {}; B: {}): each row compares the side that holds it \
         with the f64 truth",
        list(&la),
        list(&lb)
    );
    let one_sided = DisjointLayers {
        a_layers: la,
        b_layers: lb,
        truth_for_a: fa.filled.iter().map(Key::to_string).collect(),
        truth_for_b: fb.filled.iter().map(Key::to_string).collect(),
    };
    (rows, fa, fb, one_sided, note)
}

/// [1, 3, 5] → "1, 3, 5".
pub fn list(layers: &[usize]) -> String {
    layers
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
