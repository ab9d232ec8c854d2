//! Sharded model folders whose `model.safetensors.index.json` lies or escapes the folder, and
//! tokenizers that cannot be used or blow up.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use super::harness::{MEMORY_CAP, dump_case, model_with, s, write};
use crate::common::{self, copy_dir, golden_model_dir};

const FIRST: &str = "model-00001-of-00002.safetensors";
const SECOND: &str = "model-00002-of-00002.safetensors";

/// A copy of the golden sharded MoE folder at `d/tag` whose shard index is edited.
fn sharded(d: &Path, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = d.join(tag);
    copy_dir(&golden_model_dir("qwen3_next_moe_tiny"), &dir);
    let path = dir.join("model.safetensors.index.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("index")).expect("json");
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
    dir
}

/// The index's `weight_map`.
fn weight_map(v: &mut serde_json::Value) -> &mut serde_json::Map<String, serde_json::Value> {
    v["weight_map"].as_object_mut().unwrap()
}

/// Points the index's first entry at `file`.
fn first_entry_to(file: serde_json::Value) -> impl FnOnce(&mut serde_json::Value) {
    move |v: &mut serde_json::Value| {
        let wm = weight_map(v);
        let k = wm.keys().next().unwrap().clone();
        wm.insert(k, file);
    }
}

hostile!(index_names_the_wrong_shard, |d| {
    let wrong = sharded(d, "wrongshard", |v| {
        let (_, val) = weight_map(v)
            .iter_mut()
            .find(|(_, f)| f.as_str() == Some(FIRST))
            .unwrap();
        *val = json!(SECOND);
    });
    let needles = ["index.json", "lists it under"];
    dump_case("index names the wrong shard", d, &wrong, &[], &needles)
});

hostile!(index_leaves_a_tensor_out, |d| {
    let unlisted = sharded(d, "unlisted", |v| {
        let wm = weight_map(v);
        let k = wm.keys().find(|k| k.contains("layers.1.")).unwrap().clone();
        wm.remove(&k);
    });
    dump_case(
        "tensor not in the index",
        d,
        &unlisted,
        &[],
        &["not listed"],
    )
});

hostile!(index_a_tensor_in_two_shards, |d| {
    let dup = d.join("dupshard");
    copy_dir(&golden_model_dir("qwen3_next_moe_tiny"), &dup);
    let st = std::fs::read(dup.join(FIRST)).expect("shard");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&st).expect("meta");
    let name = meta.tensors().keys().next().expect("a tensor").clone();
    common::rewrite_safetensors(&dup.join(SECOND), |_| common::Edit::Keep);
    // Append `name` from shard 1 to shard 2: the same tensor in two shards.
    let bytes1 = std::fs::read(dup.join(FIRST)).expect("shard 1");
    let s1 = safetensors::SafeTensors::deserialize(&bytes1).expect("shard 1");
    let bytes2 = std::fs::read(dup.join(SECOND)).expect("shard 2");
    let s2 = safetensors::SafeTensors::deserialize(&bytes2).expect("shard 2");
    let mut views: Vec<(String, safetensors::tensor::TensorView)> = s2
        .names()
        .into_iter()
        .map(|n| (n.to_string(), s2.tensor(n).expect("view")))
        .collect();
    views.push((name.clone(), s1.tensor(&name).expect("view")));
    let data = safetensors::serialize(views, None).expect("serialize");
    std::fs::write(dup.join(SECOND), data).expect("write");
    dump_case("tensor in two shards", d, &dup, &[], &[&name, "also in"])
});

hostile!(index_shard_path_escapes_the_folder, |d| {
    let escape = sharded(d, "escape", first_entry_to(json!("../../etc/passwd")));
    let needles = ["index.json", "not a file in this folder"];
    dump_case("shard path escapes", d, &escape, &[], &needles)
});

hostile!(index_without_weight_map, |d| {
    let no_map = sharded(d, "nomap", |v| *v = json!({"metadata": {}}));
    dump_case("index without weight_map", d, &no_map, &[], &["weight_map"])
});

hostile!(index_entry_not_a_name, |d| {
    let not_name = sharded(d, "notname", first_entry_to(json!(5)));
    dump_case("index entry not a name", d, &not_name, &[], &["weight_map"])
});

hostile!(index_names_a_missing_shard, |d| {
    let missing = json!("model-00009-of-00009.safetensors");
    let missing_shard = sharded(d, "missingshard", first_entry_to(missing));
    let needles = ["model-00009-of-00009.safetensors"];
    dump_case(
        "index names a missing shard",
        d,
        &missing_shard,
        &[],
        &needles,
    )
});

hostile!(tokenizer_not_usable, |d| {
    let bad_tok = model_with(d, "badtok", |_| {});
    std::fs::write(bad_tok.join("tokenizer.json"), b"{\"version\": 3}").expect("write");
    let extra = ["--prompt", "hello"];
    dump_case(
        "tokenizer not usable",
        d,
        &bad_tok,
        &extra,
        &["tokenizer.json"],
    )
});

#[test]
fn tokenizer_regex_that_blows_up_is_an_error_line() {
    let dir = common::tempdir();
    let d = dir.path();
    let model = d.join("cat");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    let tok_path = model.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tok_path).expect("tokenizer")).expect("json");
    // A catastrophically backtracking pattern: onig gives up (its retry limit) on long input.
    tok["pre_tokenizer"] = serde_json::json!({
        "type": "Split",
        "pattern": {"Regex": "(a|aa)+(a|aa)+(a|aa)+b"},
        "behavior": "Isolated",
        "invert": false
    });
    std::fs::write(&tok_path, serde_json::to_vec(&tok).expect("json")).expect("write");
    let prompt = write(d, "aaa.txt", "a".repeat(200_000).as_bytes());
    let out = d.join("out.safetensors");
    let o = Command::new("prlimit")
        .arg(MEMORY_CAP)
        .args(["--", "timeout", "-s", "KILL", "300"])
        .arg(env!("CARGO_BIN_EXE_hsdiff"))
        .args([
            "dump",
            "--out",
            &s(&out),
            "--model",
            &s(&model),
            "--backend",
            "reference",
        ])
        .arg("--prompt")
        .arg(format!("@{}", prompt.display()))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    // Either the tokenizer copes (then the 200k tokens exceed the tokens limit) or it fails;
    // both must be one error line, never a panic or abort.
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("hsdiff: error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists());
}
