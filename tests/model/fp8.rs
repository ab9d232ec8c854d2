//! FP8 checkpoints (`golden/qwen3_5_tiny_fp8`, written by golden/make_fp8.py from the
//! golden tiny Qwen3.5 with weight_block_size [48, 40]: partial edge blocks on both sides of
//! every weight):
//!
//! - read exactly: the f64 run of the checkpoint equals transformers' strict-f64 run of its
//!   dequantised weights on every backend, and f32 / f64 dequantisation agree bit for bit;
//! - refused by name when a scale is dropped, misshapen, on a module kept in high precision, or
//!   when config.json says nothing about quantisation;
//! - served (`--dtype fp8`): the W8A8 Linear equals the torch implementation of the recipe in the
//!   fixture script bit for bit, and a live run is calibrated against its own floor.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use common::*;
use hsdiff::backends::backend_by_name;
use hsdiff::fp8::{ActScale, Fp8Format, w8a8};
use hsdiff::weights::checkpoint::{Checkpoint, TensorRequest};
use hsdiff::weights::config::ModelConfig;

const MODEL: &str = "qwen3_5_tiny_fp8";

/// Same bound as the bf16 golden model's f64 parity (tests/model/golden_parity.rs: a few dozen f64
/// roundings per layer over 8 layers stay near 1e-14; one step in f32 would be ≥ 1e-7).
const F64_BOUND: f64 = 1e-10;

fn fp8_dir() -> PathBuf {
    golden_model_dir(MODEL)
}

/// The tensors of tests/fixtures/fp8/served.safetensors, by name.
fn served_fixture() -> HashMap<String, Tensor> {
    let path = repo_root().join("tests/fixtures/fp8/served.safetensors");
    candle_core::safetensors::load(&path, &Device::Cpu).expect("served fixture")
}

fn open_checked(dir: &Path) -> Checkpoint {
    let config = ModelConfig::from_file(&dir.join("config.json")).expect("config");
    let mut ckpt = Checkpoint::open(dir).expect("open");
    ckpt.check_quantization(config.quantization.as_ref())
        .expect("consistent");
    ckpt
}

#[test]
fn the_f64_run_equals_transformers_strict_f64_run_of_the_dequantised_weights() {
    let model = load_model(&fp8_dir());
    assert!(model.config.quantization.is_some());
    let truth = load_state(&state_path(MODEL, "fizzbuzz", "f64"));
    let names = truth.float_names();
    assert!(names.contains(&"logits") && names.len() >= 10, "{names:?}");
    let mut failures = Vec::new();
    for backend in ["reference", "fused"] {
        let b = backend_by_name(backend, &Device::Cpu).expect("backend on the cpu");
        let caps = run_model(&model, &truth.ids, DType::F64, b.as_ref(), false);
        let mut worst = (0.0f64, "");
        for &name in &names {
            let got = caps
                .get(key(name))
                .unwrap_or_else(|| panic!("{backend}: no {name}"));
            let rel = rel_l2(got, truth.get(name));
            if rel.is_nan() || rel > worst.0 {
                worst = (rel, name);
            }
            if rel.is_nan() || rel > F64_BOUND {
                failures.push(format!(
                    "{backend}: {name} rel L2 {rel:.3e} > {F64_BOUND:.0e}"
                ));
            }
        }
        eprintln!(
            "{backend}: max rel L2 vs transformers strict f64 {:.3e} ({})",
            worst.0, worst.1
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn dequantised_weights_are_the_same_in_f32_and_f64() {
    // bf16 scales × e4m3 values have at most 12 significant bits: exact in f32 as in f64.
    let ckpt = open_checked(&fp8_dir());
    let mut checked = 0;
    for (name, raw) in ckpt.raw_tensors() {
        let (info, _) = raw.expect("raw");
        if Fp8Format::of(info.dtype).is_none() {
            continue;
        }
        let get = |dtype| {
            let want = TensorRequest {
                name,
                shape: &info.shape,
                dtype,
                device: &Device::Cpu,
            };
            to_f64_vec(&ckpt.get(&want).expect("dequantise"))
        };
        let (wide, narrow) = (get(DType::F64), get(DType::F32));
        assert!(wide.iter().all(|v| v.is_finite()), "{name}");
        assert!(wide.iter().any(|v| *v != 0.0), "{name}: all zero");
        assert_eq!(wide, narrow, "{name}");
        // The rows a request reads one by one are those of the whole tensor.
        let rows = TensorRequest {
            name,
            shape: &info.shape,
            dtype: DType::F64,
            device: &Device::Cpu,
        };
        let last = info.shape[0] - 1;
        let picked = to_f64_vec(&ckpt.get_rows(&rows, &[last, 0]).expect("rows"));
        let width = wide.len() / info.shape[0];
        assert_eq!(&picked[..width], &wide[last * width..], "{name} row {last}");
        assert_eq!(&picked[width..], &wide[..width], "{name} row 0");
        checked += 1;
    }
    assert_eq!(checked, 50, "every quantised Linear of the 8 layers");
}

#[test]
fn every_fp8_code_decodes_as_torch_decodes_it() {
    let fx = served_fixture();
    for (key, format) in [
        ("codes.e4m3", Fp8Format::E4M3),
        ("codes.e5m2", Fp8Format::E5M2),
    ] {
        let torch = to_f64_vec(&fx[key]);
        assert_eq!(torch.len(), 256);
        for (code, want) in torch.iter().enumerate() {
            let got = f64::from(format.decode(code as u8));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{key} code {code:#04x}: {got} vs torch {want}"
            );
        }
    }
}

/// The served Linear against the torch implementation of the recipe in
/// golden/make_fp8.py, bit for bit: both compute each block's dot exactly and round
/// it once to f32, then do the same f32 multiplies and adds in the same order and round the
/// output once to bf16, so nothing is left to differ. Any difference is a different recipe.
#[test]
fn served_linears_equal_the_torch_recipe_bit_for_bit() {
    let ckpt = open_checked(&fp8_dir());
    let fx = served_fixture();
    let mut checked = 0;
    let mut names: Vec<&String> = fx.keys().collect();
    names.sort();
    for name in names {
        let Some(module) = name.strip_suffix(".x") else {
            continue;
        };
        let x = &fx[name];
        let (m, k) = x.dims2().expect("[T, K]");
        let xs: Vec<f32> = x
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .expect("x");
        let want_rows = fx[&format!("{module}.y")].dims2().expect("[T, N]").1;
        let w = ckpt
            .fp8_weight(&format!("{module}.weight"), want_rows, k)
            .expect("read")
            .expect("stored in fp8");
        for (act, key) in [(ActScale::Fp32, "y"), (ActScale::Ue8m0, "y_ue8m0")] {
            let got: Vec<u16> = w8a8::matmul(&xs, m, &w, act)
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let want: Vec<u16> = fx[&format!("{module}.{key}")]
                .flatten_all()
                .and_then(|t| t.to_vec1::<half::bf16>())
                .expect("bf16")
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(got.len(), want.len(), "{module}.{key}");
            assert_eq!(
                differ,
                0,
                "{module}.{key}: {differ} of {} outputs differ",
                got.len()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "four Linears × two activation scales");
}

fn rewrite(dir: &Path, edit: impl FnMut(&str) -> Edit) {
    rewrite_safetensors(&dir.join("model.safetensors"), edit);
}

/// A copy of the FP8 checkpoint with the tensor `name` edited (`edit` says how), the rest kept.
fn with_one_edited(name: &str, edit: impl Fn() -> Edit) -> tempfile::TempDir {
    let copy = golden_copy(MODEL);
    rewrite(copy.path(), |n| if n == name { edit() } else { Edit::Keep });
    copy
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// `hsdiff dump` of the model in `dir`: (exit code, stderr).
fn dump(dir: &Path, dtype: &str) -> (i32, String) {
    let out_dir = tempdir();
    let out = out_dir.path().join("out.safetensors");
    let o = hsdiff(
        &[
            "dump",
            "--backend",
            "reference",
            "--model",
            dir.to_str().unwrap(),
            "--tokens",
            "1,2,3,4,5,6,7,8",
            "--dtype",
            dtype,
            "--out",
            out.to_str().unwrap(),
        ],
        dir,
    );
    (o.status.code().unwrap_or(-1), stderr_of(&o))
}

const GATE: &str = "model.language_model.layers.1.mlp.gate_proj";

#[test]
fn a_dropped_or_misshapen_scale_is_refused_naming_the_tensor() {
    let scale = format!("{GATE}.weight_scale_inv");
    let copy = with_one_edited(&scale, || Edit::Drop);
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{GATE}.weight")), "{err}");
    assert!(err.contains("without its block scales"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    // [128, 64] over [48, 40] is [3, 2]; a [6, 1] grid has as many scales, laid out wrong.
    let copy = with_one_edited(&scale, || Edit::Reshape(vec![6, 1]));
    let (code, err) = dump(copy.path(), "f64");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&scale) && err.contains("expected [3, 2]"),
        "{err}"
    );
}

#[test]
fn config_and_weights_that_disagree_are_refused_naming_the_tensor() {
    // config.json of the bf16 model beside FP8 weights.
    let copy = golden_copy(MODEL);
    edit_config(copy.path(), |v| {
        v.as_object_mut().unwrap().remove("quantization_config");
    });
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("F8_E4M3") && err.contains("no quantization_config"),
        "{err}"
    );

    // A quantised module the config says is kept in high precision (the substring `mlp.gate`
    // must not catch `mlp.gate_proj`: that entry alone passes).
    let copy = golden_copy(MODEL);
    edit_config(copy.path(), |v| {
        let list = v["quantization_config"]["modules_to_not_convert"]
            .as_array_mut()
            .unwrap();
        list.push("mlp.gate".into());
    });
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 0, "`mlp.gate` names no module here: {err}");
    edit_config(copy.path(), |v| {
        let list = v["quantization_config"]["modules_to_not_convert"]
            .as_array_mut()
            .unwrap();
        list.push("layers.*.mlp.gate_proj".into());
    });
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("modules_to_not_convert"), "{err}");
    assert!(err.contains("layers.0.mlp.gate_proj"), "{err}");

    // Scales beside a bf16 weight: a plain Linear with scales is ambiguous.
    let copy = golden_copy("qwen3_5_tiny");
    let fp8 = std::fs::read(fp8_dir().join("config.json")).unwrap();
    std::fs::write(copy.path().join("config.json"), fp8).unwrap();
    let src = fp8_dir().join("model.safetensors");
    let bytes = std::fs::read(&src).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = st.tensor(&format!("{GATE}.weight_scale_inv")).unwrap();
    let extra = (format!("{GATE}.weight_scale_inv"), view);
    add_tensor(&copy.path().join("model.safetensors"), extra);
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{GATE}.weight_scale_inv")) && err.contains("not FP8"),
        "{err}"
    );
}

/// `n` bf16 scales of `value`, as stored bytes.
fn bf16_scales(n: usize, value: f32) -> Vec<u8> {
    (0..n)
        .flat_map(|_| half::bf16::from_f32(value).to_le_bytes())
        .collect()
}

#[test]
fn scales_that_are_not_positive_or_overflow_the_weights_are_refused() {
    let scale = format!("{GATE}.weight_scale_inv");
    for (value, dtype, says) in [
        (-0.01, "bf16", "positive and finite"),
        (0.0, "f64", "positive and finite"),
        // 448 × 3e38 is past f32's range: every activation it touches would be Inf or NaN.
        (3e38, "bf16", "scales are corrupt"),
        (3e38, "f64", "scales are corrupt"),
        // Within f32 but past f16's 65504 (448 × 200): fine for bf16, refused for f16.
        (200.0, "f16", "past ±6.5504e4"),
    ] {
        let copy = with_one_edited(&scale, || Edit::Bytes(bf16_scales(6, value)));
        let (code, err) = dump(copy.path(), dtype);
        assert_eq!(code, 2, "scale {value} at {dtype}: {err}");
        assert!(
            err.contains(GATE) && err.contains(says),
            "scale {value}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // The same scales of 200 in bf16 are in range.
    let copy = with_one_edited(&scale, || Edit::Bytes(bf16_scales(6, 200.0)));
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 0, "{err}");
}

#[test]
fn codes_of_another_format_than_stored_or_configured_are_refused() {
    let weight = format!("{GATE}.weight");
    // One weight's e4m3 codes relabelled F8_E5M2, the config still saying e4m3.
    let copy = with_one_edited(&weight, || Edit::Relabel(safetensors::Dtype::F8_E5M2));
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&weight) && err.contains("F8_E5M2, but quantization_config.fmt is e4m3"),
        "{err}"
    );
    // `fmt: e5m2` over the e4m3 weights.
    let copy = golden_copy(MODEL);
    edit_config(copy.path(), |v| {
        v["quantization_config"]["fmt"] = "e5m2".into()
    });
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("F8_E4M3, but quantization_config.fmt is e5m2"),
        "{err}"
    );
    // Every label and the config say e5m2, the bytes are e4m3: a quantiser maps each block's
    // largest magnitude to ±448 (0x7e / 0xfe) and uses codes near it, which are e5m2's NaNs
    // and infinities (0x7c–0x7f, 0xfc–0xff).
    let copy = golden_copy(MODEL);
    edit_config(copy.path(), |v| {
        v["quantization_config"]["fmt"] = "e5m2".into()
    });
    let labels: HashMap<String, safetensors::Dtype> =
        safetensors_dtypes(&copy.path().join("model.safetensors"))
            .into_iter()
            .collect();
    rewrite(copy.path(), |n| {
        if labels.get(n) == Some(&safetensors::Dtype::F8_E4M3) {
            Edit::Relabel(safetensors::Dtype::F8_E5M2)
        } else {
            Edit::Keep
        }
    });
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("in F8_E5M2: quantised weights are finite")
            && err.contains("not F8_E5M2 codes"),
        "{err}"
    );
}

#[test]
fn served_fp8_is_refused_on_bf16_weights_under_a_copied_quantization_config() {
    let copy = golden_copy("qwen3_5_tiny");
    let fp8: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fp8_dir().join("config.json")).unwrap())
            .unwrap();
    edit_config(copy.path(), |v| {
        v["quantization_config"] = fp8["quantization_config"].clone();
    });
    // The bf16 weights run as what they are…
    let (code, err) = dump(copy.path(), "bf16");
    assert_eq!(code, 0, "{err}");
    // …but not as a served FP8 checkpoint.
    let (code, err) = dump(copy.path(), "fp8");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--dtype") && err.contains("no weight is stored in FP8"),
        "{err}"
    );
    assert!(!err.contains("  "), "no runs of spaces: {err}");
}

/// Adds one tensor to a safetensors file.
fn add_tensor(path: &Path, (name, view): (String, safetensors::tensor::TensorView<'_>)) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .names()
        .into_iter()
        .map(|n| (n.to_string(), st.tensor(n).unwrap()))
        .collect();
    all.push((name, view));
    let data = safetensors::serialize(all, None).unwrap();
    std::fs::write(path, data).unwrap();
}

#[test]
fn served_fp8_runs_live_calibrated_against_its_own_floor() {
    let dir = fp8_dir();
    let o = hsdiff(
        &[
            "--a",
            "fused",
            "--b",
            "reference",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            "fizzbuzz",
            "--dtype",
            "fp8",
            "--format",
            "json",
        ],
        &dir,
    );
    let out = stdout_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{out}", stderr_of(&o));
    let r: serde_json::Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(r["verdict"], "ok", "{}", r["summary"]);
    let rows = r["tensors"].as_array().expect("tensors");
    let layer = rows
        .iter()
        .find(|row| row["name"] == "layers.7")
        .expect("layers.7");
    let floor = layer["floor"].as_f64().expect("calibrated: a floor");
    assert!(floor.is_finite() && floor > 0.0, "{layer}");
    eprintln!(
        "fp8 floor at layers.7: {floor:.3e}; rel L2 {}",
        layer["rel_l2"]
    );
}

#[test]
fn served_fp8_is_refused_on_a_model_that_is_not_fp8() {
    let o = hsdiff(
        &["--a", "fused", "--b", "reference", "--dtype", "fp8"],
        &repo_root(),
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr_of(&o);
    assert!(
        err.contains("--dtype") && err.contains("not an FP8 checkpoint"),
        "{err}"
    );
}

/// `hsdiff dump --backend fused` of the FP8 checkpoint on the fizzbuzz prompt at `dtype`.
fn dump_fizzbuzz(dtype: &str, out: &Path) {
    let o = hsdiff(
        &[
            "dump",
            "--backend",
            "fused",
            "--model",
            fp8_dir().to_str().unwrap(),
            "--prompt",
            "fizzbuzz",
            "--dtype",
            dtype,
            "--out",
            out.to_str().unwrap(),
        ],
        &repo_root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
}

fn fp8_note(r: &serde_json::Value) -> String {
    r["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("fp8 serving:"))
        .unwrap_or_else(|| panic!("no fp8 note in {}", r["notes"]))
        .to_string()
}

#[test]
fn an_fp8_served_capture_against_a_bf16_one_is_judged_by_each_sides_floor() {
    let dir = tempdir();
    let (fp8, bf16) = (
        dir.path().join("fp8.safetensors"),
        dir.path().join("bf16.safetensors"),
    );
    dump_fizzbuzz("fp8", &fp8);
    dump_fizzbuzz("bf16", &bf16);
    // Calibrated with the model the fingerprints name: each side gets its own floor.
    let (code, r, _) = compare_json(&fp8, &bf16, &[]);
    assert_eq!(code, 0, "{}", r["summary"]);
    assert_eq!(r["verdict"], "ok", "{}", r["summary"]);
    let rows = r["tensors"].as_array().expect("tensors");
    let row = rows
        .iter()
        .find(|t| t["name"] == "layers.7")
        .expect("layers.7");
    let (fa, fb) = (
        row["floor_a"].as_f64().unwrap(),
        row["floor_b"].as_f64().unwrap(),
    );
    assert!(
        fa > 2.0 * fb,
        "the fp8 floor {fa:.3e} is well above bf16's {fb:.3e}"
    );
    assert_eq!(
        row["floor"].as_f64(),
        Some(fa),
        "judged by the larger floor"
    );
    let note = fp8_note(&r);
    assert!(
        note.contains("the bf16 floor") && note.contains("FP8's, not a bug"),
        "{note}"
    );
    eprintln!("{note}");

    // 30% planted at layers.3 of the FP8 side (and carried on): beyond its own floor.
    let mut t = candle_core::safetensors::load(&fp8, &Device::Cpu).expect("load");
    for i in 3..8 {
        let name = format!("layers.{i}");
        let x = t[&name].to_dtype(DType::F32).and_then(|x| x * 1.3);
        t.insert(
            name.clone(),
            x.and_then(|x| x.to_dtype(DType::BF16)).unwrap(),
        );
    }
    let planted = dir.path().join("planted.safetensors");
    candle_core::safetensors::save(&t, &planted).expect("save");
    let model = fp8_dir();
    let (code, r, _) = compare_json(
        &planted,
        &bf16,
        &[
            "--model",
            model.to_str().unwrap(),
            "--dtype-hint",
            "fp8",
            "--fail-on",
            "drift",
        ],
    );
    assert_eq!(code, 1, "{}", r["summary"]);
    assert_ne!(r["verdict"], "ok", "{}", r["summary"]);
    let note = fp8_note(&r);
    assert!(note.contains("more than FP8 serving explains"), "{note}");
}

/// A copy of the FP8 checkpoint whose `module`'s block scales are all 1: what a loader that
/// ignores the scales of that one module computes with (unsloth #6200).
fn with_scales_ignored(module: &str) -> tempfile::TempDir {
    let copy = golden_copy(MODEL);
    let path = copy.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let scale = format!("{module}.weight_scale_inv");
    let view = st.tensor(&scale).unwrap();
    assert_eq!(view.dtype(), safetensors::Dtype::BF16);
    let ones: Vec<u8> = std::iter::repeat_n(half::bf16::ONE.to_le_bytes(), view.data().len() / 2)
        .flatten()
        .collect();
    let mut all: Vec<(String, safetensors::tensor::TensorView<'_>)> = Vec::new();
    for n in st.names() {
        let t = st.tensor(n).unwrap();
        let t = if n == scale {
            safetensors::tensor::TensorView::new(t.dtype(), t.shape().to_vec(), &ones).unwrap()
        } else {
            t
        };
        all.push((n.to_string(), t));
    }
    let data = safetensors::serialize(all, None).unwrap();
    std::fs::write(&path, data).unwrap();
    copy
}

#[test]
fn a_weight_read_without_its_scale_is_named_by_its_pattern() {
    let bad_model = with_scales_ignored(GATE);
    let dir = tempdir();
    let (bad, good) = (
        dir.path().join("bad.safetensors"),
        dir.path().join("good.safetensors"),
    );
    for (model, out) in [(bad_model.path(), &bad), (fp8_dir().as_path(), &good)] {
        let o = hsdiff(
            &[
                "dump",
                "--backend",
                "fused",
                "--model",
                model.to_str().unwrap(),
                "--tokens",
                "5,17,3,99,42,7,250,11,64,1",
                "--dtype",
                "bf16",
                "--out",
                out.to_str().unwrap(),
            ],
            &repo_root(),
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
    }
    let model = fp8_dir();
    let (code, r, _) = compare_json(&bad, &good, &["--model", model.to_str().unwrap()]);
    assert_eq!(code, 1, "{}", r["summary"]);
    assert_eq!(r["first_divergent"], "layers.1", "{}", r["summary"]);
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let note = notes
        .iter()
        .find(|n| n.contains("out of scale"))
        .unwrap_or_else(|| panic!("no dropped-scale note in {notes:#?}"));
    assert!(
        note.starts_with("bad.safetensors is out of scale at layers.1"),
        "{note}"
    );
    assert!(note.contains("weight_scale_inv"), "{note}");
    // An honest difference (fp8 against bf16, above) has no such note.
    let (_, r, _) = compare_json(&good, &good, &["--model", model.to_str().unwrap()]);
    assert!(!r["notes"].to_string().contains("out of scale"));
}
