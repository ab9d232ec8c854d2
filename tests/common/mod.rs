//! Helpers shared by the integration tests: golden files, error metrics, running the model,
//! copying and rewriting checkpoints, and running the built binary.
//!
//! Each test binary that needs it declares it once in its main.rs (`#[path = "../common/mod.rs"]`);
//! its modules reach it as `crate::common` and use only part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::{DType, Device, Tensor};
use hsdiff::backends::LinearAttentionBackend;
use hsdiff::capture::dump::Dump;
use hsdiff::capture::{Captures, Key};
use hsdiff::model::{Model, Recorder, RunOptions};
use hsdiff::util::progress::Progress;
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

/// The golden checkpoints, by folder name under `golden/`.
pub const GOLDEN_MODELS: &[&str] = &["qwen3_5_tiny", "qwen3_next_moe_tiny"];

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn golden_model_dir(model: &str) -> PathBuf {
    repo_root().join("golden").join(model)
}

/// `golden/states/{model}/{prompt}.{mode}.safetensors`
pub fn state_path(model: &str, prompt: &str, mode: &str) -> PathBuf {
    repo_root()
        .join("golden/states")
        .join(model)
        .join(format!("{prompt}.{mode}.safetensors"))
}

/// The prompts that have a `{prompt}.{mode}.safetensors` state file for `model`, sorted.
pub fn prompts_with_state(model: &str, mode: &str) -> Vec<String> {
    let dir = repo_root().join("golden/states").join(model);
    let suffix = format!(".{mode}.safetensors");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(&suffix).map(str::to_string))
        .collect();
    out.sort();
    out
}

/// Prompt names in `prompts/` (file stems of `*.txt`), sorted.
pub fn prompt_files() -> Vec<String> {
    let dir = repo_root().join("prompts");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".txt").map(str::to_string))
        .collect();
    out.sort();
    out
}

/// A golden state file: every tensor by name (as stored) plus the input ids.
pub struct State {
    pub path: PathBuf,
    pub ids: Vec<u32>,
    pub tensors: Vec<(String, Tensor)>,
}

impl State {
    pub fn get(&self, name: &str) -> &Tensor {
        self.tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .unwrap_or_else(|| panic!("{}: no tensor `{name}`", self.path.display()))
    }

    /// Names of the hidden-state tensors (everything but input ids and router choices).
    pub fn float_names(&self) -> Vec<&str> {
        self.tensors
            .iter()
            .filter(|(_, t)| t.dtype().is_float())
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

pub fn load_state(path: &Path) -> State {
    let dump = Dump::open(path).unwrap_or_else(|e| panic!("{e}"));
    let ids = dump
        .input_ids()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("{}: no input_ids", path.display()));
    let tensors = dump
        .names()
        .into_iter()
        .filter(|n| n != "input_ids")
        .map(|n| {
            let t = dump.tensor(&n).unwrap_or_else(|e| panic!("{e}"));
            (n, t)
        })
        .collect();
    State {
        path: path.to_path_buf(),
        ids,
        tensors,
    }
}

/// All values of a floating tensor as f64 (exact for bf16/f16/f32).
pub fn to_f64_vec(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .expect("tensor to f64")
}

/// All values of an integer tensor as i64.
pub fn to_i64_vec(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<i64>())
        .expect("tensor to i64")
}

/// ‖a − b‖₂ / ‖b‖₂, computed in f64 over the whole tensor. Shapes must match.
pub fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shape mismatch in rel_l2");
    let (a, b) = (to_f64_vec(a), to_f64_vec(b));
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    for (x, y) in a.iter().zip(&b) {
        num += (x - y) * (x - y);
        den += y * y;
    }
    assert!(den > 0.0, "reference tensor is all zeros");
    (num / den).sqrt()
}

pub fn all_finite(t: &Tensor) -> bool {
    to_f64_vec(t).iter().all(|x| x.is_finite())
}

/// The raw bytes of a tensor (for bit-identity checks).
pub fn raw_bits(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().expect("flatten");
    match t.dtype() {
        DType::F64 => t
            .to_vec1::<f64>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()
            .unwrap()
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        _ => to_i64_vec(&t)
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    }
}

/// The key a golden file's tensor name stands for (every name there is one).
pub fn key(name: &str) -> Key {
    name.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// One forward pass on the CPU.
pub fn run_model(
    model: &Model,
    ids: &[u32],
    dtype: DType,
    backend: &dyn LinearAttentionBackend,
    capture_ops: bool,
) -> Captures {
    let opts = RunOptions {
        dtype,
        device: Device::Cpu,
        backend,
    };
    let mut recorder = Recorder::new(ids).with_ops(capture_ops);
    model
        .observe(ids, &opts, &mut recorder, &Progress::hidden(), None)
        .unwrap_or_else(|e| panic!("run ({}, {dtype:?}): {e}", backend.name()));
    recorder.into_captures()
}

pub fn load_model(dir: &Path) -> Model {
    Model::load(dir).unwrap_or_else(|e| panic!("load {}: {e}", dir.display()))
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Copies every regular file of `src` (not recursive) into `dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
        }
    }
}

/// A copy of golden model `model` in a new temporary directory.
pub fn golden_copy(model: &str) -> tempfile::TempDir {
    let dir = tempdir();
    copy_dir(&golden_model_dir(model), dir.path());
    dir
}

/// What [`rewrite_safetensors`] does with one tensor.
pub enum Edit {
    Keep,
    Drop,
    Rename(String),
    Reshape(Vec<usize>),
    /// The same bytes under another dtype label (of the same element size).
    Relabel(safetensors::Dtype),
    /// Other bytes (as many as before), dtype and shape kept.
    Bytes(Vec<u8>),
}

/// Rewrites the safetensors file `path` in place, tensor by tensor (bytes unchanged), keeping the
/// header's `__metadata__`.
pub fn rewrite_safetensors(path: &Path, mut edit: impl FnMut(&str) -> Edit) {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let user_meta: Option<HashMap<String, String>> = meta.metadata().clone();
    let mut names = st.names();
    names.sort();
    // (new name, dtype, shape, original name, replaced bytes); views are made once all the new
    // bytes are owned here.
    let mut edited = Vec::new();
    for name in names {
        let view = st.tensor(name).unwrap();
        let (dtype, shape) = (view.dtype(), view.shape().to_vec());
        edited.push(match edit(name) {
            Edit::Keep => (name.to_string(), dtype, shape, name, None),
            Edit::Drop => continue,
            Edit::Rename(n) => (n, dtype, shape, name, None),
            Edit::Reshape(s) => (name.to_string(), dtype, s, name, None),
            Edit::Relabel(d) => (name.to_string(), d, shape, name, None),
            Edit::Bytes(b) => {
                assert_eq!(
                    b.len(),
                    view.data().len(),
                    "{name}: as many bytes as before"
                );
                (name.to_string(), dtype, shape, name, Some(b))
            }
        });
    }
    let mut out: Vec<(String, TensorView<'_>)> = Vec::new();
    for (new_name, dtype, shape, original, bytes) in &edited {
        let data = match bytes {
            Some(b) => b.as_slice(),
            None => st.tensor(original).unwrap().data(),
        };
        let v = TensorView::new(*dtype, shape.clone(), data).unwrap();
        out.push((new_name.clone(), v));
    }
    let data = safetensors::serialize(out, user_meta).unwrap();
    std::fs::write(path, data).unwrap();
}

/// Each tensor's name and stored dtype in a safetensors file.
pub fn safetensors_dtypes(path: &Path) -> Vec<(String, safetensors::Dtype)> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| (name, view.dtype()))
        .collect()
}

/// Names of the tensors in a safetensors file.
pub fn safetensors_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    names
}

/// `hsdiff bench core` on a tiny geometry at `lengths` (one key head, two value heads,
/// dk = dv = 4, one call, no warm-up, one thread): quick, and the shape of a real run.
pub fn bench_core_tiny(lengths: &str) -> Vec<&str> {
    vec![
        "bench",
        "core",
        "--lengths",
        lengths,
        "--key-heads",
        "1",
        "--value-heads",
        "2",
        "--head-dim",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
    ]
}

/// Runs the built `hsdiff` binary with `args` in `cwd`.
pub fn hsdiff(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("run hsdiff")
}

pub fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `hsdiff compare A B --format json EXTRA…` from the current folder, as it ran.
pub fn compare_output(a: &Path, b: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .arg("compare")
        .arg(a)
        .arg(b)
        .args(["--format", "json"])
        .args(extra)
        .output()
        .expect("run hsdiff")
}

/// [`compare_output`]: the exit code, the JSON report (a test that expects one fails with stderr
/// when none was printed) and stderr.
pub fn compare_json(a: &Path, b: &Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = compare_output(a, b, extra);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}); stderr: {err}"));
    (out.status.code().expect("exit code"), report, err)
}

/// The names of a JSON report's tensor rows, in order.
pub fn row_names(r: &serde_json::Value) -> Vec<String> {
    r["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect()
}

/// A dataset report's entry for sample `id` (a test fails naming the samples when there is none).
pub fn dataset_sample<'a>(r: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no sample {id}: {}", r["samples"]))
}

/// A JSON list of strings (a report's `notes`, a dataset report's `sample_notes`).
pub fn strings(v: &serde_json::Value) -> Vec<&str> {
    v.as_array()
        .expect("list")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect()
}

/// A report's notes, one per line.
pub fn notes(r: &serde_json::Value) -> String {
    strings(&r["notes"]).join("\n")
}

/// The `id`s of a dataset report's list (unpaired samples, token mismatches).
pub fn sample_ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("list")
        .iter()
        .map(|u| u["id"].as_str().expect("id").to_string())
        .collect()
}
