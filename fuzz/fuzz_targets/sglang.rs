//! An SGLang dumper folder (one `{value, meta}` torch.save file per tensor, forward pass and
//! rank, the parallel ranks and `dims` in the meta) or a tensor dump's `Pass{n}.pt`: the input
//! is split into files ([`common::folder_files`]: a name line, then the bytes), written into a
//! fresh folder, and its first file opened as `compare` opens it.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp folder");
    let paths = common::write_folder(dir.path(), data);
    if let Some(first) = paths.first() {
        common::open_path_and_read_all(first, &Default::default());
    }
});
