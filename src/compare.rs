//! The comparison engine: which tensors to compare, in forward order, from two capture sources
//! (live runs or dump files), and their statistics.

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::capture::{Captures, dump::Dump, names};
use crate::config::LayerType;
use crate::error::Result;

/// Somewhere captured tensors can be read by name, one at a time.
pub trait TensorSource {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>>;
    fn names(&self) -> Vec<String>;

    /// The first `n` token rows of a `[1, T, …]` (or `[T, …]`) capture, all of them when T ≤ n.
    /// Sources that can read a prefix without the rest (memory-mapped files) override this.
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
        Ok(self.get(name).cloned())
    }
    fn names(&self) -> Vec<String> {
        Captures::names(self)
            .into_iter()
            .map(String::from)
            .collect()
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
}

/// A row of the table to come: which tensor is compared, what it is, and its decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRow {
    pub name: String,
    pub kind: Kind,
    pub layer: Option<usize>,
}

/// Rows in forward order: `embed`, then per layer its op captures and `layers.{i}`, then
/// `final_norm`, `logits`. Only names present in `available` are planned; `layers` keeps only
/// those decoder layers (and their ops).
pub fn plan_rows(
    available: &[String],
    layer_types: Option<&[LayerType]>,
    layers: Option<&[usize]>,
) -> Vec<PlannedRow> {
    let has = |n: &str| available.iter().any(|a| a == n);
    let mut rows = Vec::new();
    if has(names::EMBED) {
        rows.push(PlannedRow {
            name: names::EMBED.to_string(),
            kind: Kind::Embed,
            layer: None,
        });
    }
    let mut layer_ids: Vec<usize> = available
        .iter()
        .filter_map(|n| names::parse_layer(n))
        .collect();
    layer_ids.sort_unstable();
    layer_ids.dedup();
    for i in layer_ids {
        if layers.is_some_and(|keep| !keep.contains(&i)) {
            continue;
        }
        for n in available {
            if matches!(names::parse_op(n), Some((l, _)) if l == i) {
                rows.push(PlannedRow {
                    name: n.clone(),
                    kind: Kind::Op,
                    layer: Some(i),
                });
            }
        }
        let kind = match layer_types.and_then(|t| t.get(i)) {
            Some(LayerType::LinearAttention) => Kind::LinearAttention,
            Some(LayerType::FullAttention) => Kind::FullAttention,
            None => Kind::Layer,
        };
        rows.push(PlannedRow {
            name: names::layer(i),
            kind,
            layer: Some(i),
        });
    }
    for (name, kind) in [
        (names::FINAL_NORM, Kind::FinalNorm),
        (names::LOGITS, Kind::Logits),
    ] {
        if has(name) {
            rows.push(PlannedRow {
                name: name.to_string(),
                kind,
                layer: None,
            });
        }
    }
    rows
}
