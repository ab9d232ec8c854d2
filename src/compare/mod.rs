//! The comparison engine: which tensors to compare, in forward order, from two capture sources
//! (live runs or dump files), and their statistics.

pub mod alignment;
pub mod judge;
pub mod metrics;
pub mod softmax_equal;
pub mod token_shift;
pub mod verdict;

use std::fmt;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::capture::{Captures, Key, StateKind, dump::Dump};
use crate::compare::metrics::StoredRows;
use crate::error::Result;
use crate::weights::config::LayerType;

/// Somewhere captured tensors can be read by key, one at a time.
pub trait TensorSource {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>>;
    fn keys(&self) -> Vec<Key>;

    /// The token rows of `key` where they are stored (a file's map), for statistics summed
    /// without a copy; None when they cannot be lent (the caller reads [`tensor`](Self::tensor)).
    /// Lent rows are trusted only after [`crate::util::mapped::check`].
    fn stored_rows(&self, _key: Key) -> Result<Option<StoredRows<'_>>> {
        Ok(None)
    }

    /// The first `n` token rows of a `[1, T, …]` (or `[T, …]`) capture, all of them when T ≤ n.
    /// Sources that can read a prefix without the rest (memory-mapped files) override this.
    fn tensor_head(&self, key: Key, n: usize) -> Result<Option<Tensor>> {
        match self.tensor(key)? {
            Some(t) => {
                let axis = usize::from(t.rank() >= 3);
                let rows = t.dim(axis)?;
                Ok(Some(t.narrow(axis, 0, rows.min(n))?))
            }
            None => Ok(None),
        }
    }
}

impl TensorSource for Captures {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        Ok(self.get(key).cloned())
    }
    fn keys(&self) -> Vec<Key> {
        Captures::keys(self).collect()
    }
}

/// A dump's tensors by their keys (its names that are none of hsdiff's are no rows).
impl TensorSource for Dump {
    fn tensor(&self, key: Key) -> Result<Option<Tensor>> {
        let name = key.to_string();
        if self.contains(&name) {
            Dump::tensor(self, &name).map(Some)
        } else {
            Ok(None)
        }
    }
    fn keys(&self) -> Vec<Key> {
        Dump::names(self)
            .iter()
            .filter_map(|n| Key::of(n))
            .collect()
    }
}

/// What a compared tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Embed,
    LinearAttention,
    FullAttention,
    /// A decoder layer of unknown type (comparing files without a config).
    Layer,
    FinalNorm,
    Logits,
    Op,
    /// A linear-attention layer's state after the last token (`state.layers.{i}.*`).
    State,
}

/// A row of the table to come: which tensor is compared, what it is, and its decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRow {
    pub key: Key,
    pub kind: Kind,
    pub layer: Option<usize>,
}

/// Rows in forward order ([`Key`]'s order): `embed`, then per layer its op captures and
/// `layers.{i}`, then the final recurrent states (`state.layers.{i}.recurrent`, by layer), then
/// `final_norm`, `logits`. Only keys in `available` are planned, a layer's ops only with its
/// output; `layers` keeps only those decoder layers (and their ops and states). Conv windows,
/// routers, the decode path's captures and `--map`'s own names are not rows here
/// ([`conv_window_note`]).
pub fn forward_rows(
    available: &[Key],
    layer_types: Option<&[LayerType]>,
    layers: Option<&[usize]>,
) -> Vec<PlannedRow> {
    let mut keys: Vec<Key> = available.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let has_output = |i: usize| keys.binary_search(&Key::Layer(i)).is_ok();
    let row = |key: Key| -> Option<PlannedRow> {
        let kind = match key {
            Key::Embed => Kind::Embed,
            Key::Op(i, _) if has_output(i) => Kind::Op,
            Key::Layer(i) => match layer_types.and_then(|t| t.get(i)) {
                Some(LayerType::LinearAttention) => Kind::LinearAttention,
                Some(LayerType::FullAttention) => Kind::FullAttention,
                None => Kind::Layer,
            },
            Key::State(_, StateKind::Recurrent) => Kind::State,
            Key::FinalNorm => Kind::FinalNorm,
            Key::Logits => Kind::Logits,
            _ => return None,
        };
        let layer = key.layer();
        if layer.is_some_and(|i| layers.is_some_and(|keep| !keep.contains(&i))) {
            return None;
        }
        Some(PlannedRow { key, kind, layer })
    };
    keys.iter().filter_map(|&k| row(k)).collect()
}

/// Whether `key` is a final recurrent state, `state.layers.{i}.recurrent`.
fn is_recurrent_state(key: &Key) -> bool {
    matches!(key, Key::State(_, StateKind::Recurrent))
}

/// The tensors that would be rows (see [`forward_rows`]; final states included) which `x` holds
/// and `y` does not, in forward order; only those decoder layers with `layers`.
pub fn only_in(x: &[Key], y: &[Key], layers: Option<&[usize]>) -> Vec<Key> {
    // A set: a file of N tensors is not N² comparisons.
    let y: std::collections::HashSet<&Key> = y.iter().collect();
    let missing: Vec<Key> = x.iter().filter(|k| !y.contains(k)).copied().collect();
    forward_rows(&missing, None, layers)
        .into_iter()
        .map(|r| r.key)
        .collect()
}

/// What each side holds that the other does not, so it gets no row: final recurrent states
/// (`states`) and everything else that would be a row (`tensors`: layers, ops, embed,
/// final_norm, logits).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HeldByOneSide {
    pub states_a: Vec<Key>,
    pub states_b: Vec<Key>,
    pub tensors_a: Vec<Key>,
    pub tensors_b: Vec<Key>,
}

impl HeldByOneSide {
    pub fn of(a: &[Key], b: &[Key], layers: Option<&[usize]>) -> Self {
        let (in_a, in_b) = (only_in(a, b, layers), only_in(b, a, layers));
        let (states_a, tensors_a) = in_a.into_iter().partition(is_recurrent_state);
        let (states_b, tensors_b) = in_b.into_iter().partition(is_recurrent_state);
        HeldByOneSide {
            states_a,
            states_b,
            tensors_a,
            tensors_b,
        }
    }

    /// The report note on the final states only one side holds; None when both hold the same.
    pub fn states_note(&self) -> Option<String> {
        one_sided_note("final state", &self.states_a, &self.states_b)
    }

    /// The report note on the other tensors only one side holds; None when there are none.
    pub fn tensors_note(&self) -> Option<String> {
        one_sided_note("tensor", &self.tensors_a, &self.tensors_b)
    }
}

/// "N tensors of A read as no hsdiff name (x, y, … and K more), not compared: …" for each side
/// that stores some ([`crate::formats::FileSource::unnamed`]), joined by "; ".
pub fn unnamed_note(in_a: &[String], in_b: &[String]) -> Option<String> {
    per_side(in_a, in_b, |side, _, list, s| {
        format!(
            "{} tensor{s} of {side} read as no hsdiff name ({}), not compared: name them with \
             --map A_NAME=B_NAME (docs/file-formats.md lists the names)",
            list.len(),
            shown_list(list),
        )
    })
}

/// "N WHATs only in A (x, y, … and K more), not compared: B holds no such tensor" for each side
/// that has some, joined by "; ".
pub fn one_sided_note<T: fmt::Display>(what: &str, in_a: &[T], in_b: &[T]) -> Option<String> {
    per_side(in_a, in_b, |side, other, list, s| {
        format!(
            "{} {what}{s} only in {side} ({}), not compared: {other} holds no such tensor",
            list.len(),
            shown_list(list),
        )
    })
}

/// `part(side, other side, list, plural "s" or "")` for each side whose list is not empty, A's
/// then B's, joined by "; "; None when both are empty.
fn per_side<T>(
    in_a: &[T],
    in_b: &[T],
    part: impl Fn(&str, &str, &[T], &str) -> String,
) -> Option<String> {
    let parts: Vec<String> = [("A", "B", in_a), ("B", "A", in_b)]
        .into_iter()
        .filter(|(_, _, list)| !list.is_empty())
        .map(|(side, other, list)| part(side, other, list, if list.len() == 1 { "" } else { "s" }))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The first four of `list`, and how many more.
fn shown_list<T: fmt::Display>(list: &[T]) -> String {
    let shown: Vec<String> = list.iter().take(4).map(T::to_string).collect();
    match list.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// A report note when both sides hold conv windows (`state.layers.{i}.conv`), which get no row:
/// a window is the layer input's projection at the last `conv_kernel` tokens — already judged
/// in the `layers.{i}` rows — and too few values to judge against a rounding floor (on the
/// built-in model at bf16 a benign fused/reference pair read 2.0× the floor there).
pub fn conv_window_note(a: &[Key], b: &[Key]) -> Option<String> {
    let both = a
        .iter()
        .filter(|k| matches!(k, Key::State(_, StateKind::Conv)) && b.contains(k))
        .count();
    (both > 0).then(|| {
        format!(
            "{both} conv window{} (state.layers.{{i}}.conv) not compared: each is the last \
             conv_kernel tokens' projection, judged in the layers rows",
            if both == 1 { "" } else { "s" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of those names that are hsdiff's (a file's other names are no keys).
    fn keys(v: &[&str]) -> Vec<Key> {
        v.iter().filter_map(|s| Key::of(s)).collect()
    }

    fn names(v: &[Key]) -> Vec<String> {
        v.iter().map(Key::to_string).collect()
    }

    fn owned(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn state_rows_follow_the_layers_and_precede_final_norm() {
        let available = keys(&[
            "logits",
            "state.layers.2.recurrent",
            "final_norm",
            "layers.0",
            "state.layers.0.recurrent",
            "state.layers.0.conv",
            "layers.2",
            "state.layers.x.recurrent",
            "state.layers.1.other",
        ]);
        let rows = forward_rows(&available, None, None);
        let got: Vec<(String, Kind)> = rows.iter().map(|r| (r.key.to_string(), r.kind)).collect();
        assert_eq!(
            got,
            vec![
                ("layers.0".into(), Kind::Layer),
                ("layers.2".into(), Kind::Layer),
                ("state.layers.0.recurrent".into(), Kind::State),
                ("state.layers.2.recurrent".into(), Kind::State),
                ("final_norm".into(), Kind::FinalNorm),
                ("logits".into(), Kind::Logits),
            ]
        );
        let kept = forward_rows(&available, None, Some(&[2]));
        let names: Vec<String> = kept.iter().map(|r| r.key.to_string()).collect();
        assert_eq!(
            names,
            vec![
                "layers.2",
                "state.layers.2.recurrent",
                "final_norm",
                "logits"
            ]
        );
    }

    #[test]
    fn rows_follow_the_forward_order_whatever_the_order_of_the_names() {
        // A file's names come sorted as strings: layers.10 before layers.2, beta before q.
        let available = keys(&[
            "embed",
            "layers.0",
            "layers.0.beta",
            "layers.0.out_proj",
            "layers.0.q",
            "layers.10",
            "layers.2",
            "layers.2.core_out",
            "layers.3.g",
            "layers.03",
            "layers.2.mlp",
            "router.2.topk_ids",
            "state.layers.2.conv",
        ]);
        let names: Vec<String> = forward_rows(&available, None, None)
            .into_iter()
            .map(|r| r.key.to_string())
            .collect();
        // layers.3.g has no layer output to belong to; layers.03 and layers.2.mlp are not
        // hsdiff's names; routers and conv windows are not rows.
        assert_eq!(
            names,
            owned(&[
                "embed",
                "layers.0.beta",
                "layers.0.q",
                "layers.0.out_proj",
                "layers.0",
                "layers.2.core_out",
                "layers.2",
                "layers.10",
            ])
        );
    }

    #[test]
    fn one_sided_states_are_named() {
        let a = keys(&[
            "layers.0",
            "state.layers.0.recurrent",
            "state.layers.0.conv",
            "state.layers.1.recurrent",
        ]);
        let b = keys(&[
            "layers.0",
            "state.layers.0.conv",
            "state.layers.1.recurrent",
        ]);
        assert_eq!(
            HeldByOneSide::of(&a, &b, None).states_note().as_deref(),
            Some(
                "1 final state only in A (state.layers.0.recurrent), not compared: B holds no \
                 such tensor"
            )
        );
        assert_eq!(HeldByOneSide::of(&b, &b, None).states_note(), None);
        assert!(
            HeldByOneSide::of(&keys(&["layers.0"]), &a, None)
                .states_note()
                .is_some_and(|n| n.starts_with("2 final states only in B"))
        );
        assert!(conv_window_note(&a, &b).is_some_and(|n| n.starts_with("1 conv window ")));
        assert_eq!(conv_window_note(&a, &keys(&["layers.0"])), None);
    }

    #[test]
    fn unnamed_tensors_are_listed_per_side() {
        assert_eq!(unnamed_note(&[], &[]), None);
        let b = owned(&["a", "b", "c", "d", "e", "f"]);
        assert_eq!(
            unnamed_note(&owned(&["layers.3.mlp"]), &b).as_deref(),
            Some(
                "1 tensor of A read as no hsdiff name (layers.3.mlp), not compared: name them \
                 with --map A_NAME=B_NAME (docs/file-formats.md lists the names); 6 tensors of B \
                 read as no hsdiff name (a, b, c, d and 2 more), not compared: name them with \
                 --map A_NAME=B_NAME (docs/file-formats.md lists the names)"
            )
        );
    }

    #[test]
    fn one_sided_tensors_are_named_in_forward_order() {
        let a = keys(&[
            "input_ids",
            "embed",
            "layers.0",
            "layers.1.core_out",
            "layers.1",
            "layers.2",
            "final_norm",
            "logits",
        ]);
        let b = keys(&["input_ids", "layers.0", "layers.2", "layers.9"]);
        let one = HeldByOneSide::of(&a, &b, None);
        assert_eq!(
            names(&one.tensors_a),
            owned(&[
                "embed",
                "layers.1.core_out",
                "layers.1",
                "final_norm",
                "logits"
            ])
        );
        assert_eq!(
            one.tensors_note().as_deref(),
            Some(
                "5 tensors only in A (embed, layers.1.core_out, layers.1, final_norm and 1 more), not \
             compared: B holds no such tensor; 1 tensor only in B (layers.9), not compared: A \
             holds no such tensor"
            )
        );
        // --layers keeps the note to the layers asked for.
        let kept = HeldByOneSide::of(&a, &b, Some(&[0, 2]));
        assert_eq!(
            names(&kept.tensors_a),
            owned(&["embed", "final_norm", "logits"])
        );
        assert!(kept.tensors_b.is_empty());
        assert_eq!(HeldByOneSide::of(&b, &b, None).tensors_note(), None);
    }
}
