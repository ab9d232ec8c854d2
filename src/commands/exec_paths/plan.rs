//! Which paths `hsdiff paths` runs over a prompt: names, and where each one cuts the tokens.

use candle_core::DType;

use crate::backends::cases::SplitMix;
use crate::util::device::dtype_label;

/// Chunk length of the chunked gated delta rule (transformers, fla): where padding bugs live.
pub const CHUNK: usize = 64;
/// Positions a decode path produces.
const DECODE_STEPS: usize = 16;
/// Padding tokens in front of the shorter sequence of the padded batch.
const PAD: usize = 7;

/// The kinds of path, as `--paths` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Decode,
    ChunkedPrefill,
    Packed,
    Padded,
    StateDtype,
}

impl PathKind {
    pub const ALL: [PathKind; 5] = [
        PathKind::Decode,
        PathKind::ChunkedPrefill,
        PathKind::Packed,
        PathKind::Padded,
        PathKind::StateDtype,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PathKind::Decode => "decode",
            PathKind::ChunkedPrefill => "chunked-prefill",
            PathKind::Packed => "packed",
            PathKind::Padded => "padded",
            PathKind::StateDtype => "state-dtype",
        }
    }
}

/// How one path cuts the tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cut {
    /// Cached prefill of 0..=from, then one token at a time up to from + steps − 1; the
    /// recurrent state stored at `state_dtype` between calls when given.
    Decode {
        from: usize,
        steps: usize,
        state_dtype: Option<DType>,
    },
    /// Cached prefill of 0..at, then at..end as one continuation call.
    Split { at: usize, end: usize },
    /// Tokens 0..boundary and boundary..end packed in one sequence, state reset between.
    Packed { boundary: usize, end: usize },
    /// A batch of 2: tokens 0..end−pad left-padded by `pad`, and tokens 0..end.
    Padded { pad: usize, end: usize },
}

impl Cut {
    /// Tokens the cached prefix holds before the path continues from it (decode and split).
    pub fn prefix_len(&self) -> Option<usize> {
        match *self {
            Cut::Decode { from, .. } => Some(from + 1),
            Cut::Split { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// One path to run.
#[derive(Debug, Clone, PartialEq)]
pub struct PathPlan {
    pub name: String,
    pub kind: PathKind,
    pub cut: Cut,
}

/// A path that cannot run on this prompt, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// The paths of `kinds` over `tokens` tokens; `seed` draws the random split.
pub fn plan_paths(kinds: &[PathKind], tokens: usize, seed: u64) -> (Vec<PathPlan>, Vec<Skipped>) {
    let mut p = Planner {
        tokens,
        plans: Vec::new(),
        skipped: Vec::new(),
    };
    let decode_froms = decode_starts(tokens);
    for &kind in kinds {
        match kind {
            PathKind::Decode | PathKind::StateDtype if decode_froms.is_empty() => p.skip(
                kind.as_str(),
                format!("needs at least 3 tokens, the prompt has {tokens}"),
            ),
            PathKind::Decode => p.decode(&decode_froms),
            PathKind::StateDtype => p.state_dtype(&decode_froms),
            PathKind::ChunkedPrefill => p.chunked_prefill(seed),
            PathKind::Packed => p.packed(),
            PathKind::Padded => p.padded(),
        }
    }
    (p.plans, p.skipped)
}

/// The paths planned so far over a prompt of `tokens` tokens, and those it cannot run.
struct Planner {
    tokens: usize,
    plans: Vec<PathPlan>,
    skipped: Vec<Skipped>,
}

impl Planner {
    fn skip(&mut self, path: &str, reason: String) {
        self.skipped.push(Skipped {
            path: path.to_string(),
            reason,
        });
    }

    fn plan(&mut self, name: String, kind: PathKind, cut: Cut) {
        self.plans.push(PathPlan { name, kind, cut });
    }

    fn decode(&mut self, froms: &[(usize, usize)]) {
        let tokens = self.tokens;
        if tokens < CHUNK + 2 {
            self.skip(
                "decode from 63",
                format!(
                    "a 64-token cached prefix needs at least 66 tokens, the prompt has {tokens}"
                ),
            );
        }
        for &(from, steps) in froms {
            let cut = Cut::Decode {
                from,
                steps,
                state_dtype: None,
            };
            self.plan(format!("decode from {from}"), PathKind::Decode, cut);
        }
    }

    /// The last decode path with its state stored at each dtype coarser than f64.
    fn state_dtype(&mut self, froms: &[(usize, usize)]) {
        let &(from, steps) = froms.last().unwrap_or(&(0, 1));
        for dtype in [DType::BF16, DType::F16, DType::F32] {
            let cut = Cut::Decode {
                from,
                steps,
                state_dtype: Some(dtype),
            };
            let name = format!("state-dtype {}", dtype_label(dtype));
            self.plan(name, PathKind::StateDtype, cut);
        }
    }

    /// Splits around the chunk boundary (63, 64, 65) and one drawn from `seed`.
    fn chunked_prefill(&mut self, seed: u64) {
        let (kind, tokens) = (PathKind::ChunkedPrefill, self.tokens);
        if tokens < CHUNK + 3 {
            let why =
                format!("splits at 63/64/65 need at least 67 tokens, the prompt has {tokens}");
            return self.skip(kind.as_str(), why);
        }
        let mut rng = SplitMix::new(seed);
        let random = 1 + (rng.next_u64() % (tokens as u64 - 2)) as usize;
        for (label, at) in [
            ("", CHUNK - 1),
            ("", CHUNK),
            ("", CHUNK + 1),
            ("random ", random),
        ] {
            let name = format!("chunked-prefill {label}{at}+{}", tokens - at);
            self.plan(name, kind, Cut::Split { at, end: tokens });
        }
    }

    fn packed(&mut self) {
        let (kind, tokens) = (PathKind::Packed, self.tokens);
        if tokens < 4 {
            let why = format!("needs at least 4 tokens, the prompt has {tokens}");
            return self.skip(kind.as_str(), why);
        }
        let boundary = tokens / 2;
        let cut = Cut::Packed {
            boundary,
            end: tokens,
        };
        self.plan(
            format!("packed {boundary}+{}", tokens - boundary),
            kind,
            cut,
        );
    }

    fn padded(&mut self) {
        let (kind, tokens) = (PathKind::Padded, self.tokens);
        if tokens < PAD + 2 {
            let why = format!("needs at least {} tokens, the prompt has {tokens}", PAD + 2);
            return self.skip(kind.as_str(), why);
        }
        let cut = Cut::Padded {
            pad: PAD,
            end: tokens,
        };
        self.plan(format!("padded {PAD} left, batch of 2"), kind, cut);
    }
}

/// `(from, steps)` of the decode paths: one whose cached prefix is exactly one 64-token chunk
/// (when the prompt is long enough) and one whose prefix is not a multiple of 64 — the pair a
/// chunk-padding bug tells apart.
fn decode_starts(tokens: usize) -> Vec<(usize, usize)> {
    if tokens < 3 {
        return Vec::new();
    }
    let mut out = Vec::new();
    if tokens >= CHUNK + 2 {
        out.push((CHUNK - 1, DECODE_STEPS.min(tokens - CHUNK + 1)));
    }
    let steps = DECODE_STEPS.min(tokens / 2);
    let mut from = (tokens - steps).min(100);
    if (from + 1).is_multiple_of(CHUNK) {
        from -= 1;
    }
    out.push((from, steps.min(tokens - from)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_pairs_an_aligned_and_an_unaligned_prefix() {
        assert_eq!(decode_starts(155), vec![(63, 16), (100, 16)]);
        let short = decode_starts(20);
        assert_eq!(short.len(), 1);
        let (from, steps) = short[0];
        assert!((from + 1) % CHUNK != 0 && from + steps <= 20);
    }
}
