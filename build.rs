//! Records the git commit hsdiff was built from (`HSDIFF_GIT_COMMIT`), for fingerprints. Never
//! fails: without git, or outside a checkout, the commit is `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        cuda_kernels();
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HSDIFF_GIT_COMMIT");
    let commit = match std::env::var("HSDIFF_GIT_COMMIT") {
        // Set by packagers building from a tarball.
        Ok(c) if !c.is_empty() => c,
        _ => {
            let commit = git(&["rev-parse", "--short=12", "HEAD"]);
            // Rebuild when HEAD moves (commit, checkout). Only existing paths are named: a missing
            // path would make cargo rerun this script on every build.
            if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
                let dir = PathBuf::from(dir);
                for p in ["HEAD", "packed-refs", "refs/heads"] {
                    let p = dir.join(p);
                    if p.exists() {
                        println!("cargo:rerun-if-changed={}", p.display());
                    }
                }
            }
            commit.unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=HSDIFF_GIT_COMMIT={commit}");
}

/// Only with the `cuda` feature (the default build needs no CUDA toolkit): nvcc -ptx for every
/// kernel file into $OUT_DIR/<stem>.ptx, embedded by src/backends/fused/cuda/mod.rs with
/// include_str!. nvcc is `$NVCC`, else `$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH; the target is
/// `$HSDIFF_CUDA_ARCH` (default sm_90: H100/H200; plain sm_90 PTX, not sm_90a). docs/cuda.md.
fn cuda_kernels() {
    const KERNELS: &[&str] = &["gdn"];
    let dir = PathBuf::from("src/backends/fused/cuda");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed={}", dir.display());
    for var in ["NVCC", "CUDA_HOME", "HSDIFF_CUDA_ARCH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("CUDA_HOME")
                .map(|h| PathBuf::from(h).join("bin/nvcc"))
                .filter(|p| p.exists())
        })
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let arch = std::env::var("HSDIFF_CUDA_ARCH").unwrap_or_else(|_| "sm_90".to_string());
    for name in KERNELS {
        let src = dir.join(format!("{name}.cu"));
        println!("cargo:rerun-if-changed={}", src.display());
        let dst = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["-ptx", "-std=c++17", "-O3", "-lineinfo"])
            .arg(format!("-arch={arch}"))
            .arg("-o")
            .arg(&dst)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run nvcc ({}): {e}. The `cuda` feature needs a CUDA 13.0 toolkit: \
                     run scripts/setup-cuda-toolchain.sh, then build with scripts/build-cuda.sh \
                     (docs/cuda.md)",
                    nvcc.display()
                )
            });
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}
