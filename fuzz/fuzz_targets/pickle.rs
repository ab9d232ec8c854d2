//! The pickle reader alone (torch.save's data.pkl), at the default limits.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = hsdiff::formats::pickle::parse(data);
});
