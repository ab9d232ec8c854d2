//! A drafter pipeline's declared layer ids against what its states are. A dump whose config
//! says 1,2,4,5,6 but whose states are the outputs of layers 0,1,3,4,5 (the off-by-one of
//! aux-hidden-state captures) trained the drafter on other layers than it declares: with the
//! truth at hand, the side's layers are compared with the truth's under the declared ids and
//! under the ids shifted by ±1, ±2; a shift that fits far better is the finding (measured and
//! chosen as vLLM's aux-id check does: [`crate::formats::pipelines::id_shift`]). The
//! comparison then pairs the layers the states are (so the table is right), and the headline
//! leads with the slip, the side it is on, and the `--layer-ids` that reads the file as it is.

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::SAMPLE_TOKENS;
use crate::compare::metrics::stats::median;
use crate::error::Result;
use crate::formats::FileSource;
use crate::formats::pipelines::id_shift::{IdShift, far_better, rel_to_truth};
use crate::formats::pipelines::list;

/// The shifts looked for.
const SHIFTS: [i64; 4] = [-1, 1, -2, 2];

/// A side whose pipeline ids name other layers than its states are.
#[derive(Debug, Clone)]
pub struct LayerIdSlip {
    pub side: &'static str,
    pub pipeline: &'static str,
    /// The ids in the pipeline's convention, as declared and as the states fit them.
    pub ids: IdShift,
}

impl LayerIdSlip {
    /// The headline's clause.
    pub fn sentence(&self) -> String {
        let found = self.ids.found();
        format!(
            "{side}: layer ids declared {} but the states are those of ids {} ({}: median rel L2 \
             {:.1e} against the f64 truth, as declared {:.1e}) — the drafter's data is of other \
             layers than its config names: pass --layer-ids-{lower} {}",
            list(&self.ids.declared),
            list(&found),
            self.pipeline,
            self.ids.as_found,
            self.ids.as_declared,
            list(&found),
            side = self.side,
            lower = self.side.to_ascii_lowercase(),
        )
    }
}

/// The slip of `src`'s pipeline ids against `truth`, if its layers fit the truth far better
/// shifted than as declared.
pub fn find(
    side: &'static str,
    src: &FileSource,
    truth: &dyn TensorSource,
) -> Result<Option<LayerIdSlip>> {
    let Some(info) = &src.pipeline else {
        return Ok(None);
    };
    let last_state = info.last_state.as_deref().and_then(Key::of);
    let layers: Vec<usize> = src
        .keys()
        .into_iter()
        .filter(|&k| Some(k) != last_state)
        .filter_map(Key::layer_output)
        .collect();
    let Some(as_declared) = fit(src, truth, &layers, 0)? else {
        return Ok(None);
    };
    let mut shifted = Vec::new();
    for s in SHIFTS {
        if let Some(m) = fit(src, truth, &layers, s)? {
            shifted.push((s, m));
        }
    }
    let Some((shift, as_found)) = far_better(as_declared, shifted) else {
        return Ok(None);
    };
    let offset = info.pipeline.convention().id_offset();
    Ok(Some(LayerIdSlip {
        side,
        pipeline: info.pipeline.as_str(),
        ids: IdShift {
            declared: layers
                .iter()
                .map(|&l| (l as i64 + offset) as usize)
                .collect(),
            shift,
            as_declared,
            as_found,
        },
    }))
}

/// Median rel L2 of `layers` of `src` against the truth's layers shifted by `s`; None when a
/// shifted layer is not in the truth (past either end) or no layer can be compared.
fn fit(
    src: &FileSource,
    truth: &dyn TensorSource,
    layers: &[usize],
    s: i64,
) -> Result<Option<f64>> {
    let mut rels = Vec::new();
    for &l in layers {
        let Some(j) = usize::try_from(l as i64 + s).ok() else {
            return Ok(None);
        };
        let Some(x) = src.tensor_head(Key::Layer(l), SAMPLE_TOKENS)? else {
            return Ok(None);
        };
        let Some(rel) = rel_to_truth(&x, truth, Key::Layer(j))? else {
            return Ok(None);
        };
        rels.push(rel);
    }
    Ok((!rels.is_empty()).then(|| median(&rels)))
}
