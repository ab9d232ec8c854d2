//! Which sample of A goes with which of B: by id (file stem, `conversation_id`, batch row) when
//! the token ids agree, then, for what is left, by the token ids themselves (two pipelines name
//! samples differently). A pair of equal ids whose tokens differ is named and left out;
//! samples with no partner are listed. Nothing is dropped without a line in the report.

use std::collections::{BTreeMap, VecDeque};

use super::discover::Sample;

/// One pair to compare: indices into A's and B's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub a: usize,
    pub b: usize,
    pub by_id: bool,
}

#[derive(Debug, Default)]
pub struct Matching {
    pub pairs: Vec<Pair>,
    /// Equal ids, different token ids: (A, B).
    pub token_mismatches: Vec<(usize, usize)>,
    pub unpaired_a: Vec<usize>,
    pub unpaired_b: Vec<usize>,
}

pub fn match_samples(a: &[Sample], b: &[Sample]) -> Matching {
    let mut used_a = vec![false; a.len()];
    let mut used_b = vec![false; b.len()];
    let mut pairs = Vec::new();
    let mut id_conflicts = Vec::new();
    let by_id: BTreeMap<&str, usize> = b
        .iter()
        .enumerate()
        .map(|(j, s)| (s.id.as_str(), j))
        .collect();
    for (i, s) in a.iter().enumerate() {
        let Some(&j) = by_id.get(s.id.as_str()) else {
            continue;
        };
        if used_b[j] {
            continue;
        }
        // Without token ids on a side, ids are all there is to pair by.
        let agree = match (s.tokens, b[j].tokens) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        };
        if agree {
            used_a[i] = true;
            used_b[j] = true;
            pairs.push(Pair {
                a: i,
                b: j,
                by_id: true,
            });
        } else {
            id_conflicts.push((i, j));
        }
    }
    // What is left, by token ids (in order, when several samples share them).
    let mut by_tokens: BTreeMap<([u8; 32], usize), VecDeque<usize>> = BTreeMap::new();
    for (j, s) in b.iter().enumerate() {
        if let (false, Some(t)) = (used_b[j], s.tokens) {
            by_tokens.entry(t).or_default().push_back(j);
        }
    }
    for (i, s) in a.iter().enumerate() {
        if used_a[i] {
            continue;
        }
        if let Some(j) = s
            .tokens
            .and_then(|t| by_tokens.get_mut(&t))
            .and_then(VecDeque::pop_front)
        {
            used_a[i] = true;
            used_b[j] = true;
            pairs.push(Pair {
                a: i,
                b: j,
                by_id: false,
            });
        }
    }
    let token_mismatches: Vec<(usize, usize)> = id_conflicts
        .into_iter()
        .filter(|&(i, j)| !used_a[i] && !used_b[j])
        .collect();
    for &(i, j) in &token_mismatches {
        used_a[i] = true;
        used_b[j] = true;
    }
    // Pairing order: A's order, so that shards and merges agree.
    pairs.sort_by_key(|p| p.a);
    Matching {
        pairs,
        token_mismatches,
        unpaired_a: (0..a.len()).filter(|&i| !used_a[i]).collect(),
        unpaired_b: (0..b.len()).filter(|&j| !used_b[j]).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn s(id: &str, tokens: Option<u8>) -> Sample {
        Sample {
            id: id.to_string(),
            path: PathBuf::from(id),
            batch_index: None,
            tokens: tokens.map(|t| ([t; 32], 4)),
            held_from: 0,
        }
    }

    #[test]
    fn by_id_then_by_tokens() {
        let a = [
            s("0", Some(1)),
            s("1", Some(2)),
            s("2", Some(3)),
            s("3", Some(9)),
        ];
        let b = [
            s("x", Some(3)),
            s("0", Some(1)),
            s("3", Some(8)),
            s("y", Some(7)),
        ];
        let m = match_samples(&a, &b);
        assert_eq!(
            m.pairs,
            [
                Pair {
                    a: 0,
                    b: 1,
                    by_id: true
                },
                Pair {
                    a: 2,
                    b: 0,
                    by_id: false
                }
            ]
        );
        assert_eq!(m.token_mismatches, [(3, 2)]);
        assert_eq!(m.unpaired_a, [1]);
        assert_eq!(m.unpaired_b, [3]);
    }

    #[test]
    fn same_id_other_partner_by_tokens() {
        // A's "1" has B "1"'s id but B "z"'s tokens: paired by tokens, B "1" left unpaired.
        let a = [s("1", Some(5))];
        let b = [s("1", Some(6)), s("z", Some(5))];
        let m = match_samples(&a, &b);
        assert_eq!(
            m.pairs,
            [Pair {
                a: 0,
                b: 1,
                by_id: false
            }]
        );
        assert!(m.token_mismatches.is_empty());
        assert_eq!(m.unpaired_b, [0]);
    }

    #[test]
    fn without_tokens_ids_decide() {
        let a = [s("7", None)];
        let b = [s("7", None)];
        assert_eq!(match_samples(&a, &b).pairs.len(), 1);
    }
}
