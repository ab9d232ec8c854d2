//! The two files made comparable before anything runs: `--map` applied, each side's reading
//! told, the positions both sides hold kept, values saved wider than computed judged as what
//! they are, and the token ids both carry reconciled with any given ones.

use candle_core::DType;

use super::context::Pair;
use crate::capture::Key;
use crate::commands::compare::{pair_steps, tokens};
use crate::error::Result;
use crate::formats::pipelines::{self, HeldPositions, ZeroPadding};
use crate::formats::value_dtype_notes;
use crate::report::TokenIds;

/// The pair made comparable.
pub(super) struct Prepared {
    /// Names `--map` gave that are none of hsdiff's: compared as extra rows.
    pub extra_rows: Vec<Key>,
    /// Positions both sides held as all-zero padding, left out.
    pub zero_padding: Option<ZeroPadding>,
    /// Positions one side lacks, left out of both.
    pub held: Option<HeldPositions>,
    /// The ids the truth is computed on (empty: none known).
    pub input_ids: Vec<u32>,
    pub token_ids: TokenIds,
    /// The dtypes the two files were computed in.
    pub dtypes: (DType, DType),
}

pub(super) fn prepare(pair: &mut Pair) -> Result<Prepared> {
    let extra_rows = pair_steps::apply_maps(&mut pair.a, &mut pair.b, &pair.opts.maps)?;
    // Two entries read as one name, unresolved by --map: refused before anything is said.
    pair.a.check_unambiguous()?;
    pair.b.check_unambiguous()?;
    tell_readings(pair)?;
    // Positions both sides hold as all-zero (padding with no mask) are left out first.
    let zero_padding = pipelines::drop_zero_padding(&mut pair.a, &mut pair.b)?;
    if let Some(p) = &zero_padding {
        pair.notes.note(p.note.clone());
    }
    // Positions one side lacks (an SGLang request after a prefix-cache hit) are left out of both.
    let held = pipelines::align_held_positions(&mut pair.a, &mut pair.b)?;
    if let Some(h) = &held {
        pair.notes.note(h.note.clone());
    }
    // A bf16 run saved as f32/f64 is judged as the bf16 run it is.
    for note in value_dtype_notes([("A", &mut pair.a), ("B", &mut pair.b)])? {
        pair.notes.note(note);
    }
    // Token ids first: different inputs make every other number meaningless.
    let (file_ids, token_ids) = pair_steps::token_ids(&pair.a, &pair.b)?;
    let (input_ids, ids_note) =
        tokens::reconcile(file_ids, pair.opts.given_ids.clone(), &pair.a, &pair.b)?;
    if let Some(note) = ids_note {
        pair.notes.record(note);
    }
    let dtype = |src: &crate::formats::FileSource| src.compute_dtype().unwrap_or(DType::F32);
    Ok(Prepared {
        extra_rows,
        zero_padding,
        held,
        input_ids,
        token_ids,
        dtypes: (dtype(&pair.a), dtype(&pair.b)),
    })
}

/// How each side's file was read (its conventions), and a side none of whose names was
/// recognised refused.
fn tell_readings(pair: &mut Pair) -> Result<()> {
    for side in ["A", "B"] {
        let src = pair.side(side);
        let readings: Vec<(String, String)> = src
            .conventions
            .iter()
            .map(|c| {
                (
                    format!("{side} ({}): {c}", src.path().display()),
                    format!("{side}: {c}"),
                )
            })
            .collect();
        for (told, recorded) in readings {
            pair.notes.note_as(&told, recorded);
        }
        pair_steps::require_names(pair.side(side))?;
    }
    Ok(())
}
