//! hsdiff: tells whether two ways of running a hybrid linear-attention language model
//! (Qwen3-Next / Qwen3.5 / Qwen3.6: Gated DeltaNet + gated full attention) produce the same
//! hidden states, and if not, where they part and why.
//!
//! Data flows one way: checkpoint → config + weights → model forward (with a pluggable
//! linear-attention backend) → captures → metrics → verdicts → report → printers. The modules
//! below are the layers of docs/architecture.md, first to last: a module imports from its own
//! layer and earlier ones only (`tests/cli/architecture.rs` enforces it).

// 1. Foundations: errors, text and input handling, the output policy, FP8 arithmetic.
pub mod error;
pub mod fp8;
pub mod util;

// 2. Weights and kernels: config, checkpoints, random weights; the linear-attention backends.
pub mod backends;
pub mod weights;

// 3. Names and provenance: tensor keys, dumps, fingerprints of what ran and their differences.
pub mod capture;

// 4. The model: the forward pass of the hybrid model and the built-in tiny model.
pub mod model;

// 5. The engine: reading files (formats), comparing and judging (compare), the report value.
pub mod compare;
pub mod formats;
pub mod report;

// 6. The printers: a finished report or dataset report → its bytes (table, markdown, JSON, plot).
pub mod printer;

// 7. The job: a comparison planned from its spec, then run, then assembled into a report.
pub mod job;

// 8. The commands as library code, without their command lines.
pub mod commands;

// 9. The command line: flags → typed requests, printing, exit codes.
pub mod cli;
