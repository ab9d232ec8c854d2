//! The `hsdiff` binary end to end: `dump` with the built-in model, what a dump holds, `--ops`,
//! `prompts`, and an f64 dump against the golden truth.

use crate::common;

use std::path::Path;
use std::process::Command;

use candle_core::DType;
use common::*;
use hsdiff::capture::dump::Dump;
use sha2::{Digest, Sha256};

/// Same bound and reasoning as `F64_BOUND` in golden_parity.rs: f64 roundoff (1.1e-16) grown
/// through 8 layers stays near 1e-14.
const F64_BOUND: f64 = 1e-10;

const T_FIZZBUZZ: usize = 155;
const HIDDEN: usize = 64;
const VOCAB: usize = 384;
/// Layer types of the built-in model (full_attention_interval 4).
const LINEAR_LAYERS: &[usize] = &[0, 1, 2, 4, 5, 6];
const FULL_LAYERS: &[usize] = &[3, 7];

/// `hsdiff dump --backend reference --prompt fizzbuzz --out x.safetensors <extra>` (no
/// --model) in a fresh directory; returns the directory, the dump path and stderr.
fn dump_builtin(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let work = tempdir();
    let mut args = vec![
        "dump",
        "--backend",
        "reference",
        "--prompt",
        "fizzbuzz",
        "--out",
        "x.safetensors",
    ];
    args.extend_from_slice(extra);
    let o = hsdiff(&args, work.path());
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(0), "hsdiff {args:?}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let path = work.path().join("x.safetensors");
    assert!(path.exists(), "no dump written\n{err}");
    (work, path, err)
}

fn sha256_file(path: &Path) -> String {
    let mut h = Sha256::new();
    h.update(std::fs::read(path).unwrap());
    format!("{:x}", h.finalize())
}

/// The raw `hsdiff` metadata of a dump, as JSON.
fn metadata_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let map = meta.metadata().clone().expect("dump has __metadata__");
    let json = map.get("hsdiff").expect("metadata key `hsdiff`");
    serde_json::from_str(json).expect("`hsdiff` metadata is JSON")
}

#[test]
fn dump_without_model_uses_the_builtin_model() {
    let (_work, path, err) = dump_builtin(&[]);
    assert!(
        err.lines()
            .any(|l| l.contains("no --model given") && l.contains("built-in")),
        "stderr does not say the built-in model is used:\n{err}"
    );

    let dump = Dump::open(&path).unwrap();
    // input_ids: i64 [1, T], the golden fizzbuzz ids.
    let ids_t = dump.tensor("input_ids").unwrap();
    assert_eq!(ids_t.dtype(), DType::I64);
    assert_eq!(ids_t.dims(), &[1, T_FIZZBUZZ]);
    let golden = load_state(&state_path("qwen3_5_tiny", "fizzbuzz", "f64"));
    assert_eq!(dump.input_ids().unwrap().unwrap(), golden.ids);

    let mut want: Vec<String> = vec!["input_ids".into(), "embed".into()];
    want.extend((0..8).map(|i| format!("layers.{i}")));
    want.extend(["final_norm".into(), "logits".into()]);
    // Each linear-attention layer's final conv window and recurrent state (layer 3 and 7 are
    // full attention).
    let states: Vec<String> = [0, 1, 2, 4, 5, 6]
        .iter()
        .flat_map(|i| {
            [
                format!("state.layers.{i}.conv"),
                format!("state.layers.{i}.recurrent"),
            ]
        })
        .collect();
    let mut want_sorted: Vec<String> = want.iter().chain(&states).cloned().collect();
    want_sorted.sort();
    assert_eq!(dump.names(), want_sorted, "tensors in the dump");
    for name in &states {
        let t = dump.tensor(name).unwrap();
        let shape: &[usize] = if name.ends_with(".conv") {
            &[1, 160, 4]
        } else {
            &[1, 4, 16, 24]
        };
        assert_eq!(t.dims(), shape, "`{name}` shape");
        assert_eq!(t.dtype(), DType::F32, "`{name}` dtype");
        assert!(all_finite(&t), "`{name}` has non-finite values");
    }
    for name in &want[1..] {
        let t = dump.tensor(name).unwrap();
        let width = if name == "logits" { VOCAB } else { HIDDEN };
        assert_eq!(t.dims(), &[1, T_FIZZBUZZ, width], "`{name}` shape");
        assert_eq!(t.dtype(), DType::F32, "`{name}` dtype (default f32)");
        assert!(all_finite(&t), "`{name}` has non-finite values");
    }

    let meta = metadata_json(&path);
    let config_sha = sha256_file(&golden_model_dir("qwen3_5_tiny").join("config.json"));
    assert_eq!(meta["backend"], "reference", "{meta}");
    assert_eq!(meta["dtype"], "f32", "{meta}");
    assert_eq!(meta["device"], "cpu", "{meta}");
    assert!(
        meta["model"]
            .as_str()
            .is_some_and(|m| m.contains("built-in")),
        "metadata `model`: {meta}"
    );
    assert_eq!(meta["config_sha256"], config_sha.as_str(), "{meta}");
    assert_eq!(meta["tokens"], T_FIZZBUZZ, "{meta}");
    assert_eq!(meta["format"], "hsdiff.dump/v1", "{meta}");
    // The typed reader agrees.
    let fp = dump.fingerprint.expect("fingerprint");
    assert_eq!(fp.backend.as_deref(), Some("reference"));
    assert_eq!(fp.tokens, Some(T_FIZZBUZZ));
}

#[test]
fn prompts_lists_the_four_builtin_prompts() {
    let work = tempdir();
    let o = hsdiff(&["prompts"], work.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let out = stdout_of(&o);
    let mut names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["binary_search", "fibonacci", "fizzbuzz", "reverse_words"],
        "hsdiff prompts:\n{out}"
    );
}

#[test]
fn ops_adds_linear_attention_internals_only() {
    let (_w1, plain, _) = dump_builtin(&[]);
    let (_w2, with_ops, _) = dump_builtin(&["--ops"]);
    let plain = Dump::open(&plain).unwrap();
    let ops = Dump::open(&with_ops).unwrap();
    let names = ops.names();

    // What the shared layer code and the reference backend capture per linear-attention layer.
    let conv_dim = 160; // 2·(2 key heads × 16) + 4 value heads × 24
    let expected: &[(&str, &[usize])] = &[
        ("conv_out", &[1, T_FIZZBUZZ, conv_dim]),
        ("q", &[1, T_FIZZBUZZ, 2, 16]),
        ("k", &[1, T_FIZZBUZZ, 2, 16]),
        ("v", &[1, T_FIZZBUZZ, 4, 24]),
        ("beta", &[1, T_FIZZBUZZ, 4]),
        ("g", &[1, T_FIZZBUZZ, 4]),
        ("core_out", &[1, T_FIZZBUZZ, 4, 24]),
        ("gated_norm_out", &[1, T_FIZZBUZZ, 96]),
        ("out_proj", &[1, T_FIZZBUZZ, HIDDEN]),
    ];
    for &i in LINEAR_LAYERS {
        for (op, shape) in expected {
            let name = format!("layers.{i}.{op}");
            assert!(
                names.contains(&name),
                "--ops dump lacks `{name}`: {names:?}"
            );
            let t = ops.tensor(&name).unwrap();
            assert_eq!(t.dims(), *shape, "`{name}` shape");
            assert!(all_finite(&t), "`{name}` has non-finite values");
        }
    }
    for &i in FULL_LAYERS {
        let prefix = format!("layers.{i}.");
        let extra: Vec<&String> = names.iter().filter(|n| n.starts_with(&prefix)).collect();
        assert!(
            extra.is_empty(),
            "full-attention layer {i} has op captures: {extra:?}"
        );
    }
    // Every non-op tensor is still there and bit-identical: capturing must not change results.
    for name in plain.names() {
        let (a, b) = (plain.tensor(&name).unwrap(), ops.tensor(&name).unwrap());
        assert!(raw_bits(&a) == raw_bits(&b), "`{name}` differs with --ops");
    }
    // And nothing besides the base tensors and `layers.{i}.{op}` for linear layers.
    for name in &names {
        if plain.contains(name) {
            continue;
        }
        let Some(hsdiff::capture::Key::Op(i, _)) = hsdiff::capture::Key::of(name) else {
            panic!("unexpected tensor `{name}` in --ops dump");
        };
        assert!(LINEAR_LAYERS.contains(&i), "`{name}`: not a linear layer");
    }
}

#[test]
fn f64_dump_of_the_builtin_model_matches_the_golden_truth() {
    let (_work, path, _) = dump_builtin(&["--dtype", "f64"]);
    let dump = Dump::open(&path).unwrap();
    let truth = load_state(&state_path("qwen3_5_tiny", "fizzbuzz", "f64"));
    assert_eq!(dump.input_ids().unwrap().unwrap(), truth.ids);
    let mut max = 0.0f64;
    for name in truth.float_names() {
        let got = dump.tensor(name).unwrap();
        assert_eq!(got.dtype(), DType::F64, "`{name}` dtype");
        let rel = rel_l2(&got, truth.get(name));
        eprintln!("f64 dump vs truth: {name:<12} rel L2 {rel:.3e}");
        assert!(
            rel <= F64_BOUND,
            "`{name}`: rel L2 {rel:.3e} > {F64_BOUND:.0e}"
        );
        max = max.max(rel);
    }
    eprintln!("f64 dump vs truth: max rel L2 {max:.3e}");
    assert_eq!(
        dump.fingerprint.and_then(|f| f.dtype).as_deref(),
        Some("f64")
    );
}

/// `hsdiff selftest --device cpu --quick` from the repository root: every check passes (kernels,
/// golden parity, the live run, whose report is where its line says), exit 0; with a golden
/// folder that holds no states, the golden check fails and the exit code is 1.
#[test]
fn selftest_passes_on_cpu_and_fails_without_golden_states() {
    let o = hsdiff(&["selftest", "--device", "cpu", "--quick"], &repo_root());
    let out = stdout_of(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr_of(&o));
    let checks: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
        .collect();
    assert!(checks.iter().all(|l| l.starts_with("PASS  ")), "{out}");
    for what in [
        "gdn bf16 B1 T1 ",
        "conv f16 ",
        "gated norm f64 ",
        "golden fizzbuzz f32 ",
    ] {
        assert!(
            checks.iter().any(|l| l.contains(what)),
            "no `{what}` row:\n{out}"
        );
    }
    let live = checks
        .iter()
        .find(|l| l.contains("library diff fused vs reference"))
        .expect("the live run's row");
    let report = live
        .rsplit("report in ")
        .next()
        .expect("report path")
        .trim();
    let text = std::fs::read_to_string(report).expect("the live run's report");
    std::fs::remove_file(report).expect("remove the report");
    assert!(text.contains("final_norm"), "{text}");
    assert!(
        out.contains(&format!("selftest: {} passed, 0 failed", checks.len())),
        "{out}"
    );

    let empty = tempdir();
    let empty_golden = empty.path().join("qwen3_5_tiny");
    std::fs::create_dir(&empty_golden).expect("mkdir");
    let golden = empty.path().to_str().expect("utf-8 path");
    let o = hsdiff(
        &["selftest", "--device", "cpu", "--quick", "--golden", golden],
        &repo_root(),
    );
    let out = stdout_of(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", stderr_of(&o));
    let fail = out
        .lines()
        .find(|l| l.starts_with("FAIL  golden parity"))
        .unwrap_or_else(|| panic!("no failed golden row:\n{out}"));
    assert!(fail.contains("holds no *.f64.safetensors"), "{fail}");
    let report = out
        .rsplit("report in ")
        .next()
        .and_then(|s| s.lines().next())
        .expect("report path");
    std::fs::remove_file(report.trim()).expect("remove the report");
}

/// Plain `hsdiff` is a newcomer asking what the tool does: the help, exit 0, nothing run.
#[test]
fn plain_hsdiff_prints_the_help() {
    let work = tempdir();
    let o = hsdiff(&[], work.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let out = stdout_of(&o);
    assert!(out.starts_with("Do two ways of running"), "{out}");
    for word in ["Usage: hsdiff", "compare", "--a <", "--b <"] {
        assert!(out.contains(word), "no {word:?} in the help:\n{out}");
    }
    assert_eq!(stderr_of(&o), "");
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

/// Whether this CPU has the instructions of a fused-kernel level (as `dispatch.rs` decides).
fn cpu_has(level: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        match level {
            "generic" => true,
            "avx2" => avx2,
            "avx512" => {
                avx2 && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
            }
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        level == "generic"
    }
}

/// Every fused-kernel level this CPU has runs the kernel checks, golden parity and the live
/// run (`selftest --quick`) when forced with HSDIFF_FUSED_ISA — so the AVX2 and generic kernels
/// are tested on an AVX-512 runner too; a level it lacks, or a name that is no level, is refused
/// instead of running another one.
#[test]
fn every_fused_kernel_level_this_cpu_has_passes_the_selftest_when_forced() {
    let run = |level: &str| {
        Command::new(env!("CARGO_BIN_EXE_hsdiff"))
            .args(["selftest", "--quick"])
            .env("HSDIFF_FUSED_ISA", level)
            .current_dir(repo_root())
            .output()
            .expect("run hsdiff")
    };
    let mut ran = 0;
    for level in ["avx512", "avx2", "generic"] {
        let o = run(level);
        if cpu_has(level) {
            let out = stdout_of(&o);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{level}:\n{out}\n{}",
                stderr_of(&o)
            );
            let header = out.lines().next().unwrap_or("");
            assert!(header.ends_with(&format!("t-{level}")), "{level}: {header}");
            assert!(!out.contains("FAIL"), "{level}:\n{out}");
            ran += 1;
        } else {
            assert_ne!(
                o.status.code(),
                Some(0),
                "{level} passed on a CPU without it"
            );
            let out = stdout_of(&o);
            assert!(
                out.contains("FAIL  fused kernels vs the f64 truth"),
                "the kernel section says why it is empty:\n{out}"
            );
            // The live run refuses with one line, exit 2.
            let live = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
                .args(["--a", "fused", "--b", "reference"])
                .env("HSDIFF_FUSED_ISA", level)
                .output()
                .expect("run hsdiff");
            assert_eq!(
                live.status.code(),
                Some(2),
                "{level} ran on a CPU without it"
            );
            let err = stderr_of(&live);
            assert!(
                err.lines().last().is_some_and(|l| l.contains(&format!(
                    "HSDIFF_FUSED_ISA={level}: this CPU cannot run that kernel level"
                ))),
                "{err}"
            );
        }
    }
    assert!(ran >= 1, "not even the generic kernels ran");
    let o = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(["--a", "fused", "--b", "reference"])
        .env("HSDIFF_FUSED_ISA", "avx1024")
        .output()
        .expect("run hsdiff");
    assert_eq!(o.status.code(), Some(2));
    let err = stderr_of(&o);
    assert!(
        err.lines().last().is_some_and(
            |l| l.starts_with("hsdiff: error: ") && l.contains("names no kernel level")
        ),
        "{err}"
    );
}
