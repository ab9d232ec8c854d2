//! config.json: parsing and validation of every field.
#![no_main]

use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = hsdiff::weights::config::ModelConfig::from_bytes(data, Path::new("config.json"));
});
