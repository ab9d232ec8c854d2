//! The rows of a comparison, planned by the job from what the caller knows: the tensors its
//! sides hold, the model's layer types, the decoder layers asked for and which table it is.
//! The order is `compare::forward_rows`' (forward order, by `capture::Key`); what a table keeps of
//! it is decided here, once for the live run, `check`, two files and sides of disjoint layers.

use crate::capture::Key;
use crate::compare::{Kind, PlannedRow, forward_rows};
use crate::weights::config::LayerType;

/// Which table the rows are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowMode {
    /// Every row the sides hold: hidden states, each layer's ops with its output, final
    /// recurrent states, `final_norm`, logits (a live run, `check`).
    Every,
    /// Two files: every row, without `final_norm` and logits when `without_final`, then
    /// `--map`'s names the files hold that are no row yet, in the order given.
    Files {
        without_final: bool,
        mapped: Vec<Key>,
    },
    /// Sides holding different decoder layers, each filled from the truth: no ops (a side's
    /// ops cannot be filled from the truth's).
    Disjoint,
}

/// What a comparison's rows are planned from.
#[derive(Debug, Clone, Copy)]
pub struct RowsFrom<'a> {
    /// The tensors every side holds (with what the truth fills in, for [`RowMode::Disjoint`]).
    pub held: &'a [Key],
    pub layer_types: Option<&'a [LayerType]>,
    /// Only these decoder layers (and their ops and states); None: all.
    pub layers: Option<&'a [usize]>,
}

/// The rows of `mode`'s table over what `from` holds, in forward order.
pub fn plan(from: RowsFrom<'_>, mode: RowMode) -> Vec<PlannedRow> {
    let mut rows = forward_rows(from.held, from.layer_types, from.layers);
    match mode {
        RowMode::Every => {}
        RowMode::Disjoint => rows.retain(|r| r.kind != Kind::Op),
        RowMode::Files {
            without_final,
            mapped,
        } => {
            if without_final {
                rows.retain(|r| !matches!(r.kind, Kind::FinalNorm | Kind::Logits));
            }
            for key in mapped {
                if !rows.iter().any(|r| r.key == key) && from.held.contains(&key) {
                    rows.push(PlannedRow {
                        key,
                        kind: Kind::Op,
                        layer: None,
                    });
                }
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The keys `--map` would give these names (`lm.custom` is none of hsdiff's).
    fn keys(list: &[&str]) -> Vec<Key> {
        list.iter().map(|s| Key::mapped(s)).collect()
    }

    fn planned(held: &[Key], layers: Option<&[usize]>, mode: RowMode) -> Vec<String> {
        let from = RowsFrom {
            held,
            layer_types: None,
            layers,
        };
        plan(from, mode)
            .into_iter()
            .map(|r| r.key.to_string())
            .collect()
    }

    const HELD: &[&str] = &[
        "logits",
        "layers.1",
        "layers.0.conv_out",
        "final_norm",
        "embed",
        "layers.0",
        "state.layers.0.recurrent",
        "lm.custom",
    ];

    #[test]
    fn every_row_in_forward_order_within_the_layers_asked_for() {
        let held = keys(HELD);
        let all = planned(&held, None, RowMode::Every);
        assert_eq!(
            all,
            names(&[
                "embed",
                "layers.0.conv_out",
                "layers.0",
                "layers.1",
                "state.layers.0.recurrent",
                "final_norm",
                "logits"
            ])
        );
        let one = planned(&held, Some(&[1]), RowMode::Every);
        assert_eq!(one, names(&["embed", "layers.1", "final_norm", "logits"]));
    }

    #[test]
    fn disjoint_sides_get_no_op_rows() {
        let held = keys(HELD);
        let rows = planned(&held, None, RowMode::Disjoint);
        assert!(!rows.contains(&"layers.0.conv_out".to_string()), "{rows:?}");
        assert!(rows.contains(&"layers.0".to_string()), "{rows:?}");
    }

    #[test]
    fn files_drop_the_final_rows_when_asked_and_add_mapped_names_they_hold() {
        let held = keys(HELD);
        let mode = RowMode::Files {
            without_final: true,
            mapped: keys(&["lm.custom", "not.held", "layers.1"]),
        };
        let rows = planned(&held, None, mode);
        assert_eq!(
            rows,
            names(&[
                "embed",
                "layers.0.conv_out",
                "layers.0",
                "layers.1",
                "state.layers.0.recurrent",
                "lm.custom"
            ])
        );
    }
}
