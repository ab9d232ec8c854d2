//! torch.save archives: the zip directory, data.pkl and the storages, as `compare` reads them.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::open_and_read_all(data, ".pt"));
