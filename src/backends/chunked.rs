//! `chunked`: the chunked gated delta rule of transformers' PyTorch fallback
//! (`torch_chunk_gated_delta_rule`, gdn-spec §5.3), composed from candle tensor ops so that it
//! runs wherever candle does (CPU, and CUDA when built with it).
//!
//! - q, k, v, g, β are cast to the accumulation dtype, q/k L2-normalised there and q scaled by
//!   dk^-1/2; the sequence is right-padded with zeros to a multiple of 64 (padded positions have
//!   k = v = β = 0 and decay exp(0) = 1, so they change neither real outputs nor the state);
//! - per chunk: cumulative log decay γ, decay masks, the UT/WY transform
//!   `(I + A) [U | W] = [vβ | exp(γ)⊙kβ]` solved by blocked forward substitution (candle has no
//!   triangular solve; the substitution is exact up to rounding, in f64 too);
//! - a sequential scan over chunks carries the state at the accumulation precision; the output
//!   is rounded once to the input dtype and the final state returned in the accumulation dtype.
//!
//! The conv + SiLU and the gated RMSNorm are the `reference` ones (same casts).

use candle_core::{DType, Tensor};

use super::{
    DeltaInputs, GdnDims, LinearAttentionBackend, Reference, accumulation_dtype, check_conv_shapes,
    check_delta_rule_shapes, check_norm_shapes,
};
use crate::error::Result;

/// Chunk length of transformers' fallback (HF always passes the default).
const CHUNK: usize = 64;
/// Rows solved by plain substitution at the bottom of the blocked triangular solve.
const SOLVE_BLOCK: usize = 16;

#[derive(Debug, Default)]
pub struct Chunked;

impl LinearAttentionBackend for Chunked {
    fn name(&self) -> &'static str {
        "chunked"
    }

    fn conv1d_silu(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor> {
        // Checked here too so that errors name this backend.
        check_conv_shapes(self.name(), x, weight)?;
        Reference.conv1d_silu(x, weight)
    }

    fn gated_delta_rule(&self, x: DeltaInputs, state: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let d = check_delta_rule_shapes(self.name(), x, state)?;
        let dtype = x.v.dtype();
        let acc = accumulation_dtype(dtype);
        let (b, t, hv) = (d.batch, d.seq, d.v_heads);
        let (dk, dv) = (d.k_dim, d.v_dim);
        let dev = x.v.device();
        let bh = b * hv;
        let state = match state {
            Some(s) => s.to_dtype(acc)?.reshape((bh, dk, dv))?,
            None => Tensor::zeros((bh, dk, dv), acc, dev)?,
        };
        if t == 0 {
            let out = Tensor::zeros((b, 0, hv, dv), dtype, dev)?;
            return Ok((out, state.reshape((b, hv, dk, dv))?));
        }
        let chunks = Chunks::new(x, &d, acc)?;
        let terms = ChunkTerms::new(&chunks, dk, dv)?;
        let (outs, state) = terms.scan(state)?;
        let n = chunks.count;
        let out = Tensor::stack(&outs, 1)? // [BH, N, C, dv]
            .reshape((b, hv, n * CHUNK, dv))?
            .narrow(2, 0, t)?
            .transpose(1, 2)?
            .to_dtype(dtype)?
            .contiguous()?;
        Ok((out, state.reshape((b, hv, dk, dv))?))
    }

    fn gated_rms_norm(&self, x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
        check_norm_shapes(self.name(), x, z, weight)?;
        Reference.gated_rms_norm(x, z, weight, eps)
    }

    /// A decode step is the recurrence, as in transformers (`torch_recurrent_gated_delta_rule`
    /// for one token with a cache): a lone token is not padded to a 64-token chunk.
    fn gated_delta_rule_step(&self, x: DeltaInputs, state: &Tensor) -> Result<(Tensor, Tensor)> {
        check_delta_rule_shapes(self.name(), x, Some(state))?;
        Reference.gated_delta_rule(x, Some(state))
    }
}

/// One call's q, k, v, β and g as `[B·Hv·N, C, x]` chunks at the accumulation precision,
/// zero-padded to `count` chunks of [`CHUNK`] tokens; q and k L2-normalised, q scaled by
/// dk^-1/2, each value head holding its key head's q and k.
struct Chunks {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    /// `[M, C, 1]`.
    beta: Tensor,
    /// `[M, C]`.
    g: Tensor,
    /// Chunks per (batch, value head).
    count: usize,
}

impl Chunks {
    fn new(x: DeltaInputs, d: &GdnDims, acc: DType) -> Result<Chunks> {
        let DeltaInputs { q, k, v, g, beta } = x;
        let (b, t, hv) = (d.batch, d.seq, d.v_heads);
        let (hk, dk, dv) = (d.k_heads, d.k_dim, d.v_dim);
        let r = d.heads_per_key_head();
        let n = t.div_ceil(CHUNK);
        let pad = n * CHUNK - t;
        let m = b * hv * n; // independent (batch, value head, chunk) blocks

        // [B, T, H, x] → [B·Hv·N, C, x] at the accumulation precision, zero-padded.
        let to_chunks = |x: Tensor, width: usize| -> Result<Tensor> {
            Ok(x.transpose(1, 2)?
                .pad_with_zeros(2, 0, pad)?
                .contiguous()?
                .reshape((m, CHUNK, width))?)
        };
        // q/k: L2 norm, then value head h ← key head h / r (repeat_interleave).
        let prep_qk = |x: &Tensor| -> Result<Tensor> {
            let x = super::reference::l2_normalise(&x.to_dtype(acc)?)?
                .unsqueeze(3)?
                .broadcast_as((b, t, hk, r, dk))?
                .reshape((b, t, hv, dk))?;
            to_chunks(x, dk)
        };
        let scale = 1.0 / (dk as f64).sqrt();
        Ok(Chunks {
            q: (prep_qk(q)? * scale)?,
            k: prep_qk(k)?,
            v: to_chunks(v.to_dtype(acc)?, dv)?,
            beta: to_chunks(beta.to_dtype(acc)?.unsqueeze(3)?, 1)?,
            g: to_chunks(g.to_dtype(acc)?.unsqueeze(3)?, 1)?.squeeze(2)?,
            count: n,
        })
    }
}

/// The per-chunk terms of the scan, each `[N, B·Hv, …]` so that chunk i is one contiguous slab:
/// the UT/WY transform's U (`new_values`) and W (`k_cumdecay`), the decayed intra-chunk
/// attention, q and k decayed to the chunk's start and end, and the chunk's total decay.
struct ChunkTerms {
    new_values: Tensor,
    k_cumdecay: Tensor,
    intra_attn: Tensor,
    q_decayed: Tensor,
    /// `[N, BH, dk, C]`.
    k_decayed_t: Tensor,
    chunk_decay: Tensor,
}

impl ChunkTerms {
    fn new(c: &Chunks, dk: usize, dv: usize) -> Result<ChunkTerms> {
        let Chunks {
            q,
            k,
            v,
            beta,
            g,
            count,
        } = c;
        let m = q.dim(0)?;
        // γ_i = Σ_{m ≤ i} g_m inside each chunk.
        let gamma = g.cumsum(1)?;
        let (decay_mask, strict_decay_mask) = decay_masks(&gamma, m)?;
        let k_t = k.transpose(1, 2)?.contiguous()?; // [M, dk, C]
        let k_beta = k.broadcast_mul(beta)?;
        let v_beta = v.broadcast_mul(beta)?;
        let exp_gamma = gamma.exp()?.unsqueeze(2)?; // [M, C, 1]
        // UT transform: (I + A) X = [vβ | exp(γ)⊙kβ], A strictly lower.
        let a = (k_beta.matmul(&k_t)? * strict_decay_mask)?;
        let rhs = Tensor::cat(&[&v_beta, &k_beta.broadcast_mul(&exp_gamma)?], 2)?;
        let x = solve_unit_lower(&a, &rhs)?;
        let new_values = x.narrow(2, 0, dv)?; // U
        let k_cumdecay = x.narrow(2, dv, dk)?; // W
        let intra_attn = (q.matmul(&k_t)? * decay_mask)?; // [M, C, C]
        let gamma_last = gamma.narrow(1, CHUNK - 1, 1)?; // [M, 1]
        let q_decayed = q.broadcast_mul(&exp_gamma)?;
        let k_decayed = k.broadcast_mul(&gamma_last.broadcast_sub(&gamma)?.exp()?.unsqueeze(2)?)?;
        let chunk_decay = gamma_last.exp()?.unsqueeze(2)?; // [M, 1, 1]

        // [M, …] → [N, B·Hv, …] so that chunk i is one contiguous slab.
        let by_chunk = |x: Tensor| -> Result<Tensor> {
            let mut dims = vec![m / count, *count];
            dims.extend_from_slice(&x.dims()[1..]);
            Ok(x.reshape(dims)?.transpose(0, 1)?.contiguous()?)
        };
        Ok(ChunkTerms {
            new_values: by_chunk(new_values)?,
            k_cumdecay: by_chunk(k_cumdecay)?,
            intra_attn: by_chunk(intra_attn)?,
            q_decayed: by_chunk(q_decayed)?,
            k_decayed_t: by_chunk(k_decayed.transpose(1, 2)?)?,
            chunk_decay: by_chunk(chunk_decay)?,
        })
    }

    /// The sequential scan over chunks from `state` (`[B·Hv, dk, dv]`, accumulation precision):
    /// each chunk's output `[B·Hv, C, dv]`, and the final state.
    fn scan(&self, mut state: Tensor) -> Result<(Vec<Tensor>, Tensor)> {
        let n = self.new_values.dim(0)?;
        let mut outs = Vec::with_capacity(n);
        for i in 0..n {
            let v_new = (self.new_values.get(i)? - self.k_cumdecay.get(i)?.matmul(&state)?)?;
            let inter = self.q_decayed.get(i)?.matmul(&state)?;
            outs.push((inter + self.intra_attn.get(i)?.matmul(&v_new)?)?);
            state = (state.broadcast_mul(&self.chunk_decay.get(i)?)?
                + self.k_decayed_t.get(i)?.matmul(&v_new)?)?;
        }
        Ok((outs, state))
    }
}

/// The decay masks of one chunk from its cumulative log decay γ (`[M, C]`): `exp(γ_i − γ_j)`
/// for j ≤ i, and for j < i; zero elsewhere.
fn decay_masks(gamma: &Tensor, m: usize) -> Result<(Tensor, Tensor)> {
    let dev = gamma.device();
    // diff_ij = γ_i − γ_j.
    let diff = gamma
        .unsqueeze(2)?
        .broadcast_sub(&gamma.unsqueeze(1)?)?
        .contiguous()?;
    // Masks are applied before the exp: γ_i − γ_j > 0 above the diagonal could overflow.
    let idx = Tensor::arange(0u32, CHUNK as u32, dev)?;
    let col = idx.reshape((1, CHUNK))?.broadcast_as((CHUNK, CHUNK))?;
    let row = idx.reshape((CHUNK, 1))?.broadcast_as((CHUNK, CHUNK))?;
    let lower = col.le(&row)?.broadcast_as((m, CHUNK, CHUNK))?; // j ≤ i
    let strictly_lower = col.lt(&row)?.broadcast_as((m, CHUNK, CHUNK))?; // j < i
    let neg_inf = Tensor::new(f64::NEG_INFINITY, dev)?
        .to_dtype(gamma.dtype())?
        .broadcast_as((m, CHUNK, CHUNK))?;
    let decay_mask = lower.where_cond(&diff, &neg_inf)?.exp()?;
    let strict_decay_mask = strictly_lower.where_cond(&diff, &neg_inf)?.exp()?;
    Ok((decay_mask, strict_decay_mask))
}

/// Solves `(I + A) X = R` for X, batched: `a` `[M, n, n]` strictly lower triangular (it must be
/// zero on and above the diagonal), `rhs` `[M, n, w]`.
/// Blocked forward substitution: the leading half is solved first, its contribution subtracted
/// from the trailing rows with one matmul, then the trailing half is solved.
fn solve_unit_lower(a: &Tensor, rhs: &Tensor) -> Result<Tensor> {
    let n = rhs.dim(1)?;
    if n <= SOLVE_BLOCK {
        // Column-oriented substitution: once row j of X is final, remove its contribution from
        // every row; column j of A is zero on rows ≤ j, so those rows are untouched.
        let mut x = rhs.clone();
        for j in 0..n.saturating_sub(1) {
            let row = x.narrow(1, j, 1)?; // [M, 1, w]
            let col = a.narrow(2, j, 1)?; // [M, n, 1]
            x = (x - col.broadcast_mul(&row)?)?;
        }
        return Ok(x);
    }
    let h = n / 2;
    let a11 = a.narrow(1, 0, h)?.narrow(2, 0, h)?.contiguous()?;
    let a21 = a.narrow(1, h, n - h)?.narrow(2, 0, h)?.contiguous()?;
    let a22 = a.narrow(1, h, n - h)?.narrow(2, h, n - h)?.contiguous()?;
    let x1 = solve_unit_lower(&a11, &rhs.narrow(1, 0, h)?)?;
    let r2 = (rhs.narrow(1, h, n - h)? - a21.matmul(&x1.contiguous()?)?)?;
    let x2 = solve_unit_lower(&a22, &r2)?;
    Ok(Tensor::cat(&[&x1, &x2], 1)?)
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};

    use super::*;

    /// The blocked solve against a host f64 forward substitution, for sizes that hit both the
    /// plain and the blocked branch.
    #[test]
    fn unit_lower_solve_is_exact_in_f64() -> Result<()> {
        for n in [1usize, 5, 16, 17, 64] {
            let (m, w) = (3, 4);
            let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ n as u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            };
            let mut a = vec![0.0; m * n * n];
            for bi in 0..m {
                for i in 0..n {
                    for j in 0..i {
                        a[(bi * n + i) * n + j] = next() * 0.5;
                    }
                }
            }
            let rhs: Vec<f64> = (0..m * n * w).map(|_| next()).collect();
            let mut want = rhs.clone();
            for bi in 0..m {
                for i in 0..n {
                    for c in 0..w {
                        let mut s = rhs[(bi * n + i) * w + c];
                        for j in 0..i {
                            s -= a[(bi * n + i) * n + j] * want[(bi * n + j) * w + c];
                        }
                        want[(bi * n + i) * w + c] = s;
                    }
                }
            }
            let at = Tensor::from_vec(a, (m, n, n), &Device::Cpu)?;
            let rt = Tensor::from_vec(rhs, (m, n, w), &Device::Cpu)?;
            let got = solve_unit_lower(&at, &rt)?
                .flatten_all()?
                .to_vec1::<f64>()?;
            let err = got
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
                .fold(0.0f64, f64::max);
            assert!(err < 1e-13, "n = {n}: max error {err:e}");
        }
        Ok(())
    }

    #[test]
    fn empty_sequence_returns_the_initial_state() -> Result<()> {
        let dev = Device::Cpu;
        let q = Tensor::zeros((1, 0, 1, 4), DType::F32, &dev)?;
        let v = Tensor::zeros((1, 0, 2, 3), DType::F32, &dev)?;
        let g = Tensor::zeros((1, 0, 2), DType::F32, &dev)?;
        let s0 = Tensor::ones((1, 2, 4, 3), DType::F32, &dev)?;
        let x = DeltaInputs {
            q: &q,
            k: &q,
            v: &v,
            g: &g,
            beta: &g,
        };
        let (out, s) = Chunked.gated_delta_rule(x, Some(&s0))?;
        assert_eq!(out.dims(), [1, 0, 2, 3]);
        assert_eq!(s.flatten_all()?.to_vec1::<f32>()?, vec![1.0; 24]);
        Ok(())
    }
}
