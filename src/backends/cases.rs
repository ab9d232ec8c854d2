//! Seeded random inputs for kernel checks — shared by `hsdiff selftest`, `hsdiff bench` and the
//! kernel tests, so that every one of them draws the same kind of data: fresh values with
//! realistic ranges, never zeros or identity weights.

use candle_core::DType;

use crate::backends::fused::cpu::{
    Accum, Element, GdnDims, KernelError, fused_gdn, gated_delta_rule, truth,
};

/// SplitMix64: tiny, seeded, reproducible on every platform.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller, one value per call).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// `n` draws from N(0, sd²).
    pub fn normals(&mut self, n: usize, sd: f64) -> Vec<f64> {
        (0..n).map(|_| sd * self.normal()).collect()
    }
}

/// How fast the recurrent state forgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// g ≈ −5: the state forgets within a few tokens.
    Strong,
    /// g ≈ −1e-3: the state remembers almost everything.
    NearZero,
    /// A log-normal mix spanning several decades, like real gates.
    Mixed,
}

/// One Gated DeltaNet call's inputs, in f64 (round them to the storage type under test).
pub struct GdnCase {
    pub dims: GdnDims,
    /// `[B, T, conv_dim]` pre-conv projections, N(0, 1).
    pub mixed: Vec<f64>,
    /// `[conv_dim, K]` conv weight, N(0, 0.25).
    pub w: Vec<f64>,
    /// `[B, T, Hv]` log decay.
    pub g: Vec<f64>,
    /// `[B, T, Hv]` β = σ(N(0, 1)).
    pub beta: Vec<f64>,
    /// `[B, Hv, dk, dv]` initial state, N(0, 0.25), when asked for.
    pub init: Option<Vec<f64>>,
}

pub fn gdn_case(dims: GdnDims, decay: Decay, with_init: bool, seed: u64) -> GdnCase {
    let mut rng = SplitMix::new(seed);
    let c = 2 * dims.k_heads * dims.k_dim + dims.v_heads * dims.v_dim;
    let ngate = dims.batch * dims.seq * dims.v_heads;
    let mixed = rng.normals(dims.batch * dims.seq * c, 1.0);
    let w = rng.normals(c * dims.conv_kernel, 0.5);
    let g = (0..ngate)
        .map(|_| match decay {
            Decay::Strong => -5.0 * (0.5 + rng.uniform()),
            Decay::NearZero => -1e-3 * (0.5 + rng.uniform()),
            Decay::Mixed => -(rng.normal() * 1.5 - 2.0).exp(),
        })
        .collect();
    let beta = (0..ngate)
        .map(|_| 1.0 / (1.0 + (-rng.normal()).exp()))
        .collect();
    let nstate = dims.batch * dims.v_heads * dims.k_dim * dims.v_dim;
    let init = with_init.then(|| rng.normals(nstate, 0.5));
    GdnCase {
        dims,
        mixed,
        w,
        g,
        beta,
        init,
    }
}

/// `x` in storage type `S` (one rounding from f64 through `S`'s accumulation type).
pub fn to_storage<S: Element>(x: &[f64]) -> Vec<S> {
    x.iter()
        .map(|&v| S::from_acc(S::Acc::from_f64(v)))
        .collect()
}

/// `x` in accumulation type `A`.
pub fn to_accum<A: Accum>(x: &[f64]) -> Vec<A> {
    x.iter().map(|&v| A::from_f64(v)).collect()
}

pub fn storage_to_f64<S: Element>(x: &[S]) -> Vec<f64> {
    x.iter().map(|v| v.to_acc().to_f64()).collect()
}

pub fn accum_to_f64<A: Accum>(x: &[A]) -> Vec<f64> {
    x.iter().map(|v| v.to_f64()).collect()
}

/// `x` rounded to `S` and back: exactly the values a kernel in `S` sees.
pub fn round_to_storage<S: Element>(x: &[f64]) -> Vec<f64> {
    storage_to_f64(&to_storage::<S>(x))
}

/// `x` rounded to `A` and back.
pub fn round_to_accum<A: Accum>(x: &[f64]) -> Vec<f64> {
    accum_to_f64(&to_accum::<A>(x))
}

// --- the kernel-test cases and their bounds (selftest and tests/kernels/fused_cpu_kernels.rs) -------

/// Dims of one delta-rule case (conv kernel 4, as every Qwen3.5/3.6 and Qwen3-Next layer).
pub fn gdn_dims(b: usize, t: usize, hk: usize, hv: usize, dk: usize, dv: usize) -> GdnDims {
    GdnDims::new(b, t, (hk, hv), (dk, dv), 4)
}

/// One fused-kernel case: its dims, its decay, whether it starts from an initial state, and the
/// seed of its inputs ([`gdn_case`]).
#[derive(Clone, Copy, Debug)]
pub struct KernelCase {
    pub dims: GdnDims,
    pub decay: Decay,
    pub with_init: bool,
    pub seed: u64,
}

impl KernelCase {
    /// `B1 T64 Hk3 Hv3 dk40 dv32 Strong +init`
    pub fn label(&self) -> String {
        let d = &self.dims;
        format!(
            "B{} T{} Hk{} Hv{} dk{} dv{} {:?}{}",
            d.batch,
            d.seq,
            d.k_heads,
            d.v_heads,
            d.k_dim,
            d.v_dim,
            self.decay,
            if self.with_init { " +init" } else { "" }
        )
    }

    /// The case's inputs in f64.
    pub fn inputs(&self) -> GdnCase {
        gdn_case(self.dims, self.decay, self.with_init, self.seed)
    }
}

/// The fused-kernel cases: T = 1, 63, 64, 65, 300, 1000; r = Hv/Hk = 1, 2, 3; dk ≠ dv; dv not a
/// multiple of the 32-column state block; B = 1 and 2; with and without an initial state.
/// `quick` leaves out the three T = 1000 cases.
pub fn kernel_cases(quick: bool) -> Vec<KernelCase> {
    let all = [
        (gdn_dims(1, 1, 2, 4, 32, 48), Decay::Strong, true),
        (gdn_dims(2, 1, 2, 2, 16, 8), Decay::NearZero, false),
        (gdn_dims(2, 63, 2, 6, 24, 40), Decay::NearZero, false),
        (gdn_dims(1, 64, 3, 3, 40, 32), Decay::Strong, false),
        (gdn_dims(2, 65, 2, 4, 64, 96), Decay::NearZero, true),
        (gdn_dims(1, 300, 1, 3, 128, 128), Decay::Mixed, true),
        (gdn_dims(2, 300, 2, 4, 48, 20), Decay::Strong, true),
        (gdn_dims(2, 1000, 2, 4, 32, 36), Decay::Strong, true),
        (gdn_dims(1, 1000, 2, 2, 48, 64), Decay::NearZero, false),
        (gdn_dims(1, 1000, 1, 2, 64, 64), Decay::Mixed, false),
    ];
    all.into_iter()
        .enumerate()
        .filter(|(_, (d, _, _))| !(quick && d.seq >= 1000))
        .map(|(i, (dims, decay, with_init))| KernelCase {
            dims,
            decay,
            with_init,
            seed: 1000 + i as u64,
        })
        .collect()
}

/// Seed of the conv cases' inputs, drawn in [`CONV_CASES`] order from one generator.
pub const CONV_SEED: u64 = 7;
/// Causal conv1d + SiLU cases `(B, T, C, K)`: one token, a long row, an odd K, K = 1.
pub const CONV_CASES: [(usize, usize, usize, usize); 4] =
    [(1, 1, 5, 4), (2, 70, 300, 4), (1, 129, 17, 3), (2, 5, 9, 1)];
/// Seed of the gated-norm cases' inputs, drawn in [`NORM_CASES`] order from one generator.
pub const NORM_SEED: u64 = 11;
/// Gated RMSNorm cases `(rows, dim)`: one row, many rows, a dim that is not a multiple of 32.
pub const NORM_CASES: [(usize, usize); 3] = [(1, 128), (300, 128), (77, 20)];
/// ε of the gated-norm cases.
pub const NORM_EPS: f64 = 1e-6;

/// Relative-L2 bound of a fused kernel against its f64 truth, per storage type; `None` for a
/// dtype the kernels do not store in.
///
/// - f64: u = 1.1e-16; a few hundred roundings along the longest dependency chain (dk-long dots
///   through ≤ 1000 recurrent steps) stay far below 1e-12.
/// - f32: u = 6e-8 times a growth factor of ~100 (dots of length dk, the recurrence) gives
///   ~6e-6; measured transformers fp32 floors are 2–5e-7, so 1e-5 leaves margin without hiding a
///   bug (a wrong operation order or a missed token gives ≥ 1e-3).
/// - bf16: u = 3.9e-3; conv output rounded once to bf16 (≈ u/√3 relative noise per element)
///   then propagated through the L2 norm and the recurrence, plus the output rounding: a correct
///   bf16 layer sits ≈ 3e-3 from the truth; bound 1e-2.
/// - f16: u = 4.9e-4, the same structure as bf16 ⇒ ≈ 4e-4 expected; bound 2e-3.
///
/// The conv (one accumulation of K ≤ 4 products, SiLU, one rounding) and the gated norm sit a few
/// u from their truth, well inside the same bounds.
pub fn kernel_bound(dtype: DType) -> Option<f64> {
    match dtype {
        DType::F64 => Some(1e-12),
        DType::F32 => Some(1e-5),
        DType::BF16 => Some(1e-2),
        DType::F16 => Some(2e-3),
        _ => None,
    }
}

/// `case` as a kernel storing in `S` sees it (as f64): the inputs rounded to `S`, the gates and
/// the initial state to its accumulation type.
pub fn rounded<S: Element>(case: &GdnCase) -> GdnCase {
    GdnCase {
        dims: case.dims,
        mixed: round_to_storage::<S>(&case.mixed),
        w: round_to_storage::<S>(&case.w),
        g: round_to_accum::<S::Acc>(&case.g),
        beta: round_to_storage::<S>(&case.beta),
        init: case.init.as_deref().map(round_to_accum::<S::Acc>),
    }
}

/// The attention scale of a case, 1/√dk.
pub fn gdn_scale(dims: &GdnDims) -> f64 {
    1.0 / (dims.k_dim as f64).sqrt()
}

/// The f64 truth of a case: (core out, final state, conv out).
pub fn gdn_truth(case: &GdnCase) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    truth::gdn(
        &case.mixed,
        &case.w,
        &case.g,
        &case.beta,
        gdn_scale(&case.dims),
        case.init.as_deref(),
        &case.dims,
    )
}

/// What the fused CPU kernel gave for a case (as f64).
pub struct FusedRun {
    pub out: Vec<f64>,
    pub state: Vec<f64>,
    pub conv: Vec<f64>,
    /// The standalone delta rule on the captured conv output gave the same output and state
    /// bit for bit (same recurrence, same inputs).
    pub standalone_same: bool,
    /// With `also_without_capture`: the run without conv capture gave the same output and state
    /// bit for bit.
    pub uncaptured_same: Option<bool>,
}

/// The fused CPU kernel on `case` in storage type `S`, outputs NaN-poisoned first (an unwritten
/// element stays NaN and fails every bound), then the standalone delta rule on its conv output;
/// with `also_without_capture`, the fused kernel once more without conv capture.
pub fn run_fused_cpu<S: Element>(
    case: &GdnCase,
    also_without_capture: bool,
) -> Result<FusedRun, KernelError> {
    let d = case.dims;
    let scale = gdn_scale(&d);
    let nan = S::from_acc(S::Acc::from_f64(f64::NAN));
    let nan_acc = S::Acc::from_f64(f64::NAN);
    let (mixed, w, beta) = (
        to_storage::<S>(&case.mixed),
        to_storage::<S>(&case.w),
        to_storage::<S>(&case.beta),
    );
    let g = to_accum::<S::Acc>(&case.g);
    let init = case.init.as_ref().map(|s| to_accum::<S::Acc>(s));
    let n_out = d.batch * d.seq * d.v_heads * d.v_dim;
    let n_state = d.batch * d.v_heads * d.k_dim * d.v_dim;
    let fused = |conv: Option<&mut [S]>| {
        let (mut out, mut state) = (vec![nan; n_out], vec![nan_acc; n_state]);
        fused_gdn::<S>(
            &mixed,
            &w,
            &g,
            &beta,
            scale,
            init.as_deref(),
            d,
            &mut out,
            &mut state,
            conv,
        )
        .map(|()| (storage_to_f64(&out), accum_to_f64(&state)))
    };
    let mut conv = vec![nan; mixed.len()];
    let (out, state) = fused(Some(&mut conv))?;

    let c = d.conv_dim();
    let kd = d.k_heads * d.k_dim;
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for row in conv.chunks(c) {
        q.extend_from_slice(&row[..kd]);
        k.extend_from_slice(&row[kd..2 * kd]);
        v.extend_from_slice(&row[2 * kd..]);
    }
    let (mut out2, mut state2) = (vec![nan; n_out], vec![nan_acc; n_state]);
    gated_delta_rule::<S>(
        &q,
        &k,
        &v,
        &g,
        &beta,
        scale,
        init.as_deref(),
        d,
        &mut out2,
        &mut state2,
    )?;
    let standalone_same = storage_to_f64(&out2) == out && accum_to_f64(&state2) == state;
    let uncaptured_same = if also_without_capture {
        let (out3, state3) = fused(None)?;
        Some(out3 == out && state3 == state)
    } else {
        None
    };
    Ok(FusedRun {
        out,
        state,
        conv: storage_to_f64(&conv),
        standalone_same,
        uncaptured_same,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_cases_are_the_full_list_without_t1000_and_keep_their_seeds() {
        let all = kernel_cases(false);
        let quick = kernel_cases(true);
        assert_eq!(all.len(), 10);
        assert_eq!(quick.len(), 7);
        for (q, a) in quick.iter().zip(&all) {
            assert_eq!((q.seed, q.dims.seq), (a.seed, a.dims.seq));
        }
        assert!(all[7..].iter().all(|c| c.dims.seq == 1000));
    }

    #[test]
    fn bounds_grow_with_the_unit_roundoff_and_integers_have_none() {
        let b = |d| kernel_bound(d).unwrap_or(f64::NAN);
        assert!(b(DType::F64) < b(DType::F32));
        assert!(b(DType::F32) < b(DType::F16));
        assert!(b(DType::F16) < b(DType::BF16));
        assert_eq!(kernel_bound(DType::U32), None);
    }

    #[test]
    fn labels_name_dims_decay_and_state() {
        assert_eq!(
            kernel_cases(false)[0].label(),
            "B1 T1 Hk2 Hv4 dk32 dv48 Strong +init"
        );
    }
}
