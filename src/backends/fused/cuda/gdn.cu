// hsdiff: fused CUDA kernels of the Gated DeltaNet layer (forward only), compiled to PTX by
// build.rs (nvcc -ptx -arch=sm_90) and launched from src/backends/fused/cuda/mod.rs.
//
// Precision policy (gdn-spec §6.2, same as the fused CPU kernels): bf16/f16/f32 storage is read
// and written in that dtype, every sum and the state are f32, and each fused step rounds once
// (conv + SiLU: one rounding; delta-rule output: one rounding; gated norm: one rounding).
// f64 storage computes in f64 throughout.
//
// Kernels (one extern "C" entry per storage type: _bf16, _f16, _f32, _f64):
//   conv1d_silu_*   causal depthwise conv + SiLU, x [B,T,C], w [C,K] -> out [B,T,C]
//   gated_rms_norm_* w * x*rsqrt(mean x^2 + eps) * SiLU(z), rows of length dim
//   gdn_chunk_*     the gated delta rule, chunked (WY form), q/k L2 norm + scale + gates fused
//
// Written to be simple and checkable rather than fast: plain f32 FMAs from shared memory, no
// tensor cores. Every index is 64-bit where it can exceed 2^31.

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
        if (warp == 0) {
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
