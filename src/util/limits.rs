//! Caps on sizes that come from input (files, config.json, the prompt) and would otherwise drive
//! allocations or run time: each one is checked before the work it bounds starts. Every cap can
//! be raised with `--limit NAME=VALUE` (docs/file-formats.md lists them).

use std::sync::OnceLock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Sequence length T (the attention scores are T × T per head).
    pub tokens: usize,
    /// Bytes of prompt text (a literal, or an `@FILE`).
    pub prompt_bytes: usize,
    /// `num_hidden_layers` in config.json.
    pub layers: usize,
    /// Any one dimension in config.json (hidden size, head dims, vocabulary, …).
    pub dim: usize,
    /// Bytes of a JSON file of a model folder (config.json, the shard index, tokenizer.json) or
    /// of a saved SGLang `/generate` response.
    pub json_bytes: usize,
    /// Bytes of a torch.save archive's `data.pkl`.
    pub pickle_bytes: usize,
    /// Nesting depth of pickled containers.
    pub pickle_depth: usize,
    /// Pickled objects, counting every copy a memo lookup makes.
    pub pickle_objects: usize,
    /// Bytes a gzip-compressed file (`.ckpt.gz`) inflates to, held in memory.
    pub inflated_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            tokens: 16384,
            prompt_bytes: 1 << 20,
            layers: 1024,
            dim: 1 << 22,
            json_bytes: 1 << 30,
            pickle_bytes: 64 << 20,
            pickle_depth: 64,
            // ~30 objects per tensor: room for ~30 000 tensors in ~150 MB.
            pickle_objects: 1_000_000,
            inflated_bytes: 4 << 30,
        }
    }
}

/// The names `--limit` accepts, with what each caps.
pub const NAMES: &[(&str, &str)] = &[
    ("tokens", "sequence length T"),
    ("prompt-bytes", "bytes of prompt text"),
    ("layers", "num_hidden_layers in config.json"),
    ("dim", "any one dimension in config.json"),
    (
        "json-bytes",
        "bytes of config.json, the shard index, tokenizer.json or an SGLang response",
    ),
    ("pickle-bytes", "bytes of a torch.save data.pkl"),
    ("pickle-depth", "nesting depth of pickled containers"),
    ("pickle-objects", "pickled objects, memo copies included"),
    (
        "inflated-bytes",
        "bytes a .ckpt.gz inflates to (held in memory)",
    ),
];

/// The deepest `--limit pickle-depth` accepted: the readers of unpickled values recurse (and so
/// does dropping them), and 2048 levels stay far inside the 8 MiB main-thread stack.
pub const PICKLE_DEPTH_MAX: usize = 2048;

/// The most threads `--threads` or `RAYON_NUM_THREADS` may ask for.
pub const THREADS_MAX: usize = 1024;

/// How many folders deep a dataset side is searched (SpecForge and ge_data nest one level), and
/// so how deep the output policy guards an input folder: a sample there is never overwritten.
pub const DATASET_DEPTH: usize = 8;

static ACTIVE: OnceLock<Limits> = OnceLock::new();

/// The limits in force: the defaults unless [`set`] was called.
pub fn get() -> &'static Limits {
    ACTIVE.get_or_init(Limits::default)
}

/// Installs the limits for this process (once, before any input is read).
pub fn set(limits: Limits) {
    let _ = ACTIVE.set(limits);
}

/// `what` exceeds a limit: the message says which flag raises it.
pub fn exceeded(what: &str, value: usize, name: &str, limit: usize) -> String {
    if name == "pickle-depth" && limit >= PICKLE_DEPTH_MAX {
        return format!("{what} is {value}, deeper than hsdiff reads ({PICKLE_DEPTH_MAX})");
    }
    format!("{what} is {value}, over the limit of {limit} (raise it with --limit {name}=N)")
}
