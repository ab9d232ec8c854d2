//! The gated delta rule recurrence, blocked over value columns, and the per-(batch, head)
//! driver shared by the standalone and the fused kernel.
//!
//! # Algorithm
//!
//! Per (b, h), state S ∈ ℝ^{dk×dv}:
//! S' = e_t·S (e_t = exp g_t); u_t = β_t(v_t − S'ᵀk̂_t); S = S' + k̂_t u_tᵀ; o_t = Sᵀq̃_t.
//!
//! Three facts make this fast on a CPU:
//!
//! 1. **Columns of S are independent.** Column j of the state only ever meets column j of v, u
//!    and o; k̂, q̃, e, β are shared. So the state is split into blocks of [`BLOCK`] columns, each
//!    stored contiguously as [dk, BLOCK] (16 KiB in f32, resident in L1), and each block runs a
//!    whole time chunk of tokens before the next block is touched. The k̂/q̃ rows of the chunk
//!    (64 tokens × dk) are shared by all blocks and stay in L1/L2.
//! 2. **One pass over the state per token.** With p = Sᵀk̂ and r = Sᵀq̃ taken from the *old*
//!    state, S'ᵀk̂ = e·p and o_t = Sᵀq̃ = e·r + (k̂·q̃)·u. So the pass that writes the new state
//!    row by row can at the same time accumulate p and r for the *next* token from the freshly
//!    written row: one load and one store per element and token.
//! 3. **The decay is a scalar.** The state is kept as c·Ŝ; the decay only updates c, and the
//!    write becomes Ŝ += k̂·(u/c)ᵀ — one FMA per element instead of a multiply and an FMA. When c
//!    leaves [RENORM_MIN, 1/RENORM_MIN] (every ~7 tokens at g ≈ −5 in f32, essentially never at
//!    realistic gates) that token folds c back into Ŝ. Per element and token: three FMAs.
//!
//! Measured (Zen 4, 2 threads, Hv 48, dk = dv = 128, T = 2048, f32, `examples/bench.rs`):
//! recurrence with BLOCK 32 and a separate decay multiply 147 ms; with the scalar decay and one
//! task per key head (q/k conv + norm shared by its r value heads) 79–81 ms; BLOCK 16: 91 ms;
//! BLOCK 64 (32 KiB, spills L1): 132–156 ms.
//!
//! Why not the chunked (WY / UT-transform) form: per 64-token chunk it costs ≈ 6·C·dk·dv +
//! 10·C²·d flops ≈ 180 k flops per token and head at dk = dv = 128, against ≈ 6·dk·dv ≈ 100 k for
//! this recurrence. The chunked form only wins when the recurrence is memory-bound; with
//! L1-resident column blocks the recurrence is FMA-bound (the hot loop is 2 loads-with-FMA,
//! 2 stores and 6 FMAs on zmm registers per state row), so it is both faster and more accurate
//! (fewer roundings, no triangular solve).

use crate::backends::fused::cpu::dims::GdnDims;
use crate::backends::fused::cpu::element::{Accum, Element};
use crate::backends::fused::cpu::par::DisjointOut;

/// Value columns per state block. 32 f32 = two 512-bit registers per row: the per-row work
/// (2 loads, 2 stores, 2 mul, 6 FMA) keeps eight independent accumulator chains in flight, and a
/// [128, 32] f32 block is 16 KiB, half the L1.
pub(crate) const BLOCK: usize = 32;
/// Tokens per time chunk: the staged conv/normalised q, k, v for a chunk stay in L1/L2.
pub(crate) const TIME_CHUNK: usize = 64;

/// Lanes of the explicit lane-parallel reductions (dot, Σx²); 16 lets LLVM map them to one or
/// two vector registers for f32/f64 without relying on float reassociation.
const RED_LANES: usize = 16;

/// Σ a_i·b_i with RED_LANES independent partial sums (vectorisable), then a tree reduction.
#[inline(always)]
pub(crate) fn dot<A: Accum, const FMA: bool>(a: &[A], b: &[A]) -> A {
    let (ac, ar) = a.as_chunks::<RED_LANES>();
    let (bc, br) = b.as_chunks::<RED_LANES>();
    let mut acc = [A::ZERO; RED_LANES];
    for (x, y) in ac.iter().zip(bc) {
        for l in 0..RED_LANES {
            acc[l] = A::mul_add::<FMA>(x[l], y[l], acc[l]);
        }
    }
    for (l, (&x, &y)) in ar.iter().zip(br).enumerate() {
        acc[l] = A::mul_add::<FMA>(x, y, acc[l]);
    }
    let mut w = RED_LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] = acc[l] + acc[l + w];
        }
    }
    acc[0]
}

/// Per-task scratch of the recurrence; allocated once per rayon work split, never per token.
pub(crate) struct HeadWork<A> {
    /// q̃ rows of the current chunk, [TIME_CHUNK, dk].
    q: Vec<A>,
    /// k̂ rows, [TIME_CHUNK, dk].
    k: Vec<A>,
    /// v rows padded to a multiple of BLOCK with zeros, [TIME_CHUNK, dv_pad].
    v: Vec<A>,
    /// Outputs, [TIME_CHUNK, dv_pad].
    o: Vec<A>,
    /// Per token: the factor a_t = e_t·c_{t−1} that turns the scaled state into the decayed
    /// state, 1/c_t, whether token t renormalises, β_t and k̂_t·q̃_t.
    a: Vec<A>,
    inv_c: Vec<A>,
    renorm: Vec<bool>,
    beta: Vec<A>,
    kq: Vec<A>,
    /// Scaled states Ŝ of the r value heads of the group, each in blocked layout
    /// [dv_pad / BLOCK, dk, BLOCK]; the true state is c·Ŝ.
    state: Vec<A>,
    /// Scale c of each value head's state.
    c: Vec<A>,
    dv_pad: usize,
}

impl<A: Accum> HeadWork<A> {
    pub(crate) fn new(dims: &GdnDims) -> Self {
        let dv_pad = dims.v_dim.div_ceil(BLOCK) * BLOCK;
        let r = dims.heads_per_key_head();
        Self {
            q: vec![A::ZERO; TIME_CHUNK * dims.k_dim],
            k: vec![A::ZERO; TIME_CHUNK * dims.k_dim],
            v: vec![A::ZERO; TIME_CHUNK * dv_pad],
            o: vec![A::ZERO; TIME_CHUNK * dv_pad],
            a: vec![A::ZERO; TIME_CHUNK],
            inv_c: vec![A::ZERO; TIME_CHUNK],
            renorm: vec![false; TIME_CHUNK],
            beta: vec![A::ZERO; TIME_CHUNK],
            kq: vec![A::ZERO; TIME_CHUNK],
            state: vec![A::ZERO; r * dims.k_dim * dv_pad],
            c: vec![A::ONE; r],
            dv_pad,
        }
    }
}

/// Where the raw (pre-norm) q, k, v come from: the fused conv, or already-convolved tensors.
pub(crate) trait HeadSource<S: Element>: Sync {
    /// Per-task scratch of the source.
    type Local: Send;
    /// Allocates the scratch.
    fn local(&self) -> Self::Local;
    /// Called once before the chunks of (b, key head kh).
    fn begin(&self, local: &mut Self::Local, b: usize, kh: usize);
    /// Fills q, k ([n, dk]) of key head kh for tokens [t0, t0 + n), accumulation type, before
    /// L2 norm and scale.
    #[allow(clippy::too_many_arguments)]
    fn load_qk<const FMA: bool>(
        &self,
        local: &mut Self::Local,
        b: usize,
        kh: usize,
        t0: usize,
        n: usize,
        q: &mut [S::Acc],
        k: &mut [S::Acc],
    );
    /// Fills v (n rows of stride `v_stride`, first dv entries) of value head h.
    #[allow(clippy::too_many_arguments)]
    fn load_v<const FMA: bool>(
        &self,
        local: &mut Self::Local,
        b: usize,
        h: usize,
        t0: usize,
        n: usize,
        v: &mut [S::Acc],
        v_stride: usize,
    );
}

/// Per-call constants of the recurrence.
pub(crate) struct HeadArgs<'a, S: Element> {
    pub dims: GdnDims,
    /// [B, T, Hv] log decays.
    pub g: &'a [S::Acc],
    /// [B, T, Hv] β.
    pub beta: &'a [S],
    /// dk^−½ (or whatever the caller passes) in the accumulation type.
    pub scale: S::Acc,
    /// [B, T, Hv, dv] output.
    pub out: &'a DisjointOut<'a, S>,
}

/// Runs the whole sequence of one (b, key head kh) and its r value heads: chunks of TIME_CHUNK
/// tokens; per chunk q̃/k̂ are computed once and shared by the r value heads (so the conv and
/// norm of q/k are not repeated r times), then each value head pushes the chunk through its
/// state column blocks.
///
/// `init` / `fin` are the [r, dk, dv] initial and final states of the group's value heads.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn run_group<S: Element, Src: HeadSource<S>, const FMA: bool>(
    src: &Src,
    local: &mut Src::Local,
    work: &mut HeadWork<S::Acc>,
    args: &HeadArgs<'_, S>,
    b: usize,
    kh: usize,
    init: Option<&[S::Acc]>,
    fin: &mut [S::Acc],
) {
    let d = &args.dims;
    let r = d.heads_per_key_head();
    work.load_states(init, d);
    src.begin(local, b, kh);
    let mut out_s: Vec<S> = Vec::with_capacity(d.v_dim);

    let mut t0 = 0;
    while t0 < d.seq {
        let n = TIME_CHUNK.min(d.seq - t0);
        src.load_qk::<FMA>(local, b, kh, t0, n, &mut work.q, &mut work.k);
        work.normalise_qk::<FMA>(n, d.k_dim, args.scale);
        for i in 0..r {
            let h = kh * r + i;
            let chunk = Chunk { b, h, t0, n };
            src.load_v::<FMA>(local, b, h, t0, n, &mut work.v, work.dv_pad);
            work.gates(args, i, chunk);
            work.run_blocks::<FMA>(i, d.k_dim, n);
            work.write_outputs(args, chunk, &mut out_s);
        }
        t0 += n;
    }
    work.store_states(fin, d);
}

/// One value head's share of a time chunk: batch `b`, value head `h`, tokens `t0..t0 + n`.
#[derive(Clone, Copy)]
struct Chunk {
    b: usize,
    h: usize,
    t0: usize,
    n: usize,
}

impl<A: Accum> HeadWork<A> {
    /// The group's initial states (`[r, dk, dv]`, none: zero) into the blocked layout, with
    /// scale 1; padding columns stay zero (their v is zero, so they stay zero).
    #[inline(always)]
    fn load_states(&mut self, init: Option<&[A]>, d: &GdnDims) {
        let (dk, dv, hs) = (d.k_dim, d.v_dim, d.k_dim * self.dv_pad);
        self.state.fill(A::ZERO);
        self.c.fill(A::ONE);
        if let Some(init) = init {
            for (st, init) in self.state.chunks_mut(hs).zip(init.chunks(dk * dv)) {
                for i in 0..dk {
                    for j in 0..dv {
                        st[((j / BLOCK) * dk + i) * BLOCK + j % BLOCK] = init[i * dv + j];
                    }
                }
            }
        }
    }

    /// The true final states `c·Ŝ` of the group's value heads into `fin` (`[r, dk, dv]`).
    #[inline(always)]
    fn store_states(&self, fin: &mut [A], d: &GdnDims) {
        let (dk, dv, hs) = (d.k_dim, d.v_dim, d.k_dim * self.dv_pad);
        for ((st, fin), &c) in self
            .state
            .chunks(hs)
            .zip(fin.chunks_mut(dk * dv))
            .zip(&self.c)
        {
            for i in 0..dk {
                for j in 0..dv {
                    fin[i * dv + j] = c * st[((j / BLOCK) * dk + i) * BLOCK + j % BLOCK];
                }
            }
        }
    }

    /// L2 norm (+ `scale` for q) of the chunk's `n` q and k rows, and k̂·q̃ per token.
    #[inline(always)]
    fn normalise_qk<const FMA: bool>(&mut self, n: usize, dk: usize, scale: A) {
        let eps = A::from_f64(crate::backends::fused::cpu::L2NORM_EPS);
        for t in 0..n {
            let q = &mut self.q[t * dk..(t + 1) * dk];
            let fq = scale / (dot::<A, FMA>(q, q) + eps).sqrt();
            q.iter_mut().for_each(|x| *x = *x * fq);
            let k = &mut self.k[t * dk..(t + 1) * dk];
            let fk = A::ONE / (dot::<A, FMA>(k, k) + eps).sqrt();
            k.iter_mut().for_each(|x| *x = *x * fk);
            self.kq[t] = dot::<A, FMA>(&self.k[t * dk..(t + 1) * dk], q_row(&self.q, t, dk));
        }
    }

    /// The gates of the group's value head `i` over `chunk`, and the scale schedule of its state
    /// (identical for every column block).
    #[inline(always)]
    fn gates<S: Element<Acc = A>>(&mut self, args: &HeadArgs<'_, S>, i: usize, chunk: Chunk) {
        let d = &args.dims;
        let lo = A::from_f64(A::RENORM_MIN);
        let hi = A::ONE / lo;
        let mut c = self.c[i];
        for t in 0..chunk.n {
            let gi = ((chunk.b * d.seq + chunk.t0 + t) * d.v_heads) + chunk.h;
            let a = args.g[gi].exp() * c;
            self.a[t] = a;
            // Renormalise (fold the scale into the state) before Ŝ could overflow; NaN
            // compares false and simply propagates.
            let renorm = a < lo || a > hi;
            c = if renorm { A::ONE } else { a };
            self.renorm[t] = renorm;
            self.inv_c[t] = A::ONE / c;
            self.beta[t] = args.beta[gi].to_acc();
        }
        self.c[i] = c;
    }

    /// The chunk's `n` tokens through every column block of value head `i`'s state.
    #[inline(always)]
    fn run_blocks<const FMA: bool>(&mut self, i: usize, dk: usize, n: usize) {
        let dvp = self.dv_pad;
        let hs = dk * dvp;
        let st = &mut self.state[i * hs..(i + 1) * hs];
        for blk in 0..dvp / BLOCK {
            block_chunk::<A, FMA>(
                &mut st[blk * dk * BLOCK..(blk + 1) * dk * BLOCK],
                dk,
                n,
                &self.q,
                &self.k,
                &self.v[blk * BLOCK..],
                &mut self.o[blk * BLOCK..],
                dvp,
                TokenScalars {
                    a: &self.a,
                    inv_c: &self.inv_c,
                    renorm: &self.renorm,
                    beta: &self.beta,
                    kq: &self.kq,
                },
            );
        }
    }

    /// The chunk's outputs of its value head, rounded to `S`, into `args.out`.
    #[inline(always)]
    fn write_outputs<S: Element<Acc = A>>(
        &self,
        args: &HeadArgs<'_, S>,
        chunk: Chunk,
        out_s: &mut Vec<S>,
    ) {
        let d = &args.dims;
        let (dv, dvp) = (d.v_dim, self.dv_pad);
        for t in 0..chunk.n {
            out_s.clear();
            out_s.extend(
                self.o[t * dvp..t * dvp + dv]
                    .iter()
                    .map(|&x| S::from_acc(x)),
            );
            let off = ((chunk.b * d.seq + chunk.t0 + t) * d.v_heads + chunk.h) * dv;
            // SAFETY: task (b, kh) is the only writer of rows (b, ·, h, ·) for the value
            // heads h of its group.
            unsafe { args.out.write(off, out_s) };
        }
    }
}

#[inline(always)]
fn q_row<A>(q: &[A], t: usize, dk: usize) -> &[A] {
    &q[t * dk..(t + 1) * dk]
}

/// Per-token scalars of a chunk (see [`HeadWork`]).
#[derive(Clone, Copy)]
struct TokenScalars<'a, A> {
    a: &'a [A],
    inv_c: &'a [A],
    renorm: &'a [bool],
    beta: &'a [A],
    kq: &'a [A],
}

/// Runs n tokens through one [dk, BLOCK] block of a scaled state Ŝ (true state c·Ŝ).
///
/// With p̂ = Ŝ_{t−1}ᵀk̂_t and r̂ = Ŝ_{t−1}ᵀq̃_t, and a_t = e_t·c_{t−1}:
/// u = β(v − a·p̂); o = a·r̂ + (k̂·q̃)·u; and the state update is Ŝ += k̂·(u/c_t)ᵀ — a single FMA
/// per element, the decay living in the scalar c_t = a_t. When c_t would leave
/// [RENORM_MIN, 1/RENORM_MIN] the token instead folds the scale in (Ŝ = a·Ŝ + k̂uᵀ, c_t = 1),
/// which is the only time the state is multiplied. The update pass also accumulates p̂, r̂ for
/// the next token from the freshly written rows (see the module docs).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn block_chunk<A: Accum, const FMA: bool>(
    st: &mut [A],
    dk: usize,
    n: usize,
    q: &[A],
    k: &[A],
    v: &[A],
    o: &mut [A],
    vs: usize,
    ts: TokenScalars<'_, A>,
) {
    if n == 0 {
        return;
    }
    let (rows, _) = st.as_chunks_mut::<BLOCK>();
    let rows = &mut rows[..dk];
    // p̂ = Ŝᵀk̂_0, r̂ = Ŝᵀq̃_0 from the incoming state.
    let mut p = [A::ZERO; BLOCK];
    let mut r = [A::ZERO; BLOCK];
    for ((row, &ki), &qi) in rows.iter().zip(&k[..dk]).zip(&q[..dk]) {
        for l in 0..BLOCK {
            p[l] = A::mul_add::<FMA>(ki, row[l], p[l]);
            r[l] = A::mul_add::<FMA>(qi, row[l], r[l]);
        }
    }
    for t in 0..n {
        let (at, bt, kqt, ict) = (ts.a[t], ts.beta[t], ts.kq[t], ts.inv_c[t]);
        let vt: &[A; BLOCK] = first_block(&v[t * vs..]);
        let mut uh = [A::ZERO; BLOCK];
        let ot = &mut o[t * vs..t * vs + BLOCK];
        for l in 0..BLOCK {
            let u = bt * (vt[l] - at * p[l]);
            ot[l] = A::mul_add::<FMA>(kqt, u, at * r[l]);
            uh[l] = u * ict;
        }
        let kt = &k[t * dk..(t + 1) * dk];
        if t + 1 < n {
            let kn = &k[(t + 1) * dk..(t + 2) * dk];
            let qn = &q[(t + 1) * dk..(t + 2) * dk];
            (p, r) = if ts.renorm[t] {
                update_rows::<A, FMA, true, true>(rows, kt, kn, qn, &uh, at)
            } else {
                update_rows::<A, FMA, false, true>(rows, kt, kn, qn, &uh, at)
            };
        } else if ts.renorm[t] {
            update_rows::<A, FMA, true, false>(rows, kt, kt, kt, &uh, at);
        } else {
            update_rows::<A, FMA, false, false>(rows, kt, kt, kt, &uh, at);
        }
    }
}

/// One pass over the block: row_i ← (RENORM ? a·row_i : row_i) + k̂_i·û, and, if NEXT, the
/// next token's p̂ = Σ_i kn_i·row_i and r̂ = Σ_i qn_i·row_i from the new rows.
#[inline(always)]
fn update_rows<A: Accum, const FMA: bool, const RENORM: bool, const NEXT: bool>(
    rows: &mut [[A; BLOCK]],
    kt: &[A],
    kn: &[A],
    qn: &[A],
    uh: &[A; BLOCK],
    a: A,
) -> ([A; BLOCK], [A; BLOCK]) {
    let mut p = [A::ZERO; BLOCK];
    let mut r = [A::ZERO; BLOCK];
    for (((row, &ki), &kni), &qni) in rows.iter_mut().zip(kt).zip(kn).zip(qn) {
        for l in 0..BLOCK {
            let old = if RENORM { row[l] * a } else { row[l] };
            let s = A::mul_add::<FMA>(ki, uh[l], old);
            row[l] = s;
            if NEXT {
                p[l] = A::mul_add::<FMA>(kni, s, p[l]);
                r[l] = A::mul_add::<FMA>(qni, s, r[l]);
            }
        }
    }
    (p, r)
}

/// The first BLOCK elements of `s` as an array reference (callers guarantee the length).
#[inline(always)]
fn first_block<A>(s: &[A]) -> &[A; BLOCK] {
    let (c, _) = s.as_chunks::<BLOCK>();
    &c[0]
}
