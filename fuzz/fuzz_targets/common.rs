//! Shared by the file-format targets: the input is written to a file with the extension the
//! reader dispatches on, opened as `hsdiff compare` opens it, and every tensor is read. Any
//! outcome but a panic (or a crash, hang or runaway allocation, which libFuzzer reports) is fine:
//! errors are the expected answer to garbage.

use std::io::Write;

use hsdiff::formats::FileSource;

pub fn open_and_read_all(data: &[u8], ext: &str) {
    let mut file = tempfile::Builder::new()
        .suffix(ext)
        .tempfile()
        .expect("temp file");
    file.write_all(data).expect("write");
    file.flush().expect("flush");
    if let Ok(src) = FileSource::open(file.path(), None) {
        let _ = src.input_ids();
        let _ = src.compute_dtype();
        for name in src.names() {
            let _ = src.get_head(&name, 2);
            let _ = src.get(&name);
        }
    }
}
