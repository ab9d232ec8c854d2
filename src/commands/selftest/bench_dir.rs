//! `selftest --bench --bench-dir DIR`: the files the CUDA bench (`cuda_bench.rs`) writes there,
//! named in one place, and reserved by the output policy ([`crate::util::output`]) before any check
//! runs, so that none of them can land on what the selftest reads (the golden states).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Bench geometries (B 1, dk = dv = 128, bf16): Qwen3.5-27B's linear-attention layers
/// (Hk 16, Hv 48) and a Qwen3.5-397B-like one (Hk 16, Hv 64).
pub const GEOMETRIES: [(usize, usize); 2] = [(16, 48), (16, 64)];

/// The timings of a case.
pub const META_FILE: &str = "meta.json";

/// Every case's files: the inputs and hsdiff's output (raw little-endian, as
/// scripts/gpu-bench.py reads them) and the timings.
pub const CASE_FILES: [&str; 7] = [
    "q.bf16",
    "k.bf16",
    "v.bf16",
    "g.f32",
    "beta.bf16",
    "hsdiff_out.bf16",
    META_FILE,
];

/// The f64 truth's output, written for the case with [`has_truth`].
pub const TRUTH_FILE: &str = "truth_out.f64";

/// The folder of one case.
pub fn case_dir(dir: &Path, hv: usize, t: usize) -> PathBuf {
    dir.join(format!("Hv{hv}-T{t}"))
}

/// Whether sequence length `t` gets the f64 truth (slow on the CPU): the smallest of `seqs`,
/// when it is at most 8192.
pub fn has_truth(t: usize, seqs: &[usize]) -> bool {
    seqs.iter().min() == Some(&t) && t <= 8192
}

/// Every file the bench writes under `dir` for `seqs`.
pub fn files(dir: &Path, seqs: &[usize]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (_, hv) in GEOMETRIES {
        for &t in seqs {
            let case = case_dir(dir, hv, t);
            out.extend(CASE_FILES.iter().map(|f| case.join(f)));
            if has_truth(t, seqs) {
                out.push(case.join(TRUTH_FILE));
            }
        }
    }
    out
}

/// Makes the case folders and reserves every file the bench will write, none of them one of
/// `inputs` (files or folders the selftest reads).
pub fn reserve(dir: &Path, seqs: &[usize], inputs: &[&Path]) -> Result<()> {
    for (_, hv) in GEOMETRIES {
        for &t in seqs {
            let case = case_dir(dir, hv, t);
            std::fs::create_dir_all(&case).map_err(|e| {
                Error::output(
                    &case,
                    format!("--bench-dir: {}", crate::error::io_words(&e)),
                )
            })?;
        }
    }
    let files = files(dir, seqs);
    let targets: Vec<(&Path, &str)> = files.iter().map(|p| (p.as_path(), "--bench-dir")).collect();
    crate::util::output::reserve_all(&targets, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_reserved_and_none_may_be_an_input() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let golden = tmp.path().join("golden");
        std::fs::create_dir(&golden).expect("mkdir");
        std::fs::write(golden.join("fizzbuzz.f64.safetensors"), b"the truth").expect("writes");

        let bench = tmp.path().join("bench");
        reserve(&bench, &[64, 128], &[&golden]).expect("a fresh folder is reserved");
        // 2 geometries × 2 lengths × 7 files, and the truth for T = 64 in both geometries.
        let all = files(&bench, &[64, 128]);
        assert_eq!(all.len(), 2 * 2 * 7 + 2);
        assert!(all.contains(&bench.join("Hv48-T64").join(TRUTH_FILE)));
        assert!(!all.contains(&bench.join("Hv48-T128").join(TRUTH_FILE)));
        for p in &all {
            crate::util::output::write_bytes(p, b"x").expect("a reserved file is written");
        }
        let written = walkdir(&bench);
        assert_eq!(written.len(), all.len(), "temp files left: {written:?}");

        // A golden file linked where the bench would write is refused before anything runs.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(other.join("Hv64-T64")).expect("mkdir");
        std::fs::hard_link(
            golden.join("fizzbuzz.f64.safetensors"),
            other.join("Hv64-T64").join("meta.json"),
        )
        .expect("link");
        let err = reserve(&other, &[64], &[&golden]).expect_err("an input");
        assert!(
            err.to_string().contains("--bench-dir")
                && err.to_string().contains("one of this command's inputs"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(golden.join("fizzbuzz.f64.safetensors")).expect("reads"),
            b"the truth"
        );
    }

    fn walkdir(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).expect("lists").flatten() {
            if e.path().is_dir() {
                out.extend(walkdir(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }
}
