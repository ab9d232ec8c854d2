#!/usr/bin/env bash
# Dataset read-rate bench (issue 20 item 5): writes N SpecForge-DFlash-style bf16 samples
# ([1, T, 5·5120], the 27B width) for both sides (B = A with bf16 rounding-noise differences,
# scripts/make_bench_dataset.py), then times, side by side in one run, `cat` of the same files
# and `hsdiff compare A B` (uncalibrated), each from a cold page cache: before each timed run
# the files are flushed and dropped from the cache with posix_fadvise(DONTNEED) (no root
# needed; `fincore` checks it when present). With --warm, both are timed again from a warm cache
# (meaningful only when the files fit in memory). Prints bytes, seconds, MB/s, the hsdiff/cat
# ratio and hsdiff's peak RSS (/usr/bin/time). The data is deleted at the end unless --keep.
# With --reuse, samples an earlier `--keep` run left in DIR (the same N and T) are timed again
# instead of written anew (writing is CPU work that must not run in someone's quiet window).
#
# usage: scripts/bench-dataset.sh [--n N] [--tokens T] [--dir DIR] [--hsdiff BIN] [--warm] [--keep] [--reuse]
#   defaults: N=100, T=2048, DIR=a fresh folder under $TMPDIR (or /tmp), BIN=target/release/hsdiff
set -euo pipefail
shopt -s inherit_errexit

n=100
tokens=2048
dir=""
bin=""
warm=0
keep=0
reuse=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n="$2"; shift 2 ;;
        --tokens) tokens="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --hsdiff) bin="$2"; shift 2 ;;
        --warm) warm=1; shift ;;
        --keep) keep=1; shift ;;
        --reuse) reuse=1; shift ;;
        *) echo "bench-dataset: unknown argument $1" >&2; exit 2 ;;
    esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${HSDIFF_BENCH_PYTHON:-${HSDIFF_TEST_VENV:+$HSDIFF_TEST_VENV/bin/python}}"
py="${py:-python3}"
bin="${bin:-$root/target/release/hsdiff}"
[[ -x "$bin" ]] || { echo "bench-dataset: no hsdiff binary at $bin (cargo build --release --locked, or --hsdiff BIN)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench-dataset: needs /usr/bin/time (GNU time) for the peak RSS" >&2; exit 2; }
hidden=5120
layers=5
ids="1,16,31,46,61"

if [[ -z "$dir" ]]; then
    dir="$(mktemp -d "${TMPDIR:-/tmp}/hsdiff-bench-dataset.XXXXXX")"
else
    mkdir -p "$dir"
fi
cleanup() { [[ $keep == 1 ]] || rm -rf "$dir/A" "$dir/B" "$dir/report.json"; [[ $keep == 1 ]] || rmdir "$dir" 2>/dev/null || true; }
trap cleanup EXIT

written() { # side → how many samples an earlier run left for this N
    find "$dir/$1/rows_0-$n" -name '*.ckpt' 2>/dev/null | wc -l
}
if [[ $reuse == 1 && $(written A) == "$n" && $(written B) == "$n" ]]; then
    echo "bench-dataset: reusing the $n samples per side in $dir"
else
    [[ $reuse == 1 ]] && { echo "bench-dataset: --reuse: $dir holds no $n samples per side from an earlier run" >&2; exit 2; }
    # Room for both sides (the bf16 hidden states dominate), with 2 GiB to spare.
    need=$(( 2 * n * tokens * layers * hidden * 2 + (2 << 30) ))
    avail=$(( $(df -Pk "$dir" | awk 'NR==2 {print $4}') * 1024 ))
    if (( need > avail )); then
        echo "bench-dataset: $n samples need $((need >> 30)) GiB in $dir, $((avail >> 30)) GiB free: use a smaller --n" >&2
        exit 2
    fi

    echo "bench-dataset: writing $n samples per side, [1, $tokens, $layers·$hidden] bf16, in $dir"
    t0=$(date +%s.%N)
    "$py" "$root/scripts/make_bench_dataset.py" "$dir" "$n" --tokens "$tokens" --hidden "$hidden" --layers "$layers"
    t1=$(date +%s.%N)
    echo "bench-dataset: written in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s"
fi
mapfile -t files < <(find "$dir/A" "$dir/B" -name '*.ckpt' | sort)
bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)

drop_cache() {
    sync
    "$py" - "${files[@]}" <<'EOF'
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
    if command -v fincore >/dev/null; then
        cached=$(fincore -b -n -o RES "${files[@]}" | awk '{s += $1} END {print s + 0}')
        echo "bench-dataset: page cache dropped ($cached bytes of $bytes still cached)"
    fi
}

timed() { # command… → "wall-seconds peak-RSS-KiB"
    local out
    out=$(mktemp)
    local rc=0
    /usr/bin/time -f "%e %M" -o "$out" "$@" >/dev/null 2>"$out.err" || rc=$?
    # hsdiff's exit code 1 only means something was flagged.
    if (( rc > 1 )); then echo "bench-dataset: $* failed (exit $rc):" >&2; cat "$out.err" >&2; exit 2; fi
    tail -1 "$out"
    rm -f "$out" "$out.err"
}

run_pair() { # label: cat, then hsdiff (the cache dropped between them for "cold")
    local c h
    c=$(timed cat "${files[@]}")
    if [[ $1 == cold ]]; then drop_cache >&2; fi
    h=$(timed "$bin" compare "$dir/A" "$dir/B" --layer-ids "$ids" --format json --out "$dir/report.json")
    echo "$1 ${c% *} $h"
}

report() { # label cat_s hsdiff_s rss_kib
    awk -v label="$1" -v c="$2" -v h="$3" -v rss="$4" -v b="$bytes" 'BEGIN {
        printf "%-5s  cat %7.2f s  %8.1f MB/s   hsdiff %7.2f s  %8.1f MB/s   hsdiff/cat %.2f   hsdiff peak RSS %.0f MiB\n",
            label, c, b / c / 1e6, h, b / h / 1e6, c / h, rss / 1024 }'
}

echo "bench-dataset: $((2 * n)) files, $bytes bytes; machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); load $(cut -d' ' -f1-3 /proc/loadavg)"
drop_cache
line=$(run_pair cold)
read -r label cat_s hs_s rss <<<"$line"
report cold "$cat_s" "$hs_s" "$rss"
"$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print('bench-dataset: hsdiff says:', r['summary'])" "$dir/report.json"
if [[ $warm == 1 ]]; then
    cat "${files[@]}" >/dev/null
    line=$(run_pair warm)
    read -r label cat_s hs_s rss <<<"$line"
    report warm "$cat_s" "$hs_s" "$rss"
fi
