//! Continuing from a cached state, per backend, on fresh seeded random inputs at f64: a prefill
//! in two pieces and a prefill followed by single-token decode steps give the outputs and the
//! final conv window / recurrent state of one whole call (to f64 rounding), and the conv window
//! holds exactly the last K inputs.

use candle_core::{DType, Device, Tensor};
use hsdiff::backends::cases::{Decay, SplitMix, gdn_case, gdn_dims};
use hsdiff::backends::{
    GdnDims, GdnInputs, GdnState, LinearAttentionBackend, available_backends, backend_by_name,
};
use hsdiff::compare::metrics::stats::rel_l2_tensors;

/// Continuing changes only where roundings fall (a chunk boundary moves, a sum is split), so
/// the pieces agree with the whole call to a few f64 ulps per step; 1e-12 over ~100 dependent
/// steps leaves three orders of magnitude and rejects any step done in f32 (≥ 1e-7).
const BOUND: f64 = 1e-12;

struct Data {
    mixed: Tensor,
    w: Tensor,
    g: Tensor,
    beta: Tensor,
    z: Tensor,
    norm_w: Tensor,
    dims: GdnDims,
}

fn data(seed: u64) -> Data {
    let (b, t, hk, hv, dk, dv) = (2, 100, 2, 4, 16, 24);
    let dims = gdn_dims(b, t, hk, hv, dk, dv);
    let k = dims.conv_kernel;
    let case = gdn_case(dims, Decay::Mixed, false, seed);
    let mut rng = SplitMix::new(seed ^ 0x5eed);
    let c = 2 * hk * dk + hv * dv;
    let dev = Device::Cpu;
    let t64 = |v: Vec<f64>, shape: &[usize]| Tensor::from_vec(v, shape, &dev).expect("tensor");
    Data {
        mixed: t64(case.mixed, &[b, t, c]),
        w: t64(case.w, &[c, k]),
        g: t64(case.g, &[b, t, hv]),
        beta: t64(case.beta, &[b, t, hv]),
        z: t64(rng.normals(b * t * hv * dv, 1.0), &[b, t, hv, dv]),
        norm_w: t64((0..dv).map(|_| 0.5 + rng.uniform()).collect(), &[dv]),
        dims,
    }
}

/// Runs positions start..start+len from `state`.
fn run(
    backend: &dyn LinearAttentionBackend,
    d: &Data,
    start: usize,
    len: usize,
    state: Option<&GdnState>,
) -> (Tensor, GdnState) {
    let cut = |x: &Tensor| {
        x.narrow(1, start, len)
            .and_then(|x| x.contiguous())
            .expect("narrow")
    };
    let (mixed, g, beta, z) = (cut(&d.mixed), cut(&d.g), cut(&d.beta), cut(&d.z));
    let inputs = GdnInputs {
        mixed_qkv: &mixed,
        conv_weight: &d.w,
        beta: &beta,
        g: &g,
        z: &z,
        norm_weight: &d.norm_w,
        norm_eps: 1e-6,
        dims: GdnDims { seq: len, ..d.dims },
    };
    let (out, state) = backend
        .forward_cached(&inputs, state, false)
        .unwrap_or_else(|e| panic!("{}: {e}", backend.name()));
    (out.out, state)
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.elem_count(), b.elem_count());
    rel_l2_tensors(a, b).expect("rel L2")
}

#[test]
fn pieces_and_decode_steps_equal_one_whole_call_for_every_backend() {
    let d = data(2024);
    let t = d.dims.seq;
    for info in available_backends() {
        let b = backend_by_name(info.name, &Device::Cpu).expect("cpu backend");
        let (whole, whole_state) = run(b.as_ref(), &d, 0, t, None);
        assert_eq!(whole_state.recurrent.dtype(), DType::F64);
        // The conv window is the last K inputs, transposed, exactly.
        let last = d
            .mixed
            .narrow(1, t - 4, 4)
            .and_then(|x| x.transpose(1, 2))
            .expect("last inputs");
        assert_eq!(rel(&whole_state.conv, &last), 0.0, "{}", info.name);

        // Two pieces, the split inside the first 64-token chunk.
        let (a, s1) = run(b.as_ref(), &d, 0, 37, None);
        let (rest, s2) = run(b.as_ref(), &d, 37, t - 37, Some(&s1));
        let joined = Tensor::cat(&[&a, &rest], 1).expect("cat");
        let errs = [
            rel(&joined, &whole),
            rel(&s2.recurrent, &whole_state.recurrent),
            rel(&s2.conv, &whole_state.conv),
        ];
        assert!(
            errs.iter().all(|e| *e <= BOUND),
            "{} pieces: {errs:?}",
            info.name
        );

        // Prefill, then the last five tokens one at a time through the decode step.
        let (mut outs, mut state) = {
            let (o, s) = run(b.as_ref(), &d, 0, t - 5, None);
            (vec![o], s)
        };
        for p in t - 5..t {
            let (o, s) = run(b.as_ref(), &d, p, 1, Some(&state));
            outs.push(o);
            state = s;
        }
        let joined = Tensor::cat(&outs, 1).expect("cat");
        let errs = [
            rel(&joined, &whole),
            rel(&state.recurrent, &whole_state.recurrent),
            rel(&state.conv, &whole_state.conv),
        ];
        eprintln!("{:<10} decode steps vs whole: {errs:?}", info.name);
        assert!(
            errs.iter().all(|e| *e <= BOUND),
            "{} decode: {errs:?}",
            info.name
        );
    }
}

#[test]
fn a_conv_state_of_the_wrong_shape_is_an_error_naming_the_backend() {
    let d = data(7);
    let bad = GdnState {
        conv: Tensor::zeros((2, 3, 4), DType::F64, &Device::Cpu).expect("zeros"),
        recurrent: Tensor::zeros((2, 4, 16, 24), DType::F64, &Device::Cpu).expect("zeros"),
    };
    for info in available_backends() {
        let b = backend_by_name(info.name, &Device::Cpu).expect("cpu backend");
        let mixed = d.mixed.narrow(1, 0, 1).expect("narrow");
        let err = b
            .conv1d_silu_continue(&mixed, &d.w, &bad.conv)
            .expect_err("a [2, 3, 4] conv state for 160 channels");
        let msg = err.to_string();
        assert!(
            msg.contains(info.name) && msg.contains("conv state"),
            "{msg}"
        );
    }
}
