//! Plain `f64` reference implementations — the truth the tests compare against.
//!
//! Written to be obviously correct, not fast: direct transcriptions of gdn-spec §5 with the
//! textbook operation order (decay, predict, delta, write, read after write), full loops, the
//! standard library's `exp`/`sqrt`, no blocking and no reassociation tricks. Inputs are `f64`
//! (tests round them to the storage type first when measuring a low-precision kernel).
//! Shapes are trusted (tests only); slices are indexed directly.

use crate::backends::fused::cpu::dims::GdnDims;

/// Depthwise causal conv + SiLU: x [B, T, C], w [C, K] → [B, T, C].
pub fn causal_conv1d_silu(
    x: &[f64],
    w: &[f64],
    batch: usize,
    seq: usize,
    ch: usize,
    k: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; batch * seq * ch];
    for b in 0..batch {
        for t in 0..seq {
            for c in 0..ch {
                let mut acc = 0.0;
                for j in 0..k {
                    // Tap j reads token t − (K−1) + j; tokens before 0 are zero.
                    let src = t as isize - (k as isize - 1) + j as isize;
                    if src >= 0 {
                        acc += w[c * k + j] * x[(b * seq + src as usize) * ch + c];
                    }
                }
                out[(b * seq + t) * ch + c] = acc / (1.0 + (-acc).exp());
            }
        }
    }
    out
}

/// Gated delta rule with q/k L2 norm (eps 1e-6) and scale. q, k [B, T, Hk, dk]; v [B, T, Hv, dv];
/// g, beta [B, T, Hv]; state [B, Hv, dk, dv]. Returns (out [B, T, Hv, dv], final state).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    g: &[f64],
    beta: &[f64],
    scale: f64,
    initial_state: Option<&[f64]>,
    d: &GdnDims,
) -> (Vec<f64>, Vec<f64>) {
    let (dk, dv, hk, hv, seq) = (d.k_dim, d.v_dim, d.k_heads, d.v_heads, d.seq);
    let r = hv / hk;
    let mut out = vec![0.0; d.batch * seq * hv * dv];
    let mut fin = vec![0.0; d.batch * hv * dk * dv];
    for b in 0..d.batch {
        for h in 0..hv {
            let kh = h / r; // repeat_interleave
            let so = (b * hv + h) * dk * dv;
            let mut s: Vec<f64> = match initial_state {
                Some(init) => init[so..so + dk * dv].to_vec(),
                None => vec![0.0; dk * dv],
            };
            for t in 0..seq {
                let qo = ((b * seq + t) * hk + kh) * dk;
                let gi = (b * seq + t) * hv + h;
                let vo = gi * dv;
                let l2 = |x: &[f64]| {
                    let n = (x.iter().map(|a| a * a).sum::<f64>() + 1e-6).sqrt();
                    x.iter().map(|a| a / n).collect::<Vec<f64>>()
                };
                let kn = l2(&k[qo..qo + dk]);
                let qn: Vec<f64> = l2(&q[qo..qo + dk]).iter().map(|a| a * scale).collect();
                // S' = exp(g)·S
                let decay = g[gi].exp();
                for x in s.iter_mut() {
                    *x *= decay;
                }
                // u = β(v − S'ᵀk̂)
                let mut u = vec![0.0; dv];
                for (j, uj) in u.iter_mut().enumerate() {
                    let pred: f64 = (0..dk).map(|i| s[i * dv + j] * kn[i]).sum();
                    *uj = beta[gi] * (v[vo + j] - pred);
                }
                // S = S' + k̂ uᵀ
                for i in 0..dk {
                    for j in 0..dv {
                        s[i * dv + j] += kn[i] * u[j];
                    }
                }
                // o = Sᵀ q̃ (after the update)
                for j in 0..dv {
                    out[vo + j] = (0..dk).map(|i| s[i * dv + j] * qn[i]).sum();
                }
            }
            fin[so..so + dk * dv].copy_from_slice(&s);
        }
    }
    (out, fin)
}

/// The whole core: conv + SiLU of `mixed_qkv` [B, T, C], split into q | k | v, then
/// [`gated_delta_rule`]. Returns (out, final state, conv output).
#[allow(clippy::too_many_arguments)]
pub fn gdn(
    mixed_qkv: &[f64],
    conv_weight: &[f64],
    g: &[f64],
    beta: &[f64],
    scale: f64,
    initial_state: Option<&[f64]>,
    d: &GdnDims,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let kd = d.k_heads * d.k_dim;
    let vd = d.v_heads * d.v_dim;
    let c = 2 * kd + vd;
    let conv = causal_conv1d_silu(mixed_qkv, conv_weight, d.batch, d.seq, c, d.conv_kernel);
    let mut q = Vec::new();
    let mut k = Vec::new();
    let mut v = Vec::new();
    for row in conv.chunks(c) {
        q.extend_from_slice(&row[..kd]);
        k.extend_from_slice(&row[kd..2 * kd]);
        v.extend_from_slice(&row[2 * kd..]);
    }
    let (out, fin) = gated_delta_rule(&q, &k, &v, g, beta, scale, initial_state, d);
    (out, fin, conv)
}

/// Gated RMS norm: y = w ⊙ x / sqrt(mean x² + eps) ⊙ SiLU(z), rows of length `dim`.
pub fn gated_rms_norm(x: &[f64], z: &[f64], w: &[f64], eps: f64, dim: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for (r, o) in out.chunks_mut(dim).enumerate() {
        let xr = &x[r * dim..(r + 1) * dim];
        let zr = &z[r * dim..(r + 1) * dim];
        let ms = xr.iter().map(|a| a * a).sum::<f64>() / dim as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for i in 0..dim {
            let silu = zr[i] / (1.0 + (-zr[i]).exp());
            o[i] = w[i] * (xr[i] * inv) * silu;
        }
    }
    out
}
