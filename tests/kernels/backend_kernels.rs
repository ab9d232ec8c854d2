//! Every registered linear-attention backend against a float64 truth written here as plain host
//! loops (obviously correct, no candle): the causal conv + SiLU, the gated delta rule (q/k L2
//! norm, dk^-1/2 scale, GQA head mapping, initial state, final state), the gated RMSNorm, and the
//! default whole-layer `forward`.
//!
//! Backends are taken from `available_backends()`, so one registered later is covered without
//! touching this file. Inputs are fresh seeded random values in realistic ranges (never zeros or
//! identity weights). A low-precision run is compared with the truth computed from the inputs
//! *as that run sees them* (rounded to bf16/f16/f32), so the measured error is the backend's own
//! arithmetic, not the input quantisation.
//!
//! Bounds (rel L2 = ‖got − truth‖₂ / ‖truth‖₂ over the whole tensor) follow from the unit
//! roundoff u of the dtype the result is rounded to:
//! - f64 (u = 1.1e-16): ≤ 1e-12, i.e. ~1e4·u of slack for T ≤ 1000-step recurrences;
//! - f32 (u = 6.0e-8): ≤ 1e-5; transformers' own chunked-vs-recurrent f32 difference is
//!   2–5e-7 (numerics.md), so 1e-5 leaves 20× room and still catches any algorithmic slip;
//! - bf16 (u = 3.9e-3): ≤ 1e-2; rounding the output once costs ≈ u/√3 ≈ 2.3e-3 rel L2 and
//!   a correct bf16 GDN layer sits 2–3e-3 from the truth, 1e-2 is the "that is a bug" line;
//! - f16 (u = 4.9e-4): ≤ 2e-3 (the same reasoning scaled by u: ~4u);
//! - the final state is always in the accumulation dtype (f32 for bf16/f16/f32 runs), so it is
//!   held to the f32 bound whatever the input dtype.
//!
//! Every output must also be finite (NaN never passes a `<=` test either).
//! Run with `cargo test --test kernels backend_kernels:: -- --nocapture` to see the measured errors.

use std::collections::BTreeMap;
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use hsdiff::backends::{
    DeltaInputs, GdnDims, GdnInputs, LinearAttentionBackend, available_backends, backend_by_name,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal, StandardNormal, Uniform};

// ---------------------------------------------------------------------------------------------
// The float64 truth: plain loops over row-major Vec<f64>.
// ---------------------------------------------------------------------------------------------

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

fn softplus(x: f64) -> f64 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Causal depthwise conv + SiLU. x `[B, T, C]`, w `[C, K]` → `[B, T, C]`;
/// `out[t] = silu(Σ_j w[j] · x[t − (K−1) + j])`, zero before the first token.
fn truth_conv_silu(x: &[f64], w: &[f64], b: usize, t: usize, c: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; b * t * c];
    for bi in 0..b {
        for ti in 0..t {
            for ci in 0..c {
                let mut s = 0.0;
                for j in 0..k {
                    // source time ti + j − (k − 1)
                    if ti + j + 1 >= k {
                        let src = ti + j + 1 - k;
                        s += w[ci * k + j] * x[(bi * t + src) * c + ci];
                    }
                }
                out[(bi * t + ti) * c + ci] = silu(s);
            }
        }
    }
    out
}

struct DeltaRuleTruth {
    /// `[B, T, Hv, dv]`
    out: Vec<f64>,
    /// `[B, Hv, dk, dv]`
    state: Vec<f64>,
}

/// The gated delta rule, token by token. q, k `[B, T, Hk, dk]`, v `[B, T, Hv, dv]`,
/// g, beta `[B, T, Hv]`, state `[B, Hv, dk, dv]`. Value head h reads key head h / (Hv/Hk).
/// Per token: q̂ = q/√(Σq²+1e-6)·dk^-½, k̂ = k/√(Σk²+1e-6);
/// S ← e^g S; S ← S + k̂ ⊗ β(v − Sᵀk̂); o = Sᵀq̂.
#[allow(clippy::too_many_arguments)]
fn truth_delta_rule(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    g: &[f64],
    beta: &[f64],
    init: Option<&[f64]>,
    d: &GdnDims,
) -> DeltaRuleTruth {
    let (b, t, hk, hv, dk, dv) = (d.batch, d.seq, d.k_heads, d.v_heads, d.k_dim, d.v_dim);
    let r = hv / hk;
    let scale = 1.0 / (dk as f64).sqrt();
    let mut out = vec![0.0; b * t * hv * dv];
    let mut state = match init {
        Some(s) => s.to_vec(),
        None => vec![0.0; b * hv * dk * dv],
    };
    let normalise = |x: &[f64]| -> Vec<f64> {
        let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f64>() + 1e-6).sqrt();
        x.iter().map(|a| a * inv).collect()
    };
    for bi in 0..b {
        for h in 0..hv {
            let kh = h / r;
            let s = &mut state[(bi * hv + h) * dk * dv..(bi * hv + h + 1) * dk * dv];
            for ti in 0..t {
                let qk_at = ((bi * t + ti) * hk + kh) * dk;
                let qn: Vec<f64> = normalise(&q[qk_at..qk_at + dk])
                    .iter()
                    .map(|x| x * scale)
                    .collect();
                let kn = normalise(&k[qk_at..qk_at + dk]);
                let gi = (bi * t + ti) * hv + h;
                let decay = g[gi].exp();
                let bt = beta[gi];
                let v_at = gi * dv;
                for x in s.iter_mut() {
                    *x *= decay;
                }
                for j in 0..dv {
                    let predicted: f64 = (0..dk).map(|i| s[i * dv + j] * kn[i]).sum();
                    let delta = bt * (v[v_at + j] - predicted);
                    for i in 0..dk {
                        s[i * dv + j] += kn[i] * delta;
                    }
                }
                for j in 0..dv {
                    out[v_at + j] = (0..dk).map(|i| s[i * dv + j] * qn[i]).sum();
                }
            }
        }
    }
    DeltaRuleTruth { out, state }
}

/// Gated RMSNorm over the last dim `n`: `w ⊙ x/√(mean x² + eps) ⊙ silu(z)`.
fn truth_gated_rms_norm(x: &[f64], z: &[f64], w: &[f64], n: usize, eps: f64) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for (row, (xr, zr)) in x.chunks(n).zip(z.chunks(n)).enumerate() {
        let inv = 1.0 / (xr.iter().map(|a| a * a).sum::<f64>() / n as f64 + eps).sqrt();
        for i in 0..n {
            out[row * n + i] = w[i] * xr[i] * inv * silu(zr[i]);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Helpers: data, dtype rounding, metrics, bounds, the summary.
// ---------------------------------------------------------------------------------------------

const DTYPES: [DType; 3] = [DType::F64, DType::F32, DType::BF16];

/// f32 for f32/bf16/f16 runs, f64 for f64 runs (what `g` and the state are in).
fn acc(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Rel-L2 bound for a result rounded to `dtype` (reasoning in the module doc).
fn bound(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12, // u = 1.1e-16
        DType::F32 => 1e-5,  // u = 6.0e-8; transformers' chunk-vs-recurrent floor 2–5e-7
        DType::BF16 => 1e-2, // u = 3.9e-3; correct bf16 GDN layer ≈ 2–3e-3 from the truth
        DType::F16 => 2e-3,  // u = 4.9e-4; ~4u
        other => panic!("no bound for {other:?}"),
    }
}

fn dname(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "?",
    }
}

/// Host values → tensor in `dtype` (rounded once).
fn tensor(data: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .expect("tensor")
}

/// Every value of a floating tensor as f64 (exact for all float dtypes).
fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .expect("values")
}

/// `data` rounded to `dtype` and back.
fn round_to(data: &[f64], dtype: DType) -> Vec<f64> {
    values(&tensor(data, &[data.len()], dtype))
}

/// `data` as a tensor in `dtype`, and the values that tensor really holds.
fn rounded(data: &[f64], shape: &[usize], dtype: DType) -> (Tensor, Vec<f64>) {
    let t = tensor(data, shape, dtype);
    let v = values(&t);
    (t, v)
}

fn rel_l2(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let num: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

/// Measured errors, printed per test; `max` keeps the worst per (backend, dtype, op).
#[derive(Default)]
struct Summary(Mutex<BTreeMap<(String, &'static str, &'static str), f64>>);

impl Summary {
    /// Checks `got` (a tensor of the expected dtype and shape) against `want`, records and prints
    /// the error.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        backend: &str,
        case: &str,
        op: &'static str,
        dtype: DType,
        got: &Tensor,
        want_dtype: DType,
        want_shape: &[usize],
        want: &[f64],
        bound: f64,
    ) {
        assert_eq!(got.dtype(), want_dtype, "{backend} {case} {op}: dtype");
        assert_eq!(got.dims(), want_shape, "{backend} {case} {op}: shape");
        let got = values(got);
        let finite = got.iter().all(|x| x.is_finite());
        let err = rel_l2(&got, want);
        eprintln!(
            "{backend:>10} {:>4} {op:<16} {case:<40} rel L2 {err:.3e} (bound {bound:.1e})",
            dname(dtype)
        );
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let e = m
            .entry((backend.to_string(), dname(dtype), op))
            .or_insert(0.0);
        *e = e.max(if err.is_nan() { f64::INFINITY } else { err });
        drop(m);
        assert!(finite, "{backend} {case} {op} {dtype:?}: non-finite output");
        assert!(
            err <= bound,
            "{backend} {case} {op} {dtype:?}: rel L2 {err:e} > {bound:e}"
        );
    }

    fn print(&self, title: &str) {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        eprintln!("---- {title}: max rel L2 per backend × dtype × op");
        for ((backend, dtype, op), err) in m.iter() {
            eprintln!("{backend:>10} {dtype:>4} {op:<16} {err:.3e}");
        }
    }
}

fn backends() -> Vec<(&'static str, Box<dyn LinearAttentionBackend>)> {
    let all: Vec<_> = available_backends()
        .iter()
        .map(|info| {
            let b = backend_by_name(info.name, &Device::Cpu)
                .unwrap_or_else(|e| panic!("backend {}: {e}", info.name));
            (info.name, b)
        })
        .collect();
    assert!(all.len() >= 2, "expected at least reference and chunked");
    all
}

fn normal_vec(rng: &mut StdRng, n: usize, std: f64) -> Vec<f64> {
    let d = Normal::new(0.0, std).expect("normal");
    (0..n).map(|_| d.sample(rng)).collect()
}

fn uniform_vec(rng: &mut StdRng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let d = Uniform::new(lo, hi).expect("uniform");
    (0..n).map(|_| d.sample(rng)).collect()
}

/// How fast heads forget.
#[derive(Debug, Clone, Copy)]
enum Decay {
    /// g ≈ −5 per token (A_log = ln 5): the state is nearly wiped every token.
    Strong,
    /// g ≈ −1e-3 per token (A_log = ln 1e-3): memory over thousands of tokens.
    Weak,
    /// Heads alternate between the two.
    Mixed,
}

/// The model's gates: β = σ(b), g = −exp(A_log)·softplus(a + dt) with a, b ~ N(0, 1) and
/// dt = 0.55 (softplus(0.55) ≈ 1, so g ≈ −exp(A_log)). Returns (β, g), both `[B, T, Hv]`.
fn gates(rng: &mut StdRng, b: usize, t: usize, hv: usize, decay: Decay) -> (Vec<f64>, Vec<f64>) {
    let a_log = |h: usize| -> f64 {
        let strong = match decay {
            Decay::Strong => true,
            Decay::Weak => false,
            Decay::Mixed => h.is_multiple_of(2),
        };
        if strong { 5f64.ln() } else { 1e-3f64.ln() }
    };
    let dt = 0.55;
    let mut beta = Vec::with_capacity(b * t * hv);
    let mut g = Vec::with_capacity(b * t * hv);
    for _ in 0..b * t {
        for h in 0..hv {
            let nb: f64 = rng.sample(StandardNormal);
            let na: f64 = rng.sample(StandardNormal);
            beta.push(sigmoid(nb));
            g.push(-a_log(h).exp() * softplus(na + dt));
        }
    }
    (beta, g)
}

// ---------------------------------------------------------------------------------------------
// Gated delta rule
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
    init: bool,
    decay: Decay,
    seed: u64,
}

impl Case {
    fn dims(&self) -> GdnDims {
        GdnDims {
            batch: self.b,
            seq: self.t,
            k_heads: self.hk,
            v_heads: self.hv,
            k_dim: self.dk,
            v_dim: self.dv,
            conv_kernel: 4,
        }
    }
    fn label(&self) -> String {
        format!(
            "B{} T{} Hk{} Hv{} dk{} dv{} {}{:?}",
            self.b,
            self.t,
            self.hk,
            self.hv,
            self.dk,
            self.dv,
            if self.init { "S0 " } else { "" },
            self.decay
        )
    }
}

/// T = 1, 63, 64, 65, 300, 1000; r = 1, 2, 3; dk ≠ dv; with/without S0; B = 1, 2; all decays.
const CASES: &[Case] = &[
    Case {
        b: 1,
        t: 1,
        hk: 1,
        hv: 2,
        dk: 16,
        dv: 8,
        init: false,
        decay: Decay::Mixed,
        seed: 11,
    },
    Case {
        b: 2,
        t: 1,
        hk: 2,
        hv: 2,
        dk: 8,
        dv: 12,
        init: true,
        decay: Decay::Weak,
        seed: 12,
    },
    Case {
        b: 2,
        t: 63,
        hk: 2,
        hv: 4,
        dk: 8,
        dv: 12,
        init: true,
        decay: Decay::Mixed,
        seed: 13,
    },
    Case {
        b: 1,
        t: 64,
        hk: 1,
        hv: 3,
        dk: 16,
        dv: 8,
        init: false,
        decay: Decay::Strong,
        seed: 14,
    },
    Case {
        b: 2,
        t: 65,
        hk: 2,
        hv: 2,
        dk: 12,
        dv: 16,
        init: true,
        decay: Decay::Weak,
        seed: 15,
    },
    Case {
        b: 1,
        t: 65,
        hk: 1,
        hv: 2,
        dk: 8,
        dv: 16,
        init: false,
        decay: Decay::Mixed,
        seed: 16,
    },
    Case {
        b: 1,
        t: 300,
        hk: 2,
        hv: 6,
        dk: 16,
        dv: 8,
        init: true,
        decay: Decay::Mixed,
        seed: 17,
    },
    Case {
        b: 2,
        t: 300,
        hk: 1,
        hv: 1,
        dk: 32,
        dv: 16,
        init: false,
        decay: Decay::Strong,
        seed: 18,
    },
    Case {
        b: 1,
        t: 1000,
        hk: 1,
        hv: 2,
        dk: 8,
        dv: 16,
        init: true,
        decay: Decay::Mixed,
        seed: 19,
    },
    Case {
        b: 1,
        t: 1000,
        hk: 1,
        hv: 1,
        dk: 16,
        dv: 8,
        init: false,
        decay: Decay::Weak,
        seed: 20,
    },
];

/// Raw f64 inputs of one case: q, k, v ~ N(0, 1); β, g from `gates`; S0 ~ N(0, 0.5²).
struct DeltaValues {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    g: Vec<f64>,
    beta: Vec<f64>,
    s0: Option<Vec<f64>>,
}

fn delta_inputs(c: &Case) -> DeltaValues {
    let mut rng = StdRng::seed_from_u64(c.seed);
    let q = normal_vec(&mut rng, c.b * c.t * c.hk * c.dk, 1.0);
    let k = normal_vec(&mut rng, c.b * c.t * c.hk * c.dk, 1.0);
    let v = normal_vec(&mut rng, c.b * c.t * c.hv * c.dv, 1.0);
    let (beta, g) = gates(&mut rng, c.b, c.t, c.hv, c.decay);
    let s0 = c
        .init
        .then(|| normal_vec(&mut rng, c.b * c.hv * c.dk * c.dv, 0.5));
    DeltaValues {
        q,
        k,
        v,
        g,
        beta,
        s0,
    }
}

/// The case's inputs as tensors of `dtype` (g and S0 in the accumulation dtype), plus the truth
/// computed from exactly those (rounded) values.
struct DeltaRun {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    s0: Option<Tensor>,
    truth: DeltaRuleTruth,
}

impl DeltaRun {
    fn inputs(&self) -> DeltaInputs<'_> {
        DeltaInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
        }
    }
}

fn delta_run(c: &Case, dtype: DType) -> DeltaRun {
    let inp = delta_inputs(c);
    let qk_shape = [c.b, c.t, c.hk, c.dk];
    let (q, qr) = rounded(&inp.q, &qk_shape, dtype);
    let (k, kr) = rounded(&inp.k, &qk_shape, dtype);
    let (v, vr) = rounded(&inp.v, &[c.b, c.t, c.hv, c.dv], dtype);
    let (beta, br) = rounded(&inp.beta, &[c.b, c.t, c.hv], dtype);
    let (g, gr) = rounded(&inp.g, &[c.b, c.t, c.hv], acc(dtype));
    let s0 = inp
        .s0
        .as_ref()
        .map(|s| rounded(s, &[c.b, c.hv, c.dk, c.dv], acc(dtype)));
    let truth = truth_delta_rule(
        &qr,
        &kr,
        &vr,
        &gr,
        &br,
        s0.as_ref().map(|(_, v)| v.as_slice()),
        &c.dims(),
    );
    DeltaRun {
        q,
        k,
        v,
        g,
        beta,
        s0: s0.map(|(t, _)| t),
        truth,
    }
}

fn check_delta_rule(dtypes: &[DType], cases: &[Case], title: &str) {
    let summary = Summary::default();
    for (name, backend) in backends() {
        for &dtype in dtypes {
            for c in cases {
                let run = delta_run(c, dtype);
                let (out, state) = backend
                    .gated_delta_rule(run.inputs(), run.s0.as_ref())
                    .unwrap_or_else(|e| panic!("{name} {} {dtype:?}: {e}", c.label()));
                summary.check(
                    name,
                    &c.label(),
                    "delta_rule_out",
                    dtype,
                    &out,
                    dtype,
                    &[c.b, c.t, c.hv, c.dv],
                    &run.truth.out,
                    bound(dtype),
                );
                // The state stays in the accumulation dtype: f32 bound unless f64.
                summary.check(
                    name,
                    &c.label(),
                    "delta_rule_state",
                    dtype,
                    &state,
                    acc(dtype),
                    &[c.b, c.hv, c.dk, c.dv],
                    &run.truth.state,
                    bound(acc(dtype)),
                );
            }
        }
    }
    summary.print(title);
}

#[test]
fn gated_delta_rule_f64_matches_truth() {
    check_delta_rule(&[DType::F64], CASES, "gated delta rule f64");
}

#[test]
fn gated_delta_rule_f32_matches_truth() {
    check_delta_rule(&[DType::F32], CASES, "gated delta rule f32");
}

#[test]
fn gated_delta_rule_bf16_matches_truth() {
    check_delta_rule(&[DType::BF16], CASES, "gated delta rule bf16");
}

#[test]
fn gated_delta_rule_f16_matches_truth() {
    let c = Case {
        b: 2,
        t: 130,
        hk: 2,
        hv: 4,
        dk: 16,
        dv: 8,
        init: true,
        decay: Decay::Mixed,
        seed: 21,
    };
    check_delta_rule(&[DType::F16], &[c], "gated delta rule f16");
}

/// `chunked` against `reference` directly at f32: two correct algorithms differ only by f32
/// rounding order. transformers' chunked-vs-recurrent f32 floor is rel L2 2–4.5e-7 (output) and
/// ≤ 6e-7 (state) (numerics.md); 2e-6 is ~4× that floor, still 5× tighter than the f32 truth bound.
#[test]
fn chunked_agrees_with_reference_at_f32() {
    let reference = backend_by_name("reference", &Device::Cpu).expect("reference");
    let chunked = backend_by_name("chunked", &Device::Cpu).expect("chunked");
    let mut worst: (f64, f64) = (0.0, 0.0);
    for c in CASES {
        let run = delta_run(c, DType::F32);
        let call = |b: &dyn LinearAttentionBackend| {
            b.gated_delta_rule(run.inputs(), run.s0.as_ref())
                .expect("delta rule")
        };
        let (ro, rs) = call(reference.as_ref());
        let (co, cs) = call(chunked.as_ref());
        let eo = rel_l2(&values(&co), &values(&ro));
        let es = rel_l2(&values(&cs), &values(&rs));
        eprintln!(
            "chunked vs reference f32 {:<40} out rel L2 {eo:.3e}  state rel L2 {es:.3e} (bound 2e-6)",
            c.label()
        );
        worst = (worst.0.max(eo), worst.1.max(es));
        // ~4× transformers' measured chunked-vs-recurrent f32 floor (≤ 4.5e-7 out, 6e-7 state).
        assert!(eo <= 2e-6, "{}: out rel L2 {eo:e}", c.label());
        assert!(es <= 2e-6, "{}: state rel L2 {es:e}", c.label());
    }
    eprintln!(
        "---- chunked vs reference f32: max out rel L2 {:.3e}, max state rel L2 {:.3e}",
        worst.0, worst.1
    );
}

// ---------------------------------------------------------------------------------------------
// Conv + SiLU and gated RMSNorm
// ---------------------------------------------------------------------------------------------

#[test]
fn conv1d_silu_matches_truth() {
    let summary = Summary::default();
    // (B, T, C, K, seed): T below, at and above K; K = 4 (the models') and 2.
    let shapes = [
        (1, 1, 24, 4, 31),
        (2, 3, 40, 4, 32),
        (2, 70, 56, 4, 33),
        (1, 9, 16, 2, 34),
    ];
    for (name, backend) in backends() {
        for dtype in DTYPES.into_iter().chain([DType::F16]) {
            for &(b, t, c, k, seed) in &shapes {
                let mut rng = StdRng::seed_from_u64(seed);
                // x ~ N(0, 1) (projection outputs), w ~ N(0, 0.5²) (numerics.md recipe).
                let (x, xr) = rounded(&normal_vec(&mut rng, b * t * c, 1.0), &[b, t, c], dtype);
                let (w, wr) = rounded(&normal_vec(&mut rng, c * k, 0.5), &[c, k], dtype);
                let want = truth_conv_silu(&xr, &wr, b, t, c, k);
                let got = backend
                    .conv1d_silu(&x, &w)
                    .unwrap_or_else(|e| panic!("{name} conv {dtype:?}: {e}"));
                // Rounded twice (conv, then SiLU): ≈ 2·u/√3 for low precision, within bound(dtype).
                summary.check(
                    name,
                    &format!("B{b} T{t} C{c} K{k}"),
                    "conv1d_silu",
                    dtype,
                    &got,
                    dtype,
                    &[b, t, c],
                    &want,
                    bound(dtype),
                );
            }
        }
    }
    summary.print("conv1d + SiLU");
}

#[test]
fn gated_rms_norm_matches_truth() {
    let summary = Summary::default();
    // (shape, seed): [B, T, Hv, dv] as the layer calls it, and a plain 2-D one.
    let shapes: [(&[usize], u64); 3] = [(&[2, 5, 3, 16], 41), (&[1, 70, 4, 32], 42), (&[7, 8], 43)];
    let eps = 1e-6;
    for (name, backend) in backends() {
        for dtype in DTYPES.into_iter().chain([DType::F16]) {
            for &(shape, seed) in &shapes {
                let n: usize = shape.iter().product();
                let dv = shape[shape.len() - 1];
                let mut rng = StdRng::seed_from_u64(seed);
                // x, z ~ N(0, 1); w ~ U(0.5, 1.5) (never the identity ones).
                let (x, xr) = rounded(&normal_vec(&mut rng, n, 1.0), shape, dtype);
                let (z, zr) = rounded(&normal_vec(&mut rng, n, 1.0), shape, dtype);
                let (w, wr) = rounded(&uniform_vec(&mut rng, dv, 0.5, 1.5), &[dv], dtype);
                let want = truth_gated_rms_norm(&xr, &zr, &wr, dv, eps);
                let got = backend
                    .gated_rms_norm(&x, &z, &w, eps)
                    .unwrap_or_else(|e| panic!("{name} norm {dtype:?}: {e}"));
                // Rounded up to three times (norm, ·w, ·silu(z)): ≈ 3·u/√3, within bound(dtype).
                summary.check(
                    name,
                    &format!("{shape:?}"),
                    "gated_rms_norm",
                    dtype,
                    &got,
                    dtype,
                    shape,
                    &want,
                    bound(dtype),
                );
            }
        }
    }
    summary.print("gated RMSNorm");
}

// ---------------------------------------------------------------------------------------------
// Whole backend part of a layer (`forward`, overridden by fusing backends)
// ---------------------------------------------------------------------------------------------

#[test]
fn forward_matches_truth() {
    let summary = Summary::default();
    let cases = [
        Case {
            b: 1,
            t: 70,
            hk: 2,
            hv: 4,
            dk: 16,
            dv: 8,
            init: false,
            decay: Decay::Mixed,
            seed: 51,
        },
        Case {
            b: 2,
            t: 33,
            hk: 1,
            hv: 3,
            dk: 8,
            dv: 12,
            init: false,
            decay: Decay::Weak,
            seed: 52,
        },
        Case {
            b: 1,
            t: 129,
            hk: 2,
            hv: 2,
            dk: 12,
            dv: 16,
            init: false,
            decay: Decay::Strong,
            seed: 53,
        },
    ];
    let eps = 1e-6;
    for (name, backend) in backends() {
        for dtype in DTYPES {
            for c in &cases {
                let d = c.dims();
                let (conv_dim, kk) = (d.conv_dim(), d.conv_kernel);
                let mut rng = StdRng::seed_from_u64(c.seed);
                let (x, xr) = rounded(
                    &normal_vec(&mut rng, c.b * c.t * conv_dim, 1.0),
                    &[c.b, c.t, conv_dim],
                    dtype,
                );
                let (w, wr) = rounded(
                    &normal_vec(&mut rng, conv_dim * kk, 0.5),
                    &[conv_dim, kk],
                    dtype,
                );
                let (beta, g) = gates(&mut rng, c.b, c.t, c.hv, c.decay);
                let (beta, br) = rounded(&beta, &[c.b, c.t, c.hv], dtype);
                let (g, gr) = rounded(&g, &[c.b, c.t, c.hv], acc(dtype));
                let zshape = [c.b, c.t, c.hv, c.dv];
                let (z, zr) = rounded(
                    &normal_vec(&mut rng, c.b * c.t * c.hv * c.dv, 1.0),
                    &zshape,
                    dtype,
                );
                let (nw, nwr) = rounded(&uniform_vec(&mut rng, c.dv, 0.5, 1.5), &[c.dv], dtype);

                // Truth: conv → split [q | k | v] → delta rule → gated norm, all in f64. The
                // same pipeline with the conv and core outputs rounded to `dtype` (where
                // transformers rounds them) measures how much this input amplifies those two
                // unavoidable roundings.
                let pipeline = |round: bool| -> Vec<f64> {
                    let r = |x: Vec<f64>| if round { round_to(&x, dtype) } else { x };
                    let conv = r(truth_conv_silu(&xr, &wr, c.b, c.t, conv_dim, kk));
                    let key_dim = c.hk * c.dk;
                    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
                    for row in conv.chunks(conv_dim) {
                        q.extend_from_slice(&row[..key_dim]);
                        k.extend_from_slice(&row[key_dim..2 * key_dim]);
                        v.extend_from_slice(&row[2 * key_dim..]);
                    }
                    let core = r(truth_delta_rule(&q, &k, &v, &gr, &br, None, &d).out);
                    truth_gated_rms_norm(&core, &zr, &nwr, c.dv, eps)
                };
                let want = pipeline(false);
                let floor = rel_l2(&pipeline(true), &want);

                let inputs = GdnInputs {
                    mixed_qkv: &x,
                    conv_weight: &w,
                    beta: &beta,
                    g: &g,
                    z: &z,
                    norm_weight: &nw,
                    norm_eps: eps,
                    dims: d,
                };
                let got = backend
                    .forward(&inputs, false)
                    .unwrap_or_else(|e| panic!("{name} forward {dtype:?}: {e}"));
                // The op bound, or — where this input is ill-conditioned — 2× the error that
                // rounding only the conv and core outputs already causes (`floor`). In bf16 the
                // q̂·k̂ products of near-orthogonal random vectors amplify the conv output's
                // rounding by up to ~√dk, so `floor` reaches ~1e-2 on some inputs.
                let bound = bound(dtype).max(2.0 * floor);
                eprintln!(
                    "{name:>10} {:>4} forward floor (conv, core rounded) {floor:.3e} → bound {bound:.1e}",
                    dname(dtype)
                );
                summary.check(
                    name,
                    &c.label(),
                    "forward",
                    dtype,
                    &got.out,
                    dtype,
                    &[c.b, c.t, c.hv * c.dv],
                    &want,
                    bound,
                );
            }
        }
    }
    summary.print("forward (conv → delta rule → gated norm)");
}

// ---------------------------------------------------------------------------------------------
// Bad shapes and dtypes: `Err`, never a panic
// ---------------------------------------------------------------------------------------------

fn randn(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = shape.iter().product();
    tensor(&normal_vec(&mut rng, n, 1.0), shape, dtype)
}

/// `r` is the backend's own error about `what`, saying `expect` — not any error at all (a call
/// that failed for another reason would pass a bare `is_err()`).
fn must_fail<T>(backend: &str, what: &str, expect: &str, r: hsdiff::error::Result<T>) {
    match r {
        Ok(_) => panic!("{backend}: {what} was accepted"),
        Err(e) => assert_eq!(
            e.to_string(),
            format!("backend `{backend}`: {expect}"),
            "{backend}: {what}: another error than the one expected"
        ),
    }
}

#[test]
fn bad_shapes_and_dtypes_are_errors() {
    let (b, t, hk, hv, dk, dv) = (2, 5, 2, 4, 8, 6);
    let f32_ = DType::F32;
    let q = randn(&[b, t, hk, dk], f32_, 1);
    let k = randn(&[b, t, hk, dk], f32_, 2);
    let v = randn(&[b, t, hv, dv], f32_, 3);
    let mut rng = StdRng::seed_from_u64(4);
    let (beta, g) = gates(&mut rng, b, t, hv, Decay::Mixed);
    let beta = tensor(&beta, &[b, t, hv], f32_);
    let g = tensor(&g, &[b, t, hv], f32_);
    let ok = DeltaInputs {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
    };
    for (name, be) in backends() {
        // Sanity: the well-formed call works.
        be.gated_delta_rule(ok, None)
            .unwrap_or_else(|e| panic!("{name}: valid call failed: {e}"));
        let bad_g = randn(&[b, t, hv + 1], f32_, 6);
        must_fail(
            name,
            "g [B, T, Hv+1]",
            "g must be [2, 5, 4], got [2, 5, 5]",
            be.gated_delta_rule(DeltaInputs { g: &bad_g, ..ok }, None),
        );
        let bad_g = randn(&[b, t], f32_, 6);
        must_fail(
            name,
            "g [B, T]",
            "g must be [2, 5, 4], got [2, 5]",
            be.gated_delta_rule(DeltaInputs { g: &bad_g, ..ok }, None),
        );
        let bad_beta = randn(&[b, t + 1, hv], f32_, 6);
        must_fail(
            name,
            "beta [B, T+1, Hv]",
            "beta must be [2, 5, 4], got [2, 6, 4]",
            be.gated_delta_rule(
                DeltaInputs {
                    beta: &bad_beta,
                    ..ok
                },
                None,
            ),
        );
        let bad_k = randn(&[b, t, hk, dk + 1], f32_, 7);
        must_fail(
            name,
            "k dk ≠ q dk",
            "k shape [2, 5, 2, 9] differs from q shape [2, 5, 2, 8]",
            be.gated_delta_rule(DeltaInputs { k: &bad_k, ..ok }, None),
        );
        let bad_k = randn(&[b, t, hk + 1, dk], f32_, 7);
        must_fail(
            name,
            "k Hk ≠ q Hk",
            "k shape [2, 5, 3, 8] differs from q shape [2, 5, 2, 8]",
            be.gated_delta_rule(DeltaInputs { k: &bad_k, ..ok }, None),
        );
        let bad_v = randn(&[b, t + 1, hv, dv], f32_, 8);
        must_fail(
            name,
            "v T ≠ q T",
            "v shape [2, 6, 4, 6] does not match q shape [2, 5, 2, 8]",
            be.gated_delta_rule(DeltaInputs { v: &bad_v, ..ok }, None),
        );
        let q3 = randn(&[b, t, 3, dk], f32_, 9);
        let k3 = randn(&[b, t, 3, dk], f32_, 10);
        must_fail(
            name,
            "Hv=4 with Hk=3",
            "4 value heads is not a multiple of 3 key heads",
            be.gated_delta_rule(
                DeltaInputs {
                    q: &q3,
                    k: &k3,
                    ..ok
                },
                None,
            ),
        );
        let q3d = randn(&[b, t, hk * dk], f32_, 9);
        must_fail(
            name,
            "3-D q",
            "q must be [B, T, Hk, dk], got [2, 5, 16]",
            be.gated_delta_rule(
                DeltaInputs {
                    q: &q3d,
                    k: &q3d,
                    ..ok
                },
                None,
            ),
        );
        let k_bf = k.to_dtype(DType::BF16).expect("bf16");
        must_fail(
            name,
            "k bf16, q f32",
            "k dtype BF16 differs from q dtype F32",
            be.gated_delta_rule(DeltaInputs { k: &k_bf, ..ok }, None),
        );
        let v_bf = v.to_dtype(DType::BF16).expect("bf16");
        must_fail(
            name,
            "v bf16, q f32",
            "v dtype BF16 differs from q dtype F32",
            be.gated_delta_rule(DeltaInputs { v: &v_bf, ..ok }, None),
        );
        let beta_64 = beta.to_dtype(DType::F64).expect("f64");
        must_fail(
            name,
            "beta f64, q f32",
            "beta dtype F64 differs from q dtype F32",
            be.gated_delta_rule(
                DeltaInputs {
                    beta: &beta_64,
                    ..ok
                },
                None,
            ),
        );
        let bad_s0 = randn(&[b, hv, dv, dk], f32_, 11);
        must_fail(
            name,
            "S0 [B, Hv, dv, dk]",
            "initial state must be [2, 4, 8, 6], got [2, 4, 6, 8]",
            be.gated_delta_rule(ok, Some(&bad_s0)),
        );

        // Conv.
        let x = randn(&[b, t, 12], f32_, 12);
        let w = randn(&[12, 4], f32_, 13);
        be.conv1d_silu(&x, &w)
            .unwrap_or_else(|e| panic!("{name}: valid conv failed: {e}"));
        must_fail(
            name,
            "conv weight [C+1, K]",
            "conv weight [13, 4] does not match 12 channels",
            be.conv1d_silu(&x, &randn(&[13, 4], f32_, 14)),
        );
        must_fail(
            name,
            "conv weight [C]",
            "conv weight must be [C, K], got [12]",
            be.conv1d_silu(&x, &randn(&[12], f32_, 14)),
        );
        must_fail(
            name,
            "conv input [B, T]",
            "conv input must be [B, T, C], got [2, 5]",
            be.conv1d_silu(&randn(&[b, t], f32_, 14), &w),
        );
        let w_bf = w.to_dtype(DType::BF16).expect("bf16");
        must_fail(
            name,
            "conv weight bf16, x f32",
            "conv input dtype F32 differs from weight dtype BF16",
            be.conv1d_silu(&x, &w_bf),
        );

        // Gated norm.
        let x = randn(&[b, t, hv, dv], f32_, 15);
        let z = randn(&[b, t, hv, dv], f32_, 16);
        let nw = randn(&[dv], f32_, 17);
        be.gated_rms_norm(&x, &z, &nw, 1e-6)
            .unwrap_or_else(|e| panic!("{name}: valid norm failed: {e}"));
        let bad_z = randn(&[b, t, hv, dv + 1], f32_, 18);
        must_fail(
            name,
            "norm z shape",
            "gate shape [2, 5, 4, 7] differs from input shape [2, 5, 4, 6]",
            be.gated_rms_norm(&x, &bad_z, &nw, 1e-6),
        );
        let bad_w = randn(&[dv + 1], f32_, 19);
        must_fail(
            name,
            "norm weight [dv+1]",
            "gated norm weight must be [6], got [7]",
            be.gated_rms_norm(&x, &z, &bad_w, 1e-6),
        );
    }
}
