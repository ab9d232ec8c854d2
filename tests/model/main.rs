//! Integration tests, `model` binary: whole-model runs through the library: golden parity and
//! decode, FP8 checkpoints, random weights, key layouts, streaming, the planted-failure paths,
//! calibrated floors.
//!
//! One test binary per group (docs/architecture.md#tests): each former `tests/NAME.rs` is
//! the module `NAME` here, so `cargo test --test model NAME::` runs one of them.

#[path = "../common/mod.rs"]
mod common;

mod calibrated;
mod fp8;
mod golden_decode;
mod golden_parity;
mod key_layout;
mod paths;
mod random_weights;
mod streaming;
