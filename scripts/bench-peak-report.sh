#!/usr/bin/env bash
# Issue 24's measurements side by side in one run, for docs/performance.md. On a 2-core Zen 3 it
# takes about 8 minutes; every step has its own time limit, so the whole fits a 15-minute window.
# Each step writes its table as soon as it is measured (nothing is lost when a later step is
# stopped), most important first:
#   1. gemm:     `bench gemm`, gate_proj and down_proj at 27B shapes, T = 512, f32 / f64 / bf16,
#                hsdiff's products and candle's matmul, GFLOP/s and fraction of the FMA peak;
#   2. fused:    `bench forward` on the bench model (scripts/make_bench_model.py), fused f32 and
#                f64: the whole forward's GFLOP/s against the peak (`gflops` / `peak_gflops`);
#   3. live:     a live run (`--a fused --b reference --dtype bf16`, 512 tokens) under
#                /usr/bin/time, with its passes' progress lines;
#   4. bf16:     `bench forward` fused bf16 and reference bf16 (the live run's A and B, B also its
#                bf16 floor);
#   5. torch:    transformers' bf16 and f32 forwards (`bench forward --torch`, no warm-up call:
#                one of them takes tens of seconds here);
#   6. summary.md: the fractions, bf16 hsdiff / transformers, and the live run's wall time
#                against the sum of its passes' bench times (A fused bf16 + B reference bf16 +
#                truth fused f64; the floor is B's run), issue 24's item 4 (≤ 1.1×).
# Everything lands in $OUT: per step JSON and Markdown, log.txt (times and load), the live run's
# report and stderr. Run it on an otherwise idle machine: wall-clock numbers under load mean
# nothing.
#
# Environment: HSDIFF (default target/release/hsdiff), MODEL (default
# ~/.cache/hsdiff/bench-model, scripts/make_bench_model.py's), PYTHON (torch + transformers,
# default target/venv-golden/bin/python, docs/golden.md), THREADS (default 2),
# OUT (default bench-peak-report, outside the repository is better), REPEATS (timed calls of the
# gemm step, default 2; the forwards take one timed call after one warm-up call), GEMM_COLUMNS (only
# for a quick check of the script: `bench gemm --columns`).
set -uo pipefail

HSDIFF=${HSDIFF:-target/release/hsdiff}
MODEL=${MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/hsdiff/bench-model}
PYTHON=${PYTHON:-target/venv-golden/bin/python}
THREADS=${THREADS:-2}
OUT=${OUT:-bench-peak-report}
REPEATS=${REPEATS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)

for need in "$HSDIFF" "$MODEL/config.json" "$PYTHON"; do
    if [ ! -e "$need" ]; then
        echo "bench-peak-report: $need is missing" >&2
        exit 2
    fi
done
mkdir -p "$OUT"
export RAYON_NUM_THREADS=$THREADS

stamp() { echo "== $1: $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log.txt"; }
# step NAME LIMIT_S CMD…: runs CMD under a time limit, its stdout into $OUT/NAME.md, and logs its
# exit code (a stopped or failed step is recorded, and the next one runs).
step() {
    local name=$1 limit=$2
    shift 2
    stamp "$name"
    timeout "$limit" "$@" >"$OUT/$name.md"
    echo "$name: exit code $? (limit ${limit} s)" | tee -a "$OUT/log.txt"
}
forward=("$HSDIFF" bench forward --model "$MODEL" --threads "$THREADS" --repeats 1 --markdown)

stamp "start"
grep -m1 'model name' /proc/cpuinfo | tee -a "$OUT/log.txt"
echo "hsdiff $("$HSDIFF" --version 2>&1), commit $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)" \
    | tee -a "$OUT/log.txt"

columns=()
if [ -n "${GEMM_COLUMNS:-}" ]; then columns=(--columns "$GEMM_COLUMNS"); fi
step gemm 150 "$HSDIFF" bench gemm --shapes gate_proj,down_proj --dtypes f32,f64,bf16 \
    --repeats "$REPEATS" "${columns[@]}" --markdown --json "$OUT/gemm.json"

step fused 200 "${forward[@]}" --backends fused --dtypes f32,f64 --warmup 1 \
    --json "$OUT/fused.json"

stamp "live"
vocab=$("$PYTHON" -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('vocab_size') or c['text_config']['vocab_size'])" "$MODEL/config.json")
ids=$("$PYTHON" -c "import random,sys; r=random.Random(7); print(','.join(str(r.randrange(int(sys.argv[1]))) for _ in range(512)))" "$vocab")
# Exit 1 (a divergence flagged) is a result here, not a failure of the script.
timeout 200 /usr/bin/time -v "$HSDIFF" --model "$MODEL" --tokens "$ids" --a fused --b reference \
    --dtype bf16 >"$OUT/live-report.txt" 2>"$OUT/live-stderr.txt"
echo "live: exit code $? (limit 200 s)" | tee -a "$OUT/log.txt"
grep -E "layers, [0-9]+ tokens in|Elapsed \(wall|Maximum resident|User time|System time" \
    "$OUT/live-stderr.txt" | tee -a "$OUT/log.txt"

step bf16 200 "${forward[@]}" --backends fused,reference --dtypes bf16 --warmup 1 \
    --json "$OUT/bf16.json"

step torch 240 "${forward[@]}" --backends fused --skip fused --torch "$PYTHON" --dtypes bf16,f32 \
    --warmup 0 --json "$OUT/torch.json"

stamp "summary"
"$PYTHON" "$HERE/bench_peak_summary.py" "$OUT" | tee "$OUT/summary.md"
stamp "end"
