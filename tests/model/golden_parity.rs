//! hsdiff's forward pass against the golden states written by transformers
//! (`golden/states/`, see docs/golden.md):
//!
//! - at f64 and f32, every captured tensor against the strict-float64 truth (`*.f64`), for every
//!   registered linear-attention backend;
//! - the MoE router's top-k choices at f64;
//! - at bf16, hsdiff's distance to the truth against transformers' own bf16 distance;
//! - the `tokenizers`-crate ids against the golden `input_ids`.
//!
//! Measured errors go to stderr (`cargo test --test model golden_parity:: -- --nocapture`).

use crate::common;

use candle_core::{DType, Device};
use common::*;
use hsdiff::backends::{LinearAttentionBackend, available_backends, backend_by_name};
use hsdiff::capture::{Key, RouterField};
use hsdiff::util::input::{Tokenizer, builtin_prompt};

/// Bound on ‖hsdiff − truth‖ / ‖truth‖ for every tensor of an f64 run.
///
/// Unit roundoff in f64 is u = 1.1e-16. Each decoder layer is a few dozen dependent roundings
/// (projections over 64–256 terms, norms, softmax, a 155-step recurrence), each contributing
/// O(√n·u) in relative L2, and the error is carried and amplified from layer to layer through
/// the residual stream (growth observed in transformers' own f32 runs: ~8× from layer 0 to the
/// last layer). Over 8 layers and the logits that stays around 1e-14; 1e-10 leaves four orders
/// of magnitude and still rejects anything that computes a step in f32 (≥ 1e-7).
const F64_BOUND: f64 = 1e-10;

/// Bound on ‖hsdiff − truth‖ / ‖truth‖ for every tensor of an f32 run.
///
/// Unit roundoff in f32 is u = 6e-8; with the same growth as above a faithful f32 pass lands
/// in the low 1e-6 — transformers' own f32 runs sit at 2.0–2.7e-6 from the truth on the logits
/// of these models (golden/SUMMARY.md). 1e-5 leaves ~4× over that and still rejects a step done
/// in bf16/f16 (≥ 1e-3) or a wrong cast order that costs more than a few ulps per layer.
const F32_BOUND: f64 = 1e-5;

/// bf16: hsdiff's logits may be at most this factor farther from the truth than transformers'
/// own bf16 logits are (both round at the same places; which ties flip differs) ...
const BF16_FACTOR: f64 = 2.0;
/// ... plus this absolute slack in rel L2 (transformers' bf16 logits are 4–7e-2 off).
const BF16_SLACK: f64 = 5e-3;

/// Every registered backend that can run on the CPU, by name. A backend that refuses the CPU
/// is reported and skipped; `reference` must always be there.
fn cpu_backends() -> Vec<(String, Box<dyn LinearAttentionBackend>)> {
    let mut out = Vec::new();
    for info in available_backends() {
        // Every backend runs on the CPU: one that cannot fails the test instead of dropping out.
        let b = backend_by_name(info.name, &Device::Cpu)
            .unwrap_or_else(|e| panic!("backend {} on the CPU: {e}", info.name));
        out.push((info.name.to_string(), b));
    }
    assert!(
        out.iter().any(|(n, _)| n == "reference"),
        "the reference backend must be registered and run on the CPU"
    );
    out
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        _ => "?",
    }
}

#[test]
fn f64_and_f32_runs_match_the_float64_truth() {
    let backends = cpu_backends();
    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0usize;
    eprintln!(
        "{:<20} {:<14} {:<5} {:<10} {:>11} {:<12} {:>11}",
        "model", "prompt", "dtype", "backend", "max rel L2", "(tensor)", "logits"
    );
    for &model_name in GOLDEN_MODELS {
        let model = load_model(&golden_model_dir(model_name));
        let prompts = prompts_with_state(model_name, "f64");
        assert!(!prompts.is_empty(), "{model_name}: no f64 state files");
        for prompt in &prompts {
            let truth = load_state(&state_path(model_name, prompt, "f64"));
            let names = truth.float_names();
            for (bname, backend) in &backends {
                for (dtype, bound) in [(DType::F64, F64_BOUND), (DType::F32, F32_BOUND)] {
                    let caps = run_model(&model, &truth.ids, dtype, backend.as_ref(), false);
                    let tag = format!("{model_name}/{prompt}/{}/{bname}", dtype_name(dtype));
                    // The capture contract: exactly the golden file's hidden states (plus the
                    // router choices and hsdiff's own router margins, which transformers does
                    // not report), nothing missing, nothing extra.
                    let mut cap_floats: Vec<String> = caps
                        .iter()
                        .filter(|(k, t)| t.dtype().is_float() && !is_router_margin(*k))
                        .map(|(k, _)| k.to_string())
                        .collect();
                    cap_floats.sort();
                    let mut want = names.clone();
                    want.sort();
                    if cap_floats != want {
                        failures.push(format!(
                            "{tag}: captured {cap_floats:?}, golden file has {want:?}"
                        ));
                    }
                    let (mut max_rel, mut max_name, mut logits_rel) = (0.0f64, "", f64::NAN);
                    for &name in &names {
                        let want = truth.get(name);
                        let Some(got) = caps.get(key(name)) else {
                            continue; // reported above
                        };
                        checked += 1;
                        if got.dtype() != dtype {
                            failures.push(format!(
                                "{tag}: `{name}` has dtype {:?}, expected {dtype:?}",
                                got.dtype()
                            ));
                        }
                        if got.dims() != want.dims() {
                            failures.push(format!(
                                "{tag}: `{name}` shape {:?}, golden {:?}",
                                got.dims(),
                                want.dims()
                            ));
                            continue;
                        }
                        if !all_finite(got) {
                            failures.push(format!("{tag}: `{name}` has non-finite values"));
                        }
                        let rel = rel_l2(got, want);
                        // NaN-safe: a NaN error is a failure.
                        if rel.is_nan() || rel > max_rel {
                            max_rel = rel;
                            max_name = name;
                        }
                        if name == "logits" {
                            logits_rel = rel;
                        }
                        if rel.is_nan() || rel > bound {
                            failures.push(format!(
                                "{tag}: `{name}` rel L2 {rel:.3e} > bound {bound:.0e}"
                            ));
                        }
                    }
                    eprintln!(
                        "{:<20} {:<14} {:<5} {:<10} {:>11.3e} {:<12} {:>11.3e}",
                        model_name,
                        prompt,
                        dtype_name(dtype),
                        bname,
                        max_rel,
                        max_name,
                        logits_rel
                    );
                }
            }
        }
    }
    // For context: transformers' own f32 runs against the same truth.
    for &model_name in GOLDEN_MODELS {
        for prompt in prompts_with_state(model_name, "f32") {
            let truth = load_state(&state_path(model_name, &prompt, "f64"));
            let tf = load_state(&state_path(model_name, &prompt, "f32"));
            let (mut max_rel, mut max_name) = (0.0f64, "");
            for name in truth.float_names() {
                let rel = rel_l2(tf.get(name), truth.get(name));
                if rel > max_rel {
                    (max_rel, max_name) = (rel, name);
                }
            }
            let logits = rel_l2(tf.get("logits"), truth.get("logits"));
            eprintln!(
                "{model_name:<20} {prompt:<14} {:<5} {:<10} {max_rel:>11.3e} {max_name:<12} {logits:>11.3e}",
                "f32", "transformers"
            );
        }
    }
    assert!(checked > 0, "nothing was compared");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn moe_router_choices_match_at_f64() {
    let backends = cpu_backends();
    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0usize;
    for &model_name in GOLDEN_MODELS {
        let model = load_model(&golden_model_dir(model_name));
        for prompt in prompts_with_state(model_name, "f64") {
            let truth = load_state(&state_path(model_name, &prompt, "f64"));
            let routers: Vec<&str> = truth
                .tensors
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| n.starts_with("router."))
                .collect();
            for (bname, backend) in &backends {
                let caps = run_model(&model, &truth.ids, DType::F64, backend.as_ref(), false);
                let tag = format!("{model_name}/{prompt}/f64/{bname}");
                let mut got_routers: Vec<String> = caps
                    .keys()
                    .filter(|k| matches!(k, Key::Router(..)) && !is_router_margin(*k))
                    .map(String::from)
                    .collect();
                got_routers.sort();
                let mut want_routers = routers.clone();
                want_routers.sort();
                if got_routers != want_routers {
                    failures.push(format!(
                        "{tag}: router captures {got_routers:?}, golden {want_routers:?}"
                    ));
                }
                for &name in &routers {
                    let Some(got) = caps.get(key(name)) else {
                        continue;
                    };
                    checked += 1;
                    let want = truth.get(name);
                    if got.dims() != want.dims() {
                        failures.push(format!(
                            "{tag}: `{name}` shape {:?}, golden {:?}",
                            got.dims(),
                            want.dims()
                        ));
                        continue;
                    }
                    let (g, w) = (to_i64_vec(got), to_i64_vec(want));
                    let k = *want.dims().last().unwrap();
                    let differing: Vec<usize> = g
                        .chunks(k)
                        .zip(w.chunks(k))
                        .enumerate()
                        .filter(|(_, (a, b))| a != b)
                        .map(|(t, _)| t)
                        .collect();
                    eprintln!(
                        "{tag}: `{name}`: {}/{} tokens route identically",
                        w.len() / k - differing.len(),
                        w.len() / k
                    );
                    if !differing.is_empty() {
                        failures.push(format!("{tag}: `{name}` differs at token(s) {differing:?}"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no router choices were compared (no MoE golden?)"
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bf16_is_as_close_to_the_truth_as_transformers_bf16() {
    let backends = cpu_backends();
    let mut failures: Vec<String> = Vec::new();
    let mut checked = 0usize;
    eprintln!(
        "{:<20} {:<14} {:<10} {:>16} {:>16} {:>16} {:>16}",
        "model",
        "prompt",
        "backend",
        "hsdiff vs truth",
        "tf-bf16 vs truth",
        "hsdiff vs tf-bf16",
        "max over layers"
    );
    for &model_name in GOLDEN_MODELS {
        let model = load_model(&golden_model_dir(model_name));
        for prompt in prompts_with_state(model_name, "bf16") {
            let truth = load_state(&state_path(model_name, &prompt, "f64"));
            let tf = load_state(&state_path(model_name, &prompt, "bf16"));
            assert_eq!(tf.ids, truth.ids, "{model_name}/{prompt}: bf16 and f64 ids");
            let tf_vs_truth = rel_l2(tf.get("logits"), truth.get("logits"));
            for (bname, backend) in &backends {
                let caps = run_model(&model, &truth.ids, DType::BF16, backend.as_ref(), false);
                let tag = format!("{model_name}/{prompt}/bf16/{bname}");
                let mut max_layer = 0.0f64;
                for name in truth.float_names() {
                    let Some(got) = caps.get(key(name)) else {
                        failures.push(format!("{tag}: no `{name}` captured"));
                        continue;
                    };
                    if got.dtype() != DType::BF16 {
                        failures.push(format!(
                            "{tag}: `{name}` has dtype {:?}, expected BF16",
                            got.dtype()
                        ));
                    }
                    if !all_finite(got) {
                        failures.push(format!("{tag}: `{name}` has non-finite values"));
                    }
                    if name != "logits" {
                        // Each layer is bounded like the logits: against transformers' own bf16
                        // error at that layer.
                        let err = rel_l2(got, truth.get(name));
                        let theirs = rel_l2(tf.get(name), truth.get(name));
                        let bound = BF16_FACTOR * theirs + BF16_SLACK;
                        if err.is_nan() || err > bound {
                            failures.push(format!(
                                "{tag}: `{name}` rel L2 to the truth {err:.3e} > {BF16_FACTOR} × \
                                 transformers' {theirs:.3e} + {BF16_SLACK:.0e} = {bound:.3e}"
                            ));
                        }
                        max_layer = max_layer.max(err);
                    }
                }
                let Some(logits) = caps.get(Key::Logits) else {
                    continue;
                };
                checked += 1;
                let hs_vs_truth = rel_l2(logits, truth.get("logits"));
                let hs_vs_tf = rel_l2(logits, tf.get("logits"));
                eprintln!(
                    "{model_name:<20} {prompt:<14} {bname:<10} {hs_vs_truth:>16.3e} {tf_vs_truth:>16.3e} {hs_vs_tf:>16.3e} {max_layer:>16.3e}"
                );
                let bound = BF16_FACTOR * tf_vs_truth + BF16_SLACK;
                if hs_vs_truth.is_nan() || hs_vs_truth > bound {
                    failures.push(format!(
                        "{tag}: logits rel L2 to the truth {hs_vs_truth:.3e} > {BF16_FACTOR} × \
                         transformers' {tf_vs_truth:.3e} + {BF16_SLACK:.0e} = {bound:.3e}"
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no bf16 golden states were compared");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn tokenizer_ids_match_golden_input_ids() {
    let mut checked = 0usize;
    let prompts = prompt_files();
    assert!(prompts.len() >= 4, "prompts/ holds {prompts:?}");
    for &model_name in GOLDEN_MODELS {
        let tok = Tokenizer::from_file(&golden_model_dir(model_name).join("tokenizer.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        for prompt in &prompts {
            let text = builtin_prompt(prompt)
                .unwrap_or_else(|| panic!("prompts/{prompt}.txt is not a built-in prompt"));
            // The built-in text is the file, byte for byte (the golden script reads the file).
            let file =
                std::fs::read_to_string(repo_root().join(format!("prompts/{prompt}.txt"))).unwrap();
            assert_eq!(
                text, file,
                "built-in `{prompt}` differs from prompts/{prompt}.txt"
            );
            let ids = tok.encode(text).unwrap_or_else(|e| panic!("{e}"));
            for mode in ["f64", "f32", "bf16", "hf64"] {
                let path = state_path(model_name, prompt, mode);
                // golden/make.py's MODES_FOR_PROMPT (hf64 is summarised, not stored): a file
                // missing from that set fails here instead of dropping out of the check.
                let stored = matches!(
                    (prompt.as_str(), mode),
                    ("fizzbuzz", "f64" | "f32" | "bf16") | ("fibonacci", "f64")
                );
                assert_eq!(
                    path.exists(),
                    stored,
                    "{}: stored or not, against golden/make.py's MODES_FOR_PROMPT",
                    path.display()
                );
                if !stored {
                    continue;
                }
                let state = load_state(&path);
                assert_eq!(
                    ids,
                    state.ids,
                    "{model_name}/{prompt}: tokenizers-crate ids differ from {}",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    eprintln!("{checked} (model, prompt, mode) state files have the tokenizer's ids");
    assert!(checked > 0, "no state files found");
}

#[test]
fn capturing_ops_changes_no_result() {
    // `--ops` must only observe: for every backend, the hidden states with op capture are
    // bit-identical to those without, and every op capture is finite.
    let backends = cpu_backends();
    for &model_name in GOLDEN_MODELS {
        let model = load_model(&golden_model_dir(model_name));
        let ids = load_state(&state_path(model_name, "fizzbuzz", "f64")).ids;
        for (bname, backend) in &backends {
            for dtype in [DType::F64, DType::F32, DType::BF16] {
                let tag = format!("{model_name}/fizzbuzz/{}/{bname}", dtype_name(dtype));
                let plain = run_model(&model, &ids, dtype, backend.as_ref(), false);
                let ops = run_model(&model, &ids, dtype, backend.as_ref(), true);
                assert!(
                    ops.len() > plain.len(),
                    "{tag}: --ops captured nothing more"
                );
                for (name, a) in plain.iter() {
                    let b = ops
                        .get(name)
                        .unwrap_or_else(|| panic!("{tag}: `{name}` missing with ops"));
                    assert!(
                        raw_bits(a) == raw_bits(b),
                        "{tag}: `{name}` changes when ops are captured"
                    );
                }
                for (name, t) in ops.iter() {
                    if plain.get(name).is_none() {
                        assert!(
                            matches!(name, Key::Op(..)),
                            "{tag}: unexpected capture `{name}`"
                        );
                        if t.dtype().is_float() {
                            assert!(all_finite(t), "{tag}: `{name}` has non-finite values");
                        }
                    }
                }
            }
        }
    }
}

/// hsdiff's per-token router margins (`router.{i}.margin`): a diagnostic of its own, absent from
/// transformers' outputs.
fn is_router_margin(key: Key) -> bool {
    matches!(key, Key::Router(_, RouterField::Margin))
}
