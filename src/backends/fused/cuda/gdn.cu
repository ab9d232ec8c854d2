// hsdiff: fused CUDA kernels of the Gated DeltaNet layer (forward only), compiled to PTX by
// build.rs (nvcc -ptx -arch=sm_90) and launched from src/backends/fused/cuda/ (conv_norm.rs,
// rule.rs, shell.rs).
//
// Precision policy (gdn-spec §6.2, same as the fused CPU kernels): bf16/f16/f32 storage is read
// and written in that dtype, every sum and the state are f32, and each fused step rounds once
// (conv + SiLU: one rounding; delta-rule output: one rounding; gated norm: one rounding).
// f64 storage computes in f64 throughout.
//
// Kernels (one extern "C" entry per storage type: _bf16, _f16, _f32, _f64):
//   conv1d_silu_*   causal depthwise conv + SiLU, x [B,T,C], w [C,K] -> out [B,T,C]
//   gated_rms_norm_* w * x*rsqrt(mean x^2 + eps) * SiLU(z), rows of length dim
//   gdn_chunk_*     the gated delta rule, chunked (WY form), q/k L2 norm + scale + gates fused:
//                   the exact path (plain f32/f64 FMAs from shared memory, no tensor cores)
//   gdn_chunk_tc_bf16  the same delta rule for bf16 storage on the tensor cores (mma.sync
//                   m16n8k16, f32 accumulation, f32 operands split into bf16 hi + lo, cp.async
//                   prefetch of the next chunk); see the comment above gdn_chunk_tc
// and one entry per accumulation type (_f32, _f64):
//   gdn_gate_*      the shell's gate g = -exp(A_log) softplus(a + dt_bias) (src/model/gdn.rs)
//   gdn_recurrent_* the plain token-by-token recurrence of the `reference` backend on CUDA
//   router_rank_*   the MoE router's top experts per token (src/model/mlp.rs)
//
// Every index is 64-bit where it can exceed 2^31.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef long long i64;

namespace {

template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };

__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }

template <typename T> __device__ __forceinline__ T from_acc(typename AccOf<T>::type x);
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ double from_acc<double>(double x) { return x; }

__device__ __forceinline__ float acc_exp(float x) { return expf(x); }
__device__ __forceinline__ double acc_exp(double x) { return exp(x); }
__device__ __forceinline__ float acc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double acc_sqrt(double x) { return sqrt(x); }

template <typename A> __device__ __forceinline__ A silu(A x) { return x / (A(1) + acc_exp(-x)); }

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// In-place inclusive prefix sum of G[0, C) by one warp (`lane` its lane): each lane sums its
// C/32 consecutive entries, the lanes' totals are scanned with shuffles, and each lane adds the
// total of the lanes before it. The order of the additions is fixed, so every caller rounds
// the same way.
template <int C, typename A> __device__ __forceinline__ void warp_prefix_sum(A* G, int lane) {
    constexpr int P = C / 32;
    A loc[P];
    A run = A(0);
#pragma unroll
    for (int p = 0; p < P; ++p) {
        run += G[lane * P + p];
        loc[p] = run;
    }
    A incl = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const A y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    A excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = A(0);
#pragma unroll
    for (int p = 0; p < P; ++p) G[lane * P + p] = loc[p] + excl;
}

// ---------------------------------------------------------------------------------------------
// Causal depthwise conv1d + SiLU. One thread per output element (grid-stride), consecutive
// threads on consecutive channels (coalesced). out[b,t,c] = SiLU(sum_j w[c,j] x[b,t-(K-1)+j,c]),
// tap 0 (the oldest token) first, tokens before 0 are zero; one rounding to T.
template <typename T>
__device__ void conv1d_silu(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ out,
                            i64 batch, i64 seq, i64 ch, int k) {
    typedef typename AccOf<T>::type A;
    const i64 n = batch * seq * ch;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (i64)gridDim.x * blockDim.x) {
        const i64 c = e % ch;
        const i64 bt = e / ch;
        const i64 t = bt % seq;
        const i64 b = bt / seq;
        A acc = A(0);
        for (int j = 0; j < k; ++j) {
            const i64 src = t - (k - 1) + j;
            const A xv = src >= 0 ? to_acc(x[(b * seq + src) * ch + c]) : A(0);
            acc = fma(to_acc(w[c * k + j]), xv, acc);
        }
        out[e] = from_acc<T>(silu(acc));
    }
}

// ---------------------------------------------------------------------------------------------
// Gated RMS norm: y = w * (x * rsqrt(mean x^2 + eps)) * SiLU(z). One warp per row.
template <typename T>
__device__ void gated_rms_norm(const T *__restrict__ x, const T *__restrict__ z,
                               const T *__restrict__ w, T *__restrict__ out, i64 rows, int dim,
                               typename AccOf<T>::type eps) {
    typedef typename AccOf<T>::type A;
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    const A inv_dim = A(1) / A(dim);
    for (i64 r = (i64)blockIdx.x * warps + (threadIdx.x >> 5); r < rows;
         r += (i64)gridDim.x * warps) {  // warp-uniform
        const T *xr = x + r * dim;
        const T *zr = z + r * dim;
        T *orow = out + r * dim;
        A ss = A(0);
        for (int i = lane; i < dim; i += 32) {
            const A v = to_acc(xr[i]);
            ss = fma(v, v, ss);
        }
        ss = warp_sum(ss);
        const A inv = A(1) / acc_sqrt(ss * inv_dim + eps);
        for (int i = lane; i < dim; i += 32) {
            orow[i] = from_acc<T>(to_acc(w[i]) * (to_acc(xr[i]) * inv) * silu(to_acc(zr[i])));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The gated delta rule, chunked. Per value head h (key head kh = h / (Hv/Hk)) and token t:
//   k^ = k/sqrt(|k|^2+1e-6), q~ = scale*q/sqrt(|q|^2+1e-6)
//   S' = exp(g_t) S;  u_t = beta_t (v_t - S'^T k^_t);  S = S' + k^_t u_t^T;  o_t = S^T q~_t
// S is [dk, dv] (f32, or f64). Its columns are independent, so one block owns DVT = 32 columns
// of one (batch, value head): grid = (ceil(dv/32), Hv, B), 256 threads.
//
// Per chunk of C tokens (G_i = sum_{m<=i} g_m inside the chunk, S0 the state at chunk start):
//   (I + A) U = R,  A_ij = beta_i e^{G_i-G_j} k^_i.k^_j (j < i),  R_i = beta_i (v_i - e^{G_i} S0^T k^_i)
//   o_i = e^{G_i} S0^T q~_i + sum_{j<=i} e^{G_i-G_j} (q~_i.k^_j) u_j
//   S_end = e^{G_last} S0 + sum_j e^{G_last-G_j} k^_j u_j^T
// which is the recurrence above regrouped (no e^{-G} factors: every exponent is <= 0). The
// unit-lower-triangular solve is a blocked forward substitution (16-row blocks).
//
// q, k rows: q + (b*T + t)*qk_stride + kh*dk (so q/k/v may be column slices of the conv
// output); v row: v + (b*T + t)*v_stride + h*dv. g, beta: [B, T, Hv]. out: [B, T, Hv, dv].
// init (may be null), state_out: [B, Hv, dk, dv] in the accumulation type.
//
// Shared memory (accumulation type A), LDK = dk + 1 (odd stride: no bank conflicts):
//   Qs [C][LDK] Ks [C][LDK] S [dk][DVT] U [C][DVT] Mkk [C][C] Mqk [C][C] G [C] Bt [C] Dl [C]
// = 2C(dk+1) + 32 dk + 32 C + 2C^2 + 3C elements (124 KiB for f32, C = 64, dk = 128).
constexpr int GDN_THREADS = 256;
constexpr int DVT = 32;
constexpr int SB = 16;

template <typename T, int C>
__device__ void gdn_chunk(const T *__restrict__ q, const T *__restrict__ k,
                          const T *__restrict__ v, const typename AccOf<T>::type *__restrict__ g,
                          const T *__restrict__ beta,
                          const typename AccOf<T>::type *__restrict__ init, T *__restrict__ out,
                          typename AccOf<T>::type *__restrict__ state_out, int seq, int hk, int hv,
                          int dk, int dv, i64 qk_stride, i64 v_stride,
                          typename AccOf<T>::type scale) {
    typedef typename AccOf<T>::type A;
    constexpr int NT = GDN_THREADS;
    constexpr int PER = C * DVT / NT;  // (i, c) entries per thread in the [C][DVT] phases
    static_assert(C % 32 == 0 && C % SB == 0 && (C * DVT) % NT == 0, "chunk geometry");
    static_assert(DVT == 32, "one warp spans one row of a [C][DVT] tile");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    A *smem = reinterpret_cast<A *>(smem_raw);
    const int ldk = dk + 1;
    A *Qs = smem;
    A *Ks = Qs + C * ldk;
    A *S = Ks + C * ldk;
    A *U = S + dk * DVT;
    A *Mkk = U + C * DVT;
    A *Mqk = Mkk + C * C;
    A *G = Mqk + C * C;
    A *Bt = G + C;
    A *Dl = Bt + C;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int c0 = blockIdx.x * DVT;
    const int h = blockIdx.y;
    const i64 b = blockIdx.z;
    const int kh = h / (hv / hk);
    const A eps = A(1e-6);

    // State tile from the initial state (or zeros).
    for (int e = tid; e < dk * DVT; e += NT) {
        const int d = e / DVT, c = e % DVT;
        const i64 idx = ((b * hv + h) * dk + d) * dv + c0 + c;
        S[e] = (init != nullptr && c0 + c < dv) ? init[idx] : A(0);
    }
    __syncthreads();

    for (int t0 = 0; t0 < seq; t0 += C) {
        const int n = min(C, seq - t0);

        // 1. Load q, k (L2 norm, scale), beta, g for the chunk; one warp per row. Rows >= n are
        //    zeros (beta = g = 0), so they change nothing below.
        for (int i = warp; i < C; i += NT / 32) {
            if (i < n) {  // warp-uniform
                const i64 row = b * seq + t0 + i;
                const T *qr = q + row * qk_stride + (i64)kh * dk;
                const T *kr = k + row * qk_stride + (i64)kh * dk;
                A sq = A(0), sk = A(0);
                for (int d = lane; d < dk; d += 32) {
                    const A qa = to_acc(qr[d]);
                    const A ka = to_acc(kr[d]);
                    Qs[i * ldk + d] = qa;
                    Ks[i * ldk + d] = ka;
                    sq = fma(qa, qa, sq);
                    sk = fma(ka, ka, sk);
                }
                sq = warp_sum(sq);
                sk = warp_sum(sk);
                const A fq = scale / acc_sqrt(sq + eps);
                const A fk = A(1) / acc_sqrt(sk + eps);
                for (int d = lane; d < dk; d += 32) {  // each lane rescales what it wrote
                    Qs[i * ldk + d] *= fq;
                    Ks[i * ldk + d] *= fk;
                }
                if (lane == 0) {
                    Bt[i] = to_acc(beta[row * hv + h]);
                    G[i] = g[row * hv + h];
                }
            } else {
                for (int d = lane; d < dk; d += 32) {
                    Qs[i * ldk + d] = A(0);
                    Ks[i * ldk + d] = A(0);
                }
                if (lane == 0) {
                    Bt[i] = A(0);
                    G[i] = A(0);
                }
            }
        }
        for (int e = tid; e < C * DVT; e += NT) {
            const int i = e / DVT, c = e % DVT;
            U[e] = (i < n && c0 + c < dv)
                       ? to_acc(v[(b * seq + t0 + i) * v_stride + (i64)h * dv + c0 + c])
                       : A(0);
        }
        __syncthreads();

        // 2. G = inclusive prefix sum of g over the chunk (warp 0: C/32 entries per lane).
        if (warp == 0) warp_prefix_sum<C>(G, lane);
        __syncthreads();
        for (int i = tid; i < C; i += NT) Dl[i] = i < n ? acc_exp(G[n - 1] - G[i]) : A(0);

        // 3. Mkk_ij = beta_i e^{G_i-G_j} k^_i.k^_j (j < i), Mqk_ij = e^{G_i-G_j} q~_i.k^_j
        //    (j <= i); zero elsewhere (the exponent is only formed where it is <= 0).
        for (int e = tid; e < C * C; e += NT) {
            const int i = e / C, j = e % C;
            A kk = A(0), qk = A(0);
            if (j <= i && i < n) {
                A dkk = A(0), dqk = A(0);
                for (int d = 0; d < dk; ++d) {
                    const A kj = Ks[j * ldk + d];
                    dkk = fma(Ks[i * ldk + d], kj, dkk);
                    dqk = fma(Qs[i * ldk + d], kj, dqk);
                }
                const A dec = acc_exp(G[i] - G[j]);
                qk = dec * dqk;
                if (j < i) kk = Bt[i] * dec * dkk;
            }
            Mkk[e] = kk;
            Mqk[e] = qk;
        }

        // 4. R = beta (V - e^G K S0) in place of V; the inter-chunk output e^G Q S0 in registers.
        A o_reg[PER];
#pragma unroll
        for (int m = 0; m < PER; ++m) {
            const int e = tid + m * NT;
            const int i = e / DVT, c = e % DVT;
            A ks = A(0), qs = A(0);
            for (int d = 0; d < dk; ++d) {
                const A s = S[d * DVT + c];
                ks = fma(Ks[i * ldk + d], s, ks);
                qs = fma(Qs[i * ldk + d], s, qs);
            }
            const A eg = i < n ? acc_exp(G[i]) : A(0);
            U[e] = Bt[i] * (U[e] - eg * ks);
            o_reg[m] = eg * qs;
        }
        __syncthreads();

        // 5. Solve (I + Mkk) U = R in place: blocked forward substitution over SB-row blocks.
        for (int bb = 0; bb < n; bb += SB) {  // rows >= n are zero rows of R and Mkk
            if (bb > 0) {
                for (int e = tid; e < SB * DVT; e += NT) {
                    const int i = bb + e / DVT, c = e % DVT;
                    A acc = A(0);
                    for (int j = 0; j < bb; ++j) acc = fma(Mkk[i * C + j], U[j * DVT + c], acc);
                    U[i * DVT + c] -= acc;
                }
                __syncthreads();
            }
            if (tid < DVT) {  // one thread per column, sequential over the block's rows
                const int c = tid;
                for (int i = bb + 1; i < bb + SB; ++i) {
                    A acc = A(0);
                    for (int j = bb; j < i; ++j) acc = fma(Mkk[i * C + j], U[j * DVT + c], acc);
                    U[i * DVT + c] -= acc;
                }
            }
            __syncthreads();
        }

        // 6. Outputs (one rounding to T) and the state at the chunk end.
#pragma unroll
        for (int m = 0; m < PER; ++m) {
            const int e = tid + m * NT;
            const int i = e / DVT, c = e % DVT;
            A o = o_reg[m];
            for (int j = 0; j <= i; ++j) o = fma(Mqk[i * C + j], U[j * DVT + c], o);
            if (i < n && c0 + c < dv) {
                out[((b * seq + t0 + i) * hv + h) * (i64)dv + c0 + c] = from_acc<T>(o);
            }
        }
        const A e_last = acc_exp(G[n - 1]);
        for (int e = tid; e < dk * DVT; e += NT) {
            const int d = e / DVT, c = e % DVT;
            A s = S[e] * e_last;
            for (int j = 0; j < n; ++j) s = fma(Ks[j * ldk + d] * Dl[j], U[j * DVT + c], s);
            S[e] = s;
        }
        __syncthreads();
    }

    for (int e = tid; e < dk * DVT; e += NT) {
        const int d = e / DVT, c = e % DVT;
        if (c0 + c < dv) state_out[((b * hv + h) * dk + d) * dv + c0 + c] = S[e];
    }
}


// ---------------------------------------------------------------------------------------------
// The gated delta rule on the tensor cores (bf16 storage): the same chunked WY form as gdn_chunk
// (chunk C = 64, the same formulas, the same masking), with every product over dk or over the
// chunk done by warp-level mma.sync.m16n8k16 (bf16 operands, f32 accumulation):
//   P_kk = K K^T and P_qk = Q K^T       (raw bf16 q/k: exact operands)
//   K S0 and Q S0                        (S0 f32, split into bf16 hi + lo: two mma)
//   M U                                  (M, U f32, hi/lo: three mma, lo*lo dropped)
//   S += K^T (e^{G_last-G} fk U)         (raw K^T; the f32 right side hi/lo: two mma)
// Accuracy: the bf16 q/k/v are fed to the tensor cores as they are (the L2-norm factors fq, fk,
// the gates and beta are f32 scalars applied to rows of the f32 results), and every f32 operand
// x is carried as hi = bf16(x), lo = bf16(x - hi), i.e. with 16 significant bits (relative
// error <= 2^-17) instead of 8 (2^-9). So the products keep near-f32 accuracy and the output's
// error stays dominated by its one rounding to bf16, as in gdn_chunk; the price is 2-3 mma per
// product instead of one. The unit lower triangular solve (I + A) U = R stays f32 FMAs (blocked
// forward substitution, as gdn_chunk); the state stays f32 in registers across chunks.
//
// Block = 256 threads (8 warps) per (32 value columns, value head, batch), like gdn_chunk.
// q/k/v of the next chunk are prefetched with cp.async (double-buffered) while the current
// chunk computes, when every row start is 16-byte aligned (dk, dv, strides multiples of 8 and
// aligned base pointers); otherwise they are loaded with plain loads. dk <= TC_DKMAX; dk is
// zero-padded to a multiple of 16 inside shared memory (padding changes no product).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// lane = 4*gid + tig: A (16x16, row-major) a0 = A[gid][2tig..+1], a1 = A[gid+8][2tig..+1],
// a2 = A[gid][2tig+8..+9], a3 = A[gid+8][2tig+8..+9]; B (16x8) b0 = B[2tig..+1][gid],
// b1 = B[2tig+8..+9][gid]; C/D (16x8 f32) c_r = C[gid + 8(r/2)][2tig + r%2]. The lower-index
// element of each pair sits in the low 16 bits.
constexpr int TC_C = 64;
constexpr int TC_DVT = 32;
constexpr int TC_DKMAX = 128;
constexpr int TC_THREADS = 256;
constexpr int TC_WARPS = TC_THREADS / 32;
// State tiles (16 x 8) per warp: (TC_DKMAX / 16) * (TC_DVT / 8) / TC_WARPS.
constexpr int TC_SREG = (TC_DKMAX / 16) * (TC_DVT / 8) / TC_WARPS;

typedef unsigned short u16;
typedef unsigned int u32;

// Shared-memory bytes of gdn_chunk_tc (mirrored by gdn_tc_shared_bytes in mod.rs):
//   bf16 (u16): Q[2][C][dkp+8] K[2][C][dkp+8] V[2][C][DVT+8] Mhi/Mlo[C][C+8]
//               U^T hi/lo [DVT][C+8]  W^T hi/lo [DVT][C+8]  S^T hi/lo [DVT][dkp+8]
//   f32:        A[C][C+1] U[C][DVT+1] G Bt FQ FK EG DL [C]
// Row pitches are multiples of 8 elements (16-byte rows for cp.async) with +8 padding so that a
// warp's fragment loads hit 32 different banks.
__host__ __device__ constexpr long long gdn_tc_shared_bytes(int dk) {
    const long long dkp = (dk + 15) / 16 * 16;
    const long long u16s = 4LL * TC_C * (dkp + 8) + 2LL * TC_C * (TC_DVT + 8) +
                           2LL * TC_C * (TC_C + 8) + 4LL * TC_DVT * (TC_C + 8) +
                           2LL * TC_DVT * (dkp + 8);
    const long long f32s = (long long)TC_C * (TC_C + 1) + (long long)TC_C * (TC_DVT + 1) + 6LL * TC_C;
    return 2 * u16s + 4 * f32s;
}
static_assert(gdn_tc_shared_bytes(TC_DKMAX) <= 227 * 1024, "sm_90 allows 227 KiB per block");

#ifndef HSDIFF_CUDA_EMU
// D += A B, m16n8k16, bf16 x bf16 -> f32 (the emulator's version is in emu/cuda_shim.h).
__device__ __forceinline__ void mma_bf16_16816(float d[4], const u32 a[4], const u32 b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// 16-byte global -> shared copy that does not block the thread (sm_80+).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

__device__ __forceinline__ u16 bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float bf16_value(u16 bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
}
// x = hi + lo + O(2^-17 |x|): hi = bf16(x), lo = bf16(x - hi) (x - hi is exact in f32).
__device__ __forceinline__ void split_bf16(float x, u16 &hi, u16 &lo) {
    hi = bf16_bits(x);
    lo = bf16_bits(x - bf16_value(hi));
}
__device__ __forceinline__ u32 ld_pair(const u16 *p) { return *reinterpret_cast<const u32 *>(p); }
__device__ __forceinline__ u32 pack_pair(u16 first, u16 second) {
    return (u32)first | ((u32)second << 16);
}

// A fragment of the 16x16 tile at (m0, k0) of X, stored row-major [m][k] with pitch ld.
__device__ __forceinline__ void frag_a(u32 a[4], const u16 *X, int ld, int m0, int k0, int lane) {
    const u16 *p = X + (m0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
    a[0] = ld_pair(p);
    a[1] = ld_pair(p + 8 * ld);
    a[2] = ld_pair(p + 8);
    a[3] = ld_pair(p + 8 * ld + 8);
}
// A fragment of the 16x16 tile at (m0, k0) of X^T, where X is stored row-major [k][m].
__device__ __forceinline__ void frag_a_trans(u32 a[4], const u16 *X, int ld, int m0, int k0,
                                             int lane) {
    const int m = m0 + (lane >> 2), k = k0 + 2 * (lane & 3);
    a[0] = pack_pair(X[k * ld + m], X[(k + 1) * ld + m]);
    a[1] = pack_pair(X[k * ld + m + 8], X[(k + 1) * ld + m + 8]);
    a[2] = pack_pair(X[(k + 8) * ld + m], X[(k + 9) * ld + m]);
    a[3] = pack_pair(X[(k + 8) * ld + m + 8], X[(k + 9) * ld + m + 8]);
}
// B fragment of the 16x8 tile at (k0, n0) of B, stored transposed: Bt[n][k], pitch ld.
__device__ __forceinline__ void frag_b(u32 b[2], const u16 *Bt, int ld, int n0, int k0, int lane) {
    const u16 *p = Bt + (n0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
    b[0] = ld_pair(p);
    b[1] = ld_pair(p + 8);
}
// Row and column of accumulator element r of this lane inside its 16x8 tile.
__device__ __forceinline__ int acc_row(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
__device__ __forceinline__ int acc_col(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

__device__ void gdn_chunk_tc(const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,
                             const __nv_bfloat16 *__restrict__ v, const float *__restrict__ g,
                             const __nv_bfloat16 *__restrict__ beta, const float *__restrict__ init,
                             __nv_bfloat16 *__restrict__ out, float *__restrict__ state_out, int seq,
                             int hk, int hv, int dk, int dv, i64 qk_stride, i64 v_stride,
                             float scale) {
    constexpr int C = TC_C, DVT = TC_DVT, NT = TC_THREADS, NW = TC_WARPS;
    constexpr int LV = DVT + 8, LC = C + 8, LA = C + 1, LU = DVT + 1;
    constexpr int CT = DVT / 8;  // 8-wide column tiles of a [.][DVT] tile
    static_assert(NW == 8 && CT == 4 && C == 64, "the warp -> tile maps below assume these");
    const int dkp = (dk + 15) / 16 * 16;
    const int lqk = dkp + 8;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    u16 *Qs0 = reinterpret_cast<u16 *>(smem_raw);  // buffer b at Qs0 + b * C * lqk
    u16 *Ks0 = Qs0 + 2 * C * lqk;
    u16 *Vs0 = Ks0 + 2 * C * lqk;  // raw v tile [C][LV]
    u16 *Mh = Vs0 + 2 * C * LV;     // M hi/lo [C][LC]
    u16 *Ml = Mh + C * LC;
    u16 *Uh = Ml + C * LC;  // U^T hi/lo [DVT][LC]
    u16 *Ul = Uh + DVT * LC;
    u16 *Wh = Ul + DVT * LC;  // W^T hi/lo [DVT][LC], W_j = e^{G_last-G_j} fk_j U_j
    u16 *Wl = Wh + DVT * LC;
    u16 *Sh = Wl + DVT * LC;  // S^T hi/lo [DVT][lqk]
    u16 *Sl = Sh + DVT * lqk;
    float *Af = reinterpret_cast<float *>(Sl + DVT * lqk);  // A [C][LA]
    float *Uf = Af + C * LA;                                // R, then U, [C][LU]
    float *G = Uf + C * LU;
    float *Bt = G + C;
    float *FQ = Bt + C;  // scale / |q|
    float *FK = FQ + C;  // 1 / |k|
    float *EG = FK + C;  // e^{G_i}
    float *DL = EG + C;  // e^{G_last - G_i}

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int c0 = blockIdx.x * DVT;
    const int h = blockIdx.y;
    const i64 b = blockIdx.z;
    const int kh = h / (hv / hk);
    const bool vec = (((unsigned long long)q | (unsigned long long)k | (unsigned long long)v) & 15) == 0 &&
                     qk_stride % 8 == 0 && v_stride % 8 == 0 && dk % 8 == 0 && dv % 8 == 0;

    // q/k/v rows of the chunk at t0 into buffer buf; rows >= n and columns >= dv are zeros.
    auto load_chunk = [&](int buf, int t0) {
        const int n = min(C, seq - t0);
        u16 *Qb = Qs0 + buf * C * lqk, *Kb = Ks0 + buf * C * lqk, *Vb = Vs0 + buf * C * LV;
        if (vec) {
            const int per_row = dk / 8;
            for (int e = tid; e < C * per_row; e += NT) {
                const int i = e / per_row, d = (e % per_row) * 8;
                if (i < n) {
                    const i64 off = (b * seq + t0 + i) * qk_stride + (i64)kh * dk + d;
                    cp_async16(Qb + i * lqk + d, q + off);
                    cp_async16(Kb + i * lqk + d, k + off);
                } else {
                    for (int x = 0; x < 8; ++x) Qb[i * lqk + d + x] = Kb[i * lqk + d + x] = 0;
                }
            }
            for (int e = tid; e < C * CT; e += NT) {
                const int i = e / CT, c = (e % CT) * 8;
                if (i < n && c0 + c < dv) {
                    cp_async16(Vb + i * LV + c, v + (b * seq + t0 + i) * v_stride + (i64)h * dv + c0 + c);
                } else {
                    for (int x = 0; x < 8; ++x) Vb[i * LV + c + x] = 0;
                }
            }
        } else {
            for (int e = tid; e < C * dk; e += NT) {
                const int i = e / dk, d = e % dk;
                const i64 off = (b * seq + t0 + i) * qk_stride + (i64)kh * dk + d;
                Qb[i * lqk + d] = i < n ? __bfloat16_as_ushort(q[off]) : u16(0);
                Kb[i * lqk + d] = i < n ? __bfloat16_as_ushort(k[off]) : u16(0);
            }
            for (int e = tid; e < C * DVT; e += NT) {
                const int i = e / DVT, c = e % DVT;
                Vb[i * LV + c] =
                    (i < n && c0 + c < dv)
                        ? __bfloat16_as_ushort(v[(b * seq + t0 + i) * v_stride + (i64)h * dv + c0 + c])
                        : u16(0);
            }
        }
        cp_async_commit();  // an empty group on the plain path: the waits below stay uniform
    };

    // The dk..dkp padding columns of both q/k buffers are zero for the whole kernel.
    for (int e = tid; e < 2 * C * (dkp - dk); e += NT) {
        const int row = e / (dkp - dk), d = dk + e % (dkp - dk);
        Qs0[row * lqk + d] = 0;
        Ks0[row * lqk + d] = 0;
    }

    // The state lives in registers as accumulator tiles: warp w owns the 16x8 tiles
    // w, w + 8, ... of S [dkp][DVT] (row block = tile / CT, column tile = tile % CT).
    float sacc[TC_SREG][4];
    auto store_state_split = [&]() {  // S^T hi/lo for the next chunk's K S0 and Q S0
#pragma unroll
        for (int s = 0; s < TC_SREG; ++s) {
            const int tile = warp + s * NW, rb = tile / CT, ct = tile % CT;
            if (rb * 16 >= dkp) continue;
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int d = rb * 16 + acc_row(lane, r), c = ct * 8 + acc_col(lane, r);
                split_bf16(sacc[s][r], Sh[c * lqk + d], Sl[c * lqk + d]);
            }
        }
    };
#pragma unroll
    for (int s = 0; s < TC_SREG; ++s) {
        const int tile = warp + s * NW, rb = tile / CT, ct = tile % CT;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int d = rb * 16 + acc_row(lane, r), c = ct * 8 + acc_col(lane, r);
            sacc[s][r] = (init != nullptr && d < dk && c0 + c < dv)
                             ? init[((b * hv + h) * dk + d) * dv + c0 + c]
                             : 0.f;
        }
    }
    store_state_split();
    load_chunk(0, 0);

    int buf = 0;
    for (int t0 = 0; t0 < seq; t0 += C, buf ^= 1) {
        const int n = min(C, seq - t0);
        // Prefetch the next chunk into the other buffer (free since the last barrier), then
        // wait for this chunk's copies only.
        if (t0 + C < seq) {
            load_chunk(buf ^ 1, t0 + C);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        const u16 *Qb = Qs0 + buf * C * lqk, *Kb = Ks0 + buf * C * lqk, *Vb = Vs0 + buf * C * LV;
        for (int i = tid; i < C; i += NT) {
            const i64 row = b * seq + t0 + i;
            G[i] = i < n ? g[row * hv + h] : 0.f;
            Bt[i] = i < n ? __bfloat162float(beta[row * hv + h]) : 0.f;
        }
        __syncthreads();

        // 1. Norm factors (one warp per row, f32 sums of the bf16 values); warp 0 then forms
        //    the in-chunk cumulative log decay G and e^{G}, e^{G_last - G}.
        for (int i = warp; i < C; i += NW) {
            float sq = 0.f, sk = 0.f;
            for (int d = lane; d < dk; d += 32) {
                const float qa = bf16_value(Qb[i * lqk + d]);
                const float ka = bf16_value(Kb[i * lqk + d]);
                sq = fmaf(qa, qa, sq);
                sk = fmaf(ka, ka, sk);
            }
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            if (lane == 0) {
                FQ[i] = scale / sqrtf(sq + 1e-6f);
                FK[i] = 1.f / sqrtf(sk + 1e-6f);
            }
        }
        if (warp == 0) {
            warp_prefix_sum<C>(G, lane);
            __syncwarp();
            for (int i = lane; i < C; i += 32) {
                EG[i] = i < n ? expf(G[i]) : 0.f;
                DL[i] = i < n ? expf(G[n - 1] - G[i]) : 0.f;
            }
        }
        __syncthreads();

        // 2. A_ij = beta_i fk_i fk_j e^{G_i-G_j} (k_i.k_j) (j < i) and
        //    M_ij = fq_i fk_j e^{G_i-G_j} (q_i.k_j) (j <= i) from the raw bf16 rows: the 20
        //    16x8 tiles of the lower triangle (row block rb has column tiles 0..2rb+1).
        for (int id = warp; id < 20; id += NW) {
            int rb = 0;
            while ((rb + 1) * (rb + 2) <= id) ++rb;
            const int ct = id - rb * (rb + 1);
            float pk[4] = {0.f, 0.f, 0.f, 0.f}, pq[4] = {0.f, 0.f, 0.f, 0.f};
            for (int kb = 0; kb < dkp; kb += 16) {
                u32 ak[4], aq[4], bk[2];
                frag_a(ak, Kb, lqk, rb * 16, kb, lane);
                frag_a(aq, Qb, lqk, rb * 16, kb, lane);
                frag_b(bk, Kb, lqk, ct * 8, kb, lane);
                mma_bf16_16816(pk, ak, bk);
                mma_bf16_16816(pq, aq, bk);
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = rb * 16 + acc_row(lane, r), j = ct * 8 + acc_col(lane, r);
                float a = 0.f, m = 0.f;
                if (j <= i && i < n) {  // the exponent is only formed where it is <= 0
                    const float dec = expf(G[i] - G[j]);
                    m = FQ[i] * FK[j] * dec * pq[r];
                    if (j < i) a = Bt[i] * FK[i] * FK[j] * dec * pk[r];
                }
                Af[i * LA + j] = a;
                split_bf16(m, Mh[i * LC + j], Ml[i * LC + j]);
            }
        }

        // 3. K S0 and Q S0 for this warp's two 16x8 tiles of [C][DVT] (row blocks w/4 and
        //    3 - w/4: equal work in step 5): R = beta (V - e^G fk K S0) into Uf, and the
        //    inter-chunk output e^G fq Q S0 kept in registers.
        float oacc[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int rb = s == 0 ? warp / 4 : 3 - warp / 4, ct = warp % 4;
            float ks[4] = {0.f, 0.f, 0.f, 0.f}, qs[4] = {0.f, 0.f, 0.f, 0.f};
            for (int kb = 0; kb < dkp; kb += 16) {
                u32 ak[4], aq[4], bh[2], bl[2];
                frag_a(ak, Kb, lqk, rb * 16, kb, lane);
                frag_a(aq, Qb, lqk, rb * 16, kb, lane);
                frag_b(bh, Sh, lqk, ct * 8, kb, lane);
                frag_b(bl, Sl, lqk, ct * 8, kb, lane);
                mma_bf16_16816(ks, ak, bh);
                mma_bf16_16816(ks, ak, bl);
                mma_bf16_16816(qs, aq, bh);
                mma_bf16_16816(qs, aq, bl);
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = rb * 16 + acc_row(lane, r), c = ct * 8 + acc_col(lane, r);
                Uf[i * LU + c] = Bt[i] * (bf16_value(Vb[i * LV + c]) - EG[i] * FK[i] * ks[r]);
                oacc[s][r] = EG[i] * FQ[i] * qs[r];
            }
        }
        __syncthreads();

        // 4. Solve (I + A) U = R in place, f32: blocked forward substitution (16-row blocks;
        //    rows >= n are zero rows of R and A). The diagonal blocks are the only sequential
        //    part of the chunk: one thread per column keeps the block's 16 rows in registers
        //    (fully unrolled), so the dependency chain runs through registers, not shared
        //    memory, and the A loads (the same address across the warp) issue ahead of it.
        for (int bb = 0; bb < n; bb += 16) {
            if (bb > 0) {
                for (int e = tid; e < 16 * DVT; e += NT) {
                    const int i = bb + e / DVT, c = e % DVT;
                    float acc = 0.f;
                    for (int j = 0; j < bb; ++j) acc = fmaf(Af[i * LA + j], Uf[j * LU + c], acc);
                    Uf[i * LU + c] -= acc;
                }
                __syncthreads();
            }
            if (tid < DVT) {
                const int c = tid;
                float r[16];
#pragma unroll
                for (int i = 0; i < 16; ++i) r[i] = Uf[(bb + i) * LU + c];
#pragma unroll
                for (int i = 1; i < 16; ++i) {
                    float acc = 0.f;
#pragma unroll
                    for (int j = 0; j < i; ++j) acc = fmaf(Af[(bb + i) * LA + bb + j], r[j], acc);
                    r[i] -= acc;
                }
#pragma unroll
                for (int i = 1; i < 16; ++i) Uf[(bb + i) * LU + c] = r[i];
            }
            __syncthreads();
        }

        // 5. U^T and W^T = (e^{G_last-G} fk U)^T as bf16 hi/lo operands.
        for (int e = tid; e < C * DVT; e += NT) {
            const int j = e / DVT, c = e % DVT;
            const float u = Uf[j * LU + c];
            split_bf16(u, Uh[c * LC + j], Ul[c * LC + j]);
            split_bf16(DL[j] * FK[j] * u, Wh[c * LC + j], Wl[c * LC + j]);
        }
        __syncthreads();

        // 6. O = e^G fq Q S0 + M U (one rounding to bf16), and S = e^{G_last} S0 + K^T W.
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int rb = s == 0 ? warp / 4 : 3 - warp / 4, ct = warp % 4;
            for (int kb = 0; kb <= rb; ++kb) {  // M is zero right of the diagonal block
                u32 mh[4], ml[4], uh[2], ul[2];
                frag_a(mh, Mh, LC, rb * 16, kb * 16, lane);
                frag_a(ml, Ml, LC, rb * 16, kb * 16, lane);
                frag_b(uh, Uh, LC, ct * 8, kb * 16, lane);
                frag_b(ul, Ul, LC, ct * 8, kb * 16, lane);
                mma_bf16_16816(oacc[s], mh, uh);
                mma_bf16_16816(oacc[s], mh, ul);
                mma_bf16_16816(oacc[s], ml, uh);
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int i = rb * 16 + acc_row(lane, r), c = ct * 8 + acc_col(lane, r);
                if (i < n && c0 + c < dv) {
                    out[((b * seq + t0 + i) * hv + h) * (i64)dv + c0 + c] =
                        __float2bfloat16_rn(oacc[s][r]);
                }
            }
        }
        const float e_last = expf(G[n - 1]);
        const int kspan = (n + 15) / 16 * 16;  // W rows >= n are zero
#pragma unroll
        for (int s = 0; s < TC_SREG; ++s) {
            const int tile = warp + s * NW, rb = tile / CT, ct = tile % CT;
            if (rb * 16 >= dkp) continue;  // warp-uniform
#pragma unroll
            for (int r = 0; r < 4; ++r) sacc[s][r] *= e_last;
            for (int kb = 0; kb < kspan; kb += 16) {
                u32 ak[4], wh[2], wl[2];
                frag_a_trans(ak, Kb, lqk, rb * 16, kb, lane);
                frag_b(wh, Wh, LC, ct * 8, kb, lane);
                frag_b(wl, Wl, LC, ct * 8, kb, lane);
                mma_bf16_16816(sacc[s], ak, wh);
                mma_bf16_16816(sacc[s], ak, wl);
            }
        }
        store_state_split();
        __syncthreads();
    }

#pragma unroll
    for (int s = 0; s < TC_SREG; ++s) {
        const int tile = warp + s * NW, rb = tile / CT, ct = tile % CT;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int d = rb * 16 + acc_row(lane, r), c = ct * 8 + acc_col(lane, r);
            if (d < dk && c0 + c < dv) state_out[((b * hv + h) * dk + d) * dv + c0 + c] = sacc[s][r];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The gate of the Gated DeltaNet shell (src/model/gdn.rs computes the same on the CPU):
//   g = neg_a[h] * softplus(a + dt_bias[h]),  softplus(x) = x > 20 ? x : log1p(exp(x))
// (torch's softplus, beta 1, threshold 20), all in the accumulation type A; neg_a = -exp(A_log)
// and dt_bias are [hv], a and out are [rows, hv]. One thread per element (grid-stride).
__device__ __forceinline__ float acc_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double acc_log1p(double x) { return log1p(x); }

template <typename A>
__device__ void gdn_gate(const A *__restrict__ a, const A *__restrict__ neg_a,
                         const A *__restrict__ dt_bias, A *__restrict__ out, i64 n, int hv) {
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (i64)gridDim.x * blockDim.x) {
        const int h = (int)(e % hv);
        const A x = a[e] + dt_bias[h];
        out[e] = neg_a[h] * (x > A(20) ? x : acc_log1p(acc_exp(x)));
    }
}

// ---------------------------------------------------------------------------------------------
// The gated delta rule as the plain token-by-token recurrence: the `reference` backend's delta
// rule on CUDA (so its float64 truth and its floor), one launch per call instead of a dozen
// small tensor ops per token. The backend prepares the inputs in the accumulation type A, as it
// does on the CPU: q (L2-normalised and scaled) and k (L2-normalised) [B, Hv, T, dk], v
// [B, Hv, T, dv], decay = exp(g) and beta [B, Hv, T]; init (may be null) [B, Hv, dk, dv]. Per
// token, the reference's steps in its order:
//   S = decay_t S;  p = S^T k_t;  u = beta_t (v_t - p);  S = S + k_t u^T;  o_t = S^T q_t
// One thread per state column (value channel): its column of S lives in shared memory (S[i][c]
// at i*32 + c: a warp reads one row per step, no bank conflicts); each sum over dk is one FMA
// chain in index order. Block = one warp per (32 value columns, value head, batch), grid
// (ceil(dv/32), Hv, B). out [B, T, Hv, dv] and state_out [B, Hv, dk, dv] in A.
// Shared memory: (32 dk + 2 dk) elements of A (34 KiB for f64 at dk = 128).
constexpr int REC_COLS = 32;

template <typename A>
__device__ void gdn_recurrent(const A *__restrict__ q, const A *__restrict__ k,
                              const A *__restrict__ v, const A *__restrict__ decay,
                              const A *__restrict__ beta, const A *__restrict__ init,
                              A *__restrict__ out, A *__restrict__ state_out, int seq, int hv,
                              int dk, int dv) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    A *S = reinterpret_cast<A *>(smem_raw);
    A *qs = S + (i64)dk * REC_COLS;
    A *ks = qs + dk;
    const int c = threadIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int col = blockIdx.x * REC_COLS + c;
    const bool live = col < dv;
    const i64 head = (i64)b * hv + h;
    for (int i = 0; i < dk; ++i)
        S[i * REC_COLS + c] = (live && init) ? init[(head * dk + i) * dv + col] : A(0);
    for (int t = 0; t < seq; ++t) {
        const i64 row = head * seq + t;
        for (int i = c; i < dk; i += REC_COLS) {
            qs[i] = q[row * dk + i];
            ks[i] = k[row * dk + i];
        }
        __syncthreads();
        if (live) {
            const A dec = decay[row];
            A p = A(0);
            for (int i = 0; i < dk; ++i) {
                const A s = S[i * REC_COLS + c] * dec;
                S[i * REC_COLS + c] = s;
                p = fma(s, ks[i], p);
            }
            const A u = (v[row * dv + col] - p) * beta[row];
            A o = A(0);
            for (int i = 0; i < dk; ++i) {
                const A s = fma(ks[i], u, S[i * REC_COLS + c]);
                S[i * REC_COLS + c] = s;
                o = fma(s, qs[i], o);
            }
            out[(((i64)b * seq + t) * hv + h) * dv + col] = o;
        }
        __syncthreads();  // qs/ks are overwritten by the next token
    }
    if (live)
        for (int i = 0; i < dk; ++i) state_out[(head * dk + i) * dv + col] = S[i * REC_COLS + c];
}

// ---------------------------------------------------------------------------------------------
// The MoE router's choice (src/model/mlp.rs ranks the same way on the CPU): per token (a row of
// probs [n, e]), the `keep` most probable experts, most probable first, equal probabilities in
// ascending expert index (the CPU's stable order; a NaN ranks above every number, as
// f64::total_cmp puts a positive NaN). Writes their indices and probabilities, [n, keep]; the
// host takes the routing weights and the flip margin (k-th minus (k+1)-th) from them in f64.
// One thread per token, a sorted insertion list of keep <= TOPK_MAX entries in registers.
constexpr int TOPK_MAX = 33;

template <typename A> __device__ __forceinline__ bool ranks_above(A a, A b) {
    return a != a ? b == b : (b == b && a > b);
}

template <typename A>
__device__ void router_rank(const A *__restrict__ probs, unsigned *__restrict__ idx,
                            A *__restrict__ top, i64 n, int e, int keep) {
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < n;
         r += (i64)gridDim.x * blockDim.x) {
        const A *p = probs + r * e;
        unsigned best[TOPK_MAX];
        A val[TOPK_MAX];
        int m = 0;
        for (int x = 0; x < e; ++x) {
            const A v = p[x];
            if (m < keep) {
                ++m;
            } else if (!ranks_above(v, val[keep - 1])) {
                continue;  // ties keep the lower index, which came first
            }
            int pos = m - 1;
            while (pos > 0 && ranks_above(v, val[pos - 1])) {
                val[pos] = val[pos - 1];
                best[pos] = best[pos - 1];
                --pos;
            }
            val[pos] = v;
            best[pos] = (unsigned)x;
        }
        for (int j = 0; j < keep; ++j) {
            idx[r * keep + j] = best[j];
            top[r * keep + j] = val[j];
        }
    }
}

}  // namespace

#define HSDIFF_GDN_ENTRIES(SUFFIX, T, C)                                                        \
    extern "C" __global__ void conv1d_silu_##SUFFIX(const T *x, const T *w, T *out, i64 batch, \
                                                    i64 seq, i64 ch, int k) {                  \
        conv1d_silu<T>(x, w, out, batch, seq, ch, k);                                          \
    }                                                                                          \
    extern "C" __global__ void gated_rms_norm_##SUFFIX(const T *x, const T *z, const T *w,     \
                                                       T *out, i64 rows, int dim,              \
                                                       AccOf<T>::type eps) {                   \
        gated_rms_norm<T>(x, z, w, out, rows, dim, eps);                                       \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(GDN_THREADS) gdn_chunk_##SUFFIX(              \
        const T *q, const T *k, const T *v, const AccOf<T>::type *g, const T *beta,            \
        const AccOf<T>::type *init, T *out, AccOf<T>::type *state_out, int seq, int hk,        \
        int hv, int dk, int dv, i64 qk_stride, i64 v_stride, AccOf<T>::type scale) {           \
        gdn_chunk<T, C>(q, k, v, g, beta, init, out, state_out, seq, hk, hv, dk, dv,           \
                        qk_stride, v_stride, scale);                                           \
    }

// Chunk 64 at f32 accumulation; 32 at f64 so that the shared tiles keep the same byte size.
HSDIFF_GDN_ENTRIES(bf16, __nv_bfloat16, 64)
HSDIFF_GDN_ENTRIES(f16, __half, 64)
HSDIFF_GDN_ENTRIES(f32, float, 64)
HSDIFF_GDN_ENTRIES(f64, double, 32)

// The tensor-core delta rule (bf16 storage only; f32 accumulation and state).
extern "C" __global__ void __launch_bounds__(TC_THREADS)
    gdn_chunk_tc_bf16(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                      const float *g, const __nv_bfloat16 *beta, const float *init,
                      __nv_bfloat16 *out, float *state_out, int seq, int hk, int hv, int dk, int dv,
                      i64 qk_stride, i64 v_stride, float scale) {
    gdn_chunk_tc(q, k, v, g, beta, init, out, state_out, seq, hk, hv, dk, dv, qk_stride, v_stride,
                 scale);
}

// The shell's gate, the reference's recurrence and the router's ranking, per accumulation type.
#define HSDIFF_ACC_ENTRIES(SUFFIX, A)                                                           \
    extern "C" __global__ void gdn_gate_##SUFFIX(const A *a, const A *neg_a, const A *dt_bias, \
                                                 A *out, i64 n, int hv) {                      \
        gdn_gate<A>(a, neg_a, dt_bias, out, n, hv);                                            \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(REC_COLS) gdn_recurrent_##SUFFIX(             \
        const A *q, const A *k, const A *v, const A *decay, const A *beta, const A *init,      \
        A *out, A *state_out, int seq, int hv, int dk, int dv) {                               \
        gdn_recurrent<A>(q, k, v, decay, beta, init, out, state_out, seq, hv, dk, dv);         \
    }                                                                                          \
    extern "C" __global__ void router_rank_##SUFFIX(const A *probs, unsigned *idx, A *top,     \
                                                    i64 n, int e, int keep) {                  \
        router_rank<A>(probs, idx, top, n, e, keep);                                           \
    }
HSDIFF_ACC_ENTRIES(f32, float)
HSDIFF_ACC_ENTRIES(f64, double)
