//! Each side's recorded router choices (`router.{i}.topk_ids`), read as the routes the
//! calibration runs can be told to use: a truth under a side's own routing measures that
//! side's arithmetic alone, whatever its routing did ([`crate::job::Routing`]).

use candle_core::DType;

use crate::capture::{Key, RouterField};
use crate::compare::TensorSource;
use crate::error::{Error, Result};
use crate::formats::FileSource;
use crate::job::Routing;
use crate::model::Routes;
use crate::weights::config::ModelConfig;

/// `src`'s router choices at every MoE layer of `cfg` through `last` (all layers when None);
/// None when the model has no MoE layer there or the file lacks the choices of one of them.
pub fn recorded(
    src: &FileSource,
    cfg: &ModelConfig,
    tokens: usize,
    last: Option<usize>,
) -> Result<Option<Routes>> {
    let layers = last.map_or(cfg.num_hidden_layers, |l| l + 1);
    let moe_layers: Vec<usize> = (0..layers).filter(|&i| cfg.is_moe_layer(i)).collect();
    if moe_layers.is_empty() {
        return Ok(None);
    }
    let mut routes = Routes::default();
    for layer in moe_layers {
        let key = Key::Router(layer, RouterField::TopkIds);
        let name = key.to_string();
        let Some(t) = src.tensor(key)? else {
            return Ok(None);
        };
        let t = if t.rank() == 3 { t.squeeze(0)? } else { t };
        let rows: Vec<Vec<i64>> = t.to_dtype(DType::I64)?.to_vec2()?;
        if rows.len() != tokens {
            return Err(Error::tensor(
                src.path(),
                &name,
                format!(
                    "router expert ids for {} tokens, the comparison has {tokens}",
                    rows.len()
                ),
            ));
        }
        // The ids were checked as they were read (non-negative, below the expert count).
        let rows = rows
            .into_iter()
            .map(|r| r.into_iter().map(|e| e as u32).collect())
            .collect();
        routes.insert(layer, rows);
    }
    Ok(Some(routes))
}

/// How the calibration runs route, given both sides' recorded choices.
pub fn routing(a: Option<&Routes>, b: Option<&Routes>) -> Routing {
    match (a, b) {
        (Some(a), Some(b)) if same_sets(a, b) => Routing::Shared,
        (Some(_), Some(_)) => Routing::EachSide,
        _ => Routing::Own,
    }
}

/// Whether every token uses the same set of experts on both sides (the order within a token's
/// k experts is no difference: their outputs are summed).
fn same_sets(a: &Routes, b: &Routes) -> bool {
    let sorted = |rows: &[Vec<u32>]| -> Vec<Vec<u32>> {
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                r.sort_unstable();
                r
            })
            .collect()
    };
    a.layers().eq(b.layers())
        && a.layers().all(|l| match (a.get(l), b.get(l)) {
            (Some(x), Some(y)) => sorted(x) == sorted(y),
            _ => false,
        })
}
