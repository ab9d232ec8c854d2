#!/usr/bin/env bash
# cuda-emu-test.sh [f32|f64|bf16|tc|acc] — runs the CUDA kernels of src/backends/fused/cuda/gdn.cu on
# the CPU (every CUDA thread an OS thread; src/backends/fused/cuda/emu/) against double
# references: indexing, masking, chunk/tile edges, strided q/k/v, full writes; `tc` = the
# tensor-core kernel (mma.sync emulated by its fragment layouts, cp.async as deferred copies);
# `acc` = the gate, the reference recurrence and the router ranking (gdn_gate_*,
# gdn_recurrent_*, router_rank_*; f32 and f64).
# Needs only g++ (C++20); no CUDA toolkit, no GPU. ~30 s on 2 cores without `tc`, ~2 min more
# with it (T = 2048 cases). Not a speed test.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TMPDIR:-/tmp}/hsdiff-cuda-emu-test
g++ -std=c++20 -O2 -pthread -I src/backends/fused/cuda/emu -x c++ \
  src/backends/fused/cuda/emu/emu_test.cpp -o "$bin"
"$bin" "$@"
