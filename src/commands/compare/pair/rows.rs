//! The rows a pair is judged on: the tensors both files hold, paired — or, for files that hold
//! different layers, every layer of either side against the truth — with what only one side
//! holds and what no name rule read said rather than dropped.

use super::context::Notes;
use crate::capture::{Captures, Key};
use crate::commands::compare::disjoint::{self, TruthFilled};
use crate::commands::compare::pair::PairOptions;
use crate::commands::compare::pair_steps;
use crate::compare::{HeldByOneSide, PlannedRow, TensorSource, unnamed_note};
use crate::error::Result;
use crate::formats::FileSource;
use crate::report::{self, Alignment};
use crate::weights::config::LayerType;

/// The rows, and what the report and a dataset need to know about them.
pub(super) struct Planned<'p> {
    pub rows: Vec<PlannedRow>,
    /// Files of different layers: each side with the rows it lacks read from the truth.
    pub filled: Option<(TruthFilled<'p>, TruthFilled<'p>)>,
    pub one_sided: Option<report::DisjointLayers>,
    /// The layer offset between the files, unless they hold different layers (no diagonal).
    pub alignment: Option<Alignment>,
    /// What only one side held, so it got no row.
    pub held_by_one: HeldByOneSide,
    /// Each side's tensors that no name rule read and no `--map` named.
    pub unnamed: (Vec<String>, Vec<String>),
}

impl<'p> Planned<'p> {
    /// The two sides the rows are read from: the files, or the files filled from the truth.
    pub fn sources(&self, a: &'p FileSource, b: &'p FileSource) -> [&dyn TensorSource; 2] {
        match &self.filled {
            Some((fa, fb)) => [fa, fb],
            None => [a, b],
        }
    }
}

/// What [`plan`] plans from besides the files.
pub(super) struct Planning<'p> {
    pub truth: Option<&'p Captures>,
    pub layer_types: Option<&'p [LayerType]>,
    /// Rows `--map` named that are none of hsdiff's.
    pub extra_rows: Vec<Key>,
    /// The last layer the truth ran through, when `--layers` cut it short.
    pub last_layer: Option<usize>,
    pub alignment: Option<Alignment>,
}

pub(super) fn plan<'p>(
    (a, b): (&'p FileSource, &'p FileSource),
    notes: &mut Notes,
    opts: &PairOptions,
    planning: Planning<'p>,
) -> Result<Planned<'p>> {
    let layers = opts.layers.as_deref();
    let mut held_by_one = HeldByOneSide::of(&a.keys(), &b.keys(), layers);
    if let Some(note) = held_by_one.states_note() {
        notes.note(note);
    }
    // Files that hold different layers (hooks on layers[i] against hidden_states[i]): with
    // the truth at hand, every layer of either side is judged against it.
    let split = planning
        .truth
        .and_then(|t| disjoint::disjoint_layers(a, b).map(|l| (t, l)));
    let (rows, filled, one_sided) = match split {
        Some((t, layers_ab)) => {
            let (rows, fa, fb, one_sided, note) =
                disjoint::judged_against(a, b, t, layers_ab, planning.layer_types);
            notes.note(note);
            (rows, Some((fa, fb)), Some(one_sided))
        }
        None => {
            let without_final = planning.last_layer.is_some();
            let (types, extra) = (planning.layer_types, planning.extra_rows);
            let rows = pair_steps::paired_rows(a, b, layers, types, extra, without_final)?;
            (rows, None, None)
        }
    };
    // Files of different layers are judged against the truth layer by layer above; otherwise
    // what one side alone holds gets no row, and the report says so.
    if one_sided.is_some() {
        held_by_one.tensors_a.clear();
        held_by_one.tensors_b.clear();
    } else if let Some(note) = held_by_one.tensors_note() {
        notes.note(note);
    }
    // Tensors no name rule read (and no --map named) are not compared: said, never dropped.
    let unnamed = (a.unnamed(), b.unnamed());
    if let Some(note) = unnamed_note(&unnamed.0, &unnamed.1) {
        notes.note(note);
    }
    record_cuts((a, b), notes, planning.last_layer);
    Ok(Planned {
        rows,
        filled,
        alignment: planning.alignment.filter(|_| one_sided.is_none()),
        one_sided,
        held_by_one,
        unnamed,
    })
}

/// What the report leaves out that its table does not show: final_norm and logits past a
/// shortened truth, a pipeline's padding positions.
fn record_cuts((a, b): (&FileSource, &FileSource), notes: &mut Notes, last_layer: Option<usize>) {
    if let Some(last) = last_layer {
        notes.record(format!(
            "--layers: the truth and floor ran through layer {last} only, so final_norm and \
             logits are not reported"
        ));
    }
    for (side, src) in [("A", a), ("B", b)] {
        if let Some(p) = &src.pipeline
            && p.positions != p.stored_positions
        {
            notes.record(format!(
                "{side}: {} of {} stored positions compared (padding left out)",
                p.positions, p.stored_positions
            ));
        }
    }
}
