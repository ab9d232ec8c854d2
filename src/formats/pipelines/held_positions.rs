//! Positions one side holds and the other does not: an SGLang request extended after a
//! prefix-cache hit holds its positions from p on (0..p were served from the radix cache and
//! are in no pass), a capture of the same request holds them all. The pair is compared on the
//! positions both hold, and the report says which were left out and why.

use super::zero_padding::token_axis;
use crate::capture::Key;
use crate::error::{Error, Result};
use crate::formats::FileSource;

/// The positions compared when a side's first row is not position 0.
#[derive(Debug, Clone)]
pub struct HeldPositions {
    /// The first position compared (> 0: the truth, which needs the sequence from position 0,
    /// cannot be computed for these rows).
    pub first: usize,
    /// The report's note: which positions each side lacks, and why.
    pub note: String,
}

impl HeldPositions {
    /// Why the pair cannot be calibrated, when the positions compared start past 0: the truth
    /// of position p needs the sequence from position 0, which one side does not hold.
    pub fn uncalibrated_why(&self) -> Option<String> {
        (self.first > 0).then(|| {
            format!(
                "the positions compared start at {}: the truth needs the sequence from position 0",
                self.first
            )
        })
    }
}

/// The token rows `src`'s hidden states hold (the first one's), if it has any.
fn held_tokens(src: &FileSource) -> Option<usize> {
    src.names()
        .iter()
        .filter(|n| {
            matches!(
                Key::of(n),
                Some(Key::Embed | Key::FinalNorm | Key::Layer(_))
            )
        })
        .find_map(|n| {
            let shape = src.shape(n)?;
            token_axis(false, &shape).and_then(|axis| shape.get(axis).copied())
        })
}

fn span(from: usize, to: usize) -> String {
    if to == from + 1 {
        format!("position {from}")
    } else {
        format!("positions {from}–{}", to - 1)
    }
}

/// Cuts both sides to the positions both hold, when either side's rows start past position 0.
/// None when both start at 0 (nothing to align).
pub fn align_held_positions(
    a: &mut FileSource,
    b: &mut FileSource,
) -> Result<Option<HeldPositions>> {
    if a.held_from == 0 && b.held_from == 0 {
        return Ok(None);
    }
    let (Some(ta), Some(tb)) = (held_tokens(a), held_tokens(b)) else {
        // No hidden state on a side: the comparison says so.
        return Ok(None);
    };
    let spans = [
        (a.held_from, a.held_from + ta),
        (b.held_from, b.held_from + tb),
    ];
    let start = spans[0].0.max(spans[1].0);
    let end = spans[0].1.min(spans[1].1);
    if start >= end {
        return Err(Error::file(
            a.path(),
            format!(
                "holds {}, {} holds {}: no position both hold",
                span(spans[0].0, spans[0].1),
                b.path().display(),
                span(spans[1].0, spans[1].1)
            ),
        ));
    }
    let mut said: Vec<String> = Vec::new();
    for ((side, src), held) in [("A", &mut *a), ("B", &mut *b)].into_iter().zip(spans) {
        said.extend(left_out(side, held, (start, end)));
        cut_to_both(src, held, (start, end))?;
    }
    said.push(format!(
        "compared on the {} ({}) both sides hold",
        span(start, end),
        end - start
    ));
    Ok(Some(HeldPositions {
        first: start,
        note: said.join("; "),
    }))
}

/// What a side holding positions `from..to` lacks or leaves out of `start..end`, both sides'.
fn left_out(side: &str, (from, to): (usize, usize), (start, end): (usize, usize)) -> Vec<String> {
    let mut said = Vec::new();
    if from > 0 {
        said.push(format!(
            "{side}: {} served from SGLang's prefix cache: not in the dump",
            span(0, from)
        ));
    }
    if from < start {
        said.push(format!(
            "{side}'s {} left out (the other side lacks them)",
            span(from, start)
        ));
    }
    if end < to {
        said.push(format!(
            "{side}'s {} left out (the other side ends at position {})",
            span(end, to),
            end - 1
        ));
    }
    said
}

/// Cuts `src`, holding positions `from..to`, to the positions `start..end` both sides hold.
fn cut_to_both(
    src: &mut FileSource,
    (from, to): (usize, usize),
    (start, end): (usize, usize),
) -> Result<()> {
    let tokens = to - from;
    if end - start == tokens {
        return Ok(());
    }
    let keep: Vec<u32> = ((start - from) as u32..(end - from) as u32).collect();
    let views = src.position_views(&keep, tokens).ok_or_else(|| {
        Error::file(
            src.path(),
            format!(
                "its tensors do not all hold {tokens} positions: they cannot be cut to the \
                 {} both sides hold",
                span(start, end)
            ),
        )
    })?;
    for (idx, v) in views {
        src.views.insert(idx, v);
    }
    if let Some(n) = src.ids_list.as_ref().map(Vec::len)
        && n != tokens
    {
        return Err(Error::tensor(
            src.path(),
            "input_ids",
            format!("holds {n} ids, its hidden states {tokens} positions"),
        ));
    }
    if let Some(list) = &mut src.ids_list {
        *list = keep.iter().map(|&i| list[i as usize]).collect();
    }
    Ok(())
}
