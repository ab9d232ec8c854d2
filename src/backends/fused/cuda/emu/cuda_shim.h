// A tiny host emulation of the CUDA features gdn.cu uses, so that its kernels can be run on a
// machine without a GPU (emu_test.cpp, scripts/cuda-emu-test.sh). Every CUDA thread is an OS
// thread; blocks run one after another; __syncthreads is a block barrier and warp shuffles go
// through a per-warp buffer and barrier (a non-warp-uniform shuffle deadlocks, which is a bug).
// Correctness only: this says nothing about speed, occupancy or shared-memory limits.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

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
    std::vector<double> xbuf;  // one slot per thread, for shuffles
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
                EmuBlock eb{&bar, warps, std::vector<double>(nt)};
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
