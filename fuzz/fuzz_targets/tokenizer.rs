//! Prompt text through the golden model's tokenizer.json (the tokenizer input hsdiff feeds).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use hsdiff::util::input::Tokenizer;

static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let tok = TOKENIZER.get_or_init(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/qwen3_5_tiny/tokenizer.json");
        Tokenizer::from_file(&path).expect("golden tokenizer")
    });
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tok.encode(text);
    }
});
