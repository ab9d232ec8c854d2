//! The divergence report end to end (issue #4):
//!
//! - `fused` vs `reference` at bf16 on both golden models is `ok`;
//! - a test-only backend (defined here, over the public `LinearAttentionBackend` trait) that
//!   injects a known error into the gated-norm output of its k-th call: `mismatch` with
//!   `first_divergent == "layers.{k}"` and exit code 1 in propagate mode, only layer k flagged in
//!   isolate mode, the gated-norm op row first with `--ops`-style capture, NaN counts for a NaN;
//! - snapshots of the terminal-table, markdown and JSON renderers on fixed synthetic data
//!   (`HSDIFF_UPDATE_SNAPSHOTS=1 cargo test --test cli report::` rewrites `tests/snapshots/`);
//! - the plot (`--plot`) in both formats, and its errors;
//! - exit codes through the built binary.
//!
//! Live reports are built the way `hsdiff --a X --b Y` builds them (src/cli/diff.rs): A and B at
//! the compute dtype, the `reference` backend at f64 as the truth, and the reference at the
//! compute dtype as the floor, all on the same input (fed A's captures in isolate mode).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use candle_core::{DType, Device, Tensor};
use hsdiff::backends::{
    BackendKind, DeltaInputs, GdnInputs, GdnOutputs, LinearAttentionBackend, Reference,
    backend_by_name,
};
use hsdiff::capture::dump::Dump;
use hsdiff::capture::fingerprint::Fingerprint;
use hsdiff::capture::{Key, Op};
use hsdiff::commands::live::{self, LiveRun, Mode};
use hsdiff::compare::Kind;
use hsdiff::compare::metrics::logits::LogitStats;
use hsdiff::compare::metrics::{DiffStats, Location};
use hsdiff::compare::verdict::{K_DRIFT, K_MISMATCH, Thresholds, Verdict};
use hsdiff::error::{Error, Result};
use hsdiff::job::Instead;
use hsdiff::job::session::Session;
use hsdiff::model::Model;
use hsdiff::printer::emit::{EnvList, FailOn, ReportOptions, emit};
use hsdiff::printer::markdown::Markdown;
use hsdiff::printer::plot::{Plot, PlotFormat, check_path, write_plot};
use hsdiff::printer::table::TerminalTable;
use hsdiff::printer::{Format, Json, Render};
use hsdiff::report::first_values::FirstNonFinite;
use hsdiff::report::{
    Inputs, Judgement, Lead, Report, ReportMode, RouterRow, RoutingFlip, SCHEMA, Side, Summary,
    TensorRow, ThresholdInfo, TokenIds,
};
use hsdiff::util::precision::LabelledDType;
use hsdiff::weights::config::LayerType;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// Live comparisons, as the CLI makes them
// ---------------------------------------------------------------------------------------------

fn builtin_session(dtype: DType) -> Session {
    let model = hsdiff::model::builtin::model().expect("built-in model");
    let text = hsdiff::util::input::builtin_prompt("fizzbuzz").expect("fizzbuzz prompt");
    let ids = hsdiff::model::builtin::tokenizer()
        .expect("built-in tokenizer")
        .encode(text)
        .expect("tokenise");
    Session {
        model,
        ids,
        prompt_label: Some("fizzbuzz".into()),
        dtype,
        device: Device::Cpu,
    }
}

fn golden_moe_session(dtype: DType) -> Session {
    let model = Model::load(&repo_root().join("golden/qwen3_next_moe_tiny")).expect("MoE model");
    let state = repo_root().join("golden/states/qwen3_next_moe_tiny/fizzbuzz.bf16.safetensors");
    let ids = Dump::open(&state)
        .and_then(|d| d.input_ids())
        .expect("golden state")
        .expect("golden state has input_ids");
    Session {
        model,
        ids,
        prompt_label: Some("fizzbuzz".into()),
        dtype,
        device: Device::Cpu,
    }
}

/// What `hsdiff --a A --b reference [--mode isolate] [--ops]` computes, as a report, with side
/// A run by `a` (a fault injector, or a backend of this build).
fn live_report(
    s: &Session,
    a: &dyn LinearAttentionBackend,
    b: &dyn LinearAttentionBackend,
    isolate: bool,
    ops: bool,
) -> Report {
    assert_eq!(b.name(), "reference", "side B is the reference backend");
    let run = LiveRun {
        // A kind that never stands in for a calibration run: `a` is what is under test.
        a: BackendKind::Fused,
        b: BackendKind::Reference,
        mode: if isolate {
            Mode::Isolate
        } else {
            Mode::Propagate
        },
        ops,
        no_floor: false,
        layers: None,
        command: None,
    };
    let instead = Instead {
        a: Some(a),
        b: None,
    };
    live::report_instead(s, &run, instead).expect("live run")
}

fn row<'a>(r: &'a Report, name: &str) -> &'a TensorRow {
    r.tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no row `{name}` in the report"))
}

/// The decoder index of the k-th (0-based) linear-attention layer.
fn linear_layer(model: &Model, k: usize) -> usize {
    model
        .config
        .layer_types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == LayerType::LinearAttention)
        .nth(k)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("the model has no linear-attention layer #{k}"))
}

fn flagged(r: &Report) -> Vec<String> {
    r.tensors
        .iter()
        .filter(|t| t.judgement.verdict != Verdict::Ok)
        .map(|t| format!("{} ({})", t.name, t.judgement.verdict.as_str()))
        .collect()
}

/// Report options writing to a file (nothing on stdout).
fn report_args(out: &Path, fail_on: FailOn) -> ReportOptions {
    ReportOptions {
        format: Format::Json,
        out: Some(out.to_path_buf()),
        fail_on,
        env: EnvList::Ran,
        plot: None,
    }
}

/// A text renderer's output as a string.
fn text(renderer: &dyn Render<Report>, r: &Report) -> String {
    String::from_utf8(renderer.render(r).expect("renders")).expect("UTF-8")
}

// ---------------------------------------------------------------------------------------------
// The fault-injecting backend
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Fault {
    /// Adds `scale` × RMS(output) × N(0, 1) noise (seeded) to every element.
    Noise { scale: f64, seed: u64 },
    /// Sets one element (token 10, channel 3) to NaN.
    Nan,
    /// Noise as `Noise` on the final recurrent state the layer returns; its output is untouched.
    StateNoise { scale: f64, seed: u64 },
}

/// `reference`, except that its `target`-th `forward` call (0-based, i.e. the target-th
/// linear-attention layer of the run) corrupts the gated-norm output.
struct Injector {
    inner: Reference,
    target: usize,
    fault: Fault,
    calls: AtomicUsize,
}

impl Injector {
    fn new(target: usize, fault: Fault) -> Self {
        Injector {
            inner: Reference,
            target,
            fault,
            calls: AtomicUsize::new(0),
        }
    }

    fn corrupt(&self, out: &Tensor) -> Result<Tensor> {
        let dims = out.dims().to_vec();
        let channels = dims.last().copied().unwrap_or(1);
        let mut v: Vec<f64> = out.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
        match self.fault {
            Fault::Noise { scale, seed } | Fault::StateNoise { scale, seed } => {
                let rms = (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt();
                let mut rng = StdRng::seed_from_u64(seed);
                let normal = Normal::new(0.0, scale * rms).map_err(|e| {
                    Error::backend("inject", format!("bad noise distribution: {e}"))
                })?;
                for x in &mut v {
                    *x += normal.sample(&mut rng);
                }
            }
            Fault::Nan => {
                let at = 10 * channels + 3;
                if let Some(x) = v.get_mut(at) {
                    *x = f64::NAN;
                }
            }
        }
        Ok(Tensor::from_vec(v, dims, out.device())?.to_dtype(out.dtype())?)
    }
}

impl LinearAttentionBackend for Injector {
    fn name(&self) -> &'static str {
        "inject"
    }

    fn implementation(&self, device: &Device) -> String {
        format!("inject/{}", self.inner.implementation(device))
    }

    fn conv1d_silu(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor> {
        self.inner.conv1d_silu(x, weight)
    }

    fn gated_delta_rule(&self, x: DeltaInputs, state: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        self.inner.gated_delta_rule(x, state)
    }

    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        self.inner.gated_rms_norm(x, z, weight, eps)
    }

    fn forward(&self, inputs: &GdnInputs, capture_ops: bool) -> Result<GdnOutputs> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let mut out = self.inner.forward(inputs, capture_ops)?;
        if call == self.target && matches!(self.fault, Fault::StateNoise { .. }) {
            out.recurrent = self.corrupt(&out.recurrent)?;
        } else if call == self.target {
            let bad = self.corrupt(&out.out)?;
            if let Some(ops) = &mut out.ops {
                ops.gated_norm_out = bad.clone();
            }
            out.out = bad;
        }
        Ok(out)
    }
}

/// The call to corrupt: the 4th linear-attention layer, whose decoder index (4 in the built-in
/// model, after the full-attention layer 3) differs from the call count.
const TARGET_CALL: usize = 3;
const NOISE: Fault = Fault::Noise {
    scale: 0.05,
    seed: 4,
};

// ---------------------------------------------------------------------------------------------
// Benign comparisons
// ---------------------------------------------------------------------------------------------

#[test]
fn fused_vs_reference_bf16_is_ok_on_the_builtin_model() {
    let s = builtin_session(DType::BF16);
    let fused = backend_by_name("fused", &Device::Cpu).expect("fused backend");
    let r = live_report(&s, fused.as_ref(), &Reference, false, false);
    assert_eq!(r.schema, SCHEMA);
    assert_eq!(
        r.verdict,
        Verdict::Ok,
        "{}\nflagged: {:?}",
        r.summary,
        flagged(&r)
    );
    assert_eq!(r.first_divergent, None);
    assert_eq!(r.summary.lead, Some(Lead::Benign), "{}", r.summary);
    // The floor is measured for every tensor, and it is not zero past the embedding.
    assert!(r.tensors.iter().all(|t| t.judgement.floor.is_some()));
    assert!(row(&r, "layers.0").judgement.floor.is_some_and(|f| f > 0.0));
    let logits = r.logits.as_ref().expect("logit stats");
    assert_eq!(logits.tokens, s.ids.len());
    assert_state_rows(&s, &r);
}

/// One `state.layers.{i}.recurrent` row per linear-attention layer, with a floor and the truth,
/// after the last decoder layer's row and before `final_norm`.
fn assert_state_rows(s: &Session, r: &Report) {
    let types = &s.model.config.layer_types;
    let linear = types
        .iter()
        .filter(|t| **t == LayerType::LinearAttention)
        .count();
    let pos = |name: &str| r.tensors.iter().position(|t| t.name == name);
    let last_layer = pos(&format!("layers.{}", types.len() - 1)).expect("last layer row");
    let final_norm = pos("final_norm").expect("final_norm row");
    let states: Vec<usize> = (0..r.tensors.len())
        .filter(|&i| r.tensors[i].kind == Kind::State)
        .collect();
    assert_eq!(
        states.len(),
        linear,
        "one state row per linear-attention layer"
    );
    for i in states {
        let t = &r.tensors[i];
        assert!(last_layer < i && i < final_norm, "{} out of place", t.name);
        assert_eq!(
            types[t.layer.unwrap_or(usize::MAX)],
            LayerType::LinearAttention
        );
        assert!(
            t.judgement.floor.is_some_and(|f| f > 0.0) && t.judgement.a_vs_truth.is_some(),
            "{t:?}"
        );
        assert!(
            t.stats.per_token_rel.is_empty(),
            "a state has no token axis"
        );
    }
}

#[test]
fn fused_vs_reference_bf16_is_ok_on_the_golden_moe_model() {
    let s = golden_moe_session(DType::BF16);
    let fused = backend_by_name("fused", &Device::Cpu).expect("fused backend");
    let r = live_report(&s, fused.as_ref(), &Reference, false, false);
    assert_eq!(
        r.verdict,
        Verdict::Ok,
        "{}\nflagged: {:?}",
        r.summary,
        flagged(&r)
    );
    assert_eq!(r.first_divergent, None);
    assert_state_rows(&s, &r);
    // Every MoE layer reports router agreement.
    assert!(!r.routers.is_empty(), "no router rows for an MoE model");
    assert!(r.routers.iter().all(|x| (0.0..=1.0).contains(&x.agree)));
}

// ---------------------------------------------------------------------------------------------
// Injected faults
// ---------------------------------------------------------------------------------------------

/// f32: its floor (~1e-6) is far below a 5% fault. (At bf16 the floor of a gated-norm output
/// is itself several percent, and rightly hides a 5% fault there.)
#[test]
fn injected_noise_is_a_mismatch_at_its_layer_in_propagate_mode() {
    let s = builtin_session(DType::F32);
    let k = linear_layer(&s.model, TARGET_CALL);
    assert_ne!(k, TARGET_CALL, "pick a call whose layer index differs");
    let inject = Injector::new(TARGET_CALL, NOISE);
    let r = live_report(&s, &inject, &Reference, false, false);

    assert_eq!(r.verdict, Verdict::Mismatch, "{}", r.summary);
    assert_eq!(
        r.first_divergent.as_deref(),
        Some(format!("layers.{k}").as_str())
    );
    assert_eq!(
        r.summary.lead,
        Some(Lead::Flagged(Verdict::Mismatch)),
        "{}",
        r.summary
    );
    assert!(
        r.summary.to_string().contains(&format!("layers.{k}")),
        "{}",
        r.summary
    );
    for t in r.tensors.iter().filter(|t| t.layer.is_some_and(|l| l < k)) {
        assert_eq!(
            t.judgement.verdict,
            Verdict::Ok,
            "{} before the fault",
            t.name
        );
    }
    let hit = row(&r, &format!("layers.{k}"));
    assert!(
        hit.judgement.ratio_to_floor.is_some_and(|x| x > K_MISMATCH),
        "{hit:?}"
    );
    // "Who is right": A is the one far from the truth.
    let (a, b) = (
        hit.judgement.a_vs_truth.unwrap_or(0.0),
        hit.judgement.b_vs_truth.unwrap_or(1.0),
    );
    assert!(a > 100.0 * b, "A vs truth {a:.2e}, B vs truth {b:.2e}");

    // Exit codes through the library's `emit`.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    assert_eq!(emit(&r, &report_args(&out, FailOn::Mismatch)).ok(), Some(1));
    assert_eq!(emit(&r, &report_args(&out, FailOn::Drift)).ok(), Some(1));
    assert_eq!(emit(&r, &report_args(&out, FailOn::Never)).ok(), Some(0));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("report file")).expect("valid JSON");
    assert_eq!(json["verdict"], "mismatch");
    assert_eq!(json["first_divergent"], format!("layers.{k}"));
    save_plot(&r, "injected_propagate.png");
}

/// A delta rule whose outputs are right but whose returned state is 5 % off: every hidden-state
/// row agrees and only that layer's state row is flagged.
#[test]
fn a_wrong_final_state_is_flagged_in_its_state_row_only() {
    let s = builtin_session(DType::F32);
    let k = linear_layer(&s.model, TARGET_CALL);
    let inject = Injector::new(
        TARGET_CALL,
        Fault::StateNoise {
            scale: 0.05,
            seed: 4,
        },
    );
    let r = live_report(&s, &inject, &Reference, false, false);
    let name = format!("state.layers.{k}.recurrent");
    assert_eq!(flagged(&r), vec![format!("{name} (mismatch)")]);
    assert_eq!(r.first_divergent.as_deref(), Some(name.as_str()));
    assert!(
        row(&r, &name)
            .judgement
            .ratio_to_floor
            .is_some_and(|x| x > K_MISMATCH)
    );
    assert_state_rows(&s, &r);
}

#[test]
fn isolate_mode_flags_only_the_faulty_layer() {
    let s = builtin_session(DType::F32);
    let k = linear_layer(&s.model, TARGET_CALL);
    let inject = Injector::new(TARGET_CALL, NOISE);
    let r = live_report(&s, &inject, &Reference, true, false);
    assert_eq!(r.mode.as_str(), "isolate");
    assert_eq!(r.verdict, Verdict::Mismatch, "{}", r.summary);
    assert_eq!(
        r.first_divergent.as_deref(),
        Some(format!("layers.{k}").as_str())
    );
    assert_eq!(
        flagged(&r),
        vec![format!("layers.{k} (mismatch)")],
        "only layer {k} may be flagged in isolate mode"
    );
    // The layers after it were fed A's (faulty) stream on both sides: no inherited error.
    let after = row(&r, &format!("layers.{}", k + 1));
    assert!(after.stats.rel_l2 < 1e-5, "{after:?}");
    save_plot(&r, "injected_isolate.png");
}

#[test]
fn with_op_rows_the_first_divergent_is_the_gated_norm_of_the_faulty_layer() {
    let s = builtin_session(DType::F32);
    let k = linear_layer(&s.model, TARGET_CALL);
    let inject = Injector::new(TARGET_CALL, NOISE);
    let r = live_report(&s, &inject, &Reference, false, true);
    assert!(r.tensors.iter().any(|t| t.kind == Kind::Op));
    let first = Key::Op(k, Op::GatedNormOut).to_string();
    assert_eq!(r.first_divergent.as_deref(), Some(first.as_str()));
    // Everything computed before it in that layer agrees.
    for op in ["beta", "g", "conv_out", "q", "k", "v", "core_out"] {
        let t = row(&r, &format!("layers.{k}.{op}"));
        assert_eq!(t.judgement.verdict, Verdict::Ok, "{}", t.name);
    }
    assert!(
        r.summary.to_string().contains("gated norm"),
        "{}",
        r.summary
    );
    save_plot(&r, "injected_ops.png");
}

/// With `HSDIFF_TEST_PLOTS=DIR`, writes the figure and the markdown of a test's report there,
/// to look at.
fn save_plot(r: &Report, name: &str) {
    if let Ok(dir) = std::env::var("HSDIFF_TEST_PLOTS") {
        let path = Path::new(&dir).join(name);
        write_plot(r, &path).expect("plot");
        std::fs::write(path.with_extension("md"), text(&Markdown::default(), r)).expect("markdown");
    }
}

#[test]
fn a_nan_is_a_mismatch_at_its_layer_with_counts() {
    let s = builtin_session(DType::F32);
    let k = linear_layer(&s.model, TARGET_CALL);
    let inject = Injector::new(TARGET_CALL, Fault::Nan);
    let r = live_report(&s, &inject, &Reference, false, false);
    assert_eq!(r.verdict, Verdict::Mismatch, "{}", r.summary);
    assert_eq!(
        r.first_divergent.as_deref(),
        Some(format!("layers.{k}").as_str())
    );
    let hit = row(&r, &format!("layers.{k}"));
    assert_eq!(hit.judgement.verdict, Verdict::Mismatch);
    assert!(hit.stats.nan_a > 0, "{hit:?}");
    assert_eq!(hit.stats.nan_b, 0);
    assert!(r.summary.to_string().contains("NaN"), "{}", r.summary);
    for t in r.tensors.iter().filter(|t| t.layer.is_some_and(|l| l < k)) {
        assert_eq!(
            t.judgement.verdict,
            Verdict::Ok,
            "{} before the fault",
            t.name
        );
    }
    // Every renderer copes with the non-finite values.
    let json: serde_json::Value = serde_json::from_str(&text(&Json, &r)).expect("valid JSON");
    assert!(json["tensors"].as_array().is_some_and(|t| !t.is_empty()));
    assert!(text(&Markdown::default(), &r).contains(&format!("layers.{k}")));
    Plot(PlotFormat::Png)
        .render(&r)
        .expect("plot of a NaN report");
    save_plot(&r, "injected_nan.png");
}

// ---------------------------------------------------------------------------------------------
// Plot
// ---------------------------------------------------------------------------------------------

#[test]
fn plot_writes_svg_and_png_and_refuses_bad_paths() {
    let r = synthetic_report();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("r.svg");
    let png = dir.path().join("R.PNG");
    write_plot(&r, &svg).expect("svg");
    write_plot(&r, &png).expect("png");
    let svg_text = std::fs::read_to_string(&svg).expect("read svg");
    assert!(
        svg_text.starts_with("<svg"),
        "{}",
        &svg_text[..80.min(svg_text.len())]
    );
    assert!(svg_text.contains("first divergent: layers.2.gated_norm_out"));
    assert!(svg_text.contains("floor"));
    let png_bytes = std::fs::read(&png).expect("read png");
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    // A long input is binned: the figure stays small.
    let mut long = r.clone();
    long.inputs.tokens = 20_000;
    for t in &mut long.tensors {
        t.stats.per_token_rel = (0..20_000).map(|i| 1e-3 * (1.0 + (i % 7) as f64)).collect();
    }
    let long_svg = text(&Plot(PlotFormat::Svg), &long);
    assert!(long_svg.len() < 3_000_000, "{} bytes", long_svg.len());
    assert!(long_svg.contains("34-token bins"));
    // An empty report still draws.
    let mut empty = r.clone();
    empty.tensors.clear();
    text(&Plot(PlotFormat::Svg), &empty);

    let a_folder = dir.path().join("folder.svg");
    std::fs::create_dir(&a_folder).expect("mkdir");
    for bad in [
        a_folder,
        dir.path().join("r.pdf"),
        dir.path().join("noext"),
        dir.path().join("missing/dir/r.svg"),
    ] {
        match write_plot(&r, &bad) {
            Err(e @ Error::Output(_)) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "one line: {msg}");
                assert!(msg.contains(&*bad.to_string_lossy()), "{msg}");
            }
            other => panic!("{}: expected a file error, got {other:?}", bad.display()),
        }
    }
    assert!(check_path(Path::new("plot.Svg")).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Snapshots of the renderers
// ---------------------------------------------------------------------------------------------

fn fingerprint(backend: &str, implementation: &str) -> Fingerprint {
    Fingerprint {
        format: "hsdiff.dump/v1".into(),
        source: "hsdiff".into(),
        tool_version: Some("0.1.0".into()),
        backend: Some(backend.into()),
        implementation: Some(implementation.into()),
        dtype: Some("bf16".into()),
        device: Some("cpu".into()),
        model: Some("built-in tiny Qwen3.5".into()),
        config_sha256: Some(
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
        ),
        tokens: Some(4),
        ..Default::default()
    }
}

fn synthetic_side(label: &str, implementation: &str) -> Side {
    Side {
        label: label.into(),
        backend: Some(label.into()),
        implementation: Some(implementation.into()),
        dtype: Some("bf16".into()),
        device: Some("cpu".into()),
        fingerprint: fingerprint(label, implementation),
    }
}

#[allow(clippy::too_many_arguments)]
fn synthetic_row(
    name: &str,
    kind: Kind,
    layer: Option<usize>,
    rel_l2: f64,
    floor: Option<f64>,
    verdict: Verdict,
    per_token_rel: Vec<f64>,
    nan_a: usize,
) -> TensorRow {
    TensorRow {
        name: name.into(),
        kind,
        layer,
        stats: DiffStats {
            elements: 4 * 32,
            mean_abs: rel_l2 * 0.8,
            max_abs: rel_l2 * 9.0,
            max_abs_at: Location {
                token: 2,
                channel: 17,
            },
            rel_l2,
            cosine: 1.0 - rel_l2 * rel_l2 / 2.0,
            cosine_min: 1.0 - 2.0 * rel_l2 * rel_l2,
            cosine_min_token: 2,
            nan_a,
            inf_a: 0,
            nan_b: 0,
            inf_b: 0,
            non_finite_disagree: nan_a,
            non_finite_disagree_at: (nan_a > 0).then_some(Location {
                token: 1,
                channel: 5,
            }),
            non_finite_both: 0,
            non_finite_both_at: None,
            first_non_finite_a: None,
            first_non_finite_b: None,
            first_beyond_a: [None, None],
            first_beyond_b: [None, None],
            per_token_rel,
            norm_b: 1.0,
            token_sq_diff: Vec::new(),
            token_sq_b: Vec::new(),
        },
        judgement: Judgement {
            floor,
            ratio_to_floor: floor.filter(|f| *f > 0.0).map(|f| rel_l2 / f),
            floor_a: floor,
            floor_b: floor,
            rel_l2_judged: None,
            floor_judged: None,
            depth: layer.map_or(3, |l| l + 1),
            band: None,
            expected_floor: None,
            a_vs_truth: floor.map(|f| f * 1.1 + rel_l2 / 2.0),
            b_vs_truth: floor,
            verdict,
        },
    }
}

/// A report with one of everything: identical, ok, drift and mismatch rows, an op row, NaN
/// counts, a row with no floor, an infinite per-token value, logits, routers, amplification.
fn synthetic_report() -> Report {
    let tensors = vec![
        synthetic_row(
            "embed",
            Kind::Embed,
            None,
            0.0,
            Some(0.0),
            Verdict::Ok,
            vec![0.0; 4],
            0,
        ),
        synthetic_row(
            "layers.0",
            Kind::LinearAttention,
            Some(0),
            4.0e-3,
            Some(3.5e-3),
            Verdict::Ok,
            vec![3e-3, 4e-3, 5e-3, 4e-3],
            0,
        ),
        synthetic_row(
            "layers.1",
            Kind::FullAttention,
            Some(1),
            1.5e-2,
            Some(6.0e-3),
            Verdict::Drift,
            vec![1e-2, 2e-2, 1.5e-2, 1.2e-2],
            0,
        ),
        synthetic_row(
            "layers.2.gated_norm_out",
            Kind::Op,
            Some(2),
            9.0e-2,
            Some(1.0e-2),
            Verdict::Mismatch,
            vec![5e-2, 1e-1, 9e-2, f64::INFINITY],
            0,
        ),
        synthetic_row(
            "layers.2",
            Kind::LinearAttention,
            Some(2),
            6.0e-2,
            Some(8.0e-3),
            Verdict::Mismatch,
            vec![4e-2, 7e-2, 6e-2, 6e-2],
            3,
        ),
        synthetic_row(
            "final_norm",
            Kind::FinalNorm,
            None,
            6.5e-2,
            None,
            Verdict::Mismatch,
            vec![5e-2, 8e-2, 6e-2, 6e-2],
            0,
        ),
        synthetic_row(
            "logits",
            Kind::Logits,
            None,
            7.0e-2,
            Some(9.0e-3),
            Verdict::Mismatch,
            vec![6e-2, 8e-2, 7e-2, 7e-2],
            0,
        ),
    ];
    Report {
        schema: SCHEMA.into(),
        verdict: Verdict::Mismatch,
        summary: Summary {
            lead: Some(Lead::Flagged(Verdict::Mismatch)),
            clauses: vec![
                "fused and reference part at layers.2.gated_norm_out (in the gated norm of layer 2), rel L2 9.00e-2 = 9× the bf16 floor".into(),
            ],
        },
        mode: ReportMode::Propagate,
        a: synthetic_side("fused", "fused/cpu"),
        b: synthetic_side("reference", "reference/cpu-candle"),
        inputs: Inputs {
            tokens: 4,
            token_ids_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                .into(),
            token_ids_match: true,
            token_ids: TokenIds::Match,
        },
        thresholds: ThresholdInfo {
            dtype: LabelledDType(DType::BF16),
            bands: Thresholds {
                ok: 1e-2,
                fail: 5e-2,
            },
            k_drift: K_DRIFT,
            k_mismatch: K_MISMATCH,
            floor_source: Some("reference backend at bf16 vs reference at f64, same input".into()),
            rule: "floor".into(),
        },
        tensors,
        first_divergent: Some("layers.2.gated_norm_out".into()),
        amplification: vec![0],
        logits: Some(LogitStats {
            kl_mean: 2.5e-3,
            kl_p99: 1.2e-2,
            kl_max: 1.5e-2,
            kl_max_token: 3,
            top1_agree: 0.75,
            near_ties: 0,
            top1_flips: 1,
            top1_flips_decided: 1,
            top5_overlap: 0.9,
            tokens: 4,
            tie_margin: 0.05,
        }),
        routers: vec![
            RouterRow {
                layer: 0,
                agree: 1.0,
                flipped_tokens: vec![],
                flip_margins: vec![],
            },
            RouterRow {
                layer: 2,
                agree: 0.5,
                flipped_tokens: vec![1, 3],
                flip_margins: vec![Some(2.5e-3), None],
            },
        ],
        command: Some("hsdiff --a fused --b reference --prompt fizzbuzz --dtype bf16".into()),
        alignment: None,
        env_diff: vec![],
        routing_flips: vec![RoutingFlip {
            layer: 2,
            token: 1,
            on: vec!["B".into()],
            flip_gap: 2.5e-3,
            near_tie_bound: 1.6e-2,
            near_tie: true,
        }],
        first_non_finite: FirstNonFinite::default(),
        first_overflow: None,
        notes: vec![],
    }
}

/// Compares `actual` with `tests/snapshots/{name}`; `HSDIFF_UPDATE_SNAPSHOTS=1` rewrites it.
fn check_snapshot(name: &str, actual: &str) {
    let path = repo_root().join("tests/snapshots").join(name);
    if std::env::var("HSDIFF_UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("snapshot folder")).expect("mkdir");
        std::fs::write(&path, actual).expect("write snapshot");
        eprintln!("updated {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with HSDIFF_UPDATE_SNAPSHOTS=1 cargo test --test cli report::",
            path.display()
        )
    });
    if expected == actual {
        return;
    }
    let new = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.new"));
    let _ = std::fs::write(&new, actual);
    let (line, want, got) = expected
        .lines()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(actual.lines().map(Some).chain(std::iter::repeat(None)))
        .take(expected.lines().count().max(actual.lines().count()) + 1)
        .enumerate()
        .find(|(_, (e, a))| e != a)
        .map(|(i, (e, a))| (i + 1, e.unwrap_or("<end>"), a.unwrap_or("<end>")))
        .unwrap_or((0, "<trailing whitespace>", "<trailing whitespace>"));
    panic!(
        "snapshot {name} differs, first at line {line}:\n  expected: {want}\n  actual:   {got}\n\
         the new output is in {new}; see it with\n  diff -u {old} {new}\n\
         and if the change is intended, accept it with\n  HSDIFF_UPDATE_SNAPSHOTS=1 cargo test --test cli report::",
        new = new.display(),
        old = path.display(),
    );
}

#[test]
fn markdown_renderer_matches_its_snapshot() {
    check_snapshot(
        "report.md",
        &text(&Markdown::default(), &synthetic_report()),
    );
}

#[test]
fn terminal_table_matches_its_snapshot() {
    let table = TerminalTable {
        color: false,
        env_all: false,
    };
    check_snapshot("report.txt", &text(&table, &synthetic_report()));
}

#[test]
fn json_renderer_matches_its_snapshot() {
    let json = text(&Json, &synthetic_report());
    check_snapshot("report.json", &json);
    // The fields the schema fixes are there, with their types.
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["schema"], "hsdiff.report/v1");
    for key in [
        "verdict",
        "summary",
        "mode",
        "a",
        "b",
        "inputs",
        "tensors",
        "first_divergent",
        "logits",
    ] {
        assert!(v.get(key).is_some(), "missing `{key}`");
    }
    for key in [
        "label",
        "backend",
        "implementation",
        "dtype",
        "device",
        "fingerprint",
    ] {
        assert!(v["a"].get(key).is_some(), "missing `a.{key}`");
    }
    let t = &v["tensors"][3];
    for key in [
        "name",
        "kind",
        "layer",
        "mean_abs",
        "max_abs",
        "max_abs_at",
        "rel_l2",
        "cosine",
        "cosine_min",
        "floor",
        "ratio_to_floor",
        "verdict",
    ] {
        assert!(t.get(key).is_some(), "missing `tensors[].{key}`");
    }
    assert_eq!(t["kind"], "op");
    assert_eq!(t["max_abs_at"]["channel"], 17);
    // Non-finite numbers are written as null.
    assert!(t["per_token_rel"][3].is_null());
    assert!(v["tensors"][5]["floor"].is_null());
}

// ---------------------------------------------------------------------------------------------
// Exit codes through the binary
// ---------------------------------------------------------------------------------------------

fn hsdiff(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(args)
        .output()
        .expect("run hsdiff")
}

#[test]
fn exit_codes_of_the_binary() {
    let ok = hsdiff(&["--a", "fused", "--b", "reference"]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("benign"));

    let drift = hsdiff(&["--a", "fused", "--b", "reference", "--fail-on", "drift"]);
    assert_eq!(
        drift.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&drift.stderr)
    );

    let bad = hsdiff(&["--a", "fused", "--b", "reference", "--no-such-option"]);
    assert_eq!(bad.status.code(), Some(2));

    let bad_plot = hsdiff(&["--a", "fused", "--b", "reference", "--plot", "out.pdf"]);
    assert_eq!(bad_plot.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad_plot.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("out.pdf"), "{err}");

    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("r.svg");
    let svg_arg = svg.to_string_lossy().into_owned();
    let with_plot = hsdiff(&[
        "--a",
        "fused",
        "--b",
        "reference",
        "--format",
        "json",
        "--plot",
        &svg_arg,
    ]);
    assert_eq!(
        with_plot.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&with_plot.stderr)
    );
    assert!(svg.is_file());
    let json: serde_json::Value =
        serde_json::from_slice(&with_plot.stdout).expect("JSON on stdout");
    assert_eq!(json["verdict"], "ok");
}
