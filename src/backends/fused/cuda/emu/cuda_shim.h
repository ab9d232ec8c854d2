// A tiny host emulation of the CUDA features gdn.cu uses, so that its kernels can be run on a
// machine without a GPU (emu_test.cpp, scripts/cuda-emu-test.sh). Every CUDA thread is an OS
// thread; blocks run one after another; __syncthreads is a block barrier and warp shuffles go
// through a per-warp buffer and barrier (a non-warp-uniform shuffle deadlocks, which is a bug).
// Tensor-core mma.sync and cp.async (the only inline PTX of gdn.cu) are emulated here too:
// mma by its documented per-lane fragment layouts, cp.async as deferred copies.
// Correctness only: this says nothing about speed, occupancy or shared-memory limits.
#pragma once
#define HSDIFF_CUDA_EMU 1  // gdn.cu then takes mma_bf16_16816 / cp_async* from here
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "cuda_bf16.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n)
#define __launch_bounds__(n)
#define __host__

using std::exp;
using std::fma;
using std::min;
using std::sqrt;

struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct EmuBlock {
    std::barrier<> *block;
    std::vector<std::barrier<> *> warps;
    std::vector<double> xbuf;      // one slot per thread, for shuffles
    std::vector<uint32_t> mbuf;    // six words per thread (A and B fragments), for mma
};
inline EmuBlock *emu_block = nullptr;

inline void __syncthreads() { emu_block->block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_block->warps[threadIdx.x / 32]->arrive_and_wait(); }

template <typename A> A emu_shfl(A v, int src_lane_fn(int, int), int arg) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    emu_block->xbuf[threadIdx.x] = (double)v;
    emu_block->warps[w]->arrive_and_wait();
    const int src = src_lane_fn(lane, arg);
    const A r = (A)emu_block->xbuf[w * 32 + src];
    emu_block->warps[w]->arrive_and_wait();
    return r;
}
inline int emu_xor(int lane, int o) { return lane ^ o; }
inline int emu_up(int lane, int o) { return lane >= o ? lane - o : lane; }
template <typename A> A __shfl_xor_sync(unsigned, A v, int o) { return emu_shfl(v, emu_xor, o); }
template <typename A> A __shfl_up_sync(unsigned, A v, int o) { return emu_shfl(v, emu_up, o); }

// Runs kernel() for every block of grid, with block threads (a multiple of 32).
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()> &kernel) {
    gridDim = grid;
    blockDim = block;
    const unsigned nt = block.x;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::barrier<> bar(nt);
                std::vector<std::barrier<> *> warps;
                for (unsigned w = 0; w < (nt + 31) / 32; ++w) warps.push_back(new std::barrier<>(32));
                EmuBlock eb{&bar, warps, std::vector<double>(nt), std::vector<uint32_t>(6 * nt)};
                emu_block = &eb;
                std::vector<std::thread> ts;
                for (unsigned t = 0; t < nt; ++t)
                    ts.emplace_back([&, t] {
                        threadIdx = dim3{t, 0, 0};
                        blockIdx = dim3{bx, by, bz};
                        kernel();
                    });
                for (auto &t : ts) t.join();
                for (auto *w : warps) delete w;
            }
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D = A B + D, warp-collective. Each lane
// publishes its fragments; each lane then rebuilds the elements it needs from the documented
// layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"; lane =
// 4*gid + tig; the lower-index element of a pair in the low half):
//   A[r][k]: lane 4*(r%8) + (k%8)/2, register (r/8) + 2*(k/8), half k%2
//   B[k][n]: lane 4*n + (k%8)/2,     register k/8,             half k%2
//   D[r][n]: lane 4*(r%8) + n/2,     register 2*(r/8) + n%2
// Products are exact (bf16 x bf16); the sum is formed in double and rounded to f32 once (the
// hardware's f32 accumulation differs from this by f32 rounding only).
inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    uint32_t *mine = &emu_block->mbuf[threadIdx.x * 6];
    for (int i = 0; i < 4; ++i) mine[i] = a[i];
    for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
    emu_block->warps[w]->arrive_and_wait();
    const uint32_t *warp_buf = &emu_block->mbuf[w * 32 * 6];
    auto half = [&](int src_lane, int reg, int hi) {
        const uint32_t word = warp_buf[src_lane * 6 + reg];
        return (double)__bfloat162float(__nv_bfloat16{(uint16_t)(hi ? word >> 16 : word & 0xffffu)});
    };
    auto A = [&](int r, int k) { return half(4 * (r % 8) + (k % 8) / 2, r / 8 + 2 * (k / 8), k % 2); };
    auto B = [&](int k, int n) { return half(4 * n + (k % 8) / 2, 4 + k / 8, k % 2); };
    float res[4];
    for (int reg = 0; reg < 4; ++reg) {
        const int r = lane / 4 + 8 * (reg / 2), n = 2 * (lane % 4) + reg % 2;
        double acc = d[reg];
        for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
        res[reg] = (float)acc;
    }
    emu_block->warps[w]->arrive_and_wait();  // nobody overwrites mbuf before all have read it
    for (int i = 0; i < 4; ++i) d[i] = res[i];
}

// cp.async (16 bytes, global -> shared) as a deferred copy: nothing lands in shared memory until
// cp_async_wait<N>() retires the group, so a read before the wait sees stale data (the tests
// fill shared memory with NaN first) and a missing wait fails a test instead of passing by luck.
struct EmuCopy { void *dst; const void *src; };
inline thread_local std::vector<EmuCopy> emu_cp_open;
inline thread_local std::vector<std::vector<EmuCopy>> emu_cp_groups;
inline void cp_async16(void *dst, const void *src) {
    if (((uintptr_t)dst | (uintptr_t)src) & 15) {
        std::fprintf(stderr, "cp.async with a misaligned address (%p <- %p)\n", dst, src);
        std::abort();
    }
    emu_cp_open.push_back({dst, src});
}
inline void cp_async_commit() {
    emu_cp_groups.push_back(std::move(emu_cp_open));
    emu_cp_open.clear();
}
template <int N> void cp_async_wait() {
    while (emu_cp_groups.size() > (size_t)N) {
        for (const EmuCopy &c : emu_cp_groups.front()) std::memcpy(c.dst, c.src, 16);
        emu_cp_groups.erase(emu_cp_groups.begin());
    }
}
