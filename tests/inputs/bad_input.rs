//! Bad input through the built binary: every case exits with code 2, prints exactly one line
//! on stderr, `hsdiff: error: …`, naming the file / tensor / option at fault, writes nothing,
//! and never panics.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

/// Runs `hsdiff dump --out <tmp>/out.safetensors <args>` and checks the one-line error.
/// `needles` must all appear in the error line.
fn expect_error(args: &[&str], needles: &[&str]) -> String {
    let work = tempdir();
    let out = work.path().join("out.safetensors");
    let mut full: Vec<&str> = vec!["dump", "--out", out.to_str().unwrap()];
    full.extend_from_slice(args);
    let o = hsdiff(&full, work.path());
    let err = stderr_of(&o);
    let ctx = format!(
        "hsdiff {full:?}\n--- stderr ---\n{err}--- stdout ---\n{}",
        stdout_of(&o)
    );
    assert_eq!(o.status.code(), Some(2), "exit code\n{ctx}");
    for bad in [
        "panicked",
        "RUST_BACKTRACE",
        "stack backtrace",
        "thread 'main'",
    ] {
        assert!(!err.contains(bad), "panic text `{bad}`\n{ctx}");
    }
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr must be one line\n{ctx}");
    let line = lines[0];
    assert!(line.starts_with("hsdiff: error: "), "prefix\n{ctx}");
    for needle in needles {
        assert!(line.contains(needle), "error line lacks `{needle}`\n{ctx}");
    }
    assert!(o.stdout.is_empty(), "nothing on stdout\n{ctx}");
    assert!(
        !out.exists(),
        "an output file was written despite the error\n{ctx}"
    );
    line.to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `dump --model DIR --backend reference --prompt fizzbuzz`, plus `extra`.
fn expect_model_error(dir: &Path, extra: &[&str], needles: &[&str]) -> String {
    let mut args = vec![
        "--model",
        s(dir),
        "--backend",
        "reference",
        "--prompt",
        "fizzbuzz",
    ];
    args.extend_from_slice(extra);
    expect_error(&args, needles)
}

/// `dump --model <golden qwen3_5_tiny> --backend reference`, plus `extra` (prompt/tokens/…).
fn expect_input_error(extra: &[&str], needles: &[&str]) -> String {
    let dir = golden_model_dir("qwen3_5_tiny");
    let mut args = vec!["--model", s(&dir), "--backend", "reference"];
    args.extend_from_slice(extra);
    expect_error(&args, needles)
}

/// The shard of a golden-model copy that holds `tensor`.
fn shard_with(dir: &Path, tensor: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .find(|p| safetensors_names(p).iter().any(|n| n == tensor))
        .unwrap_or_else(|| panic!("no shard in {} holds {tensor}", dir.display()))
}

// ---- checkpoint --------------------------------------------------------------------------

#[test]
fn missing_tensor() {
    // Layer 4 is a linear-attention layer after a full-attention one: the run is well under way
    // when the tensor turns out missing, and still nothing may be written.
    let dir = golden_copy("qwen3_5_tiny");
    let name = "model.language_model.layers.4.linear_attn.A_log";
    rewrite_safetensors(&dir.path().join("model.safetensors"), |n| {
        if n == name { Edit::Drop } else { Edit::Keep }
    });
    expect_model_error(dir.path(), &[], &[name, "model.safetensors", "missing"]);
}

#[test]
fn missing_tensor_in_a_sharded_checkpoint() {
    let dir = golden_copy("qwen3_next_moe_tiny");
    let name = "model.layers.4.linear_attn.A_log";
    let shard = shard_with(dir.path(), name);
    rewrite_safetensors(&shard, |n| if n == name { Edit::Drop } else { Edit::Keep });
    // Named against the shard the index lists it under, not some other shard.
    let shard_name = shard.file_name().unwrap().to_str().unwrap();
    let line = expect_model_error(dir.path(), &[], &[name, "missing", "index.json"]);
    assert!(
        line.contains(s(&shard)),
        "error does not name {shard_name}: {line}"
    );
}

#[test]
fn wrong_shape() {
    let dir = golden_copy("qwen3_5_tiny");
    let name = "model.language_model.layers.2.linear_attn.conv1d.weight";
    rewrite_safetensors(&dir.path().join("model.safetensors"), |n| {
        if n == name {
            // [C, 1, K] → [C, K]: the same bytes, a plausible exporter mistake.
            Edit::Reshape(vec![160, 4])
        } else {
            Edit::Keep
        }
    });
    expect_model_error(
        dir.path(),
        &[],
        &[name, "model.safetensors", "[160, 4]", "[160, 1, 4]"],
    );
}

#[test]
fn truncated_safetensors() {
    let dir = golden_copy("qwen3_5_tiny");
    let file = dir.path().join("model.safetensors");
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    expect_model_error(dir.path(), &[], &["model.safetensors", "truncated"]);
}

#[test]
fn truncated_shard() {
    let dir = golden_copy("qwen3_next_moe_tiny");
    let file = dir.path().join("model-00002-of-00002.safetensors");
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    expect_model_error(
        dir.path(),
        &[],
        &["model-00002-of-00002.safetensors", "truncated"],
    );
}

#[test]
fn safetensors_file_too_small_for_a_header() {
    let dir = golden_copy("qwen3_5_tiny");
    std::fs::write(dir.path().join("model.safetensors"), b"abc").unwrap();
    expect_model_error(dir.path(), &[], &["model.safetensors"]);
}

// ---- config.json -------------------------------------------------------------------------

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn malformed_config() {
    let dir = golden_copy("qwen3_5_tiny");
    std::fs::write(
        dir.path().join("config.json"),
        "{\"model_type\": \"qwen3_5\",",
    )
    .unwrap();
    expect_model_error(dir.path(), &[], &["config.json", "JSON"]);
}

#[test]
fn unknown_model_type() {
    let dir = golden_copy("qwen3_5_tiny");
    edit_config(dir.path(), |v| v["model_type"] = "llama".into());
    expect_model_error(dir.path(), &[], &["config.json", "llama"]);
}

#[test]
fn missing_required_config_field() {
    let dir = golden_copy("qwen3_5_tiny");
    edit_config(dir.path(), |v| {
        v["text_config"]
            .as_object_mut()
            .unwrap()
            .remove("hidden_size")
            .expect("golden config has text_config.hidden_size");
    });
    expect_model_error(dir.path(), &[], &["config.json", "hidden_size"]);

    // Top-level layout (qwen3_next) too.
    let dir = golden_copy("qwen3_next_moe_tiny");
    edit_config(dir.path(), |v| {
        v.as_object_mut()
            .unwrap()
            .remove("hidden_size")
            .expect("golden config has hidden_size");
    });
    expect_model_error(dir.path(), &[], &["config.json", "hidden_size"]);
}

#[test]
fn missing_model_folder() {
    let work = tempdir();
    let missing = work.path().join("no-such-model");
    expect_model_error(&missing, &[], &[s(&missing), "no such model folder"]);
    // A file where the folder should be.
    let file = work.path().join("model.safetensors");
    std::fs::write(&file, b"").unwrap();
    expect_model_error(&file, &[], &[s(&file), "not a folder"]);
}

#[test]
fn malformed_tokenizer() {
    let dir = golden_copy("qwen3_5_tiny");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3}").unwrap();
    expect_model_error(dir.path(), &[], &["tokenizer.json"]);
}

// ---- prompt and tokens -------------------------------------------------------------------

#[test]
fn empty_prompt() {
    expect_input_error(&["--prompt", ""], &["prompt", "empty"]);
}

#[test]
fn empty_prompt_file() {
    let work = tempdir();
    let file = work.path().join("empty.txt");
    std::fs::write(&file, "").unwrap();
    let arg = format!("@{}", s(&file));
    expect_input_error(&["--prompt", &arg], &[s(&file), "empty"]);
}

#[test]
fn missing_prompt_file() {
    let work = tempdir();
    let file = work.path().join("nope.txt");
    let arg = format!("@{}", s(&file));
    expect_input_error(&["--prompt", &arg], &[s(&file)]);
}

#[test]
fn token_id_out_of_vocab() {
    expect_input_error(&["--tokens", "1,2,999999"], &["999999", "384"]);
}

#[test]
fn non_numeric_tokens() {
    expect_input_error(&["--tokens", "1,x,3"], &["`x`", "--tokens"]);
    expect_input_error(&["--tokens", "1,-2"], &["`-2`", "--tokens"]);
    expect_input_error(&["--tokens", ","], &["--tokens"]);
}

// ---- options -----------------------------------------------------------------------------

#[test]
fn unknown_backend() {
    let dir = golden_model_dir("qwen3_5_tiny");
    expect_error(
        &[
            "--model",
            s(&dir),
            "--backend",
            "nope",
            "--prompt",
            "fizzbuzz",
        ],
        // clap names the value and lists the known backends.
        &[
            "'nope'",
            "--backend",
            "possible values: reference, chunked, fused",
        ],
    );
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_device_without_cuda_in_the_build() {
    for dev in ["cuda", "cuda:0", "cuda:1"] {
        let line = expect_input_error(&["--prompt", "fizzbuzz", "--device", dev], &[dev]);
        assert!(
            line.contains("CUDA is not in this build"),
            "--device {dev}: must say CUDA is not in this build: {line}"
        );
    }
}

#[test]
fn unknown_device() {
    // clap names the value and the option; the reason is ours.
    expect_input_error(
        &["--prompt", "fizzbuzz", "--device", "tpu"],
        &["'tpu'", "--device", "expected cpu, cuda or cuda:N"],
    );
}

#[test]
fn unknown_dtype() {
    expect_input_error(
        &["--prompt", "fizzbuzz", "--dtype", "f8"],
        &[
            "'f8'",
            "--dtype",
            "possible values: f64, f32, bf16, f16, fp8, fp8-ue8m0",
        ],
    );
}

#[test]
fn unwritable_output() {
    let dir = golden_model_dir("qwen3_5_tiny");
    let work = tempdir();
    let out = work.path().join("no-such-dir").join("x.safetensors");
    let o = hsdiff(
        &[
            "dump",
            "--model",
            s(&dir),
            "--backend",
            "reference",
            "--prompt",
            "fizzbuzz",
            "--out",
            s(&out),
        ],
        work.path(),
    );
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("hsdiff: error: "), "{err}");
    assert!(err.contains(s(&out)), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
