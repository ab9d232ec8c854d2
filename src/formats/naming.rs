//! From the names tensors have in a file to hsdiff's names ([`crate::capture::Key`]).
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
//! 4. `last_hidden_state` (after the final norm) as `final_norm`;
//! 5. layer indices: integer dict keys (`{1: t, 3: t}`), `layer_N`, `layer.N`, `h.N`,
//!    `blocks.N`, `block_N`, and a *sparse* set of indices under `hidden_states` / `hs` (a dict
//!    `{'hidden_states': {1: t, 3: t, 5: t}}`: never a tuple, whose indices run 0…N−1). Index N is
//!    read as the output of layer N (`layers.N`) for now; whether it is rather
//!    `hidden_states[N]` (the input of layer N) is decided from evidence by the caller
//!    ([`crate::compare::alignment::index_reading`]) and stated in the report.

use std::collections::BTreeMap;

use crate::capture::Key;

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

/// Module names whose `.N` children are decoder layers (`h.3`, `blocks.3`, `layer.3`).
const INDEX_PARENTS: &[&str] = &["h", "blocks", "block", "layer", "layers_out"];
/// Prefixes of `layer_3`-style names.
const INDEX_PREFIXES: &[&str] = &["layer_", "layers_", "block_", "blocks_", "h_"];

/// A layer-index name: (its pattern for the report, the index). A flat-sequence name
/// (`hidden_states.3`) counts only when its set is sparse; the caller checks that.
fn index_key(raw: &str) -> Option<(String, usize)> {
    if let Ok(i) = raw.parse::<usize>() {
        return Some(("N".to_string(), i));
    }
    for p in INDEX_PREFIXES {
        if let Some(i) = raw.strip_prefix(p).and_then(|r| r.parse::<usize>().ok()) {
            return Some((format!("{p}N"), i));
        }
    }
    let (parent, index) = raw.rsplit_once(['.', '/'])?;
    let i: usize = index.parse().ok()?;
    let last = parent.rsplit(['.', '/']).next().unwrap_or(parent);
    (INDEX_PARENTS.contains(&last) || SEQ_NAMES.contains(&last)).then(|| (format!("{parent}.N"), i))
}

/// How sure a name mapping is; the higher wins a collision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    LastHidden,
    Sequence,
    Alias,
    Exact,
}

/// Whether `name` is one of hsdiff's own names (a [`Key`]; the decode path's keys are not
/// read from files).
pub fn is_ours(name: &str) -> bool {
    Key::of(name).is_some_and(|k| !matches!(k, Key::DecodeLogits | Key::DecodeLayer(_)))
}

fn alias(raw: &str) -> Option<String> {
    if raw == "lm_head" {
        return Some(Key::Logits.to_string());
    }
    let rest = PREFIXES.iter().find_map(|p| raw.strip_prefix(p))?;
    match rest {
        "embed_tokens" => Some(Key::Embed.to_string()),
        "norm" => Some(Key::FinalNorm.to_string()),
        "lm_head" => Some(Key::Logits.to_string()),
        _ => Key::of(rest)
            .filter(|k| matches!(k, Key::Layer(_)))
            .map(String::from),
    }
}

/// Whether `raw` is a decoder layer's module path (`model.layers.3`, `layers.3`), the key hook
/// dumps save a layer's output under.
pub fn is_decoder_layer(raw: &str) -> bool {
    let layer = |s: &str| matches!(Key::of(s), Some(Key::Layer(_)));
    layer(raw)
        || PREFIXES
            .iter()
            .any(|p| raw.strip_prefix(p).is_some_and(layer))
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
        Key::Embed.to_string()
    } else if index == len - 1 {
        Key::FinalNorm.to_string()
    } else {
        Key::Layer(index - 1).to_string()
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
    /// Layer names that came from bare indices (rule 5): their reading is still to be decided.
    pub index_keyed: bool,
    /// The length of a sequence read as `output_hidden_states` (rule 3), for the caller to
    /// check against the model (L + 1) when it has one.
    pub sequence_len: Option<usize>,
    /// hsdiff names that two or more entries map to equally well (`h.1` and `blocks.1`): the
    /// entries, which the caller refuses unless `--map` picks one.
    pub clashes: BTreeMap<String, Vec<usize>>,
}

/// Flat sequences (`hidden_states.3`) by prefix: their length (the largest index + 1) and how
/// many entries they have. A flat sequence is `output_hidden_states` only when its indices run
/// 0…N−1 without gaps; a sparse set is a set of layers.
struct FlatSequences {
    len: BTreeMap<String, usize>,
    count: BTreeMap<String, usize>,
}

impl FlatSequences {
    fn of(entries: &[Named]) -> Self {
        let mut len: BTreeMap<String, usize> = BTreeMap::new();
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for e in entries {
            if e.seq.is_none()
                && !is_ours(e.raw)
                && let Some((prefix, i)) = flat_sequence(e.raw)
            {
                let n = len.entry(prefix.clone()).or_insert(0);
                *n = (*n).max(i + 1);
                *count.entry(prefix).or_insert(0) += 1;
            }
        }
        FlatSequences { len, count }
    }

    fn sparse(&self, prefix: &str) -> bool {
        self.count.get(prefix) != self.len.get(prefix)
    }
}

/// The naming as it goes through the entries: each hsdiff name's best reading and every
/// reading of it, the conventions met, the index names seen.
#[derive(Default)]
struct Naming {
    index_keyed: bool,
    sequence_len: Option<usize>,
    /// Index-keyed names by pattern: (layer index, entry).
    indices: BTreeMap<String, Vec<(usize, usize)>>,
    best: BTreeMap<String, (Rank, usize)>,
    all: BTreeMap<String, Vec<(Rank, usize)>>,
    conventions: Vec<String>,
}

pub fn assign(entries: &[Named]) -> Assignment {
    let flat = FlatSequences::of(entries);
    let mut naming = Naming::default();
    for (idx, e) in entries.iter().enumerate() {
        if let Some((name, rank)) = naming.read(e, idx, &flat) {
            naming.offer(name, rank, idx);
        }
    }
    let clashes = naming.clashes(entries);
    for (pattern, read) in std::mem::take(&mut naming.indices) {
        // Only the indices this reading gave the compared name: one shadowed by a closer match
        // is said as such, not also as read.
        let mut idx: Vec<usize> = read
            .into_iter()
            .filter(|&(i, entry)| {
                naming
                    .best
                    .get(&Key::Layer(i).to_string())
                    .is_some_and(|&(_, chosen)| chosen == entry)
            })
            .map(|(i, _)| i)
            .collect();
        if idx.is_empty() {
            continue;
        }
        idx.sort_unstable();
        let list: Vec<String> = idx.iter().map(usize::to_string).collect();
        naming.conventions.push(format!(
            "`{pattern}` read as layer indices ({})",
            list.join(", ")
        ));
    }
    Assignment {
        names: naming.best.into_iter().map(|(n, (_, i))| (n, i)).collect(),
        conventions: naming.conventions,
        index_keyed: naming.index_keyed,
        sequence_len: naming.sequence_len,
        clashes,
    }
}

impl Naming {
    fn note(&mut self, s: String) {
        if !self.conventions.contains(&s) {
            self.conventions.push(s);
        }
    }

    /// The hsdiff name entry `e` reads as, and how sure that reading is.
    fn read(&mut self, e: &Named, idx: usize, flat: &FlatSequences) -> Option<(String, Rank)> {
        if let Some((seq, i, len)) = e.seq {
            self.sequence_len = Some(len);
            let n = sequence_name(i, len)?;
            let what = if seq.is_empty() {
                "the top-level tuple/list".to_string()
            } else {
                format!("`{seq}`")
            };
            self.note(format!(
                "{what} read as output_hidden_states ({})",
                layout(len)
            ));
            Some((n, Rank::Sequence))
        } else if is_ours(e.raw) {
            Some((e.raw.to_string(), Rank::Exact))
        } else if let Some(n) = alias(e.raw) {
            self.note("hook names (model.…layers.N)".to_string());
            Some((n, Rank::Alias))
        } else if let Some((pattern, i)) = index_key(e.raw)
            .filter(|_| flat_sequence(e.raw).is_none_or(|(prefix, _)| flat.sparse(&prefix)))
        {
            self.index_keyed = true;
            self.indices.entry(pattern).or_default().push((i, idx));
            Some((Key::Layer(i).to_string(), Rank::Alias))
        } else if let Some((prefix, i)) = flat_sequence(e.raw) {
            let len = flat.len.get(&prefix).copied().unwrap_or(0);
            self.sequence_len = Some(len);
            let n = sequence_name(i, len)?;
            let pattern = format!("{}N", e.raw.trim_end_matches(|c: char| c.is_ascii_digit()));
            self.note(format!(
                "`{pattern}` read as output_hidden_states ({})",
                layout(len)
            ));
            Some((n, Rank::Sequence))
        } else if e.raw == "last_hidden_state" || e.raw.ends_with(".last_hidden_state") {
            Some((Key::FinalNorm.to_string(), Rank::LastHidden))
        } else {
            None
        }
    }

    fn offer(&mut self, name: String, rank: Rank, idx: usize) {
        self.all.entry(name.clone()).or_default().push((rank, idx));
        match self.best.get(&name) {
            Some((r, _)) if *r >= rank => {}
            _ => {
                self.best.insert(name, (rank, idx));
            }
        }
    }

    /// Several entries for one name: equally good readings clash (the caller refuses them);
    /// a weaker reading shadowed by a stronger one is said.
    fn clashes(&mut self, entries: &[Named]) -> BTreeMap<String, Vec<usize>> {
        let mut clashes = BTreeMap::new();
        let mut shadowed = Vec::new();
        for (name, list) in &self.all {
            let Some(&(top, chosen)) = self.best.get(name) else {
                continue;
            };
            let equal: Vec<usize> = list
                .iter()
                .filter(|(r, _)| *r == top)
                .map(|&(_, i)| i)
                .collect();
            if equal.len() > 1 {
                clashes.insert(name.clone(), equal);
            }
            for &(r, i) in list {
                if r < top {
                    shadowed.push(format!(
                        "`{}` would also read as {name}: `{}` is compared (a closer match)",
                        entries[i].raw, entries[chosen].raw
                    ));
                }
            }
        }
        for s in shadowed {
            self.note(s);
        }
        clashes
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
    fn an_index_shadowed_by_a_closer_name_is_not_also_said_as_read() {
        let raws = ["layers.1", "layer_1", "layer_2"];
        let named: Vec<Named> = raws.iter().map(|r| Named { raw: r, seq: None }).collect();
        let a = assign(&named);
        assert_eq!(a.names["layers.1"], 0);
        assert!(
            a.conventions
                .iter()
                .any(|c| c.starts_with("`layer_1` would also read as layers.1")),
            "{:?}",
            a.conventions
        );
        let read: Vec<&String> = a
            .conventions
            .iter()
            .filter(|c| c.contains("read as layer indices"))
            .collect();
        assert_eq!(
            read,
            ["`layer_N` read as layer indices (2)"],
            "{:?}",
            a.conventions
        );
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
    fn ours_are_exactly_the_keys_files_carry() {
        for name in [
            "input_ids",
            "embed",
            "layers.0",
            "layers.12.gated_norm_out",
            "state.layers.3.conv",
            "router.1.margin",
            "final_norm",
            "logits",
        ] {
            assert!(is_ours(name), "{name}");
        }
        for name in [
            "layers.03",
            "layers.+3",
            "layers.3.mlp",
            "router.3.scores",
            "decode.logits",
            "decode.layers.0",
        ] {
            assert!(!is_ours(name), "{name}");
        }
    }

    #[test]
    fn final_states_keep_their_names() {
        let m = flat(&[
            "state.layers.4.recurrent",
            "state.layers.4.conv",
            "hidden_states.0",
            "hidden_states.1",
            "hidden_states.2",
        ]);
        assert_eq!(m["state.layers.4.recurrent"], "state.layers.4.recurrent");
        assert_eq!(m["state.layers.4.conv"], "state.layers.4.conv");
        assert_eq!(m["layers.0"], "hidden_states.1");
        assert_eq!(m.len(), 5);
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
    fn index_keys_are_layers() {
        for raws in [
            ["1", "3", "5"],
            ["layer_1", "layer_3", "layer_5"],
            ["h.1", "h.3", "h.5"],
            ["model.blocks.1", "model.blocks.3", "model.blocks.5"],
            // Sparse under hidden_states: a set of layers, not a 6-entry tuple.
            ["hidden_states.1", "hidden_states.3", "hidden_states.5"],
        ] {
            let m = flat(&raws);
            let keys: Vec<&str> = m.keys().map(String::as_str).collect();
            assert_eq!(keys, ["layers.1", "layers.3", "layers.5"], "{raws:?}");
            assert_eq!(m["layers.3"], raws[1]);
        }
        let named: Vec<Named> = ["1", "3"]
            .iter()
            .map(|r| Named { raw: r, seq: None })
            .collect();
        assert!(assign(&named).index_keyed);
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
