//! The sizes of `bench core` and `bench forward` checked before anything runs: for `core` heads
//! that fit together, positive lengths, dims within the limits and the largest case within half
//! this machine's memory; for `forward` a positive prompt length within the limits.

use crate::commands::bench::delta_rule::CoreGeometry;
use crate::error::{Error, Result};

/// The first of the checks `g` fails.
pub fn check_geometry(g: &CoreGeometry) -> Result<()> {
    if g.key_heads == 0 || g.head_dim == 0 || !g.value_heads.is_multiple_of(g.key_heads.max(1)) {
        return Err(Error::argument(
            "--value-heads",
            format!(
                "{} value heads is not a positive multiple of {} key heads (head dim {})",
                g.value_heads, g.key_heads, g.head_dim
            ),
        ));
    }
    if g.lengths.contains(&0) {
        return Err(Error::argument(
            "--lengths",
            "sequence lengths must be positive",
        ));
    }
    check_size(g)
}

/// The largest case's inputs, output and state (f64 at worst), in bytes, checked against half
/// this machine's memory before anything is allocated.
fn check_size(g: &CoreGeometry) -> Result<()> {
    let dim = crate::util::limits::get().dim;
    for (option, n) in [
        ("--key-heads", g.key_heads),
        ("--value-heads", g.value_heads),
        ("--head-dim", g.head_dim),
    ] {
        if n > dim {
            return Err(Error::argument(
                option,
                crate::util::limits::exceeded(option, n, "dim", dim),
            ));
        }
    }
    let t = g.lengths.iter().copied().max().unwrap_or(0);
    let (hk, hv, d) = (g.key_heads, g.value_heads, g.head_dim);
    // Per token: q, k (Hk × d), v and the output (Hv × d), g and beta (Hv); then the state.
    let bytes = (|| {
        let per_token = hk
            .checked_mul(2)?
            .checked_add(hv.checked_mul(2)?)?
            .checked_mul(d)?
            .checked_add(hv.checked_mul(2)?)?;
        let state = hv.checked_mul(d)?.checked_mul(d)?;
        t.checked_mul(per_token)?.checked_add(state)?.checked_mul(8)
    })();
    let budget =
        crate::util::sysinfo::mem_total_kib().map_or(u64::MAX, |kib| kib.saturating_mul(512));
    match bytes {
        Some(b) if (b as u64) <= budget => Ok(()),
        _ => Err(Error::argument(
            "--lengths/--head-dim",
            format!(
                "one case at T {t}, Hk {hk}, Hv {hv}, d {d} needs {}, more than half this machine's memory",
                bytes.map_or_else(
                    || "more than 2^64 bytes".to_string(),
                    |b| format!("{:.1} GB", b as f64 / 1e9)
                )
            ),
        )),
    }
}

/// `bench forward --seq`: positive, and within the cap on T of every other run (its
/// activations and attention scores grow with it), checked before the model is read.
pub fn check_forward_seq(seq: usize) -> Result<()> {
    if seq == 0 {
        return Err(Error::argument("--seq", "must be positive"));
    }
    crate::util::input::check_length(seq).map_err(|e| Error::argument("--seq", e.to_string()))
}
