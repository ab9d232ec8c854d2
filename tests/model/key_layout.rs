//! The same weights under the two key layouts — Qwen3.5's vision-language
//! `model.language_model.*` (plus `model.visual.*`) and the text-only `model.*` — give
//! bit-identical captures, and the checkpoint says which layout it found.

use crate::common;

use candle_core::DType;
use common::*;
use hsdiff::backends::backend_by_name;
use hsdiff::weights::checkpoint::KeyLayout;

/// A text-only copy of golden/qwen3_5_tiny: `model.language_model.` → `model.`, the vision
/// tower dropped, `lm_head.weight` and config.json kept.
fn text_only_copy() -> tempfile::TempDir {
    let dir = golden_copy("qwen3_5_tiny");
    let st = dir.path().join("model.safetensors");
    let mut dropped = 0usize;
    rewrite_safetensors(&st, |name| {
        if name.starts_with("model.visual.") {
            dropped += 1;
            Edit::Drop
        } else if let Some(rest) = name.strip_prefix("model.language_model.") {
            Edit::Rename(format!("model.{rest}"))
        } else {
            Edit::Keep
        }
    });
    assert!(
        dropped > 0,
        "the golden Qwen3.5 checkpoint has no vision tower?"
    );
    let names = safetensors_names(&st);
    assert!(names.iter().any(|n| n == "model.embed_tokens.weight"));
    assert!(names.iter().any(|n| n == "lm_head.weight"));
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("model.language_model.") || n.starts_with("model.visual.")),
        "rewrite left vision-language keys: {names:?}"
    );
    dir
}

#[test]
fn text_only_layout_gives_bit_identical_captures() {
    let vl = load_model(&golden_model_dir("qwen3_5_tiny"));
    let copy = text_only_copy();
    let text = load_model(copy.path());
    assert_eq!(*vl.layout(), KeyLayout::VisionLanguage);
    assert_eq!(*text.layout(), KeyLayout::TextOnly);
    assert_eq!(vl.layout().root(), "model.language_model.");
    assert_eq!(text.layout().root(), "model.");

    let ids = load_state(&state_path("qwen3_5_tiny", "fizzbuzz", "f64")).ids;
    let backend = backend_by_name("reference", &candle_core::Device::Cpu).unwrap();
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        for ops in [false, true] {
            let a = run_model(&vl, &ids, dtype, backend.as_ref(), ops);
            let b = run_model(&text, &ids, dtype, backend.as_ref(), ops);
            assert!(a.keys().eq(b.keys()), "{dtype:?} ops={ops}: capture names");
            assert!(!a.is_empty());
            for (name, ta) in a.iter() {
                let tb = b.get(name).unwrap();
                assert_eq!(ta.dims(), tb.dims(), "{dtype:?}: `{name}` shape");
                assert_eq!(ta.dtype(), tb.dtype(), "{dtype:?}: `{name}` dtype");
                assert!(
                    raw_bits(ta) == raw_bits(tb),
                    "{dtype:?} ops={ops}: `{name}` is not bit-identical across key layouts"
                );
            }
        }
    }
}

#[test]
fn dump_reports_the_detected_layout() {
    let copy = text_only_copy();
    let work = tempdir();
    for (dir, layout) in [
        (
            golden_model_dir("qwen3_5_tiny"),
            "model.language_model.layers.*",
        ),
        (copy.path().to_path_buf(), "model.layers.*"),
    ] {
        let out = work.path().join("x.safetensors");
        let o = hsdiff(
            &[
                "dump",
                "--model",
                dir.to_str().unwrap(),
                "--backend",
                "reference",
                "--prompt",
                "fizzbuzz",
                "--out",
                out.to_str().unwrap(),
            ],
            work.path(),
        );
        let err = stderr_of(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(
            err.contains(&format!("key layout {layout}")),
            "stderr does not name layout {layout}: {err}"
        );
        let dump = hsdiff::capture::dump::Dump::open(&out).unwrap();
        let fp = dump.fingerprint.expect("fingerprint");
        assert_eq!(fp.key_layout.as_deref(), Some(layout));
    }
}
