//! Which fingerprint keys can change the numbers ([`matters`]) and which say what ran
//! ([`ran_differently`]), by name: exact names, sections and substrings.

/// Keys that never change the numbers, by exact (last-segment) name.
const HARMLESS: &[&str] = &[
    "hostname",
    "host",
    "created",
    "time",
    "timestamp",
    "date",
    "tool_version",
    "hsdiff_version",
    "git_commit",
    "commit",
    "format",
    "source",
    "os",
    "pid",
    "user",
    "cwd",
    "cpu",
    "cpu_model",
    "threads",
    "num_threads",
    "calls",
    "gpu_driver",
    // The CPU model on a CPU run, the card's name on a GPU run: what can change the numbers is
    // recorded separately (`cpu_features`, `gpu_compute_capability`, `cuda_version`).
    "device_name",
    "key_layout",
    "module_path",
    "model_class",
    "tool",
    "python",
    // The per-function records of the Python package (`linear_attention_impl.<fn>.*`) explain a
    // choice without being it: what ran is `actual`, `implementation` and `fast` beside them.
    "reason",
    "requested",
    "environment_implementation",
];

/// Sections that say how a run was checked or what was asked for, not how it computed:
/// `strict_f64` (golden f64 dumps: how float32 requests were rewritten to float64, and the
/// self-check's numbers; what does change the numbers is recorded in `mode` and `dtype`), and the
/// Python package's `linear_attention_request` (the implementation asked for per function, like
/// the per-function `requested`: what ran is `linear_attention_impl.*.actual`).
const HARMLESS_SECTIONS: &[&str] = &["strict_f64.", "linear_attention_request."];

/// Substrings of keys that can change the numbers (checked before the harmless patterns, so
/// `fast_path` matters although it ends in `path`).
const MATTERS: &[&str] = &[
    "fla",
    "causal_conv1d",
    "fast_path",
    "kernel",
    "linear_attention",
    "linear_attn",
    "impl",
    "backend",
    "attn",
    "attention",
    "dtype",
    "device",
    "digest",
    "sha256",
    "hash",
    "weights",
    "config",
    "tokenizer",
    "torch",
    "transformers",
    "cuda",
    "compute_capability",
    "cpu_features",
    "simd",
    "triton",
    "version",
];

/// Substrings of keys that never change the numbers.
const HARMLESS_PATTERNS: &[&str] = &[
    "host", "time", "date", "path", "_dir", "file", "cwd", "user",
];

/// Whether a difference in `key` can change the hidden states.
pub fn matters(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let last = key.rsplit('.').next().unwrap_or(&key);
    if HARMLESS.contains(&last)
        || HARMLESS.contains(&key.as_str())
        || HARMLESS_SECTIONS.iter().any(|s| key.starts_with(s))
    {
        return false;
    }
    if MATTERS.iter().any(|m| key.contains(m)) {
        return true;
    }
    !HARMLESS_PATTERNS.iter().any(|p| key.contains(p))
}

/// Whether `key` says what *ran*: each linear-attention function's implementation, the kernel
/// packages and their versions, the dtype, the attention/experts implementation, the device,
/// the backend. These lead the environment section; the rest is grouped under a count.
pub fn ran_differently(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let last = key.rsplit('.').next().unwrap_or(&key);
    if last == "device_name" || last == "calls" {
        return false;
    }
    RAN.iter().any(|r| key == *r || last == *r)
        || key.starts_with("linear_attention_impl.") && matches!(last, "implementation" | "fast")
        || (key.starts_with("kernel_packages.") || key.starts_with("kernels."))
            && matches!(last, "version" | "importable" | "available")
        || key.starts_with("gated_norm.") && last == "implementation"
}

/// Keys (or last segments) that name what ran.
const RAN: &[&str] = &[
    "backend",
    "implementation",
    "attn_implementation",
    "experts_implementation",
    "dtype",
    "device",
    "fla",
    "causal_conv1d",
    "triton",
    "kernels",
    "torch",
    "transformers",
    "cuda_version",
    "fast_path",
];
