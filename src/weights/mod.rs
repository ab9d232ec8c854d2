//! Where a model's numbers come from: config.json, checkpoints of safetensors files (FP8
//! included), and the seeded random weights of `--random-weights`. Nothing here knows what a
//! layer computes.

pub mod checkpoint;
pub mod config;
pub mod non_finite;
pub mod random_weights;
pub mod safetensors_file;
pub mod tensor_list;
