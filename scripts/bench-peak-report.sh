#!/usr/bin/env bash
# Issue 24's measurements side by side in one run (about 6–8 minutes on a 2-core Zen 3), for
# docs/performance.md:
#   1. `bench gemm`: gate_proj and down_proj at 27B shapes, T = 512, f32 / f64 / bf16, hsdiff's
#      products and candle's matmul, GFLOP/s and fraction of the measured FMA peak;
#   2. `bench forward` on the bench model (scripts/make_bench_model.py): fused f32, bf16, f64 and
#      reference bf16, with transformers' f32 and bf16 forwards (`gflops` / `peak_gflops` per case);
#   3. a live run (`--a fused --b reference --dtype bf16`) under /usr/bin/time: its wall time
#      against the sum of its passes' bench times (A = fused bf16, B = reference bf16, which is
#      also the bf16 floor, truth = fused f64).
# Everything lands in $OUT (JSON, Markdown tables, the live run's stderr with one line per pass).
# Run it on an otherwise idle machine: wall-clock numbers under load mean nothing.
#
# Environment: HSDIFF (default target/release/hsdiff), MODEL (default /tmp/hsdiff-bench-model),
# PYTHON (torch + transformers, default /work/pyvenv/bin/python), THREADS (default 2),
# OUT (default bench-peak-report, outside the repository is better), REPEATS (default 2).
set -euo pipefail

HSDIFF=${HSDIFF:-target/release/hsdiff}
MODEL=${MODEL:-/tmp/hsdiff-bench-model}
PYTHON=${PYTHON:-/work/pyvenv/bin/python}
THREADS=${THREADS:-2}
OUT=${OUT:-bench-peak-report}
REPEATS=${REPEATS:-2}

for need in "$HSDIFF" "$MODEL/config.json" "$PYTHON"; do
    if [ ! -e "$need" ]; then
        echo "bench-peak-report: $need is missing" >&2
        exit 2
    fi
done
mkdir -p "$OUT"
export RAYON_NUM_THREADS=$THREADS

stamp() { echo "== $1: $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log.txt"; }

stamp "start"
grep -m1 'model name' /proc/cpuinfo | tee -a "$OUT/log.txt"

stamp "bench gemm"
"$HSDIFF" bench gemm --shapes gate_proj,down_proj --dtypes f32,f64,bf16 --repeats "$REPEATS" \
    --markdown --json "$OUT/gemm.json" | tee "$OUT/gemm.md"

stamp "bench forward"
"$HSDIFF" bench forward --model "$MODEL" --torch "$PYTHON" --backends fused,reference \
    --dtypes f32,bf16,f64 --skip reference@f32,reference@f64,torch@f64 --threads "$THREADS" \
    --repeats "$REPEATS" --warmup 1 --markdown --json "$OUT/forward.json" | tee "$OUT/forward.md"

stamp "live run"
vocab=$("$PYTHON" -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('vocab_size') or c['text_config']['vocab_size'])" "$MODEL/config.json")
ids=$("$PYTHON" -c "import random,sys; r=random.Random(7); print(','.join(str(r.randrange(int(sys.argv[1]))) for _ in range(512)))" "$vocab")
# Exit 1 (a divergence flagged) is a result here, not a failure of the script.
set +e
/usr/bin/time -v "$HSDIFF" --model "$MODEL" --tokens "$ids" --a fused --b reference --dtype bf16 \
    >"$OUT/live-report.txt" 2>"$OUT/live-stderr.txt"
echo "live run exit code $?" | tee -a "$OUT/log.txt"
set -e
grep -E "layers, [0-9]+ tokens in|Elapsed \(wall|Maximum resident|User time|System time" \
    "$OUT/live-stderr.txt" | tee -a "$OUT/log.txt"
stamp "end"
