//! Seeded random inputs for kernel checks — shared by `hsdiff selftest`, `hsdiff bench` and the
//! kernel tests, so that every one of them draws the same kind of data: fresh values with
//! realistic ranges, never zeros or identity weights.

use crate::backends::fused::cpu::{Accum, Element, GdnDims};

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
