//! Samples of a request served after a prefix-cache hit, paired. Such a sample holds positions
//! p.. only (0..p were served from SGLang's radix cache and are in no pass), so its token ids
//! are the last ones of the other side's capture of the whole request, and pairing by equal ids
//! ([`super::match_samples`]) leaves it unpaired. Here it is paired with the one unpaired sample
//! of the other side, p + n ids long, whose ids from position p on are its n ids; when several
//! are, none is chosen and the sample is named. The pair is then compared on the positions both
//! hold, as `compare` of the two files is. Only the other side's unpaired samples of that length
//! are read again (discovery keeps a digest of each sample's ids, not the ids).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use super::discover::{Sample, digest};
use super::match_samples::{Matching, Pair};
use crate::error::Result;

/// Reads a sample's token ids again; `true` for side A.
pub type IdsOf<'a> = dyn FnMut(bool, &Sample) -> Result<Option<Vec<u32>>> + 'a;

/// What pairing the prefix-hit samples did, for the report's notes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PrefixHits {
    /// (A, B) pairs made.
    pub paired: Vec<(usize, usize)>,
    /// A sample whose ids are the last of several samples of the other side: (its side is A,
    /// its index, the other side's candidates).
    pub ambiguous: Vec<(bool, usize, Vec<usize>)>,
}

/// Pairs the unpaired prefix-hit samples of either side in `m`.
pub fn pair(
    m: &mut Matching,
    a: &[Sample],
    b: &[Sample],
    ids_of: &mut IdsOf,
) -> Result<PrefixHits> {
    let mut out = PrefixHits::default();
    for hit_is_a in [true, false] {
        let (hits, full) = if hit_is_a { (a, b) } else { (b, a) };
        let (unpaired_hits, unpaired_full) = if hit_is_a {
            (&m.unpaired_a, &m.unpaired_b)
        } else {
            (&m.unpaired_b, &m.unpaired_a)
        };
        let claims = claims(hits, unpaired_hits, full, unpaired_full, &mut |s| {
            ids_of(!hit_is_a, s)
        })?;
        // A full sample two hits claim is no one's: each hit is then ambiguous between the
        // samples it matches.
        let mut claimed: BTreeMap<usize, usize> = BTreeMap::new();
        for cands in claims.values() {
            for &f in cands {
                *claimed.entry(f).or_default() += 1;
            }
        }
        for (h, cands) in claims {
            match cands.as_slice() {
                [f] if claimed[f] == 1 => {
                    let (i, j) = if hit_is_a { (h, *f) } else { (*f, h) };
                    out.paired.push((i, j));
                }
                [] => {}
                _ => out.ambiguous.push((hit_is_a, h, cands)),
            }
        }
    }
    for &(i, j) in &out.paired {
        m.pairs.push(Pair {
            a: i,
            b: j,
            by_id: false,
        });
        m.unpaired_a.retain(|&x| x != i);
        m.unpaired_b.retain(|&x| x != j);
    }
    m.pairs.sort_by_key(|p| p.a);
    Ok(out)
}

/// Each unpaired hit sample's candidates among the unpaired full samples.
fn claims(
    hits: &[Sample],
    unpaired_hits: &[usize],
    full: &[Sample],
    unpaired_full: &[usize],
    ids_of: &mut dyn FnMut(&Sample) -> Result<Option<Vec<u32>>>,
) -> Result<BTreeMap<usize, Vec<usize>>> {
    let mut read: BTreeMap<usize, Option<Vec<u32>>> = BTreeMap::new();
    let mut claims = BTreeMap::new();
    for &h in unpaired_hits {
        let (p, Some((want, n))) = (hits[h].held_from, hits[h].tokens) else {
            continue;
        };
        if p == 0 {
            continue;
        }
        let mut cands = Vec::new();
        for &f in unpaired_full {
            let s = &full[f];
            if s.held_from != 0 || s.tokens.map(|(_, len)| len) != Some(p + n) {
                continue;
            }
            let ids = match read.entry(f) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(ids_of(s)?),
            };
            if ids
                .as_deref()
                .is_some_and(|ids| ids.len() == p + n && digest(&ids[p..]) == want)
            {
                cands.push(f);
            }
        }
        claims.insert(h, cands);
    }
    Ok(claims)
}

/// The report's notes: the pairs made and the samples left unpaired for being ambiguous.
pub fn notes(hits: &PrefixHits, a: &[Sample], b: &[Sample]) -> Vec<String> {
    let mut notes = Vec::new();
    if !hits.paired.is_empty() {
        let list: Vec<String> = hits
            .paired
            .iter()
            .map(|&(i, j)| {
                let p = a[i].held_from.max(b[j].held_from);
                format!("{} ↔ {} (from position {p})", a[i].id, b[j].id)
            })
            .collect();
        notes.push(format!(
            "{} pair(s) of a request served after a prefix-cache hit, paired by the token ids \
             the served side holds (the other side's from the same position on): {}",
            list.len(),
            list.join(", ")
        ));
    }
    for (hit_is_a, h, cands) in &hits.ambiguous {
        let (hits_side, full, side, other) = if *hit_is_a {
            (a, b, "A", "B")
        } else {
            (b, a, "B", "A")
        };
        let s = &hits_side[*h];
        let names: Vec<&str> = cands.iter().map(|&f| full[f].id.as_str()).collect();
        notes.push(format!(
            "{side}'s {} (served after a prefix-cache hit: positions 0–{} in no pass) holds the \
             last token ids of {} samples of {other} ({}): left unpaired, not guessed between",
            s.id,
            s.held_from - 1,
            names.len(),
            names.join(", ")
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::compare::dataset::match_samples::match_samples;
    use std::path::PathBuf;

    fn s(id: &str, ids: &[u32], held_from: usize) -> Sample {
        Sample {
            id: id.to_string(),
            path: PathBuf::from(id),
            batch_index: None,
            tokens: Some((digest(ids), ids.len())),
            held_from,
        }
    }

    #[test]
    fn a_prefix_hit_pairs_with_the_one_sample_ending_in_its_ids() -> Result<()> {
        let whole: Vec<u32> = (1..=10).collect();
        let other: Vec<u32> = (1..=10).rev().collect();
        let a = [s("hit", &whole[6..], 6), s("plain", &other, 0)];
        let b = [
            s("w", &whole, 0),
            s("o", &other, 0),
            s("short", &whole[..4], 0),
        ];
        let mut m = match_samples(&a, &b);
        assert_eq!(m.unpaired_a, [0]);
        let mut read = Vec::new();
        let mut ids_of = |is_a: bool, x: &Sample| -> Result<Option<Vec<u32>>> {
            read.push((is_a, x.id.clone()));
            Ok(Some(if x.id == "w" {
                whole.clone()
            } else {
                other.clone()
            }))
        };
        let hits = pair(&mut m, &a, &b, &mut ids_of)?;
        assert_eq!(hits.paired, [(0, 0)]);
        assert!(m.unpaired_a.is_empty());
        assert_eq!(m.unpaired_b, [2]);
        // Only B's unpaired samples of length 6 + 4 were read again.
        assert_eq!(read, [(false, "w".to_string())]);
        let n = notes(&hits, &a, &b);
        assert!(n[0].contains("hit ↔ w (from position 6)"), "{n:?}");
        Ok(())
    }

    #[test]
    fn ids_ending_two_samples_are_named_not_guessed() -> Result<()> {
        let whole: Vec<u32> = (1..=10).collect();
        let mut twin = whole.clone();
        twin[0] = 99;
        let a = [s("hit", &whole[6..], 6)];
        let b = [s("w", &whole, 0), s("twin", &twin, 0)];
        let mut m = match_samples(&a, &b);
        let mut ids_of = |_: bool, x: &Sample| -> Result<Option<Vec<u32>>> {
            Ok(Some(if x.id == "w" {
                whole.clone()
            } else {
                twin.clone()
            }))
        };
        let hits = pair(&mut m, &a, &b, &mut ids_of)?;
        assert!(hits.paired.is_empty());
        assert_eq!(hits.ambiguous, [(true, 0, vec![0, 1])]);
        assert_eq!(m.unpaired_a, [0]);
        let n = notes(&hits, &a, &b);
        assert!(
            n[0].contains(
                "A's hit (served after a prefix-cache hit: positions 0–5 in no pass) \
                 holds the last token ids of 2 samples of B (w, twin)"
            ),
            "{n:?}"
        );
        Ok(())
    }
}
