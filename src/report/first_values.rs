//! Where each side's values first left the finite numbers, and — in an f16 or bf16 comparison —
//! first went past that type's largest finite value, in forward order (the embedding, then each
//! layer's ops, its state and its output, then the final norm and the logits). A NaN that appears
//! at layer 9 and spreads to every later row is found at layer 9, the question asked of every
//! non-finite report ("where did the first NaN appear?").

use candle_core::DType;
use serde::{Deserialize, Serialize};

use super::row::TensorRow;
use crate::compare::Kind;
use crate::compare::metrics::{Location, NonFiniteValue, RANGE_LIMITS};

/// One element of one side's capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstValue {
    pub tensor: String,
    pub token: usize,
    pub channel: usize,
    /// `NaN`, `+Inf` or `-Inf` for a non-finite value; the value itself (shortest round-trip
    /// decimal) for one past a type's range.
    pub value: String,
}

/// Each side's first non-finite element (None: every compared element of that side is finite).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FirstNonFinite {
    pub a: Option<FirstValue>,
    pub b: Option<FirstValue>,
}

/// Each side's first element past the comparison dtype's largest finite value: a finite value
/// stored wider than the run computed, or the ±Inf the overflow became.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstOverflow {
    pub dtype: String,
    pub limit: f64,
    pub a: Option<FirstValue>,
    pub b: Option<FirstValue>,
}

/// Forward-order rank of a row: rows are listed with the states after every layer, but a
/// layer's state is computed inside that layer, before its output.
fn forward_rank(row: &TensorRow, num_layers: usize) -> (usize, usize) {
    match (row.kind, row.layer) {
        (Kind::Embed, _) => (0, 0),
        (Kind::Op, Some(l)) => (l + 1, 0),
        (Kind::State, Some(l)) => (l + 1, 1),
        (_, Some(l)) => (l + 1, 2),
        (Kind::FinalNorm, None) => (num_layers + 1, 0),
        _ => (num_layers + 1, 1),
    }
}

/// The rows in forward order (stable: ops keep their listed order within a layer).
fn in_forward_order(rows: &[TensorRow]) -> Vec<&TensorRow> {
    let num_layers = rows
        .iter()
        .filter_map(|r| r.layer)
        .max()
        .map_or(0, |l| l + 1);
    let mut ordered: Vec<&TensorRow> = rows.iter().collect();
    ordered.sort_by_key(|r| forward_rank(r, num_layers));
    ordered
}

fn value_at(row: &TensorRow, at: Location, value: String) -> FirstValue {
    FirstValue {
        tensor: row.name.clone(),
        token: at.token,
        channel: at.channel,
        value,
    }
}

/// The first element of one side that `pick` finds, over the rows in forward order.
fn first_of(
    rows: &[&TensorRow],
    pick: impl Fn(&TensorRow) -> Option<(Location, String)>,
) -> Option<FirstValue> {
    rows.iter()
        .find_map(|row| pick(row).map(|(at, value)| value_at(row, at, value)))
}

/// Each side's first non-finite element and, for f16 / bf16 comparisons, its first element
/// past `dtype`'s range (the rows put in forward order once for both).
pub fn first_values(
    rows: &[TensorRow],
    dtype: DType,
    label: &str,
) -> (FirstNonFinite, Option<FirstOverflow>) {
    let ordered = in_forward_order(rows);
    (
        first_non_finite(&ordered),
        first_overflow(&ordered, dtype, label),
    )
}

fn first_non_finite(ordered: &[&TensorRow]) -> FirstNonFinite {
    let word = |x: Option<(Location, NonFiniteValue)>| x.map(|(at, v)| (at, v.word().to_string()));
    FirstNonFinite {
        a: first_of(ordered, |r| word(r.stats.first_non_finite_a)),
        b: first_of(ordered, |r| word(r.stats.first_non_finite_b)),
    }
}

/// The first overflow of `dtype`'s range on each side, for f16 and bf16 comparisons (None for
/// other dtypes, whose range no hidden state reaches). An infinite value counts as the overflow
/// it became when it comes before any finite value past the limit.
fn first_overflow(ordered: &[&TensorRow], dtype: DType, label: &str) -> Option<FirstOverflow> {
    let slot = match dtype {
        DType::F16 => 0,
        DType::BF16 => 1,
        _ => return None,
    };
    Some(FirstOverflow {
        dtype: label.to_string(),
        limit: RANGE_LIMITS[slot],
        a: first_of(ordered, |r| overflow_in(r, slot, Side::A)),
        b: first_of(ordered, |r| overflow_in(r, slot, Side::B)),
    })
}

#[derive(Clone, Copy)]
enum Side {
    A,
    B,
}

/// A row's first element past range limit `slot` on one side: a finite value past it, or an
/// infinite one, whichever comes first in the row.
fn overflow_in(row: &TensorRow, slot: usize, side: Side) -> Option<(Location, String)> {
    let s = &row.stats;
    let (beyond, non_finite) = match side {
        Side::A => (s.first_beyond_a[slot], s.first_non_finite_a),
        Side::B => (s.first_beyond_b[slot], s.first_non_finite_b),
    };
    let past = beyond.map(|(at, v)| (at, format!("{v:e}")));
    let inf = non_finite
        .filter(|(_, v)| *v != NonFiniteValue::NaN)
        .map(|(at, v)| (at, v.word().to_string()));
    match (past, inf) {
        (Some(p), Some(i)) if (i.0.token, i.0.channel) < (p.0.token, p.0.channel) => Some(i),
        (p, i) => p.or(i),
    }
}

fn describe(v: &FirstValue) -> String {
    format!(
        "{} at {} (token {}, channel {})",
        v.value, v.tensor, v.token, v.channel
    )
}

fn sides(what: &str, a: Option<&FirstValue>, b: Option<&FirstValue>) -> Option<String> {
    let part = |side: &str, v: Option<&FirstValue>| v.map(|v| format!("{side} {}", describe(v)));
    match (part("A", a), part("B", b)) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(format!("{what}: {x}")),
        (Some(x), Some(y)) => Some(format!("{what}: {x}, {y}")),
    }
}

/// The headline's clauses: where the first non-finite value and the first overflow sit, when a
/// side has one. An infinite first non-finite value that is also the first overflow is said
/// once, as the first non-finite value.
pub fn clauses(nf: &FirstNonFinite, overflow: Option<&FirstOverflow>) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(sides(
        "first non-finite value",
        nf.a.as_ref(),
        nf.b.as_ref(),
    ));
    if let Some(o) = overflow {
        fn new<'v>(
            first: &'v Option<FirstValue>,
            nf: &Option<FirstValue>,
        ) -> Option<&'v FirstValue> {
            first.as_ref().filter(|f| Some(*f) != nf.as_ref())
        }
        let what = format!("first value past {}'s range", o.dtype);
        out.extend(sides(&what, new(&o.a, &nf.a), new(&o.b, &nf.b)));
    }
    out
}
