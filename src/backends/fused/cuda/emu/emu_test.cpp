// Runs the kernels of ../gdn.cu on the CPU through cuda_shim.h and compares them with plain
// double-precision references (the same formulas as hsdiff::backends::fused::cpu::truth).
// Checks indexing, masking, chunk/tile edges, strided q/k/v and full writes (outputs are
// NaN-poisoned first). Build and run: scripts/cuda-emu-test.sh. Exit 0 = all passed.
#include "cuda_shim.h"
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>

namespace {
alignas(16) unsigned char smem_raw[1 << 20];
}
#include "../gdn.cu"

static int failures = 0;
static std::mt19937_64 rng(12345);
static std::vector<double> normals(size_t n, double sd) {
    std::normal_distribution<double> d(0.0, sd);
    std::vector<double> v(n);
    for (auto &x : v) x = d(rng);
    return v;
}
static double rel_l2(const std::vector<double> &a, const std::vector<double> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return NAN;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / den);
}
static void check(const std::string &what, const std::vector<double> &got,
                  const std::vector<double> &want, double bound) {
    const double e = rel_l2(got, want);
    const bool ok = e <= bound;  // NaN fails
    std::printf("%-4s %-62s rel L2 %.3e (bound %.2g)\n", ok ? "ok" : "FAIL", what.c_str(), e, bound);
    if (!ok) ++failures;
}

// Storage-type helpers.
template <typename T> T st(double x);
template <> float st<float>(double x) { return (float)x; }
template <> double st<double>(double x) { return x; }
template <> __nv_bfloat16 st<__nv_bfloat16>(double x) { return __float2bfloat16_rn((float)x); }
template <typename T> double f64(T x) { return (double)to_acc(x); }
template <typename T> std::vector<T> stv(const std::vector<double> &x) {
    std::vector<T> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = st<T>(x[i]);
    return r;
}
template <typename T> std::vector<double> back(const std::vector<T> &x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = f64(x[i]);
    return r;
}

// ----- references (double) -----
static std::vector<double> ref_conv(const std::vector<double> &x, const std::vector<double> &w,
                                    int B, int T, int C, int K) {
    std::vector<double> out((size_t)B * T * C);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            for (int c = 0; c < C; ++c) {
                double acc = 0;
                for (int j = 0; j < K; ++j) {
                    int s = t - (K - 1) + j;
                    if (s >= 0) acc += w[c * K + j] * x[((size_t)b * T + s) * C + c];
                }
                out[((size_t)b * T + t) * C + c] = acc / (1 + std::exp(-acc));
            }
    return out;
}
static std::vector<double> ref_norm(const std::vector<double> &x, const std::vector<double> &z,
                                    const std::vector<double> &w, double eps, int dim) {
    std::vector<double> out(x.size());
    for (size_t r = 0; r < x.size() / dim; ++r) {
        double ss = 0;
        for (int i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
        double inv = 1 / std::sqrt(ss / dim + eps);
        for (int i = 0; i < dim; ++i) {
            double zz = z[r * dim + i];
            out[r * dim + i] = w[i] * (x[r * dim + i] * inv) * (zz / (1 + std::exp(-zz)));
        }
    }
    return out;
}
// q/k rows at (b*T+t)*qks + kh*dk, v rows at (b*T+t)*vs + h*dv.
static void ref_gdn(const std::vector<double> &q, const std::vector<double> &k,
                    const std::vector<double> &v, size_t qoff, size_t koff, size_t voff, long qks,
                    long vs, const std::vector<double> &g, const std::vector<double> &beta,
                    const std::vector<double> *init, int B, int T, int Hk, int Hv, int dk, int dv,
                    double scale, std::vector<double> &out, std::vector<double> &fin) {
    out.assign((size_t)B * T * Hv * dv, 0);
    fin.assign((size_t)B * Hv * dk * dv, 0);
    const int r = Hv / Hk;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hv; ++h) {
            int kh = h / r;
            std::vector<double> S((size_t)dk * dv, 0);
            if (init) for (size_t i = 0; i < S.size(); ++i) S[i] = (*init)[((size_t)b * Hv + h) * dk * dv + i];
            for (int t = 0; t < T; ++t) {
                size_t row = (size_t)b * T + t;
                std::vector<double> qn(dk), kn(dk);
                double sq = 0, sk = 0;
                for (int d = 0; d < dk; ++d) {
                    qn[d] = q[qoff + row * qks + (size_t)kh * dk + d];
                    kn[d] = k[koff + row * qks + (size_t)kh * dk + d];
                    sq += qn[d] * qn[d];
                    sk += kn[d] * kn[d];
                }
                for (int d = 0; d < dk; ++d) {
                    qn[d] *= scale / std::sqrt(sq + 1e-6);
                    kn[d] /= std::sqrt(sk + 1e-6);
                }
                double dec = std::exp(g[row * Hv + h]), bt = beta[row * Hv + h];
                for (auto &s : S) s *= dec;
                for (int c = 0; c < dv; ++c) {
                    double p = 0;
                    for (int d = 0; d < dk; ++d) p += S[(size_t)d * dv + c] * kn[d];
                    double u = bt * (v[voff + row * vs + (size_t)h * dv + c] - p);
                    for (int d = 0; d < dk; ++d) S[(size_t)d * dv + c] += kn[d] * u;
                }
                for (int c = 0; c < dv; ++c) {
                    double o = 0;
                    for (int d = 0; d < dk; ++d) o += S[(size_t)d * dv + c] * qn[d];
                    out[(row * Hv + h) * dv + c] = o;
                }
            }
            for (size_t i = 0; i < S.size(); ++i) fin[((size_t)b * Hv + h) * dk * dv + i] = S[i];
        }
}

template <typename T> struct Entry;
template <> struct Entry<float> {
    static constexpr const char *name = "f32";
    static constexpr double bound = 1e-5;
    // gate: one f32 add, expf/log1pf (CUDA: <= 2 ulp each) and one multiply per element
    static constexpr double gate_bound = 1e-6;
    template <class... X> static void gate(X... a) { gdn_gate_f32(a...); }
    template <class... X> static void rec(X... a) { gdn_recurrent_f32(a...); }
    template <class... X> static void rank(X... a) { router_rank_f32(a...); }
    template <class... X> static void conv(X... a) { conv1d_silu_f32(a...); }
    template <class... X> static void norm(X... a) { gated_rms_norm_f32(a...); }
    template <class... X> static void gdn(X... a) { gdn_chunk_f32(a...); }
};
template <> struct Entry<double> {
    static constexpr const char *name = "f64";
    static constexpr double bound = 1e-12;
    static constexpr double gate_bound = 1e-14;
    template <class... X> static void gate(X... a) { gdn_gate_f64(a...); }
    template <class... X> static void rec(X... a) { gdn_recurrent_f64(a...); }
    template <class... X> static void rank(X... a) { router_rank_f64(a...); }
    template <class... X> static void conv(X... a) { conv1d_silu_f64(a...); }
    template <class... X> static void norm(X... a) { gated_rms_norm_f64(a...); }
    template <class... X> static void gdn(X... a) { gdn_chunk_f64(a...); }
};
template <> struct Entry<__nv_bfloat16> {
    static constexpr const char *name = "bf16";
    static constexpr double bound = 1e-2;
    template <class... X> static void conv(X... a) { conv1d_silu_bf16(a...); }
    template <class... X> static void norm(X... a) { gated_rms_norm_bf16(a...); }
    template <class... X> static void gdn(X... a) { gdn_chunk_bf16(a...); }
};

template <typename T> T nan_of() { return st<T>(NAN); }

// Bounds of the tensor-core kernel against the double reference (inputs identical: the
// reference reads the same bf16 values). The output is rounded to bf16 once: |err| <= 2^-9 |o|
// per element, so that alone keeps rel L2 <= 2^-9 = 1.95e-3 (about 1.1e-3 in practice). Inside,
// every f32 operand is carried as bf16 hi + lo (relative error <= 2^-17 = 7.6e-6 per operand),
// products are exact and sums f32, so the f32 state (not rounded to bf16) should stay within a
// few times 2^-17: TC_STATE_BOUND = 4 * 2^-17 = 3e-5 (measured 2.3e-6 .. 4.7e-6). Out: 2^-9 plus
// the internal error, < 2.1e-3 (measured 1.64e-3 .. 1.79e-3). Mutations caught by these bounds:
// K S0 without its lo term (state 1.1e-3), M U without the M_lo U_hi term (out 2.4e-3 .. 2.8e-3),
// a swapped fragment register, a missing cp.async wait (NaN from the poisoned shared memory).
constexpr double TC_STATE_BOUND = 3e-5;
constexpr double TC_OUT_BOUND = 2.1e-3;

template <typename T> void test_conv(int B, int Tn, int C, int K) {
    auto x = stv<T>(normals((size_t)B * Tn * C, 1.0));
    auto w = stv<T>(normals((size_t)C * K, 0.5));
    std::vector<T> out((size_t)B * Tn * C, nan_of<T>());
    const long long n = (long long)out.size();
    emu_launch({(unsigned)std::min<long long>((n + 255) / 256, 3), 1, 1}, {256, 1, 1},
               [&] { Entry<T>::conv(x.data(), w.data(), out.data(), (long long)B, (long long)Tn, (long long)C, K); });
    check(std::string("conv ") + Entry<T>::name + " B" + std::to_string(B) + " T" + std::to_string(Tn) +
              " C" + std::to_string(C) + " K" + std::to_string(K),
          back(out), ref_conv(back(x), back(w), B, Tn, C, K), Entry<T>::bound);
}

template <typename T> void test_norm(int rows, int dim) {
    auto x = stv<T>(normals((size_t)rows * dim, 2.0));
    auto z = stv<T>(normals((size_t)rows * dim, 1.5));
    auto w = stv<T>(normals(dim, 1.0));
    std::vector<T> out(x.size(), nan_of<T>());
    emu_launch({2, 1, 1}, {256, 1, 1}, [&] {
        Entry<T>::norm(x.data(), z.data(), w.data(), out.data(), (long long)rows, dim,
                       (typename AccOf<T>::type)1e-6);
    });
    check(std::string("norm ") + Entry<T>::name + " rows" + std::to_string(rows) + " dim" + std::to_string(dim),
          back(out), ref_norm(back(x), back(z), back(w), 1e-6, dim), Entry<T>::bound);
}

// strided: q/k/v are column slices of one [B, T, 2*Hk*dk + Hv*dv] buffer (the fused path).
// tc: run gdn_chunk_tc_bf16 (the tensor-core kernel; bf16 only) instead of gdn_chunk_<T>.
template <typename T>
void test_gdn(int B, int Tn, int Hk, int Hv, int dk, int dv, double gscale, bool with_init, bool strided,
              bool tc = false) {
    typedef typename AccOf<T>::type A;
    const long kd = (long)Hk * dk, vd = (long)Hv * dv, C = 2 * kd + vd;
    std::vector<T> q, k, v;
    size_t qoff = 0, koff = 0, voff = 0;
    long qks = kd, vs = vd;
    if (strided) {
        q = stv<T>(normals((size_t)B * Tn * C, 1.0));
        koff = kd; voff = 2 * kd; qks = C; vs = C;
    } else {
        q = stv<T>(normals((size_t)B * Tn * kd, 1.0));
        k = stv<T>(normals((size_t)B * Tn * kd, 1.0));
        v = stv<T>(normals((size_t)B * Tn * vd, 1.0));
    }
    const T *qp = q.data();
    const T *kp = strided ? q.data() + koff : k.data();
    const T *vp = strided ? q.data() + voff : v.data();
    std::uniform_real_distribution<double> U(0.5, 1.5);
    std::normal_distribution<double> N(0, 1);
    std::vector<A> g((size_t)B * Tn * Hv);
    std::vector<T> beta((size_t)B * Tn * Hv);
    for (size_t i = 0; i < g.size(); ++i) {
        g[i] = (A)(gscale > 0 ? -gscale * U(rng) : -std::exp(N(rng) * 1.5 - 2.0));
        beta[i] = st<T>(1 / (1 + std::exp(-N(rng))));
    }
    std::vector<A> init;
    std::vector<double> init_d;
    if (with_init) {
        init_d = normals((size_t)B * Hv * dk * dv, 0.5);
        for (double x : init_d) init.push_back((A)x);
        for (size_t i = 0; i < init.size(); ++i) init_d[i] = init[i];
    }
    std::vector<T> out((size_t)B * Tn * Hv * dv, nan_of<T>());
    std::vector<A> fin((size_t)B * Hv * dk * dv, (A)NAN);
    const double scale = 1 / std::sqrt((double)dk);
    constexpr int CH = sizeof(A) == 8 ? 32 : 64;
    const size_t smem = tc ? (size_t)gdn_tc_shared_bytes(dk)
                           : (size_t)(2 * CH * (dk + 1) + 32 * dk + 32 * CH + 2 * CH * CH + 3 * CH) * sizeof(A);
    if (smem > sizeof(smem_raw)) { std::printf("FAIL smem\n"); ++failures; return; }
    std::memset(smem_raw, 0xff, smem);  // shared memory starts as garbage (NaN)
    emu_launch({(unsigned)((dv + 31) / 32), (unsigned)Hv, (unsigned)B}, {256, 1, 1}, [&] {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
            if (tc) {
                gdn_chunk_tc_bf16(qp, kp, vp, g.data(), beta.data(), with_init ? init.data() : nullptr,
                                  out.data(), fin.data(), Tn, Hk, Hv, dk, dv, (long long)qks, (long long)vs,
                                  (A)scale);
                return;
            }
        }
        Entry<T>::gdn(qp, kp, vp, g.data(), beta.data(), with_init ? init.data() : nullptr, out.data(),
                      fin.data(), Tn, Hk, Hv, dk, dv, (long long)qks, (long long)vs, (A)scale);
    });
    std::vector<double> gd(g.begin(), g.end()), ro, rf;
    std::vector<double> qd = back(q), kd_ = strided ? qd : back(k), vd_ = strided ? qd : back(v);
    ref_gdn(qd, kd_, vd_, qoff, koff, voff, qks, vs, gd, back(beta), with_init ? &init_d : nullptr,
            B, Tn, Hk, Hv, dk, dv, scale, ro, rf);
    char label[160];
    std::snprintf(label, sizeof label, "%s %s B%d T%d Hk%d Hv%d dk%d dv%d g%s%s%s", tc ? "gdn-tc" : "gdn",
                  Entry<T>::name, B, Tn, Hk, Hv,
                  dk, dv, gscale > 0 ? std::to_string(gscale).substr(0, 5).c_str() : "mixed",
                  with_init ? " +init" : "", strided ? " strided" : "");
    check(std::string(label) + " out", back(out), ro, tc ? TC_OUT_BOUND : Entry<T>::bound);
    std::vector<double> fd(fin.begin(), fin.end());
    check(std::string(label) + " state", fd, rf, tc ? TC_STATE_BOUND : Entry<T>::bound);
}

template <typename T> void all() {
    test_conv<T>(1, 1, 5, 4);
    test_conv<T>(2, 70, 300, 4);
    test_conv<T>(1, 129, 17, 3);
    test_norm<T>(1, 128);
    test_norm<T>(77, 20);
    test_norm<T>(300, 128);
    test_gdn<T>(1, 1, 2, 4, 32, 48, 5.0, true, false);
    test_gdn<T>(2, 65, 2, 4, 24, 40, 1e-3, true, true);
    test_gdn<T>(1, 64, 3, 3, 40, 32, 5.0, false, false);
    test_gdn<T>(2, 63, 2, 6, 16, 8, 0.0, false, true);
    test_gdn<T>(1, 150, 1, 2, 128, 72, 0.0, true, false);
}

// The shell's gate, g = -exp(A_log) softplus(a + dt_bias) (torch's softplus: threshold 20), with
// A_log ~ log U(0.05, 2) and dt_bias ~ U(-3, 0.5) as in the weight recipe, and a spread wide
// enough (sd 8) that some a + dt_bias pass the threshold and some underflow exp.
template <typename A> void test_gate(int rows, int hv) {
    std::uniform_real_distribution<double> Ua(0.05, 2.0), Ud(-3.0, 0.5);
    std::vector<A> neg_a(hv), dt(hv);
    for (int h = 0; h < hv; ++h) {
        neg_a[h] = (A)(-std::exp(std::log(Ua(rng))));
        dt[h] = (A)Ud(rng);
    }
    std::vector<A> a;
    for (double x : normals((size_t)rows * hv, 8.0)) a.push_back((A)x);
    std::vector<A> out(a.size(), (A)NAN);
    const long long n = (long long)a.size();
    emu_launch({(unsigned)std::min<long long>((n + 255) / 256, 3), 1, 1}, {256, 1, 1},
               [&] { Entry<A>::gate(a.data(), neg_a.data(), dt.data(), out.data(), n, hv); });
    std::vector<double> want(a.size());
    int passed = 0;
    for (size_t e = 0; e < a.size(); ++e) {
        const double x = (double)a[e] + (double)dt[e % hv];
        passed += x > 20;
        want[e] = (double)neg_a[e % hv] * (x > 20 ? x : std::log1p(std::exp(x)));
    }
    check(std::string("gate ") + Entry<A>::name + " rows" + std::to_string(rows) + " hv" +
              std::to_string(hv) + " (" + std::to_string(passed) + " above the threshold)",
          std::vector<double>(out.begin(), out.end()), want, Entry<A>::gate_bound);
}

// The reference's recurrence (gdn_recurrent_*) on prepared inputs: q (normalised, scaled), k
// (normalised) [B, Hv, T, dk], v [B, Hv, T, dv], decay = exp(g), beta [B, Hv, T].
template <typename A> void test_rec(int B, int Tn, int Hv, int dk, int dv, double gscale, bool with_init) {
    const size_t rows = (size_t)B * Hv * Tn;
    std::vector<double> qd = normals(rows * dk, 1.0), kd = normals(rows * dk, 1.0);
    const double scale = 1 / std::sqrt((double)dk);
    for (size_t r = 0; r < rows; ++r) {
        double sq = 0, sk = 0;
        for (int i = 0; i < dk; ++i) {
            sq += qd[r * dk + i] * qd[r * dk + i];
            sk += kd[r * dk + i] * kd[r * dk + i];
        }
        for (int i = 0; i < dk; ++i) {
            qd[r * dk + i] *= scale / std::sqrt(sq + 1e-6);
            kd[r * dk + i] /= std::sqrt(sk + 1e-6);
        }
    }
    std::vector<double> vd = normals(rows * dv, 1.0), dd(rows), bd(rows);
    std::uniform_real_distribution<double> U(0.5, 1.5);
    std::normal_distribution<double> N(0, 1);
    for (size_t r = 0; r < rows; ++r) {
        dd[r] = std::exp(gscale > 0 ? -gscale * U(rng) : -std::exp(N(rng) * 1.5 - 2.0));
        bd[r] = 1 / (1 + std::exp(-N(rng)));
    }
    std::vector<double> init_d = with_init ? normals((size_t)B * Hv * dk * dv, 0.5) : std::vector<double>();
    auto cast = [](std::vector<double> &x) {  // the kernel's inputs, and the reference reads the same values
        std::vector<A> r(x.size());
        for (size_t i = 0; i < x.size(); ++i) x[i] = r[i] = (A)x[i];
        return r;
    };
    auto q = cast(qd), k = cast(kd), v = cast(vd), dec = cast(dd), beta = cast(bd), init = cast(init_d);
    std::vector<A> out((size_t)B * Tn * Hv * dv, (A)NAN), fin((size_t)B * Hv * dk * dv, (A)NAN);
    const size_t smem = (size_t)(REC_COLS * dk + 2 * dk) * sizeof(A);
    std::memset(smem_raw, 0xff, smem);
    emu_launch({(unsigned)((dv + 31) / 32), (unsigned)Hv, (unsigned)B}, {32, 1, 1}, [&] {
        Entry<A>::rec(q.data(), k.data(), v.data(), dec.data(), beta.data(),
                      with_init ? init.data() : nullptr, out.data(), fin.data(), Tn, Hv, dk, dv);
    });
    std::vector<double> ro((size_t)B * Tn * Hv * dv), rf((size_t)B * Hv * dk * dv);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hv; ++h) {
            const size_t head = (size_t)b * Hv + h;
            std::vector<double> S((size_t)dk * dv, 0);
            if (with_init) for (size_t i = 0; i < S.size(); ++i) S[i] = init_d[head * dk * dv + i];
            for (int t = 0; t < Tn; ++t) {
                const size_t row = head * Tn + t;
                for (auto &s : S) s *= dd[row];
                for (int c = 0; c < dv; ++c) {
                    double p = 0;
                    for (int i = 0; i < dk; ++i) p += S[(size_t)i * dv + c] * kd[row * dk + i];
                    const double u = (vd[row * dv + c] - p) * bd[row];
                    double o = 0;
                    for (int i = 0; i < dk; ++i) {
                        S[(size_t)i * dv + c] += kd[row * dk + i] * u;
                        o += S[(size_t)i * dv + c] * qd[row * dk + i];
                    }
                    ro[(((size_t)b * Tn + t) * Hv + h) * dv + c] = o;
                }
            }
            for (size_t i = 0; i < S.size(); ++i) rf[head * dk * dv + i] = S[i];
        }
    char label[160];
    std::snprintf(label, sizeof label, "recurrent %s B%d T%d Hv%d dk%d dv%d g%s%s", Entry<A>::name, B, Tn,
                  Hv, dk, dv, gscale > 0 ? std::to_string(gscale).substr(0, 5).c_str() : "mixed",
                  with_init ? " +init" : "");
    check(std::string(label) + " out", std::vector<double>(out.begin(), out.end()), ro, Entry<A>::bound);
    check(std::string(label) + " state", std::vector<double>(fin.begin(), fin.end()), rf, Entry<A>::bound);
}

// The router's ranking against a stable sort (ties: lower expert first), on softmax rows with
// planted exact ties (duplicated logits) and a NaN row: every index and value must be equal.
template <typename A> void test_rank(int n, int e, int keep) {
    std::vector<A> probs((size_t)n * e);
    std::uniform_int_distribution<int> pick(0, e - 1);
    for (int r = 0; r < n; ++r) {
        std::vector<double> logit = normals(e, 2.0);
        for (int t = 0; t < e / 4; ++t) logit[pick(rng)] = logit[pick(rng)];  // exact ties
        double mx = *std::max_element(logit.begin(), logit.end()), sum = 0;
        for (double &x : logit) sum += (x = std::exp(x - mx));
        for (int x = 0; x < e; ++x) probs[(size_t)r * e + x] = (A)(logit[x] / sum);
    }
    if (n > 2) probs[(size_t)2 * e + e / 2] = (A)NAN;  // a NaN ranks first
    std::vector<unsigned> idx((size_t)n * keep, 0xffffffffu);
    std::vector<A> top((size_t)n * keep, (A)NAN);
    emu_launch({(unsigned)std::min(n, 2), 1, 1}, {64, 1, 1},
               [&] { Entry<A>::rank(probs.data(), idx.data(), top.data(), (long long)n, e, keep); });
    int wrong = 0;
    for (int r = 0; r < n; ++r) {
        std::vector<int> order(e);
        for (int x = 0; x < e; ++x) order[x] = x;
        const A *p = &probs[(size_t)r * e];
        auto key = [&](int x) { return std::isnan((double)p[x]) ? INFINITY : (double)p[x]; };
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
        for (int j = 0; j < keep; ++j) {
            const A got = top[(size_t)r * keep + j], want = p[order[j]];
            const bool same_val = std::isnan((double)want) ? std::isnan((double)got) : got == want;
            wrong += idx[(size_t)r * keep + j] != (unsigned)order[j] || !same_val;
        }
    }
    const bool ok = wrong == 0;
    std::printf("%-4s %-62s %d of %d entries differ\n", ok ? "ok" : "FAIL",
                (std::string("router rank ") + Entry<A>::name + " n" + std::to_string(n) + " e" +
                 std::to_string(e) + " keep" + std::to_string(keep)).c_str(), wrong, n * keep);
    if (!ok) ++failures;
}

// Cases per accumulation type: the gate (a row count that is not a multiple of the block, Hv 48
// of Qwen3.5-27B), the recurrence at T = 1 / 65 / 300, dv a partial column tile, dk 24 and 128,
// B 2, with and without an initial state, strong / weak / mixed decays; the router ranking.
template <typename A> void all_acc() {
    test_gate<A>(1, 4);
    test_gate<A>(333, 48);
    test_rec<A>(1, 1, 2, 32, 48, 5.0, true);
    test_rec<A>(2, 65, 3, 24, 40, 1e-3, true);
    test_rec<A>(1, 300, 2, 128, 72, 0.0, false);
    test_rec<A>(2, 64, 1, 16, 32, 3.0, false);
    test_rank<A>(1, 1, 1);     // one expert, no (k+1)-th
    test_rank<A>(77, 8, 3);    // the golden MoE model: 8 experts, top-2 (+1)
    test_rank<A>(130, 512, 11); // Qwen3-Next: 512 experts, top-10 (+1)
    test_rank<A>(5, 40, 33);   // the most the kernel keeps
}

// The tensor-core kernel: chunk edges (T = 1, 63, 64, 65, 300, 2048), grouped value heads
// (Hv > Hk), with/without initial state, strong/weak/mixed decays, dk not a multiple of 16 (zero
// padding) or of 8 and dv not a multiple of 8 (the plain-load path instead of cp.async), strided
// q/k/v (the fused layer's layout), dk = 128 (the largest it takes).
void all_tc() {
    using BF = __nv_bfloat16;
    test_gdn<BF>(1, 1, 2, 4, 32, 48, 5.0, true, false, true);
    test_gdn<BF>(2, 63, 2, 6, 24, 40, 0.0, false, true, true);
    test_gdn<BF>(1, 64, 3, 3, 40, 32, 5.0, false, false, true);
    test_gdn<BF>(2, 65, 2, 4, 20, 36, 1e-3, true, true, true);
    test_gdn<BF>(1, 300, 1, 2, 128, 72, 0.0, true, false, true);
    test_gdn<BF>(1, 300, 2, 4, 64, 32, 3.0, false, true, true);
    test_gdn<BF>(1, 2048, 1, 2, 128, 32, 0.0, true, false, true);
    test_gdn<BF>(1, 2048, 1, 1, 128, 40, 1e-3, false, true, true);
}

int main(int argc, char **argv) {
    std::string only = argc > 1 ? argv[1] : "";
    if (only.empty() || only == "f32") all<float>();
    if (only.empty() || only == "f64") all<double>();
    if (only.empty() || only == "bf16") all<__nv_bfloat16>();
    if (only.empty() || only == "tc") all_tc();
    if (only.empty() || only == "acc") {
        all_acc<float>();
        all_acc<double>();
    }
    std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
