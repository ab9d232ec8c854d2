//! Drafter pipelines' files (SpecForge DFlash / EAGLE-3 `.ckpt` and `.ckpt.gz`, speculators,
//! Model-Optimizer, EAGLE ge_data) opened as `compare` opens them, with the options a command
//! line adds (layer ids, the model's layers, width and experts, the sample of a batch): the
//! first byte picks the options and the file's extension, the rest is the file.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&flags, file)) = data.split_first() {
        let (ext, opts) = common::pipeline_options(flags);
        common::open_with_and_read_all(file, ext, &opts);
    }
});
