#!/usr/bin/env bash
# setup-cuda-toolchain.sh — a CUDA 13.0 *build* toolchain for hsdiff's `cuda` feature on a
# machine with no GPU and no CUDA install (docs/cuda.md). Idempotent; no root needed.
#
#   CUDA_PREFIX  where everything goes (default ${XDG_CACHE_HOME:-~/.cache}/hsdiff/cuda-toolchain —
#                keep it OUT of the repo)
#                $CUDA_PREFIX/venv   python venv holding NVIDIA's 13.0.x wheels
#                $CUDA_PREFIX/cuda   symlink to the toolkit-shaped root inside the venv
#                                    (use it as CUDA_HOME; scripts/build-cuda.sh does)
#
# Steps: (1) pip-install the pinned nvcc/nvvm/crt/runtime/cccl wheels, (2) lib64 -> lib and
# libcudart.so symlinks, (3) link-time stub libraries for libcuda/libnvrtc/libcublas/
# libcublasLt/libcurand with the right SONAMEs, their symbol lists taken from the exact cudarc
# in Cargo.lock (candle links them through cudarc's `dynamic-linking`; the real libraries are
# the GPU machine's at run time). Run it BEFORE the first `--features cuda` build: cudarc's
# build script only records stub directories that exist when it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA_PREFIX=${CUDA_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/hsdiff/cuda-toolchain}
venv="$CUDA_PREFIX/venv"
home="$CUDA_PREFIX/cuda"

# 13.0.x exactly: driver 580 (CUDA 13.0) on the GPU machines JIT-compiles PTX up to ISA 9.0;
# PTX from nvcc 13.1+ would be refused (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
        nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)

if [ ! -x "$home/bin/nvcc" ]; then
  mkdir -p "$CUDA_PREFIX"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "${WHEELS[@]}"
  root=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
  [ -x "$root/bin/nvcc" ] || { echo "nvcc not found under $root after pip install" >&2; exit 1; }
  ln -sfn lib "$root/lib64"                           # nvcc.profile and cudaforge look in lib64
  ln -sfn libcudart.so.13 "$root/lib/libcudart.so"    # candle-kernels links -lcudart
  ln -sfn "$root" "$home"
fi

# Link-time stand-ins. Symbol names: every `fn name(` that cudarc's bindings declare.
lock_ver=$(awk '/^name = "cudarc"$/ {getline; gsub(/[^0-9.]/, ""); print; exit}' Cargo.lock)
[ -n "$lock_ver" ] || { echo "cudarc not in Cargo.lock" >&2; exit 1; }
cudarc_dir=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-"$lock_ver" 2>/dev/null | head -1 || true)
if [ -z "$cudarc_dir" ]; then
  cargo fetch --locked >/dev/null
  cudarc_dir=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-"$lock_ver" | head -1)
fi
stubs="$home/lib/stubs"
stamp="$stubs/.cudarc-$lock_ver"
if [ ! -e "$stamp" ]; then
  mkdir -p "$stubs"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  gen() { # cudarc module, SONAME, -l name
    grep -hE '^\s+fn (cu|nvrtc|cublas|curand)[A-Za-z0-9_]*\(' "$cudarc_dir/src/$1/sys/mod.rs" |
      sed -E 's/^\s+fn ([A-Za-z0-9_]+)\(.*/\1/' | sort -u | awk '
        /^cuGetError(String|Name)$/ { print "int " $1 "(int e, const char **s) { (void)e; *s = \"CUDA stub library: no driver\"; return 0; }"; next }
        /(String|Name)$/            { print "const char *" $1 "(void) { return \"CUDA stub library\"; }"; next }
                                    { print "int " $1 "(void) { return 100; }" }' > "$tmp/$3.c"
    local n; n=$(grep -c . "$tmp/$3.c")
    [ "$n" -gt 10 ] || { echo "only $n symbols for $1: cudarc layout changed?" >&2; exit 1; }
    cc -shared -fPIC -O1 -w -o "$stubs/$2" -Wl,-soname,"$2" "$tmp/$3.c"
    ln -sfn "$2" "$stubs/lib$3.so"
    echo "  stub $2: $n symbols"
  }
  gen driver   libcuda.so.1      cuda
  gen nvrtc    libnvrtc.so.13    nvrtc
  gen cublas   libcublas.so.13   cublas
  gen cublaslt libcublasLt.so.13 cublasLt
  gen curand   libcurand.so.10   curand
  rm -f "$stubs"/.cudarc-*; touch "$stamp"
fi
"$home/bin/nvcc" --version | tail -2
echo "CUDA build root ready: CUDA_HOME=$home (stubs for cudarc $lock_ver in $stubs)"
