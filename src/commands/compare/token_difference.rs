//! How two samples' token ids differ, in words a user can act on: a leading token one side
//! lacks (a BOS the tokeniser of one run adds), extra trailing tokens (an EOS, a longer
//! truncation), the same ids shifted by k positions, or other ids from a position on. The kind
//! without the ids lets a dataset say "every pair differs the same way".

/// At most this many positions of shift are looked for (a BOS, a chat-template prefix).
const MAX_SHIFT: usize = 8;

/// Which side holds the tokens the other lacks, or leads the shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::A => "A",
            Side::B => "B",
        }
    }

    fn other(self) -> &'static str {
        match self {
            Side::A => "B",
            Side::B => "A",
        }
    }
}

/// The shape of a difference, without the positions' ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `side` starts with `ids` the other lacks; the rest is equal.
    Leading { side: Side, ids: Vec<u32> },
    /// `side` ends with `count` tokens the other lacks; the rest is equal.
    Trailing { side: Side, count: usize },
    /// `side`'s ids from position `by` on are the other's from 0 (both truncated to a length).
    Shift { side: Side, by: usize },
    /// Other ids.
    Other,
}

/// A difference between two token-id sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenDifference {
    pub kind: Kind,
    pub len_a: usize,
    pub len_b: usize,
    /// First position where the ids differ (or where the shorter one ends).
    pub first: usize,
    /// The ids there (None past a side's end).
    pub at_a: Option<u32>,
    pub at_b: Option<u32>,
    /// Positions, of those both hold, whose ids differ.
    pub differing: usize,
}

/// How `a` and `b` differ; None when they are equal.
pub fn token_difference(a: &[u32], b: &[u32]) -> Option<TokenDifference> {
    if a == b {
        return None;
    }
    let first = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let differing = a.iter().zip(b).filter(|(x, y)| x != y).count();
    Some(TokenDifference {
        kind: kind(a, b),
        len_a: a.len(),
        len_b: b.len(),
        first,
        at_a: a.get(first).copied(),
        at_b: b.get(first).copied(),
        differing,
    })
}

fn kind(a: &[u32], b: &[u32]) -> Kind {
    for (side, long, short) in [(Side::A, a, b), (Side::B, b, a)] {
        if long.len() > short.len() {
            let k = long.len() - short.len();
            if long[k..] == *short {
                return Kind::Leading {
                    side,
                    ids: long[..k].to_vec(),
                };
            }
            if long[..short.len()] == *short {
                return Kind::Trailing { side, count: k };
            }
        }
    }
    // A shift: one side's ids from `by` on are the other's from 0, over at least half of the
    // shorter sequence (a shift over two tokens is no evidence of one).
    for by in 1..=MAX_SHIFT {
        for (side, lead, lag) in [(Side::A, a, b), (Side::B, b, a)] {
            if lead.len() <= by {
                continue;
            }
            let m = (lead.len() - by).min(lag.len());
            if m >= 2 && 2 * m >= a.len().min(b.len()) && lead[by..by + m] == lag[..m] {
                return Kind::Shift { side, by };
            }
        }
    }
    Kind::Other
}

impl Kind {
    /// The kind in words, the same for every pair that differs this way.
    pub fn describe(&self) -> String {
        match self {
            Kind::Leading { side, ids } => format!(
                "{} starts with {} token(s) {} lacks ({}{}), the rest equal",
                side.name(),
                ids.len(),
                side.other(),
                ids_text(ids),
                if ids.len() == 1 {
                    ": a BOS on one side only?"
                } else {
                    ""
                }
            ),
            Kind::Trailing { side, count } => format!(
                "{} ends with {count} token(s) {} lacks, the rest equal",
                side.name(),
                side.other()
            ),
            Kind::Shift { side, by } => format!(
                "the ids are shifted by {by}: {}'s from position {by} are {}'s from 0",
                side.name(),
                side.other()
            ),
            Kind::Other => "other token ids".to_string(),
        }
    }
}

impl TokenDifference {
    /// The difference in words: its kind, and for other ids where they first differ.
    pub fn describe(&self) -> String {
        let lengths = if self.len_a == self.len_b {
            format!("{} ids each", self.len_a)
        } else {
            format!("{} vs {} ids", self.len_a, self.len_b)
        };
        match self.kind {
            Kind::Other => format!(
                "other ids from position {} (A {}, B {}; {} of the {} positions both hold \
                 differ; {lengths})",
                self.first,
                id_or_end(self.at_a),
                id_or_end(self.at_b),
                self.differing,
                self.len_a.min(self.len_b)
            ),
            _ => format!("{} ({lengths})", self.kind.describe()),
        }
    }
}

fn id_or_end(id: Option<u32>) -> String {
    id.map_or("nothing".to_string(), |t| t.to_string())
}

fn ids_text(ids: &[u32]) -> String {
    let shown: Vec<String> = ids.iter().take(4).map(u32::to_string).collect();
    let more = if ids.len() > 4 { ", …" } else { "" };
    format!(
        "id{} {}{more}",
        if ids.len() == 1 { "" } else { "s" },
        shown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_bos_on_one_side() {
        let d = token_difference(&[1, 5, 6, 7], &[5, 6, 7]).expect("differ");
        assert_eq!(
            d.kind,
            Kind::Leading {
                side: Side::A,
                ids: vec![1]
            }
        );
        assert_eq!(
            d.describe(),
            "A starts with 1 token(s) B lacks (id 1: a BOS on one side only?), the rest equal \
             (4 vs 3 ids)"
        );
        let d = token_difference(&[5, 6, 7], &[9, 9, 5, 6, 7]).expect("differ");
        assert_eq!(
            d.kind,
            Kind::Leading {
                side: Side::B,
                ids: vec![9, 9]
            }
        );
    }

    #[test]
    fn trailing_tokens() {
        let d = token_difference(&[5, 6, 7], &[5, 6, 7, 2]).expect("differ");
        assert_eq!(
            d.kind,
            Kind::Trailing {
                side: Side::B,
                count: 1
            }
        );
        assert_eq!(d.first, 3);
        assert_eq!(d.at_a, None);
    }

    #[test]
    fn a_shift_at_equal_lengths() {
        // B has a BOS and was cut to A's length.
        let d = token_difference(&[5, 6, 7, 8, 9], &[1, 5, 6, 7, 8]).expect("differ");
        assert_eq!(
            d.kind,
            Kind::Shift {
                side: Side::B,
                by: 1
            }
        );
        assert!(d.describe().contains("shifted by 1"), "{}", d.describe());
    }

    #[test]
    fn other_ids_say_where() {
        let d = token_difference(&[5, 6, 7, 8, 9], &[5, 6, 3, 8, 9]).expect("differ");
        assert_eq!(d.kind, Kind::Other);
        assert_eq!(
            d.describe(),
            "other ids from position 2 (A 7, B 3; 1 of the 5 positions both hold differ; 5 ids \
             each)"
        );
        assert!(token_difference(&[1, 2], &[1, 2]).is_none());
    }
}
