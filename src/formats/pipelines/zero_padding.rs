//! Zero-padded positions of files that carry no `attention_mask`: a batch `[B, T, H]` padded
//! to its longest sample, or a sample saved at a padded length. No forward writes an all-zero
//! hidden state, so a position that is zero in every element of every captured hidden state on
//! BOTH sides is padding, and is left out of the comparison (its token ids too — the truth is
//! then run on the real tokens only). A position all-zero on one side only is no padding: it is
//! a divergence (a lost write, a cleared cache row) and stays compared.

use candle_core::DType;

use super::view::{Op, View};
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::FileSource;

/// The hidden states a padding decision reads: the embedding, layers and final norm.
fn is_hidden(name: &str) -> bool {
    matches!(
        Key::of(name),
        Some(Key::Embed | Key::FinalNorm | Key::Layer(_))
    )
}

/// Per position (of T), whether it is all-zero in every hidden state of `src`. None when the
/// file has no hidden state, they disagree on T, or the first one has no all-zero position (the
/// common case costs one tensor's scan, which stops at each row's first non-zero value).
fn zero_rows(src: &FileSource) -> Result<Option<Vec<bool>>> {
    let mut zero: Option<Vec<bool>> = None;
    for name in src.names().into_iter().filter(|n| is_hidden(n)) {
        let here = match zero_rows_of(src, &name)? {
            Scan::Rows(here) => here,
            Scan::Absent => continue,
            Scan::NotAState => return Ok(None),
        };
        zero = Some(match zero {
            None => here,
            Some(z) if z.len() != here.len() => return Ok(None),
            Some(z) => z.iter().zip(&here).map(|(a, b)| *a && *b).collect(),
        });
        if zero.as_ref().is_some_and(|z| !z.contains(&true)) {
            return Ok(None);
        }
    }
    Ok(zero)
}

/// What one hidden state says about zero positions.
enum Scan {
    /// Per position, whether it is all zeros there (±0; NaN is not zero).
    Rows(Vec<bool>),
    /// No tensor of that name.
    Absent,
    /// Not a `[1, T, D]` state.
    NotAState,
}

/// Scans the hidden state `name`: from the map when it can be (no copy), else through the
/// tensor.
fn zero_rows_of(src: &FileSource, name: &str) -> Result<Scan> {
    if let Some(rows) = src.mapped_rows(name)? {
        let elem = rows.dtype.size_in_bytes();
        // Little-endian: a value is ±0 when every byte is 0 but the top one's sign bit.
        let is_zero = |v: &[u8]| v[elem - 1] & 0x7f == 0 && v[..elem - 1].iter().all(|&b| b == 0);
        let here = (0..rows.rows)
            .map(|t| rows.row(t).chunks_exact(elem).all(is_zero))
            .collect();
        // Pages of a file truncated meanwhile read as zeros: never decide from those.
        crate::util::mapped::check()?;
        return Ok(Scan::Rows(here));
    }
    let Some(t) = src.get(name)? else {
        return Ok(Scan::Absent);
    };
    let [1, _, _] = t.dims()[..] else {
        return Ok(Scan::NotAState);
    };
    // `ne(0)` is true for NaN: a NaN row is never read as zero.
    let nonzero: Vec<f32> = t
        .squeeze(0)?
        .ne(&t.squeeze(0)?.zeros_like()?)?
        .to_dtype(DType::F32)?
        .sum(1)?
        .to_vec1()?;
    Ok(Scan::Rows(nonzero.iter().map(|&c| c == 0.0).collect()))
}

/// The token axis of the tensor `name` seen with `shape`: the last for token ids and the loss
/// mask (`[T]`, `[1, T]`), the first of `[T, D]`, the second of `[1, T, …]`.
pub(super) fn token_axis(ids_like: bool, shape: &[usize]) -> Option<usize> {
    match (ids_like, shape.len()) {
        (true, n) if n >= 1 => Some(n - 1),
        (false, 2) => Some(0),
        (false, n) if n >= 3 => Some(1),
        _ => None,
    }
}

impl FileSource {
    /// The views that keep only `keep` of the `tokens` positions of every named entry (and the
    /// loss mask), or None when some entry has no token axis of that length.
    pub(super) fn position_views(&self, keep: &[u32], tokens: usize) -> Option<Vec<(usize, View)>> {
        let loss = self.pipeline.as_ref().and_then(|p| p.loss_mask);
        let mut out = Vec::new();
        let named = self
            .names
            .iter()
            .map(|(n, &i)| (Key::of(n) == Some(Key::InputIds), i));
        for (ids_like, idx) in named.chain(loss.map(|i| (true, i))) {
            let (ops, shape) = match self.views.get(&idx) {
                Some(v) => (v.ops.clone(), v.shape.clone()),
                None => (Vec::new(), self.entries[idx].shape.clone()),
            };
            let axis = token_axis(ids_like, &shape)?;
            if shape[axis] != tokens {
                return None;
            }
            let mut ops = ops;
            ops.push(Op::Select {
                axis,
                index: keep.to_vec(),
            });
            out.push((idx, View::new(&self.entries[idx].shape, ops).ok()?));
        }
        Some(out)
    }
}

/// Positions left out as zero padding.
#[derive(Debug, Clone)]
pub struct ZeroPadding {
    pub left_out: usize,
    pub of: usize,
    /// The report's note: how many, which, and why.
    pub note: String,
}

/// Leaves out the positions both sides hold as zero padding. None when there is none.
pub fn drop_zero_padding(a: &mut FileSource, b: &mut FileSource) -> Result<Option<ZeroPadding>> {
    if [&*a, &*b]
        .iter()
        .any(|s| s.pipeline.as_ref().is_some_and(|p| p.masked_by.is_some()))
    {
        // The attention mask said which positions are real.
        return Ok(None);
    }
    let Some(both) = zero_on_both(a, b)? else {
        return Ok(None);
    };
    let tokens = both.len();
    let keep = between_padding(&both, a, b)?;
    let padded = tokens - keep.len();
    if padded == 0 || !cut_both(a, b, &keep, tokens) {
        return Ok(None);
    }
    let left: Vec<u32> = (0..tokens as u32)
        .filter(|i| keep.binary_search(i).is_err())
        .collect();
    Ok(Some(ZeroPadding {
        left_out: padded,
        of: tokens,
        note: format!(
            "{padded} of {tokens} positions ({}) are zero in every hidden state of both sides: \
             zero padding (no forward writes an all-zero hidden state), left out; {} compared",
            ranges(&left),
            keep.len()
        ),
    }))
}

/// Per position, whether it is zero in every hidden state of both sides; None when the sides'
/// rows cannot be told or differ in number. Refused when every position is.
fn zero_on_both(a: &FileSource, b: &FileSource) -> Result<Option<Vec<bool>>> {
    let Some(za) = zero_rows(a)? else {
        return Ok(None);
    };
    let Some(zb) = zero_rows(b)? else {
        return Ok(None);
    };
    if za.len() != zb.len() {
        return Ok(None);
    }
    let both: Vec<bool> = za.iter().zip(&zb).map(|(x, y)| *x && *y).collect();
    if !both.contains(&false) {
        return Err(Error::Compare(format!(
            "{} and {}: every position is zero in every hidden state of both sides — no forward \
             writes that, so there is nothing to compare (the hooks wrote no values?)",
            a.path().display(),
            b.path().display()
        )));
    }
    Ok(Some(both))
}

/// The positions between the zero runs at either end (padding sits at an end, left or right:
/// a run from position 0 and one to the last); refused when a zero position lies between
/// real ones.
fn between_padding(both: &[bool], a: &FileSource, b: &FileSource) -> Result<Vec<u32>> {
    let tokens = both.len();
    let lead = both.iter().take_while(|&&z| z).count();
    let trail = both.iter().rev().take_while(|&&z| z).count();
    let inner: Vec<u32> = (lead..tokens - trail)
        .filter(|&i| both[i])
        .map(|i| i as u32)
        .collect();
    if !inner.is_empty() {
        return Err(Error::Compare(format!(
            "{} and {}: position(s) {} of {tokens} are zero in every hidden state of both sides \
             between real positions — not padding (padding sits at an end) and no forward \
             writes an all-zero hidden state: both captures lost those positions",
            a.path().display(),
            b.path().display(),
            ranges(&inner)
        )));
    }
    Ok((lead as u32..(tokens - trail) as u32).collect())
}

/// Cuts both sides, holding `tokens` positions, to `keep`; false (nothing changed) when a side
/// cannot be cut so.
fn cut_both(a: &mut FileSource, b: &mut FileSource, keep: &[u32], tokens: usize) -> bool {
    let (Some(va), Some(vb)) = (
        a.position_views(keep, tokens),
        b.position_views(keep, tokens),
    ) else {
        return false;
    };
    if [&*a, &*b]
        .iter()
        .any(|s| s.ids_list.as_ref().is_some_and(|l| l.len() != tokens))
    {
        return false;
    }
    for (src, views) in [(a, va), (b, vb)] {
        for (idx, v) in views {
            src.views.insert(idx, v);
        }
        // Token ids stored as a list (torch.save of a Python list) are cut alike.
        if let Some(list) = &mut src.ids_list {
            *list = keep.iter().map(|&i| list[i as usize]).collect();
        }
    }
    true
}

/// `10,11,12,15` → `10–12, 15`.
fn ranges(xs: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < xs.len() {
        let mut j = i;
        while j + 1 < xs.len() && xs[j + 1] == xs[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            xs[i].to_string()
        } else {
            format!("{}–{}", xs[i], xs[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_ranges() {
        assert_eq!(ranges(&[10, 11, 12, 15]), "10–12, 15");
        assert_eq!(ranges(&[3]), "3");
    }

    #[test]
    fn token_axes() {
        assert_eq!(token_axis(true, &[7]), Some(0));
        assert_eq!(token_axis(true, &[1, 7]), Some(1));
        assert_eq!(token_axis(false, &[7, 64]), Some(0));
        assert_eq!(token_axis(false, &[1, 7, 64]), Some(1));
        assert_eq!(token_axis(false, &[7]), None);
    }
}
