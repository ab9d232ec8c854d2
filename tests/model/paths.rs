//! `hsdiff paths`: on the golden models every path of every backend is ok at f64 and f32; a
//! test backend with each planted path bug is flagged at the right position and the known-bug
//! signature is named.

use crate::common;

use candle_core::{DType, Device, Tensor};
use common::*;
use hsdiff::backends::{
    DeltaInputs, GdnInputs, GdnOutputs, LinearAttentionBackend, Reference, available_backends,
    backend_by_name, forward_documents,
};
use hsdiff::commands::exec_paths::{
    PathKind, PathResult, PathsReport, RULES, plan_paths, run_paths,
};
use hsdiff::compare::verdict::Verdict;
use hsdiff::error::Result;
use hsdiff::model::Model;
use hsdiff::util::input::{Tokenizer, builtin_prompt};

fn fizzbuzz_ids(model: &str) -> Vec<u32> {
    let tok = Tokenizer::from_file(&golden_model_dir(model).join("tokenizer.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    tok.encode(builtin_prompt("fizzbuzz").expect("fizzbuzz"))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn all_paths(
    model: &Model,
    ids: &[u32],
    b: &dyn LinearAttentionBackend,
    dtype: DType,
) -> PathsReport {
    let (plans, skipped) = plan_paths(&PathKind::ALL, ids.len(), 12);
    assert!(
        skipped.is_empty(),
        "fizzbuzz is long enough for every path: {skipped:?}"
    );
    run_paths(model, ids, b, dtype, &Device::Cpu, &plans, skipped)
        .unwrap_or_else(|e| panic!("paths ({}, {dtype:?}): {e}", b.name()))
}

fn path<'r>(r: &'r PathsReport, name: &str) -> &'r PathResult {
    r.paths.iter().find(|p| p.name == name).unwrap_or_else(|| {
        panic!(
            "no path `{name}` in {:?}",
            r.paths.iter().map(|p| &p.name).collect::<Vec<_>>()
        )
    })
}

fn signature_of(p: &PathResult) -> Option<&'static str> {
    p.signature.as_ref().map(|s| s.name)
}

#[test]
fn every_path_of_every_backend_is_ok_at_f64_and_f32_on_the_golden_models() {
    let mut failures = Vec::new();
    for &model_name in GOLDEN_MODELS {
        let model = load_model(&golden_model_dir(model_name));
        let ids = fizzbuzz_ids(model_name);
        for info in available_backends() {
            let b = backend_by_name(info.name, &Device::Cpu).expect("cpu backend");
            for dtype in [DType::F64, DType::F32] {
                let r = all_paths(&model, &ids, b.as_ref(), dtype);
                assert_eq!(r.paths.len(), 11);
                for p in &r.paths {
                    eprintln!(
                        "{model_name:<20} {:<9} {dtype:?} {:<30} worst {:.2e} ×floor {:>5} state {:>9}",
                        info.name,
                        p.name,
                        p.worst_rel_l2,
                        p.worst_ratio_to_floor
                            .map_or("—".into(), |x| format!("{x:.1}")),
                        p.state_recurrent_rel_l2
                            .map_or("—".into(), |x| format!("{x:.2e}")),
                    );
                    assert!(p.worst_rel_l2.is_finite(), "{}: NaN error", p.name);
                    if p.verdict != Verdict::Ok {
                        failures.push(format!(
                            "{model_name} {} {dtype:?} {}: {}",
                            info.name,
                            p.name,
                            p.verdict.as_str()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "paths flagged on a correct backend:\n{}",
        failures.join("\n")
    );
}

/// The reference backend with one thing changed, to plant a path bug.
struct Planted {
    bug: Bug,
}

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    /// A prefill pads the last chunk with copies of the last token, which update the state
    /// (the outputs of the real tokens stay right: the damage is only in the state).
    PadTokensUpdateState,
    /// Packed documents run as one sequence: the state is not reset at the boundary.
    NoResetAtPackedBoundary,
    /// The decode step stores the recurrent state at f16.
    F16DecodeState,
}

impl LinearAttentionBackend for Planted {
    fn name(&self) -> &'static str {
        "planted"
    }
    fn implementation(&self, _: &Device) -> String {
        "planted/test".into()
    }
    fn conv1d_silu(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        Reference.conv1d_silu(x, w)
    }
    fn gated_delta_rule(&self, x: DeltaInputs, s0: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let t = x.q.dim(1)?;
        if self.bug != Bug::PadTokensUpdateState || t % 64 == 0 {
            return Reference.gated_delta_rule(x, s0);
        }
        let pad = t.div_ceil(64) * 64 - t;
        let extend = |x: &Tensor| -> Result<Tensor> {
            let last = x.narrow(1, t - 1, 1)?;
            let mut dims = x.dims().to_vec();
            dims[1] = pad;
            Ok(Tensor::cat(
                &[x, &last.broadcast_as(dims)?.contiguous()?],
                1,
            )?)
        };
        let (q, k, v, g, beta) = (
            extend(x.q)?,
            extend(x.k)?,
            extend(x.v)?,
            extend(x.g)?,
            extend(x.beta)?,
        );
        let padded = DeltaInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
        };
        let (out, state) = Reference.gated_delta_rule(padded, s0)?;
        Ok((out.narrow(1, 0, t)?, state))
    }
    fn gated_delta_rule_step(&self, x: DeltaInputs, state: &Tensor) -> Result<(Tensor, Tensor)> {
        let (out, s) = Reference.gated_delta_rule(x, Some(state))?;
        if self.bug == Bug::F16DecodeState {
            let acc = s.dtype();
            return Ok((out, s.to_dtype(DType::F16)?.to_dtype(acc)?));
        }
        Ok((out, s))
    }
    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
        Reference.gated_rms_norm(x, z, w, eps)
    }
    fn forward_packed(
        &self,
        inputs: &GdnInputs,
        starts: &[usize],
        ops: bool,
    ) -> Result<GdnOutputs> {
        if self.bug == Bug::NoResetAtPackedBoundary {
            return self.forward(inputs, ops);
        }
        forward_documents(self, inputs, starts, ops)
    }
}

fn planted(bug: Bug) -> PathsReport {
    let model = load_model(&golden_model_dir("qwen3_5_tiny"));
    let ids = fizzbuzz_ids("qwen3_5_tiny");
    let r = all_paths(&model, &ids, &Planted { bug }, DType::F32);
    for p in &r.paths {
        eprintln!(
            "{:<30} {:<8} departs {:>5} worst {:.2e} sig {:?}",
            p.name,
            p.verdict.as_str(),
            p.departs_at.map_or("—".into(), |x| x.to_string()),
            p.worst_rel_l2,
            signature_of(p)
        );
    }
    r
}

#[test]
fn pad_tokens_updating_the_state_are_flagged_where_the_prefix_is_not_a_whole_chunk() {
    let r = planted(Bug::PadTokensUpdateState);
    let sig = RULES[0].name;
    let aligned = path(&r, "decode from 63");
    assert_eq!(aligned.verdict, Verdict::Ok, "64-token prefix: no padding");
    // Its full-prefill counterpart (79 tokens) pads, so the states differ: seen, apart.
    assert_ne!(aligned.state_verdict, Verdict::Ok);
    assert_eq!(path(&r, "chunked-prefill 64+91").verdict, Verdict::Ok);
    for (name, departs) in [
        ("decode from 100", 101),
        ("chunked-prefill 63+92", 63),
        ("chunked-prefill 65+90", 65),
    ] {
        let p = path(&r, name);
        assert_ne!(p.verdict, Verdict::Ok, "{name}");
        assert_eq!(p.departs_at, Some(departs), "{name}");
        assert_eq!(signature_of(p), Some(sig), "{name}");
        assert!(
            p.state_recurrent_rel_l2.is_some_and(|e| e > 1e-3),
            "{name}: the state carries the damage"
        );
    }
    assert_eq!(path(&r, "packed 77+78").verdict, Verdict::Ok);
    assert!(r.summary.contains(sig), "{}", r.summary);
}

#[test]
fn a_missing_state_reset_at_the_packed_boundary_is_flagged_at_the_boundary() {
    let r = planted(Bug::NoResetAtPackedBoundary);
    let p = path(&r, "packed 77+78");
    assert_ne!(p.verdict, Verdict::Ok);
    assert_eq!(p.departs_at, Some(77));
    assert_eq!(signature_of(p), Some(RULES[1].name));
    let others: Vec<&str> = r
        .paths
        .iter()
        .filter(|q| q.kind != "packed" && q.verdict != Verdict::Ok)
        .map(|q| q.name.as_str())
        .collect();
    assert!(
        others.is_empty(),
        "only the packed path may diverge: {others:?}"
    );
}

#[test]
fn an_f16_decode_state_is_flagged_from_the_first_step_and_named() {
    let r = planted(Bug::F16DecodeState);
    // The first step reads the prefill's exact state and stores its result at f16: the step
    // after it (P + 2) is the first to read a rounded state.
    for (name, departs) in [("decode from 63", 65), ("decode from 100", 102)] {
        let p = path(&r, name);
        assert_ne!(p.verdict, Verdict::Ok, "{name}");
        assert_eq!(p.departs_at, Some(departs), "{name}");
        assert_eq!(signature_of(p), Some(RULES[2].name), "{name}");
    }
    let evidence = &path(&r, "decode from 100")
        .signature
        .as_ref()
        .expect("signature")
        .evidence;
    assert!(evidence.contains("state-dtype f16"), "{evidence}");
    for p in r
        .paths
        .iter()
        .filter(|p| p.kind == "chunked-prefill" || p.kind == "packed" || p.kind == "padded")
    {
        assert_eq!(
            p.verdict,
            Verdict::Ok,
            "{} never takes the decode step",
            p.name
        );
    }
}

#[test]
fn paths_cli_writes_json_and_refuses_unknown_paths() {
    let dir = tempdir();
    let out = hsdiff(
        &[
            "paths",
            "--backend",
            "chunked",
            "--paths",
            "decode,packed",
            "--format",
            "json",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&out)).expect("JSON");
    let paths = v["paths"].as_array().expect("paths array");
    assert_eq!(paths.len(), 3);
    for p in paths {
        assert_eq!(p["verdict"], "ok");
        assert!(p["rows"].as_array().is_some_and(|r| {
            r.iter()
                .any(|x| x["name"] == "logits" && x["floor"].is_number())
        }));
    }
    let bad = hsdiff(&["paths", "--paths", "decode,sideways"], dir.path());
    assert_eq!(bad.status.code(), Some(2));
    let err = stderr_of(&bad);
    assert!(
        err.starts_with("hsdiff: error: ") && err.contains("sideways"),
        "{err}"
    );

    // An output that cannot be written is refused before any path runs, and nothing is written.
    let folder = dir.path().join("a-folder");
    std::fs::create_dir(&folder).expect("mkdir");
    let folder_arg = folder.to_string_lossy().to_string();
    let bad = hsdiff(
        &["paths", "--paths", "decode", "--out", &folder_arg],
        dir.path(),
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = stderr_of(&bad);
    assert!(
        err.starts_with("hsdiff: error: ") && err.contains("--out") && !err.contains("decode"),
        "{err}"
    );
    assert!(folder.is_dir());
}
