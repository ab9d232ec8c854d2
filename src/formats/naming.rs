//! From the names tensors have in a file to hsdiff's names ([`crate::capture::names`]).
//!
//! Recognised, in order of precedence when two entries claim the same name:
//! 1. hsdiff's own names: `embed`, `layers.{i}`, `layers.{i}.{op}`, `final_norm`, `logits`,
//!    `input_ids`, `router.{i}.*` (`topk_ids`, …);
//! 2. module paths of hook dumps: `layers.N`, `embed_tokens`, `norm` under any of the prefixes
//!    `model.`, `model.model.`, `model.language_model.`, `model.model.language_model.`,
//!    `language_model.`; and `lm_head` for the logits;
//! 3. the transformers `output_hidden_states` sequence of N = L+1 entries — a tuple/list, the
//!    rows of a stacked array, or names `hidden_states.{i}` / `hidden_states_{i}` / `hs.{i}` /
//!    `arr_{i}` (numpy's names for `np.savez(f, *hs)`): entry 0 is the embedding output
//!    (`embed`), entry i the output of layer i−1 (`layers.{i-1}`) for 0 < i < N−1, and the last
//!    entry is AFTER the final norm (`final_norm`) — never the last layer's raw output;
//! 4. `last_hidden_state` (after the final norm) as `final_norm`.

use std::collections::BTreeMap;

use crate::capture::names;

/// Hook-dump prefixes, longest first.
const PREFIXES: &[&str] = &[
    "model.model.language_model.",
    "model.language_model.",
    "language_model.model.",
    "model.model.",
    "language_model.",
    "model.",
];

/// Names of an `output_hidden_states` sequence stored flat (`hidden_states.3`).
const SEQ_NAMES: &[&str] = &["hidden_states", "all_hidden_states", "hs", "arr"];

/// How sure a name mapping is; the higher wins a collision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    LastHidden,
    Sequence,
    Alias,
    Exact,
}

/// Whether `name` is one of hsdiff's own names.
pub fn is_ours(name: &str) -> bool {
    matches!(
        name,
        names::INPUT_IDS | names::EMBED | names::FINAL_NORM | names::LOGITS
    ) || names::parse_layer(name).is_some()
        || names::parse_op(name).is_some()
        || name
            .strip_prefix("router.")
            .and_then(|r| r.split_once('.'))
            .is_some_and(|(i, what)| i.parse::<usize>().is_ok() && !what.is_empty())
}

fn alias(raw: &str) -> Option<String> {
    if raw == "lm_head" {
        return Some(names::LOGITS.to_string());
    }
    let rest = PREFIXES.iter().find_map(|p| raw.strip_prefix(p))?;
    match rest {
        "embed_tokens" => Some(names::EMBED.to_string()),
        "norm" => Some(names::FINAL_NORM.to_string()),
        "lm_head" => Some(names::LOGITS.to_string()),
        _ => names::parse_layer(rest).map(names::layer),
    }
}

/// `hidden_states.3` → (`hidden_states`, 3).
fn flat_sequence(raw: &str) -> Option<(String, usize)> {
    let cut = raw.rfind(['.', '_', '/'])?;
    let (prefix, index) = (&raw[..cut], &raw[cut + 1..]);
    let index: usize = index.parse().ok()?;
    let last = prefix.rsplit(['.', '/']).next().unwrap_or(prefix);
    SEQ_NAMES
        .contains(&last)
        .then(|| (prefix.to_string(), index))
}

/// The name of entry `index` of an `output_hidden_states` sequence of `len` entries.
pub fn sequence_name(index: usize, len: usize) -> Option<String> {
    if len < 2 || index >= len {
        return None;
    }
    Some(if index == 0 {
        names::EMBED.to_string()
    } else if index == len - 1 {
        names::FINAL_NORM.to_string()
    } else {
        names::layer(index - 1)
    })
}

/// "9 entries: embed, layers.0–6, final_norm".
fn layout(len: usize) -> String {
    let layers = match len {
        0..=2 => String::new(),
        3 => "layers.0, ".to_string(),
        n => format!("layers.0–{}, ", n - 3),
    };
    format!("{len} entries: embed, {layers}final_norm")
}

/// One entry as the naming sees it: its raw name and, when it sits in a tuple/list or a stacked
/// array, its place there (sequence name, index, length).
pub struct Named<'a> {
    pub raw: &'a str,
    pub seq: Option<(&'a str, usize, usize)>,
}

/// What the naming found: hsdiff name → entry index, and the conventions it applied.
pub struct Assignment {
    pub names: BTreeMap<String, usize>,
    pub conventions: Vec<String>,
}

pub fn assign(entries: &[Named]) -> Assignment {
    // Flat sequences: their length is the largest index + 1.
    let mut flat_len: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries {
        if e.seq.is_none()
            && !is_ours(e.raw)
            && let Some((prefix, i)) = flat_sequence(e.raw)
        {
            let n = flat_len.entry(prefix).or_insert(0);
            *n = (*n).max(i + 1);
        }
    }
    let mut best: BTreeMap<String, (Rank, usize)> = BTreeMap::new();
    let mut conventions = Vec::new();
    let mut note = |s: String| {
        if !conventions.contains(&s) {
            conventions.push(s);
        }
    };
    for (idx, e) in entries.iter().enumerate() {
        let mapped = if let Some((seq, i, len)) = e.seq {
            sequence_name(i, len).map(|n| {
                let what = if seq.is_empty() {
                    "the top-level tuple/list".to_string()
                } else {
                    format!("`{seq}`")
                };
                note(format!(
                    "{what} read as output_hidden_states ({})",
                    layout(len)
                ));
                (n, Rank::Sequence)
            })
        } else if is_ours(e.raw) {
            Some((e.raw.to_string(), Rank::Exact))
        } else if let Some(n) = alias(e.raw) {
            note("hook names (model.…layers.N)".to_string());
            Some((n, Rank::Alias))
        } else if let Some((prefix, i)) = flat_sequence(e.raw) {
            let len = flat_len.get(&prefix).copied().unwrap_or(0);
            sequence_name(i, len).map(|n| {
                let pattern = format!("{}N", e.raw.trim_end_matches(|c: char| c.is_ascii_digit()));
                note(format!(
                    "`{pattern}` read as output_hidden_states ({})",
                    layout(len)
                ));
                (n, Rank::Sequence)
            })
        } else if e.raw == "last_hidden_state" || e.raw.ends_with(".last_hidden_state") {
            Some((names::FINAL_NORM.to_string(), Rank::LastHidden))
        } else {
            None
        };
        if let Some((name, rank)) = mapped {
            match best.get(&name) {
                Some((r, _)) if *r >= rank => {}
                _ => {
                    best.insert(name, (rank, idx));
                }
            }
        }
    }
    Assignment {
        names: best.into_iter().map(|(n, (_, i))| (n, i)).collect(),
        conventions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(raws: &[&str]) -> BTreeMap<String, String> {
        let named: Vec<Named> = raws.iter().map(|r| Named { raw: r, seq: None }).collect();
        assign(&named)
            .names
            .into_iter()
            .map(|(n, i)| (n, raws[i].to_string()))
            .collect()
    }

    #[test]
    fn hook_prefixes() {
        let m = flat(&[
            "model.language_model.layers.0",
            "model.layers.1",
            "model.model.layers.2",
            "layers.3",
            "model.norm",
            "lm_head",
            "something.else",
        ]);
        assert_eq!(m["layers.0"], "model.language_model.layers.0");
        assert_eq!(m["layers.1"], "model.layers.1");
        assert_eq!(m["layers.2"], "model.model.layers.2");
        assert_eq!(m["layers.3"], "layers.3");
        assert_eq!(m["final_norm"], "model.norm");
        assert_eq!(m["logits"], "lm_head");
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn hidden_states_convention() {
        let m = flat(&[
            "hidden_states.0",
            "hidden_states.1",
            "hidden_states.2",
            "hidden_states.3",
            "last_hidden_state",
        ]);
        assert_eq!(m["embed"], "hidden_states.0");
        assert_eq!(m["layers.0"], "hidden_states.1");
        assert_eq!(m["layers.1"], "hidden_states.2");
        // The last entry is after the final norm: never layers.2.
        assert_eq!(m["final_norm"], "hidden_states.3");
        assert!(!m.contains_key("layers.2"));
    }

    #[test]
    fn exact_beats_sequence() {
        let m = flat(&[
            "layers.0",
            "hidden_states.0",
            "hidden_states.1",
            "hidden_states.2",
        ]);
        assert_eq!(m["layers.0"], "layers.0");
    }

    #[test]
    fn containers() {
        let named: Vec<Named> = (0..4)
            .map(|i| Named {
                raw: "x",
                seq: Some(("", i, 4)),
            })
            .collect();
        let a = assign(&named);
        let keys: Vec<&str> = a.names.keys().map(String::as_str).collect();
        assert_eq!(keys, ["embed", "final_norm", "layers.0", "layers.1"]);
        assert_eq!(a.names["final_norm"], 3);
    }
}
