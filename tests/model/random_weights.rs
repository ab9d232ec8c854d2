//! `--random-weights SEED`: the generated checkpoint has the names and shapes of a real checkpoint
//! of the same config (the golden models), the same SEED always gives the same run, and the CLI
//! works from a folder holding only config.json.

use crate::common;

use std::collections::BTreeMap;

use candle_core::DType;
use common::{GOLDEN_MODELS, all_finite, golden_model_dir, hsdiff, raw_bits, run_model};
use hsdiff::backends::Reference;
use hsdiff::capture::dump::Dump;
use hsdiff::model::Model;
use hsdiff::weights::checkpoint::Checkpoint;
use hsdiff::weights::config::ModelConfig;
use hsdiff::weights::random_weights::{checkpoint_tensors, layout_for};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The text model's tensors of a real checkpoint (no vision tower, no multi-token prediction).
fn text_tensors(ckpt: &Checkpoint) -> BTreeMap<String, Vec<usize>> {
    ckpt.raw_tensors()
        .filter(|(name, _)| !name.starts_with("model.visual.") && !name.starts_with("mtp."))
        .map(|(name, raw)| {
            let (info, _) = raw.unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.to_string(), info.shape.clone())
        })
        .collect()
}

#[test]
fn names_and_shapes_match_the_golden_checkpoints() {
    for name in GOLDEN_MODELS {
        let dir = golden_model_dir(name);
        let cfg = ModelConfig::from_file(&dir.join("config.json")).unwrap();
        let ckpt = Checkpoint::open(&dir).unwrap();
        let layout = layout_for(&cfg);
        assert_eq!(&layout, ckpt.layout(), "{name}: key layout");
        let generated = checkpoint_tensors(&cfg, &layout);
        let real = text_tensors(&ckpt);
        let only_real: Vec<_> = real
            .keys()
            .filter(|k| !generated.contains_key(*k))
            .collect();
        let only_generated: Vec<_> = generated
            .keys()
            .filter(|k| !real.contains_key(*k))
            .collect();
        assert!(
            only_real.is_empty() && only_generated.is_empty(),
            "{name}: only in the checkpoint {only_real:?}; only generated {only_generated:?}"
        );
        for (tensor, shape) in &real {
            assert_eq!(&generated[tensor], shape, "{name}: shape of {tensor}");
        }
    }
}

fn random_ids(seed: u64, vocab: usize, n: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..vocab as u32)).collect()
}

#[test]
fn the_same_seed_gives_bit_identical_runs_and_another_seed_does_not() {
    for name in GOLDEN_MODELS {
        let dir = golden_model_dir(name);
        let a = Model::load_random(&dir, 7).unwrap();
        let b = Model::load_random(&dir, 7).unwrap();
        let c = Model::load_random(&dir, 8).unwrap();
        let ids = random_ids(0x5eed, a.config.vocab_size, 70);
        let backend = Reference;
        let ca = run_model(&a, &ids, DType::F32, &backend, false);
        let cb = run_model(&b, &ids, DType::F32, &backend, false);
        let cc = run_model(&c, &ids, DType::F32, &backend, false);
        assert!(ca.keys().eq(cb.keys()), "{name}");
        for (tensor, t) in ca.iter() {
            let other = cb.get(tensor).unwrap();
            assert_eq!(
                raw_bits(t),
                raw_bits(other),
                "{name}: {tensor} differs between runs"
            );
            if t.dtype().is_float() {
                assert!(all_finite(t), "{name}: {tensor} has non-finite values");
            }
        }
        let logits = |caps: &hsdiff::capture::Captures| {
            raw_bits(caps.get(hsdiff::capture::Key::Logits).unwrap())
        };
        assert_ne!(
            logits(&ca),
            logits(&cc),
            "{name}: seeds 7 and 8 gave the same logits"
        );
    }
}

#[test]
fn dump_runs_from_a_folder_holding_only_config_json() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(
        golden_model_dir("qwen3_next_moe_tiny").join("config.json"),
        model.join("config.json"),
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let out = tmp.path().join("d.safetensors");
    let o = out.to_str().unwrap();

    // No tokenizer.json: the input must come as token ids, and the message says so.
    let r = hsdiff(
        &["dump", "--model", m, "--random-weights", "7", "--out", o],
        tmp.path(),
    );
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.starts_with("hsdiff: error:")
            && err.contains("tokenizer.json")
            && err.contains("--tokens"),
        "{err}"
    );

    let r = hsdiff(
        &[
            "dump",
            "--model",
            m,
            "--random-weights",
            "7",
            "--tokens",
            "3,1,4,1,5,9,2,6",
            "--dtype",
            "f64",
            "--out",
            o,
        ],
        tmp.path(),
    );
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let dump = Dump::open(&out).unwrap();
    let fp = dump.fingerprint.clone().expect("fingerprint");
    assert_eq!(
        fp.weights_digest.as_deref(),
        Some("random-weights-v1:seed=7")
    );
    let logits = dump.tensor("logits").unwrap();
    assert_eq!(logits.dims(), &[1, 8, 384]);
    assert!(all_finite(&logits));
}

#[test]
fn kept_weights_give_bit_identical_passes() {
    // A live run keeps the session dtype's weights across its passes (MoE experts and lm_head
    // blocks included): the second and third pass must equal a pass that read everything afresh.
    let dir = golden_model_dir("qwen3_next_moe_tiny");
    let fresh = Model::load_random(&dir, 5).unwrap();
    let kept = Model::load_random(&dir, 5).unwrap();
    assert!(kept.keep_weights(DType::F32, &candle_core::Device::Cpu));
    let ids = random_ids(0xcafe, fresh.config.vocab_size, 40);
    let backend = Reference;
    let want = run_model(&fresh, &ids, DType::F32, &backend, false);
    for pass in 0..3 {
        let got = run_model(&kept, &ids, DType::F32, &backend, false);
        for (tensor, t) in want.iter() {
            assert_eq!(
                raw_bits(t),
                raw_bits(got.get(tensor).unwrap()),
                "pass {pass}: {tensor}"
            );
        }
    }
}
