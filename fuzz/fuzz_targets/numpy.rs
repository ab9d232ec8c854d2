//! numpy .npy arrays and .npz archives (stored or deflated); the first byte picks which.
#![no_main]
#[path = "common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&which, rest)) = data.split_first() {
        common::open_and_read_all(rest, if which & 1 == 0 { ".npy" } else { ".npz" });
    }
});
