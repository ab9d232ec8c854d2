//! SGLang as served: one request's forward passes joined into one sample.
//!
//! With chunked prefill (`--chunked-prefill-size`, on by default) a long prompt is prefilled in
//! several extend passes, then each generated token is a decode pass; with the radix cache (on
//! by default) a prompt whose prefix is cached is extended from the end of that prefix, so the
//! prefix's positions are in no pass at all. The dumper's core fields of each pass
//! (`_SGLangPlugin.convert_value` of `ForwardBatch`, python/sglang/srt/debug_utils/dumper.py at
//! sgl-project/sglang 00d35548c30a58ac5925d3b59d01c634120d8d98) are `input_ids`, `positions`
//! (each token's position in its request), `seq_lens` (each request's length after the pass),
//! `req_pool_indices` (each request's slot in the request-to-token pool, kept from its first
//! chunk to its last decode step) and `rids` when set.
//!
//! A pass's tokens are cut into its requests by `positions` and `seq_lens`: request i's tokens
//! run from position `positions[cursor]` up to `seq_lens[i] − 1`, contiguously. A request's
//! share of a pass continues the request open on the same slot when its first position is the
//! next one that request lacks; otherwise it begins a request — at position 0, or at position p
//! after a prefix-cache hit (positions 0..p served from the cache, in no pass). Identity is by
//! slot and position continuity, not `rids` (a list of strings, which the bounded torch reader
//! does not read as a tensor).
//!
//! The plan is read once per folder listing: every pass of the folder shares it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::{DType, Tensor};

use super::dump_file;
use super::listing::{self, Listing};
use super::tags;
use crate::error::{Error, Result};
use crate::util::limits;

/// One request's share of one forward pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub step: String,
    /// Its first token's offset in the pass, and its token count.
    pub start: usize,
    pub len: usize,
    /// The position in its request of its first token.
    pub first: usize,
}

/// One request: its segments in pass order, their positions contiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub slot: i64,
    pub segments: Vec<Segment>,
}

impl Request {
    /// Its first position held: > 0 after a prefix-cache hit.
    pub fn first(&self) -> usize {
        self.segments.first().map_or(0, |s| s.first)
    }
    /// One past its last position held.
    pub fn end(&self) -> usize {
        self.segments.last().map_or(0, |s| s.first + s.len)
    }
}

/// A folder's requests, in the order they began.
#[derive(Debug, Default)]
pub struct Served {
    pub requests: Vec<Request>,
}

impl Served {
    /// The requests that begin in pass `step`, in batch order.
    pub fn beginning_at(&self, step: &str) -> Vec<&Request> {
        self.requests
            .iter()
            .filter(|r| r.segments.first().is_some_and(|s| s.step == step))
            .collect()
    }
    /// The first pass of the request whose share `step` holds, when `step` begins none.
    pub fn begun_before(&self, step: &str) -> Option<&str> {
        self.requests
            .iter()
            .find(|r| r.segments.iter().skip(1).any(|s| s.step == step))
            .and_then(|r| r.segments.first())
            .map(|s| s.step.as_str())
    }
}

/// A pass's core field `name` (rank 0's copy, the same on every rank), as i64.
fn core_field(listing: &Listing, key: &str, step: &str, name: &str) -> Result<Option<Vec<i64>>> {
    let Some((_, path)) = listing
        .pass(key, step)
        .iter()
        .find(|(t, _)| t.name() == Some(name))
    else {
        return Ok(None);
    };
    let t = dump_file::read(path)?.value;
    if t.elem_count() > limits::get().tokens {
        return Err(Error::tensor(
            path,
            name,
            limits::exceeded(
                &format!("`{name}`"),
                t.elem_count(),
                "tokens",
                limits::get().tokens,
            ),
        ));
    }
    let v = t
        .flatten_all()
        .and_then(|t| t.to_dtype(DType::I64))
        .and_then(|t| t.to_vec1::<i64>())
        .map_err(|e| Error::tensor(path, name, e.to_string()))?;
    Ok(Some(v))
}

/// The pass's tokens cut into its requests: (offset, count, first position) each, from
/// `positions` (one per token) and `seq_lens` (one per request).
pub fn split(
    positions: &[i64],
    seq_lens: &[i64],
) -> std::result::Result<Vec<(usize, usize, usize)>, String> {
    let mut out = Vec::with_capacity(seq_lens.len());
    let mut cursor = 0usize;
    for (i, &len) in seq_lens.iter().enumerate() {
        let Some(&first) = positions.get(cursor) else {
            return Err(format!(
                "`seq_lens` counts {} requests, `positions` ends after request {i}'s predecessors \
                 ({} tokens)",
                seq_lens.len(),
                positions.len()
            ));
        };
        if first < 0 || len <= first {
            return Err(format!(
                "request {i}: first position {first}, `seq_lens` {len}: a request's positions \
                 run from its first up to seq_lens − 1"
            ));
        }
        let count = (len - first) as usize;
        let held = positions.get(cursor..cursor + count);
        let contiguous = held.is_some_and(|h| h.iter().zip(first..).all(|(&p, want)| p == want));
        if !contiguous {
            return Err(format!(
                "request {i}'s positions (from offset {cursor}) do not run {first}..{} as \
                 `seq_lens` {len} says",
                len - 1
            ));
        }
        out.push((cursor, count, first as usize));
        cursor += count;
    }
    if cursor != positions.len() {
        return Err(format!(
            "`seq_lens` accounts for {cursor} tokens, `positions` holds {}",
            positions.len()
        ));
    }
    Ok(out)
}

/// The requests of a dumper folder whose passes carry `positions`; None when none does (a
/// dump of whole prompts, read one pass per sample).
fn plan_of(dir: &Path, listing: &Listing, key: &str) -> Result<Option<Served>> {
    let steps = listing.passes(key);
    let has_positions = |s: &str| {
        listing
            .pass(key, s)
            .iter()
            .any(|(t, _)| t.name() == Some("positions"))
    };
    if !steps.iter().any(|s| has_positions(s)) {
        return Ok(None);
    }
    let refuse =
        |step: &str, msg: String| Error::file(dir, format!("sglang-dumper ({key} {step}): {msg}"));
    let mut served = Served::default();
    // slot → index in `served.requests` of the request open on it.
    let mut open: HashMap<i64, usize> = HashMap::new();
    for step in steps {
        let field = |name: &str| core_field(listing, key, step, name);
        let (Some(positions), Some(seq_lens)) = (field("positions")?, field("seq_lens")?) else {
            return Err(refuse(
                step,
                "no `positions` and `seq_lens`, which other passes of the folder carry: its \
                 tokens cannot be placed in their requests"
                    .to_string(),
            ));
        };
        let slots = match field("req_pool_indices")? {
            Some(s) if s.len() == seq_lens.len() => s,
            Some(s) => {
                return Err(refuse(
                    step,
                    format!(
                        "`req_pool_indices` holds {} slots, `seq_lens` {} requests",
                        s.len(),
                        seq_lens.len()
                    ),
                ));
            }
            None if seq_lens.len() == 1 => vec![0],
            None => {
                return Err(refuse(
                    step,
                    format!(
                        "{} requests and no `req_pool_indices`: which request each continues \
                         cannot be told",
                        seq_lens.len()
                    ),
                ));
            }
        };
        let parts = split(&positions, &seq_lens).map_err(|m| refuse(step, m))?;
        for ((start, len, first), slot) in parts.into_iter().zip(slots) {
            let segment = Segment {
                step: step.to_string(),
                start,
                len,
                first,
            };
            let continues = open
                .get(&slot)
                .is_some_and(|&r| first > 0 && served.requests[r].end() == first);
            match open.get(&slot) {
                Some(&r) if continues => served.requests[r].segments.push(segment),
                _ => {
                    open.insert(slot, served.requests.len());
                    served.requests.push(Request {
                        slot,
                        segments: vec![segment],
                    });
                }
            }
        }
    }
    Ok(Some(served))
}

type Cache = Mutex<HashMap<(PathBuf, String), (Arc<Listing>, Option<Arc<Served>>)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The requests of the dumper folder `dir` (passes counted by `key`), planned once per listing.
pub fn plan(dir: &Path, key: &str) -> Result<Option<Arc<Served>>> {
    let listing = listing::of(dir)?;
    let slot = (dir.to_path_buf(), key.to_string());
    {
        let map = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some((l, served)) = map.get(&slot)
            && Arc::ptr_eq(l, &listing)
        {
            return Ok(served.clone());
        }
    }
    let served = plan_of(dir, &listing, key)?.map(Arc::new);
    let mut map = cache().lock().unwrap_or_else(|p| p.into_inner());
    map.insert(slot, (listing, served.clone()));
    Ok(served)
}

/// The folders among `files` whose dumper files include `positions`: the served ones.
pub fn served_folders(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    files
        .iter()
        .filter(|f| tags::parse(f).is_some_and(|t| t.name() == Some("positions")))
        .map(|f| folder(f))
        .collect()
}

fn folder(f: &Path) -> PathBuf {
    f.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// `files` without the passes of `served` folders that begin no request (chunks after a
/// request's first, decode steps): each request is one sample, read from the pass it begins in.
pub fn drop_continuations(files: Vec<PathBuf>, served: &BTreeSet<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut plans: BTreeMap<(PathBuf, String), Option<Arc<Served>>> = BTreeMap::new();
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let dir = folder(&f);
        let Some(t) = tags::parse(&f).filter(|_| served.contains(&dir)) else {
            out.push(f);
            continue;
        };
        let key = if t.get("step").is_some() {
            "step"
        } else {
            "forward_pass_id"
        };
        let slot = (dir.clone(), key.to_string());
        let here = match plans.get(&slot) {
            Some(p) => p.clone(),
            None => {
                let p = plan(&dir, key)?;
                plans.insert(slot, p.clone());
                p
            }
        };
        let step = t.get(key).unwrap_or_default();
        if here.is_none_or(|s| !s.beginning_at(step).is_empty()) {
            out.push(f);
        }
    }
    Ok(out)
}

/// The token rows of `segment` cut from a pass's tensors, joined to the rows cut before.
pub fn append(
    joined: &mut Vec<(String, Tensor)>,
    pass: Vec<(String, Tensor)>,
    segment: &Segment,
) -> std::result::Result<(), String> {
    let first = joined.is_empty();
    if !first && pass.len() != joined.len() {
        let had: Vec<&str> = joined.iter().map(|(n, _)| n.as_str()).collect();
        let has: Vec<&str> = pass.iter().map(|(n, _)| n.as_str()).collect();
        return Err(format!(
            "step {} holds {} where the request's earlier passes hold {}",
            segment.step,
            has.join(", "),
            had.join(", ")
        ));
    }
    for (k, (name, t)) in pass.into_iter().enumerate() {
        let cut = t
            .narrow(0, segment.start, segment.len)
            .map_err(|e| format!("step {}: `{name}`: {e}", segment.step))?;
        if first {
            joined.push((name, cut));
            continue;
        }
        let (have, sofar) = &mut joined[k];
        if *have != name {
            return Err(format!(
                "step {} holds `{name}` where the request's earlier passes hold `{have}`",
                segment.step
            ));
        }
        *sofar = Tensor::cat(
            &[
                &*sofar,
                &cut.to_dtype(sofar.dtype()).map_err(|e| e.to_string())?,
            ],
            0,
        )
        .map_err(|e| format!("step {}: `{name}`: {e}", segment.step))?;
    }
    Ok(())
}

/// The passes of `r` with the positions each holds, for the reading's description.
pub fn describe(r: &Request, key: &str) -> String {
    let parts: Vec<String> = r
        .segments
        .iter()
        .map(|s| match s.len {
            1 => format!("{key}={} position {}", s.step, s.first),
            n => format!("{key}={} positions {}–{}", s.step, s.first, s.first + n - 1),
        })
        .collect();
    let mut text = format!(
        "one request of {} forward pass(es) joined by slot {} and position ({})",
        r.segments.len(),
        r.slot,
        parts.join(", ")
    );
    if r.first() > 0 {
        text.push_str(&format!(
            "; positions 0–{} served from SGLang's prefix cache: not in the dump",
            r.first() - 1
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_cut_into_its_requests() {
        // An extend of a request with 4 cached positions (4..7) and a fresh one (0..2).
        assert_eq!(
            split(&[4, 5, 6, 0, 1], &[7, 2]),
            Ok(vec![(0, 3, 4), (3, 2, 0)])
        );
        // A decode pass: one token per request, at seq_len − 1.
        assert_eq!(
            split(&[40, 12], &[41, 13]),
            Ok(vec![(0, 1, 40), (1, 1, 12)])
        );
        let gap = split(&[0, 2, 3], &[4]).unwrap_err();
        assert!(gap.contains("do not run 0..3"), "{gap}");
        let short = split(&[0, 1], &[3]).unwrap_err();
        assert!(short.contains("do not run 0..2"), "{short}");
        let extra = split(&[0, 1, 2], &[2]).unwrap_err();
        assert!(
            extra.contains("accounts for 2 tokens, `positions` holds 3"),
            "{extra}"
        );
        let past = split(&[5], &[5]).unwrap_err();
        assert!(past.contains("first position 5, `seq_lens` 5"), "{past}");
    }
}
