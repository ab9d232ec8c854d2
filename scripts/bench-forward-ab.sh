#!/usr/bin/env bash
# Two builds of hsdiff timed against each other on the whole forward, interleaved (before, after,
# after, before, …) so that both see the same machine: on a shared VM single runs of one binary
# move by up to 28 points of the FMA peak (docs/performance.md), so only such side-by-side runs
# can show a change of a few percent. Then, with the `after` build, issue 24's item 4 and the
# `compare --model` half of it: a `compare --model` of two dumps (its calibration passes: the f64
# truth and the bf16 floor) and a live run, each under /usr/bin/time, against the `bench forward`
# times of the same passes; and last a `perf record` profile of the fused f64 and f32 forwards.
#
# Every step has its own time limit and writes its output as soon as it is done (nothing is lost
# when a later step is stopped). Run it on an otherwise idle machine.
#
# Environment: BEFORE, AFTER (the two hsdiff binaries; required), MODEL (default
# ~/.cache/hsdiff/bench-model, scripts/make_bench_model.py's), OUT (default bench-forward-ab), THREADS (default 2), DUMPS (a folder
# holding a.safetensors and b.safetensors of the model on TOKENS, for the compare step; skipped
# when absent), TOKENS (a file of comma-separated ids, for the live run and the dumps; skipped
# when absent), STEPS (default "ab compare live perf").
set -uo pipefail

: "${BEFORE:?BEFORE=path/to/hsdiff}" "${AFTER:?AFTER=path/to/hsdiff}"
MODEL=${MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/hsdiff/bench-model}
OUT=${OUT:-bench-forward-ab}
THREADS=${THREADS:-2}
DUMPS=${DUMPS:-}
TOKENS=${TOKENS:-}
STEPS=${STEPS:-ab compare live perf}
mkdir -p "$OUT/work"
export RAYON_NUM_THREADS=$THREADS
LOG=$OUT/log.txt

stamp() { echo "== $1: $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"; }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }

# forward LABEL BIN DTYPE BACKEND: one `bench forward` case (one warm-up call, one timed call).
forward() {
    local label=$1 bin=$2 dtype=$3 backend=$4
    stamp "forward $label $backend $dtype"
    timeout 240 "$bin" bench forward --model "$MODEL" --backends "$backend" --dtypes "$dtype" \
        --threads "$THREADS" --repeats 1 --warmup 1 --work-dir "$OUT/work" --keep \
        --json "$OUT/forward-$label-$backend-$dtype-$(date +%s).json" >>"$OUT/forward.md" 2>>"$LOG"
    echo "exit code $?" | tee -a "$LOG"
}

stamp start
grep -m1 'model name' /proc/cpuinfo | tee -a "$LOG"

if has_step ab; then
    forward before "$BEFORE" f64 fused
    forward after "$AFTER" f64 fused
    forward after "$AFTER" f32 fused
    forward before "$BEFORE" f32 fused
    forward after "$AFTER" f64 fused
    forward before "$BEFORE" f64 fused
fi

if has_step compare && [ -n "$DUMPS" ] && [ -e "$DUMPS/a.safetensors" ]; then
    stamp "compare --model"
    timeout 240 /usr/bin/time -v "$AFTER" compare "$DUMPS/a.safetensors" "$DUMPS/b.safetensors" \
        --model "$MODEL" >"$OUT/compare-report.txt" 2>"$OUT/compare-stderr.txt"
    echo "compare: exit code $?" | tee -a "$LOG"
    forward after "$AFTER" bf16 reference
fi

if has_step live && [ -n "$TOKENS" ] && [ -e "$TOKENS" ]; then
    stamp live
    timeout 240 /usr/bin/time -v "$AFTER" --model "$MODEL" --tokens "$(cat "$TOKENS")" \
        --a fused --b reference --dtype bf16 >"$OUT/live-report.txt" 2>"$OUT/live-stderr.txt"
    echo "live: exit code $?" | tee -a "$LOG"
    forward after "$AFTER" bf16 fused
fi

if has_step perf; then
    ids=$(ls "$OUT"/work/hsdiff-bench-*/forward.ids.safetensors 2>/dev/null | head -1)
    for dtype in f64 f32; do
        if [ -z "$ids" ]; then break; fi
        stamp "perf $dtype"
        timeout 150 perf record -e cpu-clock -F 499 -o "$OUT/perf-$dtype.data" -- \
            "$AFTER" bench case --kind forward --backend fused --model "$MODEL" --inputs "$ids" \
            --out "$OUT/work/perf-out.safetensors" --dtype "$dtype" --repeats 1 --warmup 1 \
            >/dev/null 2>>"$LOG"
        echo "perf $dtype: exit code $?" | tee -a "$LOG"
    done
fi
stamp end
