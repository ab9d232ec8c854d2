//! The model that measures a pair's truth and floor: given (`--model`), named by a file's
//! fingerprint, lent by a dataset that loaded it once — or none, and the report says why.

use super::context::Pair;
use super::prepare::Prepared;
use crate::commands::compare::pair_steps;
use crate::error::Result;
use crate::formats::pipelines::HeldPositions;
use crate::model::{Model, ModelFolder};

/// Where a pair's truth and floor come from.
pub enum TruthModel<'m> {
    /// `--model DIR`, its config.json already read.
    Folder(Box<ModelFolder>),
    /// The model a file's fingerprint names, if any.
    Fingerprinted,
    /// A model already loaded (a dataset's), with how it was found; handed back when done.
    Loaded(&'m mut Option<(Model, String)>),
    /// None: the report is uncalibrated, for this reason.
    Skip(String),
}

/// The model found for one pair, and where it goes when the pair is done.
pub(super) struct Calibrator<'m> {
    /// The model, and how it was found ("--model DIR").
    found: Option<(Model, String)>,
    /// Why there is no truth, when it is the missing token ids (the headline's generic "pass
    /// --model DIR" would mislead).
    pub uncalibrated_why: Option<String>,
    lent_by: Option<&'m mut Option<(Model, String)>>,
}

impl<'m> Calibrator<'m> {
    /// Finds the model `truth` names for `pair`; without one, records why.
    pub fn find(truth: TruthModel<'m>, pair: &mut Pair, ready: &Prepared) -> Result<Self> {
        let ids = &ready.input_ids;
        // Rows from position p > 0 on are compared uncalibrated (a dataset's model is kept).
        let unheld_why = ready
            .held
            .as_ref()
            .and_then(HeldPositions::uncalibrated_why);
        let truth = if pair.opts.no_floor {
            TruthModel::Skip("no floor measured (--no-floor)".to_string())
        } else {
            truth
        };
        let (found, lent_by) = match (truth, unheld_why) {
            (TruthModel::Skip(why), _) => (Err(why), None),
            (TruthModel::Loaded(slot), why) => (borrowed(slot, why, ids), Some(slot)),
            (_, Some(why)) => (Err(why), None),
            (TruthModel::Folder(folder), None) => {
                let found = pair_steps::calibration_model(Some(*folder), &pair.a, &pair.b, ids)?;
                (found, None)
            }
            (TruthModel::Fingerprinted, None) => {
                let found = pair_steps::calibration_model(None, &pair.a, &pair.b, ids)?;
                (found, None)
            }
        };
        let mut uncalibrated_why = None;
        let found = match found {
            Ok(found) => Some(found),
            Err(why) => {
                // The headline says so; a stderr line here would precede any later input error.
                pair.notes.record(format!("uncalibrated: {why}"));
                // Only the missing ids need other words than the headline's "pass --model DIR".
                if ids.is_empty() && !pair.opts.no_floor {
                    uncalibrated_why = Some(why);
                }
                None
            }
        };
        Ok(Calibrator {
            found,
            uncalibrated_why,
            lent_by,
        })
    }

    /// The model and how it was found, when there is one.
    pub fn model(&self) -> Option<(&Model, &str)> {
        self.found.as_ref().map(|(m, how)| (m, how.as_str()))
    }

    /// A dataset's model goes back to it, whatever became of this pair.
    pub fn give_back(self) {
        if let (Some(slot), Some(found)) = (self.lent_by, self.found) {
            *slot = Some(found);
        }
    }
}

/// A dataset's model taken for one pair, or why it cannot calibrate it. A pair some of whose
/// positions only one side holds, or whose files carry no token ids, leaves the model with the
/// dataset for its other pairs.
fn borrowed(
    slot: &mut Option<(Model, String)>,
    unheld_why: Option<String>,
    ids: &[u32],
) -> std::result::Result<(Model, String), String> {
    match (slot.take(), unheld_why) {
        (Some(m), Some(why)) => {
            *slot = Some(m);
            Err(why)
        }
        // The model stays with the dataset: a later pair may carry the ids.
        (held, _) if ids.is_empty() => {
            *slot = held;
            Err("neither file carries token ids, so the truth cannot be computed".to_string())
        }
        (Some(m), None) => Ok(m),
        (None, _) => Err("no model to measure the floor".to_string()),
    }
}
