//! Accuracy of the fused CPU kernels against their f64 truth (`hsdiff::backends::fused::cpu::truth`), per storage type.
//!
//! Inputs are fresh seeded random values (never zeros or identities). Low-precision kernels are
//! compared with the truth computed from their *rounded* inputs, so the measured error is the
//! kernel's own rounding, not input quantisation. Every output is also checked to be finite, and
//! output buffers are pre-filled with NaN so that an unwritten element fails the test.
//! Run with `--nocapture` to see the measured errors.

use candle_core::WithDType;
use half::{bf16, f16};
use hsdiff::backends::fused::cpu::{
    Accum, ConvDims, Element, GdnDims, KernelError, NormDims, causal_conv1d_silu, fused_gdn,
    gated_delta_rule, gated_rms_norm, truth,
};

use hsdiff::backends::cases::{
    CONV_CASES, CONV_SEED, GdnCase as Inputs, NORM_CASES, NORM_EPS, NORM_SEED, SplitMix as Rng,
    gdn_dims as dims, gdn_truth, kernel_bound, kernel_cases, rounded, run_fused_cpu,
    storage_to_f64, to_storage,
};
use hsdiff::compare::metrics::stats;

/// ‖a − b‖₂ / ‖b‖₂, asserting everything is finite first (NaN never passes).
fn rel_l2(what: &str, a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    assert!(a.iter().all(|v| v.is_finite()), "{what}: non-finite output");
    assert!(b.iter().all(|v| v.is_finite()), "{what}: non-finite truth");
    assert!(b.iter().any(|&y| y != 0.0), "{what}: truth is all zeros");
    stats::rel_l2(a, b)
}

/// Relative-L2 bound per storage type (`hsdiff::backends::cases::kernel_bound`, reasoning there).
fn bound<S: WithDType>() -> f64 {
    kernel_bound(S::DTYPE).expect("a storage type of the kernels")
}

fn check_fused<S: Element + WithDType>(inp: &Inputs, label: &str) {
    // Round the inputs to what the kernel sees, and compute the truth from those.
    let inp = rounded::<S>(inp);
    let (t_out, t_fin, t_conv) = gdn_truth(&inp);
    let run = run_fused_cpu::<S>(&inp, true).unwrap();
    let e_out = rel_l2("core_out", &run.out, &t_out);
    let e_fin = rel_l2("final_state", &run.state, &t_fin);
    let e_conv = rel_l2("conv_out", &run.conv, &t_conv);
    println!(
        "fused {:>4} {label:<44} out {e_out:.2e}  state {e_fin:.2e}  conv {e_conv:.2e}",
        S::NAME
    );
    let b = bound::<S>();
    assert!(e_out <= b, "{label}: core_out rel L2 {e_out:e} > {b:e}");
    assert!(e_fin <= b, "{label}: final_state rel L2 {e_fin:e} > {b:e}");
    // The conv is one accumulation of K products and one rounding: ≤ a few u.
    assert!(e_conv <= b, "{label}: conv rel L2 {e_conv:e} > {b:e}");
    // Without conv capture the results must be bit-identical (same routine, same order).
    assert_eq!(
        run.uncaptured_same,
        Some(true),
        "{label}: conv capture changed outputs"
    );
    // The standalone rule on the captured conv output must match the fused kernel bit for bit.
    assert!(run.standalone_same, "{label}: standalone rule differs");
}

fn run_all<S: Element + WithDType>() {
    for case in kernel_cases(false) {
        check_fused::<S>(&case.inputs(), &case.label());
    }
}

#[test]
fn fused_f64_vs_truth() {
    run_all::<f64>();
}
#[test]
fn fused_f32_vs_truth() {
    run_all::<f32>();
}
#[test]
fn fused_bf16_vs_truth() {
    run_all::<bf16>();
}
#[test]
fn fused_f16_vs_truth() {
    run_all::<f16>();
}

fn check_conv<S: Element + WithDType>() {
    let mut rng = Rng::new(CONV_SEED);
    for (b, t, c, k) in CONV_CASES {
        let x: Vec<S> = to_storage(&rng.normals(b * t * c, 1.0));
        let w: Vec<S> = to_storage(&rng.normals(c * k, 0.5));
        let want = truth::causal_conv1d_silu(&storage_to_f64(&x), &storage_to_f64(&w), b, t, c, k);
        let mut out = vec![S::from_acc(S::Acc::from_f64(f64::NAN)); want.len()];
        let dims = ConvDims {
            batch: b,
            seq: t,
            channels: c,
            kernel: k,
        };
        causal_conv1d_silu(&x, &w, dims, &mut out).unwrap();
        let e = rel_l2("conv", &storage_to_f64(&out), &want);
        println!("conv  {:>4} B{b} T{t} C{c} K{k}: {e:.2e}", S::NAME);
        // One accumulation of K ≤ 4 products + SiLU + one rounding to S: a few u.
        assert!(e <= bound::<S>(), "conv {e:e}");
    }
}

#[test]
fn conv_vs_truth() {
    check_conv::<f64>();
    check_conv::<f32>();
    check_conv::<bf16>();
    check_conv::<f16>();
}

fn check_norm<S: Element + WithDType>() {
    let mut rng = Rng::new(NORM_SEED);
    for (rows, dim) in NORM_CASES {
        let x: Vec<S> = to_storage(&rng.normals(rows * dim, 2.0));
        let z: Vec<S> = to_storage(&rng.normals(rows * dim, 1.5));
        let w: Vec<S> = to_storage(&rng.normals(dim, 1.0));
        let eps = NORM_EPS;
        let want = truth::gated_rms_norm(
            &storage_to_f64(&x),
            &storage_to_f64(&z),
            &storage_to_f64(&w),
            eps,
            dim,
        );
        let mut out = vec![S::from_acc(S::Acc::from_f64(f64::NAN)); want.len()];
        gated_rms_norm(&x, &z, &w, eps, NormDims { rows, dim }, &mut out).unwrap();
        let e = rel_l2("norm", &storage_to_f64(&out), &want);
        println!("norm  {:>4} N{rows} dim{dim}: {e:.2e}", S::NAME);
        assert!(e <= bound::<S>(), "norm {e:e}");
    }
}

#[test]
fn gated_rms_norm_vs_truth() {
    check_norm::<f64>();
    check_norm::<f32>();
    check_norm::<bf16>();
    check_norm::<f16>();
}

#[test]
fn seq_zero_copies_state() {
    let d = dims(2, 0, 1, 2, 8, 8);
    let init: Vec<f32> = (0..2 * 2 * 64).map(|i| i as f32 * 0.01 + 0.5).collect();
    let mut fin = vec![f32::NAN; init.len()];
    let mut out: Vec<f32> = vec![];
    let w = vec![0.3f32; d.conv_dim() * 4];
    fused_gdn::<f32>(
        &[],
        &w,
        &[],
        &[],
        0.3,
        Some(&init),
        d,
        &mut out,
        &mut fin,
        None,
    )
    .unwrap();
    assert_eq!(fin, init);
    fused_gdn::<f32>(&[], &w, &[], &[], 0.3, None, d, &mut out, &mut fin, None).unwrap();
    assert!(fin.iter().all(|&v| v == 0.0));
}

#[test]
fn shape_errors_not_panics() {
    let d = dims(1, 5, 2, 4, 8, 6);
    let c = d.conv_dim();
    let x = vec![0.1f32; 5 * c];
    let w = vec![0.1f32; c * 4];
    let g = vec![-0.1f32; 5 * 4];
    let beta = vec![0.5f32; 5 * 4];
    let mut out = vec![0.0f32; 5 * 4 * 6];
    let mut fin = vec![0.0f32; 4 * 8 * 6];
    let ok = fused_gdn::<f32>(&x, &w, &g, &beta, 0.3, None, d, &mut out, &mut fin, None);
    assert!(ok.is_ok());
    let short_init = vec![0.0f32; 4 * 8 * 6 - 1];
    // Each bad call fails with the error naming what is wrong with it, not just any error.
    let err = |r: Result<(), KernelError>, expect: &str| {
        let e = r.expect_err(expect);
        assert_eq!(e.to_string(), expect);
        e
    };
    err(
        fused_gdn::<f32>(
            &x[1..],
            &w,
            &g,
            &beta,
            0.3,
            None,
            d,
            &mut out,
            &mut fin,
            None,
        ),
        "`mixed_qkv` has 279 elements, expected 280",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w[1..],
            &g,
            &beta,
            0.3,
            None,
            d,
            &mut out,
            &mut fin,
            None,
        ),
        "`conv_weight` has 223 elements, expected 224",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g[1..],
            &beta,
            0.3,
            None,
            d,
            &mut out,
            &mut fin,
            None,
        ),
        "`g` has 19 elements, expected 20",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g,
            &beta[1..],
            0.3,
            None,
            d,
            &mut out,
            &mut fin,
            None,
        ),
        "`beta` has 19 elements, expected 20",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g,
            &beta,
            0.3,
            Some(&short_init),
            d,
            &mut out,
            &mut fin,
            None,
        ),
        "`initial_state` has 191 elements, expected 192",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g,
            &beta,
            0.3,
            None,
            d,
            &mut out[1..],
            &mut fin,
            None,
        ),
        "`core_out` has 119 elements, expected 120",
    );
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g,
            &beta,
            0.3,
            None,
            d,
            &mut out,
            &mut fin[1..],
            None,
        ),
        "`final_state` has 191 elements, expected 192",
    );
    let mut co = vec![0.0f32; 5 * c - 1];
    err(
        fused_gdn::<f32>(
            &x,
            &w,
            &g,
            &beta,
            0.3,
            None,
            d,
            &mut out,
            &mut fin,
            Some(&mut co),
        ),
        "`conv_out` has 279 elements, expected 280",
    );
    let bad = GdnDims { v_heads: 3, ..d };
    err(
        fused_gdn::<f32>(&x, &w, &g, &beta, 0.3, None, bad, &mut out, &mut fin, None),
        "invalid dimensions: v_heads must be a multiple of k_heads",
    );
    let bad = GdnDims {
        conv_kernel: 0,
        ..d
    };
    err(
        fused_gdn::<f32>(&x, &w, &g, &beta, 0.3, None, bad, &mut out, &mut fin, None),
        "invalid dimensions: conv_kernel must be > 0",
    );
    let bad = GdnDims { k_dim: 0, ..d };
    err(
        fused_gdn::<f32>(&x, &w, &g, &beta, 0.3, None, bad, &mut out, &mut fin, None),
        "invalid dimensions: k_dim and v_dim must be > 0",
    );
    let huge = GdnDims {
        seq: usize::MAX / 2,
        ..d
    };
    assert_eq!(
        err(
            fused_gdn::<f32>(&x, &w, &g, &beta, 0.3, None, huge, &mut out, &mut fin, None),
            "dimensions overflow usize",
        ),
        KernelError::Overflow
    );
    let q = vec![0.1f32; 5 * 2 * 8];
    let v = vec![0.1f32; 5 * 4 * 6];
    assert!(
        gated_delta_rule::<f32>(&q, &q, &v, &g, &beta, 0.3, None, d, &mut out, &mut fin).is_ok()
    );
    err(
        gated_delta_rule::<f32>(&q[1..], &q, &v, &g, &beta, 0.3, None, d, &mut out, &mut fin),
        "`q` has 79 elements, expected 80",
    );
    err(
        gated_delta_rule::<f32>(&q, &q, &v[1..], &g, &beta, 0.3, None, d, &mut out, &mut fin),
        "`v` has 119 elements, expected 120",
    );
    let cd = ConvDims {
        batch: 1,
        seq: 5,
        channels: c,
        kernel: 4,
    };
    let mut co = vec![0.0f32; 5 * c];
    assert!(causal_conv1d_silu(&x, &w, cd, &mut co).is_ok());
    err(
        causal_conv1d_silu(&x, &w[1..], cd, &mut co),
        "`w` has 223 elements, expected 224",
    );
    err(
        causal_conv1d_silu(&x, &w, ConvDims { kernel: 0, ..cd }, &mut co),
        "invalid dimensions: channels and kernel must be > 0",
    );
    let nd = NormDims { rows: 5, dim: 6 };
    let mut no = vec![0.0f32; 30];
    assert!(gated_rms_norm(&out[..30], &out[..30], &out[..6], 1e-6, nd, &mut no).is_ok());
    err(
        gated_rms_norm(&out[..30], &out[..29], &out[..6], 1e-6, nd, &mut no),
        "`z` has 29 elements, expected 30",
    );
    err(
        gated_rms_norm(&out[..30], &out[..30], &out[..5], 1e-6, nd, &mut no),
        "`w` has 5 elements, expected 6",
    );
    err(
        gated_rms_norm(
            &out[..30],
            &out[..30],
            &out[..6],
            1e-6,
            NormDims { rows: 5, dim: 0 },
            &mut no,
        ),
        "invalid dimensions: dim must be > 0",
    );
}
