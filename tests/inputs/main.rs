//! Integration tests, `inputs` binary: hostile and unusual input files: bad inputs, the hostile
//! matrix (one test per case, `hostile::`), the fuzz corpus replayed, torch-written sweeps, a
//! zip64 archive.
//!
//! One test binary per group (docs/architecture.md#tests): each former `tests/NAME.rs` is
//! the module `NAME` here, so `cargo test --test inputs NAME::` runs one of them.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod fuzz_regressions;
mod hostile;
mod torch_sweep;
mod zip64_large;
