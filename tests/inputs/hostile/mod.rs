//! The bad-input matrix: crafted and corrupt files of every format, model folders with absurd or
//! inconsistent configs and shard indexes, hostile CLI values and output targets. Each case runs
//! the built binary under a memory cap (`prlimit --as`) and a timeout, and must
//!
//! - never panic, abort, hang, or run out of memory;
//! - when refused: exit 2 with exactly one stderr line `hsdiff: error: …` that names the problem
//!   (the case's needles), in words (no Rust debug text), and write nothing — no output file, no
//!   temp file left next to it;
//! - when the inputs are fine but differ: exit 1 (flagged); when they agree: exit 0.
//!
//! The cases are built here from the committed fixtures and golden models, so the matrix needs
//! no network and little disk. Each case is a test of its own ([`hostile!`]), so a failure names
//! the case and `cargo test --test inputs CASE` runs it alone; the files group them by what they
//! attack.

/// One hostile case as one `#[test] fn $name()`, in the style of ripgrep's `rgtest!`: `$dir` is
/// a fresh temporary folder for the case's files, the body builds the [`harness::Case`], and the
/// test runs it and asserts its outcome. After `then`, a check of the folder once the case ran.
macro_rules! hostile {
    ($name:ident, |$dir:ident| $body:block) => {
        hostile!($name, |$dir| $body, then |_: &std::path::Path| {});
    };
    ($name:ident, |$dir:ident| $body:block, then $after:expr) => {
        #[test]
        fn $name() {
            let tmp = $crate::common::tempdir();
            let $dir: &std::path::Path = tmp.path();
            let case: $crate::hostile::harness::Case = $body;
            case.assert_holds();
            let after: fn(&std::path::Path) = $after;
            after($dir);
        }
    };
}

mod craft;
mod harness;

mod compare_flags;
mod configs;
mod dataset_outputs;
mod datasets;
mod dump_flags;
mod escaping;
mod filtered_pass;
mod limits;
mod loss_mask;
mod nan_weights;
mod no_evidence;
mod numpy;
mod outputs;
mod pickle;
mod readable;
mod readers_lie;
mod resolved;
mod router;
mod safetensors_files;
mod sglang_return;
mod shard_index;
mod torch_zip;
