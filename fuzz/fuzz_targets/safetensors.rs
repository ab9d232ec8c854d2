//! safetensors header and tensors (hsdiff dumps and PyTorch safetensors), as `compare` reads them.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::open_and_read_all(data, ".safetensors"));
