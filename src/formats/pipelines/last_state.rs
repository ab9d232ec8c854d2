//! "After the final norm or not": a pipeline's last state is read as its code says
//! (`final_norm` for SpecForge EAGLE-3, Model-Optimizer and ge_data; the last layer's raw output
//! for vLLM's id L), then checked against the f64 truth: both readings are compared with the
//! truth and the far better one is kept, with the evidence in the report.

use super::Pipeline;
use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::rel_l2_tensors_over_finite;
use crate::error::Result;
use crate::formats::FileSource;

/// Checks the reading of `src`'s last state against `truth` (a model of `num_layers` layers),
/// renaming it when the other reading is far closer. Returns the note for the report.
pub fn check_last_state(
    src: &mut FileSource,
    truth: &dyn TensorSource,
    num_layers: usize,
) -> Result<Option<String>> {
    let Some(info) = &src.pipeline else {
        return Ok(None);
    };
    let last_layer = Key::Layer(num_layers.saturating_sub(1)).to_string();
    let claimed = match (&info.last_state, info.pipeline) {
        (Some(n), _) => n.clone(),
        // vLLM's id L, named only once L is known.
        (None, Pipeline::Speculators) if src.has(&last_layer) => last_layer.clone(),
        (None, _) => return Ok(None),
    };
    let other = if Key::of(&claimed) == Some(Key::FinalNorm) {
        last_layer
    } else {
        Key::FinalNorm.to_string()
    };
    let raw = src.raw_name(&claimed).unwrap_or_default().to_string();
    let Some(t) = src.get_head(&claimed, SAMPLE_TOKENS)? else {
        return Ok(None);
    };
    let (Some(claimed_key), Some(other_key)) = (Key::of(&claimed), Key::of(&other)) else {
        return Ok(None);
    };
    let (Some(as_claimed), Some(as_other)) = (
        truth.tensor_head(claimed_key, SAMPLE_TOKENS)?,
        truth.tensor_head(other_key, SAMPLE_TOKENS)?,
    ) else {
        return Ok(None);
    };
    if as_claimed.dims() != t.dims() || as_other.dims() != t.dims() {
        return Ok(None);
    }
    let (rc, ro) = (
        rel_l2_tensors_over_finite(&t, &as_claimed)?,
        rel_l2_tensors_over_finite(&t, &as_other)?,
    );
    let side = |n: &str| {
        if Key::of(n) == Some(Key::FinalNorm) {
            "after the final norm (final_norm)".to_string()
        } else {
            format!("the last layer's output before the final norm ({n})")
        }
    };
    // Renamed only when the other name is free (not another of the file's layers).
    if ro * FAR_BETTER < rc && !src.has(&other) {
        src.rename(&raw, &other)?;
        return Ok(Some(format!(
            "`{raw}` read as {}, not {} as its pipeline documents: rel L2 {ro:.1e} against the truth read so, {rc:.1e} otherwise",
            side(&other),
            side(&claimed)
        )));
    }
    Ok(Some(format!(
        "`{raw}` read as {} (rel L2 {rc:.1e} against the truth; read as {}: {ro:.1e})",
        side(&claimed),
        side(&other)
    )))
}
