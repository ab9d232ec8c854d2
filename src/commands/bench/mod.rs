//! Speed and memory of the linear-attention backends, side by side with transformers' PyTorch
//! fallback, in one run (`hsdiff bench`).
//!
//! - [`delta_rule`]: the gated delta rule alone at a linear layer's geometry; [`forward`]: the whole
//!   prefill forward pass of a checkpoint; [`gemm`]: the linear layers' products alone.
//! - [`peak`]: this machine's FMA peak, measured by a register-resident microbenchmark: every
//!   GEMM-bound case (forward, gemm) is reported as GFLOP/s and as a fraction of it.
//! - [`plan`]: the options, checked (including the `--skip` parser); [`runner`]: the parent,
//!   which runs every measured case in a child process ([`case`], `hsdiff bench case`, hidden) so
//!   that its peak RSS (`VmHWM`) is its own, and talks to it and to bench_torch.py ([`torch_script`]) through
//!   [`protocol`]: inputs and outputs travel as safetensors files, results as one tagged stdout
//!   line. Outputs are compared with transformers' (relative L2).
//! - [`stats`]: timings are the median of `--repeats` calls after `--warmup` calls; min and max
//!   are shown so that noise is visible. [`results`] and [`render`]: the rows, the table and the
//!   JSON file.

pub mod case;
pub mod delta_rule;
pub mod forward;
pub mod gemm;
pub mod peak;
pub mod plan;
pub mod protocol;
pub mod render;
pub mod results;
pub mod runner;
pub mod stats;
pub mod torch_script;
