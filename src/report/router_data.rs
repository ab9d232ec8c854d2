//! Whether the two sides' router data — every `router.{i}.*` tensor either side holds: chosen
//! experts, logits, margins — are the same bit for bit. The headline calls two captures
//! "identical" only when they are, router data included: equal hidden states beside other
//! routing, NaN router logits or router data on one side only are not identical captures.

use candle_core::{DType, Tensor};

use crate::capture::Key;
use crate::compare::TensorSource;
use crate::error::Result;

/// The router tensors of a source, in forward order.
fn router_keys(src: &dyn TensorSource) -> Vec<Key> {
    let mut keys: Vec<Key> = src
        .keys()
        .into_iter()
        .filter(|k| matches!(k, Key::Router(..)))
        .collect();
    keys.sort();
    keys
}

/// The values' bits, NaN seen (None when a value is NaN).
fn bits(t: &Tensor) -> Result<Option<Vec<u64>>> {
    let v: Vec<f64> = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
    if v.iter().any(|x| x.is_nan()) {
        return Ok(None);
    }
    Ok(Some(v.into_iter().map(f64::to_bits).collect()))
}

/// The first way the sides' router data differ, in words; None when they are the same bit for
/// bit (or neither side holds any).
pub(super) fn router_difference(
    a: &dyn TensorSource,
    b: &dyn TensorSource,
) -> Result<Option<String>> {
    let (in_a, in_b) = (router_keys(a), router_keys(b));
    let mut all: Vec<Key> = in_a.into_iter().chain(in_b).collect();
    all.sort();
    all.dedup();
    for name in all {
        let (x, y) = match (a.tensor(name)?, b.tensor(name)?) {
            (Some(x), Some(y)) => (x, y),
            (Some(_), None) => return Ok(Some(format!("`{name}` is on A only"))),
            (None, Some(_)) => return Ok(Some(format!("`{name}` is on B only"))),
            (None, None) => continue,
        };
        let (bx, by) = (bits(&x)?, bits(&y)?);
        let why = match (&bx, &by) {
            (None, _) | (_, None) => {
                let sides = match (bx.is_none(), by.is_none()) {
                    (true, true) => "both sides",
                    (true, false) => "A",
                    _ => "B",
                };
                Some(format!("`{name}` holds NaN on {sides}"))
            }
            _ if x.dims() != y.dims() || bx != by => Some(format!("`{name}` differs")),
            _ => None,
        };
        if why.is_some() {
            return Ok(why);
        }
    }
    Ok(None)
}
