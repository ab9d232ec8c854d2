//! The comparison engine: which tensors to compare, in forward order, from two capture sources
//! (live runs or dump files), and their statistics.

pub mod alignment;
pub mod judge;
pub mod metrics;
pub mod softmax_equal;
pub mod token_shift;
pub mod verdict;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::capture::{Captures, Key, StateKind, dump::Dump};
use crate::compare::metrics::StoredRows;
use crate::error::Result;
use crate::weights::config::LayerType;

/// Somewhere captured tensors can be read by name, one at a time.
pub trait TensorSource {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>>;
    fn names(&self) -> Vec<String>;

    /// The first `n` token rows of a `[1, T, …]` (or `[T, …]`) capture, all of them when T ≤ n.
    /// Sources that can read a prefix without the rest (memory-mapped files) override this.
    /// The token rows of `name` where they are stored (a file's map), for statistics summed
    /// without a copy; None when they cannot be lent (the caller reads [`tensor`](Self::tensor)).
    /// Lent rows are trusted only after [`crate::util::mapped::check`].
    fn stored_rows(&self, _name: &str) -> Result<Option<StoredRows<'_>>> {
        Ok(None)
    }

    fn tensor_head(&self, name: &str, n: usize) -> Result<Option<Tensor>> {
        match self.tensor(name)? {
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
    fn tensor(&self, name: &str) -> Result<Option<Tensor>> {
        Ok(Key::of(name).and_then(|k| self.get(k)).cloned())
    }
    fn names(&self) -> Vec<String> {
        self.keys().map(String::from).collect()
    }
}

impl TensorSource for Dump {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>> {
        if self.contains(name) {
            Dump::tensor(self, name).map(Some)
        } else {
            Ok(None)
        }
    }
    fn names(&self) -> Vec<String> {
        Dump::names(self)
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
    pub name: String,
    pub kind: Kind,
    pub layer: Option<usize>,
}

/// Rows in forward order ([`Key`]'s order): `embed`, then per layer its op captures and
/// `layers.{i}`, then the final recurrent states (`state.layers.{i}.recurrent`, by layer), then
/// `final_norm`, `logits`. Only names present in `available` are planned, a layer's ops only
/// with its output; `layers` keeps only those decoder layers (and their ops and states). Conv
/// windows, routers and the decode path's captures are not rows ([`conv_window_note`]).
pub fn forward_rows(
    available: &[String],
    layer_types: Option<&[LayerType]>,
    layers: Option<&[usize]>,
) -> Vec<PlannedRow> {
    let mut keys: Vec<Key> = available.iter().filter_map(|n| Key::of(n)).collect();
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
        Some(PlannedRow {
            name: key.to_string(),
            kind,
            layer,
        })
    };
    keys.iter().filter_map(|&k| row(k)).collect()
}

/// Whether `name` is a final recurrent state, `state.layers.{i}.recurrent`.
fn is_recurrent_state(name: &str) -> bool {
    matches!(Key::of(name), Some(Key::State(_, StateKind::Recurrent)))
}

/// The tensors that would be rows (see [`forward_rows`]; final states included) which `x` holds
/// and `y` does not, in forward order; only those decoder layers with `layers`.
pub fn only_in(x: &[String], y: &[String], layers: Option<&[usize]>) -> Vec<String> {
    // A set: a file of N tensors is not N² string comparisons.
    let y: std::collections::HashSet<&str> = y.iter().map(String::as_str).collect();
    let missing: Vec<String> = x
        .iter()
        .filter(|n| !y.contains(n.as_str()))
        .cloned()
        .collect();
    forward_rows(&missing, None, layers)
        .into_iter()
        .map(|r| r.name)
        .collect()
}

/// What each side holds that the other does not, so it gets no row: final recurrent states
/// (`states`) and everything else that would be a row (`tensors`: layers, ops, embed,
/// final_norm, logits).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HeldByOneSide {
    pub states_a: Vec<String>,
    pub states_b: Vec<String>,
    pub tensors_a: Vec<String>,
    pub tensors_b: Vec<String>,
}

impl HeldByOneSide {
    pub fn of(a: &[String], b: &[String], layers: Option<&[usize]>) -> Self {
        let (in_a, in_b) = (only_in(a, b, layers), only_in(b, a, layers));
        let (states_a, tensors_a) = in_a.into_iter().partition(|n| is_recurrent_state(n));
        let (states_b, tensors_b) = in_b.into_iter().partition(|n| is_recurrent_state(n));
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
pub fn one_sided_note(what: &str, in_a: &[String], in_b: &[String]) -> Option<String> {
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
fn per_side(
    in_a: &[String],
    in_b: &[String],
    part: impl Fn(&str, &str, &[String], &str) -> String,
) -> Option<String> {
    let parts: Vec<String> = [("A", "B", in_a), ("B", "A", in_b)]
        .into_iter()
        .filter(|(_, _, list)| !list.is_empty())
        .map(|(side, other, list)| part(side, other, list, if list.len() == 1 { "" } else { "s" }))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The first four of `list`, and how many more.
fn shown_list(list: &[String]) -> String {
    let shown: Vec<&str> = list.iter().take(4).map(String::as_str).collect();
    match list.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// A report note when both sides hold conv windows (`state.layers.{i}.conv`), which get no row:
/// a window is the layer input's projection at the last `conv_kernel` tokens — already judged
/// in the `layers.{i}` rows — and too few values to judge against a rounding floor (on the
/// built-in model at bf16 a benign fused/reference pair read 2.0× the floor there).
pub fn conv_window_note(a: &[String], b: &[String]) -> Option<String> {
    let both = a
        .iter()
        .filter(|n| matches!(Key::of(n), Some(Key::State(_, StateKind::Conv))) && b.contains(n))
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

    fn owned(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn state_rows_follow_the_layers_and_precede_final_norm() {
        let available = owned(&[
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
        let got: Vec<(&str, Kind)> = rows.iter().map(|r| (r.name.as_str(), r.kind)).collect();
        assert_eq!(
            got,
            vec![
                ("layers.0", Kind::Layer),
                ("layers.2", Kind::Layer),
                ("state.layers.0.recurrent", Kind::State),
                ("state.layers.2.recurrent", Kind::State),
                ("final_norm", Kind::FinalNorm),
                ("logits", Kind::Logits),
            ]
        );
        let kept = forward_rows(&available, None, Some(&[2]));
        let names: Vec<&str> = kept.iter().map(|r| r.name.as_str()).collect();
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
        let available = owned(&[
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
            .map(|r| r.name)
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
        let a = owned(&[
            "layers.0",
            "state.layers.0.recurrent",
            "state.layers.0.conv",
            "state.layers.1.recurrent",
        ]);
        let b = owned(&[
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
            HeldByOneSide::of(&owned(&["layers.0"]), &a, None)
                .states_note()
                .is_some_and(|n| n.starts_with("2 final states only in B"))
        );
        assert!(conv_window_note(&a, &b).is_some_and(|n| n.starts_with("1 conv window ")));
        assert_eq!(conv_window_note(&a, &owned(&["layers.0"])), None);
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
        let a = owned(&[
            "input_ids",
            "embed",
            "layers.0",
            "layers.1.core_out",
            "layers.1",
            "layers.2",
            "final_norm",
            "logits",
        ]);
        let b = owned(&["input_ids", "layers.0", "layers.2", "layers.9"]);
        let one = HeldByOneSide::of(&a, &b, None);
        assert_eq!(
            one.tensors_a,
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
        assert_eq!(kept.tensors_a, owned(&["embed", "final_norm", "logits"]));
        assert!(kept.tensors_b.is_empty());
        assert_eq!(HeldByOneSide::of(&b, &b, None).tensors_note(), None);
    }
}
