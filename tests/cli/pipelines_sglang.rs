//! SGLang's own dumps (`tests/fixtures/pipelines/{model}/sglang/`, emulated from SGLang's code by
//! `tests/fixtures/pipelines/make.py` from transformers forwards of both golden models): the
//! dumper's `{value, meta}` files and the `Pass{n}.pt` tensor dump read with the right layers
//! (each layer's output rebuilt from SGLang's hidden_states / residual pair), tensor-parallel
//! shards joined by their `dims` or refused without, and a SpecForge DFlash training dump
//! paired with an SGLang eval dump of the same prompts (the layer-id +1 handled), the planted
//! bug named with its sample and layer.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

const MODELS: [&str; 2] = ["qwen3_5_tiny", "qwen3_next_moe_tiny"];

fn fx(model: &str, rel: &str) -> String {
    common::repo_root()
        .join("tests/fixtures/pipelines")
        .join(model)
        .join(rel)
        .display()
        .to_string()
}

fn model_dir(model: &str) -> String {
    common::golden_model_dir(model).display().to_string()
}

/// The one folder of dumper files under `rel` (the dumper's experiment folder).
fn exp_dir(model: &str, rel: &str) -> PathBuf {
    let root = PathBuf::from(fx(model, rel));
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{}", root.display());
    dirs.remove(0)
}

/// A file of forward pass `step` in a dumper folder.
fn step_file(dir: &Path, step: usize, name: &str) -> PathBuf {
    let prefix = format!("step={step}___");
    let infix = format!("___name={name}___");
    std::fs::read_dir(dir)
        .expect("dumper folder")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            let f = p.file_name().expect("name").to_string_lossy().into_owned();
            f.starts_with(&prefix)
                && (f.contains(&infix) || f.ends_with(&format!("___name={name}.pt")))
        })
        .unwrap_or_else(|| panic!("no {name} of step {step} in {}", dir.display()))
}

/// The layers the fixture script filtered SGLang's dumper to.
fn sglang_ids(model: &str) -> [usize; 3] {
    match model {
        "qwen3_5_tiny" => [1, 4, 6],
        _ => [1, 3, 5],
    }
}

fn planted(model: &str) -> &'static str {
    match model {
        "qwen3_5_tiny" => "layers.4",
        _ => "layers.3",
    }
}

fn json(a: &str, b: &str, extra: &[&str]) -> (i32, Value, String) {
    common::compare_json(Path::new(a), Path::new(b), extra)
}

fn max_x_floor(r: &Value) -> f64 {
    r["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["ratio_to_floor"].as_f64().unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max)
}

/// A report's notes: a pair report's `notes`; a dataset report's run notes and sample notes.
fn notes(r: &Value) -> String {
    let empty = Vec::new();
    let of = |key: &str| r[key].as_array().unwrap_or(&empty).clone();
    of("notes")
        .into_iter()
        .chain(of("sample_notes"))
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// One forward pass of the dumper against the eval box's hsdiff capture of the same prompt,
/// calibrated: the dumped layers, each rebuilt as hidden_states + residual, within the floor
/// (reading `output.0` alone, or an index off by one, would be far outside it), and the
/// reading stated.
#[test]
fn dumper_pass_read_with_its_layers() {
    for model in MODELS {
        let dir = exp_dir(model, "sglang/dumper");
        let file = step_file(&dir, 0, "input_ids");
        let eval = fx(model, "eval/prompt_0.safetensors");
        let m = model_dir(model);
        let (code, r, err) = json(&file.display().to_string(), &eval, &["--model", &m]);
        assert_eq!(code, 0, "{model}: {}\n{err}", r["summary"]);
        let mut want: Vec<String> = sglang_ids(model)
            .iter()
            .map(|n| format!("layers.{n}"))
            .collect();
        want.push("final_norm".to_string());
        assert_eq!(common::row_names(&r), want, "{model}");
        let x = max_x_floor(&r);
        assert!(x < 2.0, "{model}: {x}× the floor");
        let n = notes(&r);
        assert!(
            n.contains("sglang-dumper") && n.contains("layers.N = hidden_states + residual"),
            "{model}: {n}"
        );
        assert!(err.contains("sglang-dumper"), "stated on stderr: {err}");
        // Each hidden state is compared at every one of the prompt's positions.
        for t in r["tensors"].as_array().expect("tensors") {
            assert!(t["verdict"] == "ok", "{model}: {t}");
        }
    }
}

/// The tensor dump's `Pass{n}.pt`: every layer's output from the fused add-norms' residual
/// outputs (`model.layers.N+1.input_layernorm`, `model.norm`), the embedding and the final norm.
#[test]
fn tensor_dump_pass_read_with_its_layers() {
    for model in MODELS {
        let pass = fx(
            model,
            "sglang/tensor_dump/TP0_PP0_Rank0_pid4242/Pass00001.pt",
        );
        let eval = fx(model, "eval/prompt_1.safetensors");
        let m = model_dir(model);
        let (code, r, err) = json(&pass, &eval, &["--model", &m]);
        assert_eq!(code, 0, "{model}: {}\n{err}", r["summary"]);
        let layers = if model == "qwen3_5_tiny" { 8 } else { 6 };
        let mut want = vec!["embed".to_string()];
        want.extend((0..layers).map(|n| format!("layers.{n}")));
        want.push("final_norm".to_string());
        let got = common::row_names(&r);
        for w in &want {
            assert!(got.contains(w), "{model}: {w} not in {got:?}");
        }
        // The same eager bf16 forward as the eval box's capture: every layer read at the right
        // index is equal bit for bit (one off would be a different layer).
        let summary = r["summary"].as_str().expect("summary");
        assert!(
            summary.contains("identical (bit for bit)") || max_x_floor(&r) < 2.0,
            "{model}: {summary}"
        );
        assert!(notes(&r).contains("sglang-tensor-dump"), "{model}");
    }
}

/// Two tensor-parallel ranks whose meta says how they join (`t h[tp]`: half the columns each;
/// `t h # tp:replicated`: whole copies) read as the one-rank dump of the same forward pass.
#[test]
fn tensor_parallel_shards_joined() {
    let model = "qwen3_5_tiny";
    let tp2 = exp_dir(model, "sglang/dumper_tp2");
    let tp1 = exp_dir(model, "sglang/dumper");
    let (code, r, err) = json(
        &tp2.display().to_string(),
        &tp1.display().to_string(),
        &["--no-floor"],
    );
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    let samples = r["samples"].as_array().expect("samples");
    assert_eq!(samples.len(), 2, "{}", r["samples"]);
    for s in samples {
        assert_eq!(s["paired_by"], "id", "{s}");
        // The same tensors, split and joined: exact.
        assert_eq!(s["worst_rel_l2"].as_f64(), Some(0.0), "{s}");
    }
    assert!(
        err.contains("2 ranks concatenated along axis 1")
            && err.contains("2 ranks one copy of identical ones (tp:replicated)"),
        "{err}"
    );
}

/// The same ranks without `dims`: refused, naming the tensor, the ranks and shapes seen.
#[test]
fn unjoinable_shards_refused() {
    let model = "qwen3_5_tiny";
    let dir = exp_dir(model, "sglang/dumper_tp2_nodims");
    let eval = fx(model, "eval/prompt_0.safetensors");
    let out = common::hsdiff(
        &["compare", &dir.display().to_string(), &eval],
        &common::repo_root(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr_of(&out);
    assert!(
        err.contains(
            "sglang-dumper (step 0): `non_intrusive__model.layers.1.output.0` is dumped by 2 of \
             tp_size 2 ranks (rank 0 [10, 32], rank 1 [10, 32]) and its meta has no `dims` saying \
             how they join (split along an axis, tp:partial sums or tp:replicated): refused, as \
             whole copies and partial sums look alike"
        ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// The brief's case: a SpecForge DFlash training dump (ids = outputs of layers N) against an
/// SGLang eval dump of the same prompts — dumped at the layers' outputs, and at the inputs of
/// layer N+1 (SGLang's +1) — paired by token ids; the honest samples are ok, the planted bug
/// is named with its sample and layer, and rows only one side holds are listed, not compared.
#[test]
fn specforge_training_dump_vs_sglang_eval_dump() {
    for model in MODELS {
        let cfg = fx(model, "draft_config.json");
        let m = model_dir(model);
        let mut evals = vec![("outputs", exp_dir(model, "sglang/dumper"))];
        if model == "qwen3_5_tiny" {
            evals.push(("inputs of N+1", exp_dir(model, "sglang/dumper_inputs")));
        }
        for (how, eval) in evals {
            let (code, r, err) = json(
                &fx(model, "specforge_dflash"),
                &eval.display().to_string(),
                &["--draft-config", &cfg, "--model", &m],
            );
            assert_eq!(code, 1, "{model} {how}: {}\n{err}", r["summary"]);
            assert_eq!(r["schema"], "hsdiff.dataset/v1");
            let bad = common::dataset_sample(&r, "1");
            assert_eq!(bad["verdict"], "mismatch", "{model} {how}: {bad}");
            assert_eq!(bad["first_divergent"], planted(model), "{model} {how}");
            assert_eq!(bad["paired_by"], "token ids");
            assert_eq!(bad["id_b"], "step=1");
            let s = common::dataset_sample(&r, "0");
            assert_eq!(s["verdict"], "ok", "{model} {how}: {s}");
            assert!(s["worst_x_floor"].as_f64().expect("x") < 2.0, "{s}");
            if how == "outputs" {
                let s = common::dataset_sample(&r, "2");
                assert_eq!(s["verdict"], "ok", "{model} {how}: {s}");
            }
            assert!(common::sample_ids(&r["unpaired_a"]).contains(&"3".to_string()));
            let layer = r["layers"]
                .as_array()
                .expect("layers")
                .iter()
                .find(|l| l["name"] == planted(model))
                .unwrap_or_else(|| panic!("{model} {how}: no planted row: {}", r["layers"]));
            assert_eq!(layer["worst_sample"], "1");
            assert_eq!(layer["flagged"], 1);
            assert!(err.contains("sglang-dumper"), "{err}");
        }
    }
}

/// A batch padded with zeros and no `attention_mask`: the positions zero in every hidden state
/// of both sides are padding, left out and counted in the report; the compared samples are ok
/// (with the truth run on the real tokens only: compared, the padded rows would be 100 % off
/// the truth).
#[test]
fn zero_padding_on_both_sides_left_out() {
    let model = "qwen3_5_tiny";
    let batch = fx(model, "specforge_dflash_batch_nomask/batch.ckpt");
    let cfg = fx(model, "draft_config.json");
    let m = model_dir(model);
    let (code, r, err) = json(&batch, &batch, &["--draft-config", &cfg, "--model", &m]);
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    let positions: Vec<u64> = r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| s["positions"].as_u64().expect("positions"))
        .collect();
    // The prompts are 10, 13 and 16 tokens long, padded to 16.
    assert_eq!(positions, [10, 13, 16]);
    assert!(
        notes(&r).contains(
            "zero padding left out in 2 sample(s) (positions zero in every hidden state of both \
             sides, no attention_mask: no forward writes an all-zero hidden state): batch#0 6 of \
             16, batch#1 3 of 16"
        ),
        "{}",
        r["notes"]
    );
}

/// A real position zeroed on every layer of ONE side is no padding: it stays compared and the
/// sample is flagged from the first layer; the padding both sides share is still left out.
#[test]
fn zero_row_on_one_side_is_flagged() {
    let model = "qwen3_5_tiny";
    let (code, r, err) = json(
        &fx(model, "specforge_dflash_batch_nomask/batch.ckpt"),
        &fx(
            model,
            "specforge_dflash_batch_nomask_zeroed/batch_zeroed.ckpt",
        ),
        &[
            "--draft-config",
            &fx(model, "draft_config.json"),
            "--model",
            &model_dir(model),
        ],
    );
    assert_eq!(code, 1, "{}\n{err}", r["summary"]);
    let bad = common::dataset_sample(&r, "batch#2");
    assert_eq!(bad["verdict"], "mismatch", "{bad}");
    assert_eq!(bad["first_divergent"], "layers.1");
    assert_eq!(bad["positions"], 16, "the zeroed position is compared");
    for id in ["batch#0", "batch#1"] {
        assert_eq!(common::dataset_sample(&r, id)["verdict"], "ok", "{id}");
    }
    assert!(
        notes(&r).contains("batch#0 6 of 16, batch#1 3 of 16"),
        "{}",
        r["notes"]
    );
}

/// The zero padding note is drawn from the samples' rows, so two shards merged say what the
/// whole run says — each shard saw one padded sample only.
#[test]
fn zero_padding_note_survives_a_merge() {
    let model = "qwen3_5_tiny";
    let batch = fx(model, "specforge_dflash_batch_nomask/batch.ckpt");
    let cfg = fx(model, "draft_config.json");
    let (code, mut whole, err) = json(&batch, &batch, &["--draft-config", &cfg, "--no-floor"]);
    assert_eq!(code, 0, "{}\n{err}", whole["summary"]);
    let dir = std::env::temp_dir().join(format!("hsdiff-padding-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut parts = Vec::new();
    for i in 0..2 {
        let out = dir.join(format!("part{i}.json")).display().to_string();
        let shard = format!("{i}/2");
        let o = common::hsdiff(
            &[
                "compare",
                &batch,
                &batch,
                "--draft-config",
                &cfg,
                "--no-floor",
                "--format",
                "json",
                "--out",
                &out,
                "--shard",
                &shard,
            ],
            &common::repo_root(),
        );
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
        let part: Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("part")).expect("JSON");
        assert!(
            !notes(&part).contains("batch#0 6 of 16, batch#1 3 of 16"),
            "shard {i}"
        );
        parts.push(out);
    }
    let mut args = vec!["merge", "--format", "json"];
    args.extend(parts.iter().map(String::as_str));
    let o = common::hsdiff(&args, &common::repo_root());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
    let mut merged: Value = serde_json::from_slice(&o.stdout).expect("merged JSON");
    assert!(
        notes(&merged).contains("batch#0 6 of 16, batch#1 3 of 16"),
        "{}",
        merged["sample_notes"]
    );
    for r in [&mut whole, &mut merged] {
        r.as_object_mut().expect("object").remove("command");
    }
    assert_eq!(merged, whole);
    std::fs::remove_dir_all(&dir).ok();
}

/// The dumper before `meta` (`forward_pass_id=…` names, the bare tensor): read alike.
#[test]
fn bare_tensor_dumper_read() {
    let model = "qwen3_5_tiny";
    let dir = exp_dir(model, "sglang/dumper_bare");
    let (code, r, err) = json(
        &dir.display().to_string(),
        &fx(model, "eval/prompt_0.safetensors"),
        &["--model", &model_dir(model)],
    );
    assert_eq!(code, 0, "{}\n{err}", r["summary"]);
    assert_eq!(common::sample_ids(&r["samples"]), ["forward_pass_id=1"]);
    assert_eq!(r["layers"][0]["name"], "layers.1", "{}", r["layers"]);
    assert!(
        r["formats_a"][0]
            .as_str()
            .expect("format")
            .contains("bare tensors or {value, meta}"),
        "{}",
        r["formats_a"]
    );
}

/// A forward pass batching two requests (prompts 0 and 1, `seq_lens` [10, 13]) is two samples,
/// each its own positions: paired by token ids with the eval box's captures of those prompts,
/// every layer within the floor — in both dump formats. Read as one sample, the pair would not
/// even share token ids.
#[test]
fn a_pass_of_several_requests_is_one_sample_each() {
    let model = "qwen3_5_tiny";
    let m = model_dir(model);
    let eval = fx(model, "eval");
    for dump in ["sglang/tensor_dump_batch", "sglang/dumper_batch"] {
        let (code, r, err) = json(&fx(model, dump), &eval, &["--model", &m]);
        assert_eq!(code, 0, "{dump}: {}\n{err}", r["summary"]);
        let samples = r["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), 2, "{dump}: {}", r["samples"]);
        for (k, s) in samples.iter().enumerate() {
            let id = s["id"].as_str().expect("id");
            assert!(id.ends_with(&format!("#{k}")), "{dump}: {id}");
            assert_eq!(s["id_b"], format!("prompt_{k}"), "{dump}");
            assert_eq!(s["positions"], [10, 13][k], "{dump}");
            assert_eq!(s["verdict"], "ok", "{dump}");
            let x = s["worst_x_floor"].as_f64().expect("calibrated");
            assert!(x < 2.0, "{dump}: sample {k} at {x}× the floor");
        }
        // The side's reading says what holds for every request, not request 0's positions.
        let reading = r["formats_a"][0].as_str().expect("format");
        assert!(
            reading.contains("each request of a pass one sample, its positions cut by seq_lens"),
            "{dump}: {reading}"
        );
        assert!(!err.contains("positions 0..10"), "{dump}: {err}");
        // Rows equal bit for bit aggregate to 0× the floor — the embedding too, whose floor is 0
        // (no ×floor of its own): never ∞.
        for l in r["layers"].as_array().expect("layers") {
            assert_eq!(l["max"], 0.0, "{dump}: {l}");
        }
    }
}

/// A decode pass (one token per request, `seq_lens` counting the requests' whole lengths) holds
/// fewer tokens than seq_lens says: its requests cannot be cut apart, and it is refused, naming
/// the file and why — never read as one sample of two tokens.
#[test]
fn a_decode_pass_of_several_requests_refused() {
    let model = "qwen3_5_tiny";
    let pass = fx(
        model,
        "sglang/tensor_dump_decode/TP0_PP0_Rank0_pid4242/Pass00000.pt",
    );
    let eval = fx(model, "eval/prompt_0.safetensors");
    let o = common::hsdiff(&["compare", &pass, &eval], &common::repo_root());
    let err = common::stderr_of(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("Pass00000.pt"), "{err}");
    assert!(
        err.contains("[10, 13] counts 23 tokens, the pass holds 2: a decode pass"),
        "{err}"
    );
}

/// The source of a pass's first request holds every request's token ids (read once with the
/// pass), equal to those of each request opened on its own: a dataset lists the requests without
/// reading the pass once per request.
#[test]
fn a_pass_read_once_gives_every_requests_ids() {
    use hsdiff::formats::FileSource;
    use hsdiff::formats::pipelines::ReadOptions;
    let model = "qwen3_5_tiny";
    for file in [
        "sglang/tensor_dump_batch/TP0_PP0_Rank0_pid4242/Pass00000.pt",
        "sglang/dumper_batch/dump_20261201_120000_000000/step=0___rank=0___dump_index=1___name=input_ids___recompute_status=disabled.pt",
    ] {
        let path = PathBuf::from(fx(model, file));
        let open = |b: usize| {
            let opts = ReadOptions {
                sample: Some(b),
                ..ReadOptions::default()
            };
            FileSource::open_with(&path, None, &opts).expect("opens")
        };
        let first = open(0);
        assert_eq!(first.samples_held(), 2, "{file}");
        for b in 0..2 {
            let held = first.held_input_ids(b).expect("held").expect("ids");
            let alone = open(b).input_ids().expect("ids").expect("some");
            assert_eq!(held, alone, "{file}: request {b}");
            assert_eq!(held.len(), [10, 13][b], "{file}: request {b}");
        }
        assert!(first.held_input_ids(2).is_none(), "{file}");
    }
}
