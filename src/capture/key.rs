//! Typed tensor keys: what a captured tensor is (`Key`), the contract between the forward pass,
//! dump files, `compare` and the JSON report. The model, the captures and the comparison speak
//! in keys; a key becomes a string ([`Display`]) or a string a key ([`FromStr`]) only where a
//! file is read or written or a report is emitted. `tests/fixtures/tensor_names.txt` lists every
//! kind of name, and the Python package's names are tested against it.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// One captured tensor. Ordered in forward order ([`Ord`]): `input_ids`, `embed`; per decoder
/// layer its ops (in the order the layer computes them), its router's fields and its output
/// `layers.{i}`; then the final states of every layer (`state.layers.{i}.*`, by layer: the rows
/// of a report follow the layers), `final_norm`, `logits`; then the decode path's captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The token ids, i64 `[1, T]`.
    InputIds,
    /// The embedding's output, `[1, T, H]`.
    Embed,
    /// Output of decoder layer `i` (the residual stream after it, before the final norm).
    Layer(usize),
    /// An intermediate value inside decoder layer `i`, e.g. `layers.3.core_out`.
    Op(usize, Op),
    /// A final state of linear-attention layer `i` after the last token.
    State(usize, StateKind),
    /// What the router of MoE layer `i` decided.
    Router(usize, RouterField),
    /// After the final norm, `[1, T, H]`.
    FinalNorm,
    /// The logits, `[1, T, V]`.
    Logits,
    /// Logits of the decoded positions, `[1, K, V]`: entry 0 from the cached prefill, entry m
    /// after feeding m more tokens one at a time.
    DecodeLogits,
    /// Output of decoder layer `i` at the decoded positions, `[1, K, H]`.
    DecodeLayer(usize),
    /// A tensor that `--map A_NAME=B_NAME` names when neither name is one of the above: compared
    /// under A's name, after every other key. Never read from a name ([`Key::of`]); made only
    /// by [`Key::mapped`].
    Mapped(&'static str),
}

/// The intermediate values inside a layer ([`Key::Op`]), captured with `--ops`: the Gated
/// DeltaNet shell's gates, the linear-attention backend's values, the output projection. In
/// the order the layer computes them (their [`Ord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// The gates: write strength and decay.
    Beta,
    G,
    /// The causal conv's output, `[B, T, conv_dim]`, and the q, k, v split from it.
    ConvOut,
    Q,
    K,
    V,
    /// The gated delta rule's output.
    CoreOut,
    /// The gated RMSNorm's output, ready for the output projection.
    GatedNormOut,
    /// The output projection's result.
    OutProj,
}

/// The two kinds of final state of a linear-attention layer ([`Key::State`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StateKind {
    /// The conv window after the last token, `[1, conv_dim, K]`.
    Conv,
    /// The recurrent state after the last token, `[1, Hv, dk, dv]`.
    Recurrent,
}

/// What a router's capture holds ([`Key::Router`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouterField {
    /// The experts chosen per token, `[1, T, k]` int64.
    TopkIds,
    /// The router logits, `[1, T, E]` (hsdiff-capture writes them; the truth's runs record them
    /// for routing recovery: how near each other choice was).
    Logits,
    /// Per token, the router probability gap between the last chosen expert and the best
    /// expert left out, `[1, T]` (accumulation dtype).
    Margin,
    /// A run with forced routing only: per token, how far the forced experts are from the
    /// router's own choice, in units of the token's router-logit RMS; −1 where they are its
    /// own choice, `[1, T]` f64 (`model::mlp`).
    FlipGap,
}

/// A name that is not one of hsdiff's own ([`Key`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAKey(pub String);

impl fmt::Display for NotAKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not an hsdiff tensor name", self.0)
    }
}

impl std::error::Error for NotAKey {}

/// A small enum's names, both ways.
macro_rules! named {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            /// Every value, in order.
            pub const ALL: &[$t] = &[$(<$t>::$v),*];

            /// The name in a tensor name.
            pub fn name(self) -> &'static str {
                match self {
                    $(<$t>::$v => $s),*
                }
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $t {
            type Err = NotAKey;
            fn from_str(s: &str) -> Result<Self, NotAKey> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name() == s)
                    .ok_or_else(|| NotAKey(s.to_string()))
            }
        }
    };
}

named!(Op {
    Beta => "beta",
    G => "g",
    ConvOut => "conv_out",
    Q => "q",
    K => "k",
    V => "v",
    CoreOut => "core_out",
    GatedNormOut => "gated_norm_out",
    OutProj => "out_proj",
});

named!(StateKind {
    Conv => "conv",
    Recurrent => "recurrent",
});

named!(RouterField {
    TopkIds => "topk_ids",
    Logits => "logits",
    Margin => "margin",
    FlipGap => "flip_gap",
});

const INPUT_IDS: &str = "input_ids";
const EMBED: &str = "embed";
const FINAL_NORM: &str = "final_norm";
const LOGITS: &str = "logits";
const DECODE_LOGITS: &str = "decode.logits";
const LAYERS: &str = "layers.";
const STATE_LAYERS: &str = "state.layers.";
const ROUTER: &str = "router.";
const DECODE_LAYERS: &str = "decode.layers.";

impl Key {
    /// `name` as a key; None for a name that is not hsdiff's (a file's own names).
    pub fn of(name: &str) -> Option<Key> {
        name.parse().ok()
    }

    /// The key `--map` names by `name`: hsdiff's own, else a [`Key::Mapped`] of it.
    pub fn mapped(name: &str) -> Key {
        Key::of(name).unwrap_or_else(|| Key::Mapped(intern(name)))
    }

    /// The key a file's tensor is compared under, `name`: hsdiff's own, a name `--map` gave
    /// ([`Key::mapped`]), else None (the file's other names are no keys).
    pub fn named(name: &str) -> Option<Key> {
        Key::of(name).or_else(|| mapped_names().get(name).map(|&kept| Key::Mapped(kept)))
    }

    /// The decoder layer a key belongs to (its op, router, state or output); None for the
    /// tensors outside the layers.
    pub fn layer(self) -> Option<usize> {
        match self {
            Key::Layer(i)
            | Key::Op(i, _)
            | Key::State(i, _)
            | Key::Router(i, _)
            | Key::DecodeLayer(i) => Some(i),
            Key::InputIds
            | Key::Embed
            | Key::FinalNorm
            | Key::Logits
            | Key::DecodeLogits
            | Key::Mapped(_) => None,
        }
    }

    /// The decoder layer this is the output of (`layers.{i}`); None for any other key.
    pub fn layer_output(self) -> Option<usize> {
        match self {
            Key::Layer(i) => Some(i),
            _ => None,
        }
    }

    /// Position in forward order: (group, layer, place in the layer, field).
    fn rank(self) -> (u8, usize, u8, u8) {
        match self {
            Key::InputIds => (0, 0, 0, 0),
            Key::Embed => (1, 0, 0, 0),
            Key::Op(i, op) => (2, i, 0, op as u8),
            Key::Router(i, f) => (2, i, 1, f as u8),
            Key::Layer(i) => (2, i, 2, 0),
            Key::State(i, k) => (3, i, k as u8, 0),
            Key::FinalNorm => (4, 0, 0, 0),
            Key::Logits => (5, 0, 0, 0),
            Key::DecodeLayer(i) => (6, i, 0, 0),
            Key::DecodeLogits => (7, 0, 0, 0),
            Key::Mapped(_) => (8, 0, 0, 0),
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        let name = |k: &Key| match k {
            Key::Mapped(n) => Some(*n),
            _ => None,
        };
        self.rank()
            .cmp(&other.rank())
            .then_with(|| name(self).cmp(&name(other)))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::InputIds => f.write_str(INPUT_IDS),
            Key::Embed => f.write_str(EMBED),
            Key::Layer(i) => write!(f, "{LAYERS}{i}"),
            Key::Op(i, op) => write!(f, "{LAYERS}{i}.{op}"),
            Key::State(i, kind) => write!(f, "{STATE_LAYERS}{i}.{kind}"),
            Key::Router(i, field) => write!(f, "{ROUTER}{i}.{field}"),
            Key::FinalNorm => f.write_str(FINAL_NORM),
            Key::Logits => f.write_str(LOGITS),
            Key::DecodeLogits => f.write_str(DECODE_LOGITS),
            Key::DecodeLayer(i) => write!(f, "{DECODE_LAYERS}{i}"),
            Key::Mapped(name) => f.write_str(name),
        }
    }
}

/// The names `--map` gave that are none of hsdiff's, kept for the rest of the process so that a
/// [`Key::Mapped`] is `Copy` like every key. Only the command line adds to it ([`Key::mapped`]):
/// a file's own names are looked up ([`Key::named`]), never added, so a file of a million names
/// cannot grow it.
static MAPPED_NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn mapped_names() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<&'static str>> {
    MAPPED_NAMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `name` kept for the rest of the process, once however often it is asked for.
fn intern(name: &str) -> &'static str {
    let mut names = mapped_names();
    if let Some(&kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(kept);
    kept
}

/// A key's name, for messages and files.
impl From<Key> for String {
    fn from(key: Key) -> String {
        key.to_string()
    }
}

impl FromStr for Key {
    type Err = NotAKey;

    /// Exactly the names [`Display`](fmt::Display) writes: a layer index in decimal without a
    /// sign or leading zeros, so that every accepted name is displayed back as it was read.
    fn from_str(s: &str) -> Result<Key, NotAKey> {
        parse(s).ok_or_else(|| NotAKey(s.to_string()))
    }
}

fn parse(s: &str) -> Option<Key> {
    match s {
        INPUT_IDS => return Some(Key::InputIds),
        EMBED => return Some(Key::Embed),
        FINAL_NORM => return Some(Key::FinalNorm),
        LOGITS => return Some(Key::Logits),
        DECODE_LOGITS => return Some(Key::DecodeLogits),
        _ => {}
    }
    // Each prefix below is the start of no other (`layers.` is not that of `state.layers.`).
    if let Some(rest) = s.strip_prefix(LAYERS) {
        return match rest.split_once('.') {
            None => Some(Key::Layer(index(rest)?)),
            Some((i, op)) => Some(Key::Op(index(i)?, op.parse().ok()?)),
        };
    }
    if let Some(rest) = s.strip_prefix(STATE_LAYERS) {
        let (i, kind) = rest.split_once('.')?;
        return Some(Key::State(index(i)?, kind.parse().ok()?));
    }
    if let Some(rest) = s.strip_prefix(ROUTER) {
        let (i, field) = rest.split_once('.')?;
        return Some(Key::Router(index(i)?, field.parse().ok()?));
    }
    Some(Key::DecodeLayer(index(s.strip_prefix(DECODE_LAYERS)?)?))
}

/// A layer index as [`Display`](fmt::Display) writes it: decimal digits, no sign, no leading
/// zero (`0` itself aside), within `usize`.
fn index(s: &str) -> Option<usize> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

#[cfg(test)]
mod tests;
