//! hsdiff: tells whether two ways of running a hybrid linear-attention language model
//! (Qwen3-Next / Qwen3.5 / Qwen3.6: Gated DeltaNet + gated full attention) produce the same
//! hidden states, and if not, where they part and why.
//!
//! Data flows one way: checkpoint → config + weights → model forward (with a pluggable
//! linear-attention backend) → captures → metrics → verdicts → report → renderers.

pub mod alignment;
pub mod backends;
pub mod bench;
pub mod builtin;
pub mod capture;
pub mod check;
pub mod checkpoint;
pub mod cli;
pub mod compare;
pub mod compare_command;
pub mod compare_pair;
pub mod compare_tokens;
pub mod config;
pub mod dataset;
pub mod device;
pub mod disjoint;
pub mod dump_command;
pub mod envdiff;
pub mod environment;
pub mod error;
pub mod escape;
pub mod fingerprint;
pub mod formats;
pub mod fp8;
pub mod input;
pub mod job;
pub mod json_doc;
pub mod limits;
pub mod live;
pub mod mapped;
pub mod metrics;
pub mod model;
pub mod output;
pub mod pairing;
pub mod paths;
pub mod plausibility;
pub mod progress;
pub mod random_weights;
pub mod render;
pub mod report;
pub mod safetensors_file;
pub mod selftest;
pub mod session;
pub mod sysinfo;
pub mod testdata;
pub mod verdict;
