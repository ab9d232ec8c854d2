//! vLLM's decoder layers return the pair `(hidden_states, residual)` and leave the residual add
//! to the next layer's fused add-RMSNorm; the hidden state transformers reports (and hsdiff
//! compares) is their sum. A dump that keeps the pair — a 2-tuple saved as is under a layer's
//! module path (`model.layers.N` → `.0`, `.1`) or its index, or the halves named `….hidden` /
//! `….residual` — is read as `layers.N = hidden + residual`.
//!
//! The sum is made in the tensors' own dtype and rounded once, as vLLM's
//! `fused_add_rms_norm` kernel does (`z = input + residual` in the scalar type, stored back as the
//! residual before the norm reads it) and as its torch fallback does for bf16: so a bf16 pair sums
//! to exactly the bf16 value the next layer (or, for the last layer, `model.norm`) works on, which
//! is transformers' layer output. docs/file-formats.md#vllm describes it for users.

use std::collections::BTreeMap;

use candle_core::Tensor;

use super::{Entry, FileSource, naming};
use crate::error::{Error, Result};

/// Which half of a pair an entry is, and how the dump spelled it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    Hidden,
    Residual,
}

/// `model.layers.3.0` / `model.layers.3.hidden` → (`model.layers.3`, the half, whether the
/// halves are named rather than numbered).
fn half_of(e: &Entry) -> Option<(String, Half, bool)> {
    let (parent, last) = e.raw.rsplit_once('.')?;
    // A layer's module path, or its index as a dict key (`{3: (hidden, residual)}`), whose
    // reading as layer N's output or input the name conventions then decide.
    if !naming::is_decoder_layer(parent) && parent.parse::<usize>().is_err() {
        return None;
    }
    let (half, named) = match last {
        "0" => (Half::Hidden, false),
        "1" => (Half::Residual, false),
        "hidden" | "hidden_states" => (Half::Hidden, true),
        "residual" => (Half::Residual, true),
        _ => return None,
    };
    // A numbered half of a saved tuple counts only when that tuple held two values.
    if let Some((_, _, len)) = &e.seq
        && *len != 2
    {
        return None;
    }
    Some((parent.to_string(), half, named))
}

/// One layer's halves, by entry index.
#[derive(Default)]
struct Pair {
    hidden: Option<usize>,
    residual: Option<usize>,
    named: bool,
}

/// Each layer's halves, by the layer's module path (or index).
fn pairs_of(entries: &[Entry]) -> BTreeMap<String, Pair> {
    let mut pairs: BTreeMap<String, Pair> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let Some((parent, half, named)) = half_of(e) else {
            continue;
        };
        let p = pairs.entry(parent).or_default();
        p.named |= named;
        match half {
            Half::Hidden => p.hidden = Some(i),
            Half::Residual => p.residual = Some(i),
        }
    }
    pairs
}

impl FileSource {
    /// Reads every (hidden, residual) pair of a layer as that layer's output: the hidden half
    /// renamed to the layer's module path, the residual half kept aside to be added on read.
    /// A pair whose halves differ in dtype or shape, or that lacks a half, is refused with the
    /// layer's name. Runs before the name conventions.
    pub(super) fn pair_residuals(&mut self) -> Result<()> {
        let pairs = pairs_of(&self.entries);
        let mut sums: Vec<(usize, usize, String)> = Vec::new();
        for (parent, p) in &pairs {
            if let Some((h, r)) = self.summed_pair(parent, p)? {
                sums.push((h, r, parent.clone()));
            }
        }
        if sums.is_empty() {
            return Ok(());
        }
        let spelled = if pairs.values().any(|p| p.named) {
            "`.hidden` + `.residual`"
        } else {
            "the tuple's `.0` + `.1`"
        };
        let dtypes: std::collections::BTreeSet<String> = sums
            .iter()
            .map(|&(h, _, _)| label(&self.entries[h]))
            .collect();
        self.keep_residuals_aside(&sums);
        self.conventions.push(format!(
            "vLLM (hidden, residual) pairs summed in {} as vLLM's next fused add-RMSNorm does \
             (one rounding; the last layer's pair is what feeds model.norm): {spelled} read as \
             the layer's output, {} layers",
            dtypes.into_iter().collect::<Vec<_>>().join("/"),
            sums.len()
        ));
        Ok(())
    }

    /// The (hidden, residual) entries of `parent`'s pair when they are one of vLLM's; None when
    /// the halves are some other tuple, left to the names; refused when a vLLM pair is broken.
    fn summed_pair(&self, parent: &str, p: &Pair) -> Result<Option<(usize, usize)>> {
        let (h, r) = match (p.hidden, p.residual) {
            (Some(h), Some(r)) => (h, r),
            // A numbered half alone (`(hidden, None)`, or `model.layers.3.0` by itself) is no
            // vLLM pair (its residual is never None after a layer): left to the names.
            (Some(_), None) | (None, Some(_)) if !p.named => return Ok(None),
            (h, _) => {
                let (has, lacks) = if h.is_some() {
                    ("hidden", "residual")
                } else {
                    ("residual", "hidden")
                };
                return Err(Error::tensor(
                    &self.path,
                    parent,
                    format!(
                        "holds the {has} half of vLLM's (hidden, residual) pair but no {lacks}: \
                         the layer's output is their sum, so both are needed"
                    ),
                ));
            }
        };
        let (eh, er) = (&self.entries[h], &self.entries[r]);
        // Numbered halves of other shapes are some other tuple (transformers' older
        // `(hidden, attn_weights)`): left to the names.
        if !p.named && eh.shape != er.shape {
            return Ok(None);
        }
        if eh.dtype != er.dtype || eh.bits16 != er.bits16 || eh.shape != er.shape {
            return Err(Error::tensor(
                &self.path,
                parent,
                format!(
                    "is vLLM's (hidden, residual) pair, but its halves differ: `{}` {} {:?}, `{}` {} {:?} \
                     (vLLM's layer returns both in one dtype and shape)",
                    eh.raw,
                    label(eh),
                    eh.shape,
                    er.raw,
                    label(er),
                    er.shape
                ),
            ));
        }
        if !eh.dtype.is_some_and(|d| d.is_float()) {
            return Err(Error::tensor(
                &self.path,
                &eh.raw,
                format!(
                    "is half of vLLM's (hidden, residual) pair but holds {} values, not floating point",
                    label(eh)
                ),
            ));
        }
        Ok(Some((h, r)))
    }

    /// Renames each pair's hidden half to its layer and keeps its residual half aside, out of
    /// the entries.
    fn keep_residuals_aside(&mut self, sums: &[(usize, usize, String)]) {
        let residual_of: BTreeMap<usize, usize> = sums.iter().map(|&(h, r, _)| (h, r)).collect();
        let parent_of: BTreeMap<usize, String> =
            sums.iter().map(|(h, _, p)| (*h, p.clone())).collect();
        let dropped: std::collections::BTreeSet<usize> = residual_of.values().copied().collect();
        let mut kept = Vec::with_capacity(self.entries.len() - dropped.len());
        let mut residuals = BTreeMap::new();
        let stored = std::mem::take(&mut self.entries);
        for (i, mut e) in stored.iter().cloned().enumerate() {
            if dropped.contains(&i) {
                continue;
            }
            if let Some(parent) = parent_of.get(&i) {
                e.raw = parent.clone();
                e.seq = None;
                residuals.insert(kept.len(), stored[residual_of[&i]].clone());
            }
            kept.push(e);
        }
        self.entries = kept;
        self.residuals = residuals;
    }

    /// Whether entry `idx` is the hidden half of a pair (its tensor is a sum, never its bytes).
    pub(super) fn is_pair(&self, idx: usize) -> bool {
        self.residuals.contains_key(&idx)
    }

    /// `t` (entry `idx` as stored) plus its residual half when it has one, in their dtype.
    pub(super) fn add_residual(&self, idx: usize, t: Tensor) -> Result<Tensor> {
        let Some(r) = self.residuals.get(&idx) else {
            return Ok(t);
        };
        let residual = self.load_entry(r)?;
        t.add(&residual)
            .map_err(|e| Error::tensor(&self.path, &r.raw, e.to_string()))
    }
}

fn label(e: &Entry) -> String {
    match e.dtype {
        Some(d) => crate::util::device::dtype_label(d).to_string(),
        None => "16-bit integer".to_string(),
    }
}
