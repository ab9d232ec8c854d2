//! Integration tests, `kernels` binary: the backends and kernels as a library: every backend's
//! delta rule, conv and norm against the f64 truth, state hand-over, the fused CPU kernels.
//!
//! One test binary per group (docs/architecture.md#tests): each former `tests/NAME.rs` is
//! the module `NAME` here, so `cargo test --test kernels NAME::` runs one of them.

mod backend_kernels;
mod backend_state;
mod fused_cpu_kernels;
