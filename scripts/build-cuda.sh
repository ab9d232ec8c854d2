#!/usr/bin/env bash
# build-cuda.sh [OUT.xz] — release build of hsdiff with `--features cuda` for sm_90 (H100/H200)
# on a CPU-only machine, into its own target dir, then strip and xz-compress the binary.
# Needs scripts/setup-cuda-toolchain.sh first (same CUDA_PREFIX). docs/cuda.md explains.
#
#   OUT.xz             where the compressed binary goes (default .gpu/hsdiff.xz; carry .gpu)
#   CUDA_PREFIX        toolchain prefix (default ~/.cache/hsdiff/cuda-toolchain, as
#                      scripts/setup-cuda-toolchain.sh)
#   CARGO_TARGET_DIR   default target-cuda in the checkout (never the shared target/: a
#                      15-minute CUDA build would hold its lock)
#   CUDA_BUILD_CMD     cargo subcommand, default `build` (e.g. `clippy` for the lint pass)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu/hsdiff.xz}
CUDA_PREFIX=${CUDA_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/hsdiff/cuda-toolchain}
export CUDA_HOME="$CUDA_PREFIX/cuda"
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "no nvcc at $CUDA_HOME/bin: run scripts/setup-cuda-toolchain.sh" >&2; exit 2; }
export PATH="$CUDA_HOME/bin:$PATH"
export NVCC="$CUDA_HOME/bin/nvcc"
export CUDA_COMPUTE_CAP=90         # no nvidia-smi here; candle-kernels (cudaforge) makes it sm_90a
export CUDARC_CUDA_VERSION=13000   # cudarc's CUDA 13.0 bindings (also pinned by our cudarc dep)
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-cuda}
cmd=${CUDA_BUILD_CMD:-build}

start=$(date +%s)
if [ "$cmd" = clippy ]; then
  nice -n 19 cargo clippy --release --features cuda --all-targets -- -D warnings
  echo "clippy --features cuda: clean ($(( $(date +%s) - start )) s)"
  exit 0
fi
nice -n 19 cargo build --release --features cuda --bin hsdiff
echo "build: $(( $(date +%s) - start )) s"

bin="$CARGO_TARGET_DIR/release/hsdiff"
mkdir -p "$(dirname "$out")"
stripped="$CARGO_TARGET_DIR/release/hsdiff.stripped"
strip -o "$stripped" "$bin"
nice -n 19 xz -T2 -6 -c "$stripped" > "$out.tmp" && mv "$out.tmp" "$out"
echo "raw $(stat -c %s "$bin") B, stripped $(stat -c %s "$stripped") B, xz $(stat -c %s "$out") B -> $out"
echo "NEEDED: $(readelf -d "$stripped" | sed -nE 's/.*Shared library: \[(.*)\]/\1/p' | tr '\n' ' ')"
