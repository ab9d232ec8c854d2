//! Verdicts that are right on real captures (issue #9), through the built binary:
//!
//! - transformers' own bf16 and f32 captures vs the strict-f64 capture of the same model, with
//!   the model at hand: ok, exit 0, on the dense and the MoE golden model, with the floor and
//!   both distances to the truth on every row; a 25 % error planted at one layer is flagged
//!   there; the golden dumps name the built-in model by its weights digest, so no `--model` is
//!   needed for it; without any model the report says it is uncalibrated;
//! - NaN/Inf judged per element (both NaN, NaN at different elements, +Inf vs −Inf);
//! - captures saved by layer index (`{1: t}`, `layer_N`, `{'hidden_states': {1: t}}`, and
//!   indices meaning `hidden_states[N]`), read as the layers they are and said so.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn state(model: &str, name: &str) -> PathBuf {
    root()
        .join("golden/states")
        .join(model)
        .join(format!("{name}.safetensors"))
}

fn rows(r: &Value) -> &Vec<Value> {
    r["tensors"].as_array().expect("tensors")
}

fn names(r: &Value) -> Vec<&str> {
    rows(r)
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect()
}

fn row<'a>(r: &'a Value, name: &str) -> &'a Value {
    rows(r)
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

fn summary(r: &Value) -> &str {
    r["summary"].as_str().expect("summary")
}

/// Every tensor of a safetensors file, as f32 or as stored.
fn load(path: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu).expect("load state")
}

fn save(tensors: &HashMap<String, Tensor>, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    candle_core::safetensors::save(tensors, &path).expect("save");
    path
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hsdiff-calibrated-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

#[test]
fn transformers_captures_vs_strict_f64_are_ok_with_the_model() {
    for model in ["qwen3_5_tiny", "qwen3_next_moe_tiny"] {
        let dir = root().join("golden").join(model);
        let dir = dir.to_string_lossy();
        for dtype in ["bf16", "f32"] {
            let (code, r, err) = common::compare_json(
                &state(model, "fizzbuzz.f64"),
                &state(model, &format!("fizzbuzz.{dtype}")),
                &["--model", &dir],
            );
            assert_eq!(code, 0, "{model} {dtype}: {}\n{err}", summary(&r));
            assert_eq!(r["verdict"], "ok", "{model} {dtype}: {}", summary(&r));
            assert!(summary(&r).starts_with("benign: "), "{}", summary(&r));
            assert_eq!(r["thresholds"]["rule"], "floor");
            for t in rows(&r) {
                for key in ["floor", "a_vs_truth", "b_vs_truth"] {
                    assert!(
                        t[key].is_f64(),
                        "{model} {dtype}: {} has no {key}",
                        t["name"]
                    );
                }
            }
            // A is the strict f64 capture: the truth itself, to f64 rounding.
            let a_far = rows(&r)
                .iter()
                .map(|t| t["a_vs_truth"].as_f64().unwrap_or(1.0))
                .fold(0.0, f64::max);
            assert!(
                a_far < 1e-12,
                "{model}: strict f64 capture {a_far:.1e} from our truth"
            );
        }
    }
}

#[test]
fn a_quarter_error_planted_at_one_layer_is_flagged_there() {
    let model = "qwen3_5_tiny";
    let mut t = load(&state(model, "fizzbuzz.bf16"));
    let h = t["layers.3"].to_dtype(DType::F32).expect("f32");
    let mut rng = StdRng::seed_from_u64(9);
    let normal = Normal::new(0.0f32, 1.0).expect("normal");
    let noise: Vec<f32> = (0..h.elem_count())
        .map(|_| normal.sample(&mut rng))
        .collect();
    let noise = Tensor::from_vec(noise, h.dims(), &Device::Cpu).expect("noise");
    let norm = |x: &Tensor| {
        x.sqr()
            .and_then(|x| x.sum_all())
            .and_then(|x| x.to_scalar::<f32>())
            .expect("norm")
            .sqrt()
    };
    let scale = 0.25 * norm(&h) / norm(&noise);
    let bad = (h + noise.affine(f64::from(scale), 0.0).expect("scale"))
        .and_then(|x| x.to_dtype(DType::BF16))
        .expect("planted");
    t.insert("layers.3".into(), bad);
    let dir = tmp("planted");
    let planted = save(&t, &dir, "planted.bf16.safetensors");
    let gold = root().join("golden").join(model);
    let (code, r, _) = common::compare_json(
        &state(model, "fizzbuzz.f64"),
        &planted,
        &["--model", &gold.to_string_lossy()],
    );
    assert_eq!(code, 1, "{}", summary(&r));
    assert_eq!(r["verdict"], "mismatch");
    assert_eq!(r["first_divergent"], "layers.3");
    let flagged: Vec<&str> = rows(&r)
        .iter()
        .filter(|t| t["verdict"] != "ok")
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(flagged, ["layers.3"]);
    assert!(summary(&r).starts_with("mismatch: "), "{}", summary(&r));
    // Who is right: A is the truth, B is far from it at layers.3 only.
    assert!(row(&r, "layers.3")["b_vs_truth"].as_f64().expect("b") > 0.2);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_golden_dumps_are_calibrated_with_the_builtin_model_without_model() {
    let (code, r, err) = common::compare_json(
        &state("qwen3_5_tiny", "fizzbuzz.f64"),
        &state("qwen3_5_tiny", "fizzbuzz.bf16"),
        &[],
    );
    assert_eq!(code, 0, "{}", summary(&r));
    assert!(err.contains("calibrating with the built-in model"), "{err}");
    assert!(row(&r, "layers.7")["floor"].is_f64());
    assert!(
        r["thresholds"]["floor_source"]
            .as_str()
            .expect("floor source")
            .contains("f64 (A) and bf16 (B)")
    );
}

/// Files without fingerprints or ids of a known model: no floor can be had.
fn uncalibrated_pair(
    dir: &Path,
    edit: impl Fn(&mut HashMap<String, Tensor>, bool),
) -> (PathBuf, PathBuf) {
    let base = load(&state("qwen3_5_tiny", "fizzbuzz.f32"));
    let mut a = base.clone();
    let mut b = base;
    a.remove("input_ids");
    b.remove("input_ids");
    edit(&mut a, true);
    edit(&mut b, false);
    (
        save(&a, dir, "a.safetensors"),
        save(&b, dir, "b.safetensors"),
    )
}

#[test]
fn without_a_model_the_report_says_uncalibrated_and_scales_the_band_with_depth() {
    let dir = tmp("uncal");
    let (a, b) = uncalibrated_pair(&dir, |t, is_a| {
        if !is_a {
            for v in t.values_mut() {
                *v = v
                    .to_dtype(DType::BF16)
                    .and_then(|x| x.to_dtype(DType::F32))
                    .expect("round");
            }
        }
    });
    let (code, r, _) = common::compare_json(&a, &b, &["--dtype-hint", "bf16"]);
    assert_eq!(code, 0, "{}", summary(&r));
    // Both are missing: the ids and the model, and the headline names both.
    assert!(
        summary(&r).starts_with("uncalibrated: neither file carries token ids")
            && summary(&r).contains("--tokens")
            && summary(&r).contains("pass --model DIR"),
        "{}",
        summary(&r)
    );
    assert_eq!(r["thresholds"]["rule"], "expected floor");
    let band = |n: &str| row(&r, n)["band"].as_f64().expect("band");
    assert!(band("layers.7") > band("layers.0"));
    // The mismatch bound is 8 × the floor expected from the measured table, at least the ok band.
    for n in ["embed", "layers.0", "layers.7"] {
        let expected = row(&r, n)["expected_floor"]
            .as_f64()
            .expect("expected floor");
        assert!((band(n) - (8.0 * expected).max(1e-2)).abs() < 1e-12, "{n}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Rewrites element (token, channel) of `name` to `v`.
fn poke(t: &mut HashMap<String, Tensor>, name: &str, token: usize, channel: usize, v: f32) {
    let x = t[name].to_dtype(DType::F32).expect("f32");
    let dims = x.dims().to_vec();
    let mut data: Vec<f32> = x.flatten_all().and_then(|x| x.to_vec1()).expect("data");
    data[token * dims[2] + channel] = v;
    t.insert(
        name.into(),
        Tensor::from_vec(data, dims, &Device::Cpu).expect("tensor"),
    );
}

#[test]
fn nan_and_inf_are_judged_per_element() {
    let dir = tmp("nan");
    // NaN at different elements of the same tensor.
    let (a, b) = uncalibrated_pair(&dir, |t, is_a| {
        let (tok, ch) = if is_a { (5, 7) } else { (9, 3) };
        poke(t, "layers.2", tok, ch, f32::NAN);
    });
    let (code, r, _) = common::compare_json(&a, &b, &[]);
    assert_eq!(code, 1, "{}", summary(&r));
    assert_eq!(r["first_divergent"], "layers.2");
    assert_eq!(row(&r, "layers.2")["non_finite_disagree"], 2);
    assert!(
        summary(&r).contains("token 5, channel 7"),
        "{}",
        summary(&r)
    );

    // +Inf against −Inf at the same element.
    let (a, b) = uncalibrated_pair(&dir, |t, is_a| {
        poke(
            t,
            "layers.4",
            11,
            2,
            if is_a {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            },
        );
    });
    let (code, r, _) = common::compare_json(&a, &b, &[]);
    assert_eq!(code, 1, "{}", summary(&r));
    assert_eq!(r["first_divergent"], "layers.4");
    assert!(
        summary(&r).contains("token 11, channel 2"),
        "{}",
        summary(&r)
    );

    // NaN at the same element on both sides: never benign.
    let (a, b) = uncalibrated_pair(&dir, |t, _| poke(t, "layers.1", 17, 0, f32::NAN));
    let (code, r, _) = common::compare_json(&a, &b, &[]);
    assert_eq!(code, 1, "{}", summary(&r));
    assert!(
        summary(&r).contains("both NaN") && summary(&r).contains("layers.1"),
        "{}",
        summary(&r)
    );
    assert!(summary(&r).contains("token 17"), "{}", summary(&r));

    // Both sides entirely NaN from layers.3 on.
    let (a, b) = uncalibrated_pair(&dir, |t, _| {
        for (name, v) in t.iter_mut() {
            let late = name
                .strip_prefix("layers.")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= 3)
                || name == "final_norm"
                || name == "logits";
            if late {
                *v = (v.ones_like().expect("ones") * f64::NAN).expect("nan");
            }
        }
    });
    let (code, r, _) = common::compare_json(&a, &b, &[]);
    assert_eq!(code, 1, "{}", summary(&r));
    assert_eq!(r["first_divergent"], "layers.3");
    assert!(
        summary(&r).starts_with("mismatch: ") && summary(&r).contains("both NaN"),
        "{}",
        summary(&r)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn captures_saved_by_layer_index_compare_as_those_layers() {
    let full = state("qwen3_5_tiny", "fizzbuzz.f64");
    let layouts = root().join("tests/fixtures/layouts");
    for (file, reading) in [
        ("idx_int.pt", "the output of layer N"),
        ("idx_layer.pt", "the output of layer N"),
        ("idx_nested.pt", "the output of layer N"),
        ("idx_input.pt", "hidden_states[N], the input of layer N"),
    ] {
        let (code, r, err) = common::compare_json(&full, &layouts.join(file), &[]);
        assert_eq!(code, 0, "{file}: {}\n{err}", summary(&r));
        assert_eq!(r["verdict"], "ok", "{file}");
        assert_eq!(names(&r), ["layers.1", "layers.3", "layers.5"], "{file}");
        let notes = r["notes"].to_string();
        assert!(
            notes.contains(&format!("index N read as {reading}")),
            "{file}: {notes}"
        );
        assert!(
            err.contains(&format!("index N read as {reading}")),
            "{file}: {err}"
        );
    }
}

#[test]
fn a_sequence_is_output_hidden_states_only_when_its_length_fits_the_model() {
    let dir = tmp("short-seq");
    let gold = load(&state("qwen3_5_tiny", "fizzbuzz.bf16"));
    let mut t = HashMap::new();
    for (i, name) in ["embed", "layers.0", "layers.1", "final_norm"]
        .iter()
        .enumerate()
    {
        t.insert(format!("hidden_states.{i}"), gold[*name].clone());
    }
    t.insert("input_ids".to_string(), gold["input_ids"].clone());
    let short = save(&t, &dir, "short.safetensors");
    let out = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .arg("compare")
        .arg(state("qwen3_5_tiny", "fizzbuzz.f64"))
        .arg(&short)
        .output()
        .expect("run hsdiff");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("4 entries were read as output_hidden_states, but this model has 8 layers"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}
