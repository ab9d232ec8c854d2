//! Integration tests, `cli` binary: the commands end to end through the built binary: compare, the
//! report renderers, verdicts, bench, env/check, drafter pipelines, shards and merge, and the module layering of
//! src/.
//!
//! One test binary per group (docs/architecture.md#tests): each former `tests/NAME.rs` is
//! the module `NAME` here, so `cargo test --test cli cli:: NAME::` runs one of them.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod bench;
mod cli;
mod compare;
mod env_check;
mod field;
mod findings;
mod message_spacing;
mod moe;
mod opens;
mod pipelines;
mod pipelines_sglang;
mod pipelines_sglang_ops;
mod pipelines_sglang_return;
mod pipelines_sglang_served;
mod report;
mod shards;
mod verdicts;
mod vllm;
