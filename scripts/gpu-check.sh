#!/usr/bin/env bash
# gpu-check.sh [BIN.xz] [WHEELS_DIR] — the whole GPU check of hsdiff's CUDA build in one call
# on the lent GPU machine (docs/cuda.md): unpack the carried binary, point it at the machine's
# CUDA 13 libraries, run `hsdiff selftest --device cuda --bench` (kernels vs the f64 truth,
# golden parity, fused vs reference, bench), then flash-linear-attention on the same bench
# inputs (scripts/gpu-bench.py, fla-core from the carried wheels). Logs go to $OUT (or ./gpu-out).
# At most 280 s + 240 s (each step has its own timeout; run with the device tool's timeout_s 590).
# Exit status: 0 when all steps passed.
#
# gpu-check.sh --real-sizes [BIN.xz] — instead, issue 10's real-size targets at Qwen3.5-27B
# geometry with weights generated on the machine from config.json (`--random-weights 7`, nothing
# to carry): one bf16 forward of 4 layers at T = 2048, a live run (A, B, f64 truth, floor) of the
# same, and a live run of all 64 layers at T = 2048, each timed (wall, peak host RSS) under its
# own timeout (the 64-layer run only when the 4-layer one took at most 60 s). About 10 minutes
# at most; see docs/performance.md for the targets.
set -uo pipefail
real_sizes=0
if [ "${1:-}" = "--real-sizes" ]; then real_sizes=1; shift; fi
cd "$(dirname "$0")/.."
bin=${1:-.gpu/hsdiff.xz}
wheels=${2:-.gpu/wheels}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
work=${TMPDIR:-/tmp}/hsdiff-gpu-check
rm -rf "$work"; mkdir -p "$work"
log() { echo "[gpu-check $(date +%T)] $*" | tee -a "$out/summary.txt"; }
start=$(date +%s)

{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv
  nvidia-smi
  uname -a; cat /etc/os-release 2>/dev/null | head -2
} > "$out/env.txt" 2>&1
log "GPU: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1)"

# 1. Unpack the binary (xz, or Python's lzma when xz is missing).
exe="$work/hsdiff"
if [[ $bin == *.xz ]]; then
  xz -dc "$bin" > "$exe" 2>/dev/null ||
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$bin" "$exe"
else
  cp "$bin" "$exe"
fi
chmod +x "$exe"

# 2. The machine's CUDA 13 libraries: toolkit first, then the PyTorch wheels' nvidia/cu13/lib.
py=python3
for cand in python3 /usr/bin/python3 "$(command -v python 2>/dev/null)"; do
  [ -n "$cand" ] && "$cand" -c 'import torch' 2>/dev/null && { py=$cand; break; }
done
dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e $d/libcublas.so.13 || -e $d/libcudart.so.13 ]] && dirs+=("$d")
done
nv=$("$py" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)
[[ -n $nv && -d $nv ]] && dirs+=("$nv")
for sub in cublas cuda_runtime curand cuda_nvrtc; do   # older per-library wheel layout
  d=$("$py" -c "import nvidia.$sub, os; print(os.path.join(list(nvidia.$sub.__path__)[0], 'lib'))" 2>/dev/null || true)
  [[ -n $d && -d $d ]] && dirs+=("$d")
done
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
    [[ -e $d/libcuda.so.1 ]] && dirs+=("$d")
  done
fi
export LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd "$exe" > "$out/ldd.txt" 2>&1
grep -E 'libcu|libnvrtc|not found' "$out/ldd.txt" | tee -a "$out/summary.txt"
if grep -q 'not found' "$out/ldd.txt"; then
  log "missing libraries (see ldd.txt); searching:"
  timeout 60 find /usr /opt /lib /lib64 /root /home -xdev \( -name 'libcublas.so.13*' -o -name 'libcurand.so.10*' -o -name 'libcudart.so.13*' -o -name 'libcuda.so.1*' \) 2>/dev/null | head -20 | tee -a "$out/summary.txt"
fi

# 3r. Real sizes (--real-sizes): Qwen3.5-27B's text config, 4 layers and 64, weights generated.
if [ "$real_sizes" -eq 1 ]; then
  cfg4="$work/q27-4"; cfg64="$work/q27-64"
  mkdir -p "$cfg4" "$cfg64"
  q27='{"model_type": "qwen3_5_text", "hidden_size": 5120, "intermediate_size": 17408,
    "num_hidden_layers": LAYERS, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 48, "full_attention_interval": 4,
    "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": false, "vocab_size": 248320,
    "tie_word_embeddings": false, "rope_parameters": {"rope_type": "default",
    "rope_theta": 10000000, "partial_rotary_factor": 0.25}}'
  echo "${q27/LAYERS/4}" > "$cfg4/config.json"
  echo "${q27/LAYERS/64}" > "$cfg64/config.json"
  toks=$(seq -s, 1000 3047)   # T = 2048
  rc=0
  timed() {  # timed NAME TIMEOUT ARGS…: wall and peak RSS of one hsdiff call
    local name=$1 limit=$2; shift 2
    log "$name start"
    local t0; t0=$(date +%s%N)
    /usr/bin/time -v timeout "$limit" "$exe" "$@" > "$out/$name.log" 2> "$out/$name.err"
    local st=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    local wall; wall=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
    local rss; rss=$(grep 'Maximum resident' "$out/$name.err" | awk '{print $NF}')
    grep '^hsdiff' "$out/$name.err" | tail -6 | tee -a "$out/summary.txt"
    log "$name exit $st, wall ${wall} s, peak host RSS ${rss:-?} KB"
    last_wall=$((ms / 1000))
    # 0 and 1 (a divergence flagged) both mean the run completed; 2 is trouble, 124 the timeout.
    [ "$st" -le 1 ] || rc=1
  }
  timed fwd4-bf16 120 dump --model "$cfg4" --random-weights 7 --tokens "$toks" --dtype bf16 \
    --backend fused --device cuda --out "$work/fwd4.safetensors"
  timed live4 240 --model "$cfg4" --random-weights 7 --tokens "$toks" --dtype bf16 \
    --a fused --b reference --device cuda --format json --out "$out/live4.json"
  # 64 layers cannot meet their 60 s target when 4 layers already took over 60 s: skip them then.
  if [ "${last_wall:-999}" -gt 60 ]; then
    log "live64 skipped: live4 took ${last_wall:-?} s"
  else
  timed live64 240 --model "$cfg64" --random-weights 7 --tokens "$toks" --dtype bf16 \
    --a fused --b reference --device cuda --format json --out "$out/live64.json"
  fi
  log "real sizes done in $(( $(date +%s) - start )) s"
  exit "$rc"
fi

# 3. The self-test and hsdiff's half of the bench.
log "selftest start"
# The bench times both delta-rule kernels (tc = tensor cores, exact = f32 SIMT) at Hk/Hv 16/48
# and 16/64, T = 2048 .. 65536, and checks both against the f64 truth at T = 2048.
# BENCH_SEQ=2048,8192 (say) shortens it when the 280 s cap is hit.
seq_arg=(); [ -n "${BENCH_SEQ:-}" ] && seq_arg=(--bench-seq "$BENCH_SEQ")
timeout 280 "$exe" selftest --device cuda --bench "${seq_arg[@]}" --bench-dir "$work/bench" \
  > "$out/selftest.log" 2>&1
st=$?
tail -5 "$out/selftest.log" | tee -a "$out/summary.txt"
grep -E '^FAIL' "$out/selftest.log" | head -40 | tee -a "$out/summary.txt"
sed -n '/^== bench ==/,$p' "$out/selftest.log" | grep -E 'Hk/Hv|^ +16/|copy bandwidth|vs f64 truth' |
  tee -a "$out/summary.txt"
log "selftest exit $st ($(( $(date +%s) - start )) s so far)"
for m in "$work"/bench/*/meta.json; do [ -e "$m" ] && cp "$m" "$out/meta-$(basename "$(dirname "$m")").json"; done

# 4. flash-linear-attention on the same inputs.
fst=0
if [ -d "$work/bench" ] && ls "$wheels"/fla_core-*.whl > /dev/null 2>&1; then
  site="$work/fla-site"
  "$py" -m pip install -q --no-deps --no-index --target "$site" "$wheels"/*.whl > "$out/pip.log" 2>&1 ||
    { mkdir -p "$site"; for w in "$wheels"/*.whl; do "$py" -m zipfile -e "$w" "$site"; done; }
  log "fla bench start (python: $py)"
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" timeout 240 "$py" scripts/gpu-bench.py "$work/bench" \
    --out "$out/bench-fla.json" > "$out/bench-fla.log" 2>&1
  fst=$?
  tail -11 "$out/bench-fla.log" | tee -a "$out/summary.txt"
  log "fla bench exit $fst"
else
  log "fla bench skipped (no bench inputs or no fla_core wheel in $wheels)"
  fst=3
fi
log "done in $(( $(date +%s) - start )) s: selftest exit $st, fla bench exit $fst"
[ "$st" -eq 0 ] && [ "$fst" -eq 0 ]
