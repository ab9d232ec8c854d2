//! Public entry points of the delta rule: the fused layer kernel ([`fused_gdn`]) and the
//! standalone rule on already-convolved q, k, v ([`gated_delta_rule`]).

use rayon::prelude::*;

use crate::backends::fused::cpu::conv::{conv_all, conv_segment, transpose_weights};
use crate::backends::fused::cpu::delta::{HeadArgs, HeadSource, HeadWork, TIME_CHUNK, run_group};
use crate::backends::fused::cpu::dims::{ConvDims, GdnDims};
use crate::backends::fused::cpu::dispatch::{isa, multiversion};
use crate::backends::fused::cpu::element::{Accum, Element};
use crate::backends::fused::cpu::error::{KernelError, check_len, prod};
use crate::backends::fused::cpu::par::DisjointOut;

/// The fused Gated DeltaNet core: causal conv + SiLU, L2 norm of q and k, scale, and the gated
/// delta rule, in one pass per (batch, value head).
///
/// - `mixed_qkv`: [B, T, C] pre-conv projections, channels [q (Hk·dk) | k (Hk·dk) | v (Hv·dv)].
/// - `conv_weight`: [C, K], no bias; `w[c, K−1]` multiplies the current token.
/// - `g`: [B, T, Hv] log decays in the accumulation type; `beta`: [B, T, Hv].
/// - `scale`: multiplies the L2-normalised q (normally dk^−½).
/// - `initial_state`: optional [B, Hv, dk, dv]; `final_state`: [B, Hv, dk, dv], overwritten.
/// - `core_out`: [B, T, Hv, dv], overwritten.
/// - `conv_out`: optional [B, T, C] capture of the conv + SiLU output, for per-op comparisons.
///
/// Precision: conv accumulated in `S::Acc`, SiLU in `S::Acc`, rounded once to `S` (what the
/// delta rule then reads); L2 norm, scale, gates, state and outputs in `S::Acc`; outputs rounded
/// once to `S`.
///
/// Parallel over (batch, key head) with rayon: a task owns the r value heads that read one key
/// head, so the conv and L2 norm of q/k are computed once and tasks share nothing. `conv_out`, when asked for, is written by a separate pass of the same conv routine, bit-for-bit
/// equal to what the fused pass consumed (capture is a debugging path; it keeps the tasks free of
/// interleaved writes into [B, T, C]).
#[allow(clippy::too_many_arguments)]
pub fn fused_gdn<S: Element>(
    mixed_qkv: &[S],
    conv_weight: &[S],
    g: &[S::Acc],
    beta: &[S],
    scale: f64,
    initial_state: Option<&[S::Acc]>,
    dims: GdnDims,
    core_out: &mut [S],
    final_state: &mut [S::Acc],
    conv_out: Option<&mut [S]>,
) -> Result<(), KernelError> {
    dims.validate(true)?;
    let c = dims.conv_dim();
    let k = dims.conv_kernel;
    check_len(
        "mixed_qkv",
        prod(&[dims.batch, dims.seq, c])?,
        mixed_qkv.len(),
    )?;
    check_len("conv_weight", prod(&[c, k])?, conv_weight.len())?;
    let recurrence = Recurrence {
        dims,
        g,
        beta,
        scale,
        initial_state,
    };
    recurrence.check_lengths(core_out, final_state)?;
    if let Some(co) = &conv_out {
        check_len("conv_out", prod(&[dims.batch, dims.seq, c])?, co.len())?;
    }
    let isa = isa();
    if let Some(co) = conv_out
        && !co.is_empty()
    {
        let cd = ConvDims {
            batch: dims.batch,
            seq: dims.seq,
            channels: c,
            kernel: k,
        };
        conv_all::<S>(isa, mixed_qkv, conv_weight, cd, co);
    }
    let src = FusedSource {
        x: mixed_qkv,
        w: conv_weight,
        dims,
        c,
    };
    recurrence.run(isa, &src, core_out, final_state);
    Ok(())
}

/// The gated delta rule on already-convolved inputs, with the q/k L2 norm inside.
///
/// - `q`, `k`: [B, T, Hk, dk]; `v`: [B, T, Hv, dv]; value head h reads q/k head h / r.
/// - `g`: [B, T, Hv] (accumulation type); `beta`: [B, T, Hv].
/// - `initial_state`: optional [B, Hv, dk, dv]; `final_state`, `out` overwritten
///   ([B, Hv, dk, dv] and [B, T, Hv, dv]).
///
/// `dims.conv_kernel` is ignored. Same recurrence code as [`fused_gdn`].
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule<S: Element>(
    q: &[S],
    k: &[S],
    v: &[S],
    g: &[S::Acc],
    beta: &[S],
    scale: f64,
    initial_state: Option<&[S::Acc]>,
    dims: GdnDims,
    out: &mut [S],
    final_state: &mut [S::Acc],
) -> Result<(), KernelError> {
    dims.validate(false)?;
    let nqk = prod(&[dims.batch, dims.seq, dims.k_heads, dims.k_dim])?;
    check_len("q", nqk, q.len())?;
    check_len("k", nqk, k.len())?;
    check_len(
        "v",
        prod(&[dims.batch, dims.seq, dims.v_heads, dims.v_dim])?,
        v.len(),
    )?;
    let recurrence = Recurrence {
        dims,
        g,
        beta,
        scale,
        initial_state,
    };
    recurrence.check_lengths(out, final_state)?;
    recurrence.run(isa(), &SplitSource { q, k, v, dims }, out, final_state);
    Ok(())
}

/// What both entry points hand the recurrence besides where q, k, v come from.
struct Recurrence<'a, S: Element> {
    dims: GdnDims,
    /// [B, T, Hv] log decays.
    g: &'a [S::Acc],
    /// [B, T, Hv] β.
    beta: &'a [S],
    scale: f64,
    /// Optional [B, Hv, dk, dv].
    initial_state: Option<&'a [S::Acc]>,
}

impl<S: Element> Recurrence<'_, S> {
    /// Checks the lengths of the gates, the states and the core output `out` against the dims.
    fn check_lengths(&self, out: &[S], final_state: &[S::Acc]) -> Result<(), KernelError> {
        let dims = &self.dims;
        let ngate = prod(&[dims.batch, dims.seq, dims.v_heads])?;
        check_len("g", ngate, self.g.len())?;
        check_len("beta", ngate, self.beta.len())?;
        let nstate = prod(&[dims.batch, dims.v_heads, dims.k_dim, dims.v_dim])?;
        if let Some(s) = self.initial_state {
            check_len("initial_state", nstate, s.len())?;
        }
        check_len("final_state", nstate, final_state.len())?;
        check_len(
            "core_out",
            prod(&[dims.batch, dims.seq, dims.v_heads, dims.v_dim])?,
            out.len(),
        )
    }

    /// The parallel loop over (b, key head) tasks (shapes validated and lengths checked).
    fn run<Src: HeadSource<S>>(
        &self,
        isa: crate::backends::fused::cpu::dispatch::Isa,
        src: &Src,
        out: &mut [S],
        final_state: &mut [S::Acc],
    ) {
        if final_state.is_empty() {
            return; // batch == 0
        }
        let dims = self.dims;
        let out = DisjointOut::new(out);
        let args = HeadArgs {
            dims,
            g: self.g,
            beta: self.beta,
            scale: S::Acc::from_f64(self.scale),
            out: &out,
        };
        // The r value heads of one key head are consecutive in [B, Hv, dk, dv].
        let gs = dims.heads_per_key_head() * dims.k_dim * dims.v_dim;
        let initial_state = self.initial_state;
        final_state
            .par_chunks_mut(gs)
            .enumerate()
            .with_max_len(1)
            .for_each_init(
                || (src.local(), HeadWork::new(&dims)),
                |(local, work), (idx, fin)| {
                    let (b, kh) = (idx / dims.k_heads, idx % dims.k_heads);
                    let init = initial_state.map(|s| &s[idx * gs..(idx + 1) * gs]);
                    group::<S, Src>(isa, src, local, work, &args, b, kh, init, fin);
                },
            );
    }
}

multiversion! {
    /// Multiversioned [`run_group`].
    fn group<S: Element, Src: HeadSource<S>>(
        src: &Src,
        local: &mut Src::Local,
        work: &mut HeadWork<S::Acc>,
        args: &HeadArgs<'_, S>,
        b: usize,
        kh: usize,
        init: Option<&[S::Acc]>,
        fin: &mut [S::Acc],
    ) => run_group
}

/// q, k, v produced by the depthwise conv of `mixed_qkv`.
struct FusedSource<'a, S> {
    x: &'a [S],
    w: &'a [S],
    dims: GdnDims,
    c: usize,
}

/// Transposed weights of the current key head's q/k channels and of its r value heads, and the
/// conv staging buffer.
struct FusedLocal<A> {
    wq: Vec<A>,
    wk: Vec<A>,
    /// [r, K, dv].
    wv: Vec<A>,
    xbuf: Vec<A>,
}

impl<S: Element> FusedSource<'_, S> {
    /// First channels of q and k of key head kh.
    fn qk_channels(&self, kh: usize) -> (usize, usize) {
        let d = &self.dims;
        (kh * d.k_dim, (d.k_heads + kh) * d.k_dim)
    }

    /// First channel of v of value head h.
    fn v_channel(&self, h: usize) -> usize {
        let d = &self.dims;
        2 * d.k_heads * d.k_dim + h * d.v_dim
    }
}

impl<S: Element> HeadSource<S> for FusedSource<'_, S> {
    type Local = FusedLocal<S::Acc>;

    fn local(&self) -> Self::Local {
        let d = &self.dims;
        let k = d.conv_kernel;
        FusedLocal {
            wq: vec![S::Acc::ZERO; k * d.k_dim],
            wk: vec![S::Acc::ZERO; k * d.k_dim],
            wv: vec![S::Acc::ZERO; d.heads_per_key_head() * k * d.v_dim],
            xbuf: vec![S::Acc::ZERO; (TIME_CHUNK + k - 1) * d.k_dim.max(d.v_dim)],
        }
    }

    fn begin(&self, l: &mut Self::Local, _b: usize, kh: usize) {
        let d = &self.dims;
        let kk = d.conv_kernel;
        let (cq, ck) = self.qk_channels(kh);
        transpose_weights::<S>(self.w, kk, cq, d.k_dim, &mut l.wq);
        transpose_weights::<S>(self.w, kk, ck, d.k_dim, &mut l.wk);
        let r = d.heads_per_key_head();
        for (i, wv) in l.wv.chunks_mut(kk * d.v_dim).enumerate() {
            transpose_weights::<S>(self.w, kk, self.v_channel(kh * r + i), d.v_dim, wv);
        }
    }

    #[inline(always)]
    fn load_qk<const FMA: bool>(
        &self,
        l: &mut Self::Local,
        b: usize,
        kh: usize,
        t0: usize,
        n: usize,
        q: &mut [S::Acc],
        k: &mut [S::Acc],
    ) {
        let d = &self.dims;
        let (cq, ck) = self.qk_channels(kh);
        let per_b = d.seq * self.c;
        let x_b = &self.x[b * per_b..(b + 1) * per_b];
        let (kk, dk) = (d.conv_kernel, d.k_dim);
        conv_segment::<S, FMA>(x_b, self.c, cq, dk, t0, n, kk, &l.wq, &mut l.xbuf, q, dk);
        conv_segment::<S, FMA>(x_b, self.c, ck, dk, t0, n, kk, &l.wk, &mut l.xbuf, k, dk);
    }

    #[inline(always)]
    fn load_v<const FMA: bool>(
        &self,
        l: &mut Self::Local,
        b: usize,
        h: usize,
        t0: usize,
        n: usize,
        v: &mut [S::Acc],
        v_stride: usize,
    ) {
        let d = &self.dims;
        let per_b = d.seq * self.c;
        let x_b = &self.x[b * per_b..(b + 1) * per_b];
        let (kk, dv) = (d.conv_kernel, d.v_dim);
        let i = h % d.heads_per_key_head();
        let wv = &l.wv[i * kk * dv..(i + 1) * kk * dv];
        let cv = self.v_channel(h);
        conv_segment::<S, FMA>(x_b, self.c, cv, dv, t0, n, kk, wv, &mut l.xbuf, v, v_stride);
    }
}

/// q, k, v given directly (already convolved).
struct SplitSource<'a, S> {
    q: &'a [S],
    k: &'a [S],
    v: &'a [S],
    dims: GdnDims,
}

impl<S: Element> HeadSource<S> for SplitSource<'_, S> {
    type Local = ();

    fn local(&self) {}

    fn begin(&self, _l: &mut (), _b: usize, _kh: usize) {}

    #[inline(always)]
    fn load_qk<const FMA: bool>(
        &self,
        _l: &mut (),
        b: usize,
        kh: usize,
        t0: usize,
        n: usize,
        q: &mut [S::Acc],
        k: &mut [S::Acc],
    ) {
        let d = &self.dims;
        let dk = d.k_dim;
        for t in 0..n {
            let off = ((b * d.seq + t0 + t) * d.k_heads + kh) * dk;
            widen(&self.q[off..off + dk], &mut q[t * dk..(t + 1) * dk]);
            widen(&self.k[off..off + dk], &mut k[t * dk..(t + 1) * dk]);
        }
    }

    #[inline(always)]
    fn load_v<const FMA: bool>(
        &self,
        _l: &mut (),
        b: usize,
        h: usize,
        t0: usize,
        n: usize,
        v: &mut [S::Acc],
        v_stride: usize,
    ) {
        let d = &self.dims;
        let dv = d.v_dim;
        for t in 0..n {
            let off = ((b * d.seq + t0 + t) * d.v_heads + h) * dv;
            widen(
                &self.v[off..off + dv],
                &mut v[t * v_stride..t * v_stride + dv],
            );
        }
    }
}

#[inline(always)]
fn widen<S: Element>(src: &[S], dst: &mut [S::Acc]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.to_acc();
    }
}
