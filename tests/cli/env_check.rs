//! `hsdiff env`, the fingerprint every dump carries, and `hsdiff check` (built-in golden set,
//! `--golden FILE`, a perturbed file → 1, malformed files → 2).

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;
use serde_json::Value;

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_str(&stdout_of(o))
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", stdout_of(o)))
}

fn fingerprint_of(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let json = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("hsdiff"))
        .expect("dump metadata has an `hsdiff` key")
        .clone();
    serde_json::from_str(&json).unwrap()
}

fn is_hex64(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
}

fn assert_machine_fields(fp: &Value) {
    for key in [
        "format",
        "source",
        "tool_version",
        "git_commit",
        "device",
        "device_name",
        "hostname",
        "os",
        "created",
    ] {
        assert!(
            fp[key].as_str().is_some_and(|s| !s.is_empty()),
            "`{key}` missing or empty in {fp:#}"
        );
    }
    assert!(fp["cpu_features"].is_array(), "cpu_features: {fp:#}");
    assert!(fp["threads"].as_u64().is_some_and(|t| t >= 1), "threads");
    let created = fp["created"].as_str().unwrap();
    assert!(
        created.len() == 20 && created.ends_with('Z') && &created[10..11] == "T",
        "created = {created}"
    );
    if cfg!(target_arch = "x86_64") {
        assert!(fp["cpu"].as_str().is_some(), "cpu model on x86-64 Linux");
    }
}

#[test]
fn env_prints_the_machine_fingerprint() {
    let root = repo_root();
    let o = hsdiff(&["env"], &root);
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let text = stdout_of(&o);
    for needle in [
        "hsdiff",
        "git commit",
        "cpu",
        "threads",
        "device",
        "backends",
        "reference",
        "fused",
    ] {
        assert!(text.contains(needle), "`{needle}` not in:\n{text}");
    }

    let o = hsdiff(&["env", "--json"], &root);
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let fp = json_of(&o);
    assert_machine_fields(&fp);
    assert_eq!(fp["source"], "hsdiff");
    assert_eq!(fp["device"], "cpu");
    for backend in ["reference", "chunked", "fused"] {
        let imp = fp["backends"][backend]["cpu"].as_str().unwrap_or_default();
        assert!(
            imp.starts_with(&format!("{backend}/")),
            "backends.{backend}.cpu = {imp:?}"
        );
    }
    assert!(fp["build_features"].is_array());
    // No model asked for: no model fields.
    assert!(fp.get("weights_digest").is_none());
}

#[test]
fn env_with_a_model_records_its_digests_shard_independently() {
    let root = repo_root();
    let sharded = golden_model_dir("qwen3_next_moe_tiny");
    let o = hsdiff(
        &["env", "--json", "--model", sharded.to_str().unwrap()],
        &root,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let fp = json_of(&o);
    let digest = fp["weights_digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sampled-sha256-v1:"), "{digest}");
    assert!(is_hex64(&fp["config_sha256"]));
    assert!(is_hex64(&fp["tokenizer_sha256"]));
    assert_eq!(fp["key_layout"], "model.layers.*");

    // The same tensors in one file instead of two shards: the same digest.
    let dir = tempdir();
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    for entry in std::fs::read_dir(&sharded).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".safetensors") {
            blobs.push(std::fs::read(&p).unwrap());
        } else if !name.ends_with(".index.json") {
            std::fs::copy(&p, dir.path().join(&name)).unwrap();
        }
    }
    let parsed: Vec<SafeTensors> = blobs
        .iter()
        .map(|b| SafeTensors::deserialize(b).unwrap())
        .collect();
    let mut views: Vec<(String, TensorView)> = Vec::new();
    for st in &parsed {
        for (name, view) in st.tensors() {
            views.push((name, view));
        }
    }
    let data = safetensors::serialize(views, None).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), data).unwrap();
    let o = hsdiff(
        &["env", "--json", "--model", dir.path().to_str().unwrap()],
        &root,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    assert_eq!(json_of(&o)["weights_digest"].as_str().unwrap(), digest);
}

#[test]
fn a_dump_carries_the_fingerprint() {
    let root = repo_root();
    let dir = tempdir();
    let out = dir.path().join("d.safetensors");
    let o = hsdiff(
        &[
            "dump",
            "--backend",
            "fused",
            "--prompt",
            "fizzbuzz",
            "--out",
            out.to_str().unwrap(),
        ],
        &root,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let fp = fingerprint_of(&out);
    assert_machine_fields(&fp);
    assert_eq!(fp["format"], "hsdiff.dump/v1");
    assert_eq!(fp["source"], "hsdiff");
    assert_eq!(fp["backend"], "fused");
    assert!(
        fp["implementation"]
            .as_str()
            .unwrap()
            .starts_with("fused/cpu-rayon-")
    );
    assert_eq!(fp["dtype"], "f32");
    assert_eq!(fp["device"], "cpu");
    assert_eq!(fp["prompt"], "fizzbuzz");
    assert_eq!(fp["model"], "built-in tiny Qwen3.5");
    assert_eq!(fp["key_layout"], "model.language_model.layers.*");
    assert!(is_hex64(&fp["config_sha256"]));
    assert!(is_hex64(&fp["tokenizer_sha256"]));
    assert!(
        fp["weights_digest"]
            .as_str()
            .unwrap()
            .starts_with("sampled-sha256-v1:")
    );
    let ids = load_state(&out).ids;
    assert_eq!(fp["tokens"].as_u64(), Some(ids.len() as u64));
    let le: Vec<u8> = ids.iter().flat_map(|&i| i.to_le_bytes()).collect();
    assert_eq!(
        fp["token_ids_sha256"].as_str().unwrap(),
        hsdiff::capture::fingerprint::sha256_hex(&le)
    );

    // The built-in model and its folder are the same bytes: the same digests.
    let o = hsdiff(
        &[
            "env",
            "--json",
            "--model",
            golden_model_dir("qwen3_5_tiny").to_str().unwrap(),
        ],
        &root,
    );
    let env = json_of(&o);
    for key in ["weights_digest", "config_sha256", "tokenizer_sha256"] {
        assert_eq!(env[key], fp[key], "{key}");
    }
}

fn check_builtin(backend: &str) {
    let o = hsdiff(&["check", "--backend", backend], &repo_root());
    let out = stdout_of(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "check --backend {backend}:\n{out}\n{}",
        stderr_of(&o)
    );
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("check ")).collect();
    assert_eq!(lines.len(), 3, "one line per golden file:\n{out}");
    for (line, dtype) in lines.iter().zip(["f64", "f32", "bf16"]) {
        assert!(
            line.contains(&format!(" {dtype}: ok")),
            "expected `{dtype}: ok` in {line}"
        );
        assert!(line.contains(&format!("{backend}/")), "{line}");
    }
}

#[test]
fn check_builtin_set_passes_with_reference() {
    check_builtin("reference");
}

#[test]
fn check_builtin_set_passes_with_fused() {
    check_builtin("fused");
}

#[test]
fn check_builtin_set_json() {
    let o = hsdiff(
        &["check", "--backend", "reference,fused", "--format", "json"],
        &repo_root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    let doc = json_of(&o);
    assert_eq!(doc["schema"], "hsdiff.check/v1");
    assert_eq!(doc["verdict"], "ok");
    let checks = doc["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 6);
    for c in checks {
        assert_eq!(c["report"]["schema"], "hsdiff.report/v1");
        assert_eq!(c["report"]["mode"], "check");
    }
}

#[test]
fn check_golden_file_passes() {
    for (model, mode) in [("qwen3_5_tiny", "f32"), ("qwen3_next_moe_tiny", "f64")] {
        let path = state_path(model, "fizzbuzz", mode);
        let o = hsdiff(&["check", "--golden", path.to_str().unwrap()], &repo_root());
        assert_eq!(
            o.status.code(),
            Some(0),
            "{model} {mode}:\n{}\n{}",
            stdout_of(&o),
            stderr_of(&o)
        );
    }
}

/// Copies a golden file with one tensor scaled by `factor` (f32 only), metadata kept.
fn perturbed_copy(src: &Path, dst: &Path, tensor: &str, factor: f32) {
    let bytes = std::fs::read(src).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let user_meta: Option<HashMap<String, String>> = meta.metadata().clone();
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        let mut data = view.data().to_vec();
        if name == tensor {
            assert_eq!(view.dtype(), safetensors::Dtype::F32);
            for c in data.chunks_exact_mut(4) {
                let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * factor;
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
        owned.push((name, view.dtype(), view.shape().to_vec(), data));
    }
    let views: Vec<(String, TensorView)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(dst, safetensors::serialize(views, user_meta).unwrap()).unwrap();
}

#[test]
fn check_flags_a_perturbed_golden_file() {
    let dir = tempdir();
    let bad = dir.path().join("fizzbuzz.f32.safetensors");
    perturbed_copy(
        &state_path("qwen3_5_tiny", "fizzbuzz", "f32"),
        &bad,
        "layers.5",
        1.01,
    );
    let o = hsdiff(
        &[
            "check",
            "--golden",
            bad.to_str().unwrap(),
            "--model",
            golden_model_dir("qwen3_5_tiny").to_str().unwrap(),
        ],
        &repo_root(),
    );
    let out = stdout_of(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", stderr_of(&o));
    assert!(out.contains("mismatch"), "{out}");
    assert!(stderr_of(&o).contains("mismatch"), "{}", stderr_of(&o));
}

#[test]
fn check_refuses_malformed_golden_files() {
    let dir = tempdir();
    let good = std::fs::read(state_path("qwen3_5_tiny", "fizzbuzz", "f32")).unwrap();
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(&garbage, b"this is not a safetensors file at all").unwrap();
    let truncated = dir.path().join("truncated.safetensors");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap();
    let no_ids = dir.path().join("no_ids.safetensors");
    std::fs::write(&no_ids, &good).unwrap();
    rewrite_safetensors(&no_ids, |n| {
        if n == "input_ids" {
            Edit::Drop
        } else {
            Edit::Keep
        }
    });
    let missing = dir.path().join("does_not_exist.safetensors");
    for (path, why) in [
        (&garbage, "not a valid safetensors file"),
        (&truncated, "truncated"),
        (&no_ids, "tensor `input_ids`: missing"),
        (&missing, "no such file"),
    ] {
        let o = hsdiff(&["check", "--golden", path.to_str().unwrap()], &repo_root());
        let err = stderr_of(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", path.display());
        let line = err
            .lines()
            .find(|l| l.starts_with("hsdiff: error:"))
            .unwrap_or_else(|| panic!("no error line for {}: {err}", path.display()));
        assert!(
            line.contains(path.file_name().unwrap().to_str().unwrap()),
            "the error names the file: {line}"
        );
        assert!(line.contains(why), "the error says {why:?}: {line}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
