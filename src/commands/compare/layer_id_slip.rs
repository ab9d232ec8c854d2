//! A drafter pipeline's declared layer ids against what its states are. A dump whose config
//! says 1,2,4,5,6 but whose states are the outputs of layers 0,1,3,4,5 (the off-by-one of
//! aux-hidden-state captures) trained the drafter on other layers than it declares: with the
//! truth at hand, the side's layers are compared with the truth's under the declared ids and
//! under the ids shifted by ±1, ±2; a shift that fits [`FAR_BETTER`]× better is the finding. The
//! comparison then pairs the layers the states are (so the table is right), and the headline
//! leads with the slip, the side it is on, and the `--layer-ids` that reads the file as it is.

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::compare::alignment::{FAR_BETTER, SAMPLE_TOKENS};
use crate::compare::metrics::stats::{median, rel_l2_tensors_over_finite};
use crate::error::Result;
use crate::formats::FileSource;
use crate::formats::pipelines::Pipeline;

/// The shifts looked for.
const SHIFTS: [i64; 4] = [-1, 1, -2, 2];

/// A side whose pipeline ids name other layers than its states are.
#[derive(Debug, Clone)]
pub struct LayerIdSlip {
    pub side: &'static str,
    pub pipeline: &'static str,
    /// The ids as declared and as the states are, in the pipeline's convention.
    pub declared: Vec<usize>,
    pub found: Vec<usize>,
    /// Layers to add to the declared reading.
    pub shift: i64,
    /// Median rel L2 against the truth as declared, and as found.
    pub as_declared: f64,
    pub as_found: f64,
}

impl LayerIdSlip {
    /// The headline's clause.
    pub fn sentence(&self) -> String {
        format!(
            "{side}: layer ids declared {} but the states are those of ids {} ({}: median rel L2 \
             {:.1e} against the f64 truth, as declared {:.1e}) — the drafter's data is of other \
             layers than its config names: pass --layer-ids-{lower} {}",
            list(&self.declared),
            list(&self.found),
            self.pipeline,
            self.as_found,
            self.as_declared,
            list(&self.found),
            side = self.side,
            lower = self.side.to_ascii_lowercase(),
        )
    }
}

/// The hsdiff layer number a pipeline's id names is `id − offset`.
fn id_offset(p: Pipeline) -> i64 {
    match p {
        Pipeline::Speculators => 1,
        _ => 0,
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
    let layers: Vec<usize> = src
        .names()
        .iter()
        .filter(|n| info.last_state.as_deref() != Some(n.as_str()))
        .filter_map(|n| match Key::of(n) {
            Some(Key::Layer(i)) => Some(i),
            _ => None,
        })
        .collect();
    let Some(as_declared) = fit(src, truth, &layers, 0)? else {
        return Ok(None);
    };
    let mut best: Option<(i64, f64)> = None;
    for s in SHIFTS {
        if let Some(m) = fit(src, truth, &layers, s)?
            && best.is_none_or(|(_, b)| m < b)
        {
            best = Some((s, m));
        }
    }
    let Some((shift, as_found)) = best.filter(|(_, m)| m * FAR_BETTER < as_declared) else {
        return Ok(None);
    };
    let offset = id_offset(info.pipeline);
    let id = |layer: usize, s: i64| (layer as i64 + s + offset).max(0) as usize;
    Ok(Some(LayerIdSlip {
        side,
        pipeline: info.pipeline.as_str(),
        declared: layers.iter().map(|&l| id(l, 0)).collect(),
        found: layers.iter().map(|&l| id(l, shift)).collect(),
        shift,
        as_declared,
        as_found,
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
        let (Some(x), Some(t)) = (
            src.tensor_head(&Key::Layer(l).to_string(), SAMPLE_TOKENS)?,
            truth.tensor_head(&Key::Layer(j).to_string(), SAMPLE_TOKENS)?,
        ) else {
            return Ok(None);
        };
        if x.dims() != t.dims() {
            return Ok(None);
        }
        rels.push(rel_l2_tensors_over_finite(&x, &t)?);
    }
    Ok((!rels.is_empty()).then(|| median(&rels)))
}

fn list(ids: &[usize]) -> String {
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
