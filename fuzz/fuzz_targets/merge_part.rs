//! `hsdiff merge` of `--shard` parts (JSON: the run's identity, the shard, the part's digest,
//! its rows): the input is split into up to four part files at [`common::SEPARATOR`] and merged.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp folder");
    let paths = common::write_parts(dir.path(), data);
    let _ = hsdiff::commands::compare::dataset::merge::merge(&paths);
});
