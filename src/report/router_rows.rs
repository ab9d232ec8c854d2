//! Router top-k agreement of side A with side B, per MoE layer both record.

use candle_core::DType;

use super::RouterRow;
use super::build::Comparison;
use super::routing::router_layers;
use crate::capture::{Key, RouterField};
use crate::error::Result;

/// Both sides' router choices cover every token once with the same k: otherwise agreement over
/// the rows that happen to exist would read as "100 % agree".
fn check_router_pair(key: Key, a: &[Vec<i64>], b: &[Vec<i64>], tokens: usize) -> Result<()> {
    let k = |rows: &[Vec<i64>]| rows.first().map_or(0, Vec::len);
    let refuse = |msg: String| Err(crate::error::Error::Compare(format!("`{key}`: {msg}")));
    if k(a) != k(b) {
        return refuse(format!(
            "A chose {} experts per token, B {}: not the same router",
            k(a),
            k(b)
        ));
    }
    for (side, rows) in [("A", a), ("B", b)] {
        if tokens > 0 && rows.len() != tokens {
            return refuse(format!(
                "{side} has router choices for {} tokens, the comparison has {tokens}",
                rows.len()
            ));
        }
    }
    if a.len() != b.len() {
        return refuse(format!(
            "A has router choices for {} tokens, B for {}",
            a.len(),
            b.len()
        ));
    }
    Ok(())
}

/// Router top-k agreement for every `router.{i}.topk_ids` both sides carry.
pub(super) fn router_rows(c: &Comparison) -> Result<Vec<RouterRow>> {
    let mut rows = Vec::new();
    for layer in router_layers(c.a) {
        let key = Key::Router(layer, RouterField::TopkIds);
        let (Some(a), Some(b)) = (c.a.tensor(key)?, c.b.tensor(key)?) else {
            continue;
        };
        let a: Vec<Vec<i64>> = a.squeeze(0)?.to_dtype(DType::I64)?.to_vec2()?;
        let b: Vec<Vec<i64>> = b.squeeze(0)?.to_dtype(DType::I64)?.to_vec2()?;
        check_router_pair(key, &a, &b, c.input.tokens)?;
        let flipped: Vec<usize> = a
            .iter()
            .zip(&b)
            .enumerate()
            .filter(|(_, (x, y))| {
                let (mut x, mut y) = ((*x).clone(), (*y).clone());
                x.sort_unstable();
                y.sort_unstable();
                x != y
            })
            .map(|(t, _)| t)
            .collect();
        let margins: Option<Vec<f64>> = match c.b.tensor(Key::Router(layer, RouterField::Margin))? {
            Some(m) => Some(m.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?),
            None => None,
        };
        let flip_margins = flipped
            .iter()
            .map(|&t| margins.as_ref().and_then(|m| m.get(t).copied()))
            .collect();
        rows.push(RouterRow {
            layer,
            agree: 1.0 - flipped.len() as f64 / a.len().max(1) as f64,
            flipped_tokens: flipped,
            flip_margins,
        });
    }
    Ok(rows)
}
