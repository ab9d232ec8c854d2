#!/usr/bin/env bash
# SGLang dumper folder read-rate bench (issue 33, quadratic readers): a dumper folder holds one
# file per tensor and forward pass, and every pass is one sample. This writes two folders (A and
# B) of N passes each — hard links to the 8 files of each of the 3 passes of
# tests/fixtures/pipelines/qwen3_5_tiny/sglang/dumper, renamed to steps 0..N-1 (no new bytes, so
# the time is the reader's, not the disk's) — and times `hsdiff compare A B --no-floor`
# (uncalibrated: no model run), once per N given. Prints N, seconds and milliseconds per pass;
# with a reader that lists the folder once, the time per pass stays flat as N grows.
#
# usage: scripts/bench-sglang-listing.sh [--hsdiff BIN] [N ...]
#   defaults: BIN=target/release/hsdiff, N = 1250 5000
set -euo pipefail
shopt -s inherit_errexit

bin=""
counts=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --hsdiff) bin="$2"; shift 2 ;;
        -*) echo "bench-sglang-listing: unknown argument $1" >&2; exit 2 ;;
        *) counts+=("$1"); shift ;;
    esac
done
[[ ${#counts[@]} -gt 0 ]] || counts=(1250 5000)
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${bin:-$root/target/release/hsdiff}"
[[ -x "$bin" ]] || { echo "bench-sglang-listing: no hsdiff binary at $bin (cargo build --release --locked, or --hsdiff BIN)" >&2; exit 2; }
src="$root/tests/fixtures/pipelines/qwen3_5_tiny/sglang/dumper/dump_20261201_120000_000000"
[[ -d "$src" ]] || { echo "bench-sglang-listing: no fixture folder $src" >&2; exit 2; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/hsdiff-bench-sglang.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

printf '%8s %10s %12s\n' passes seconds ms/pass
for n in "${counts[@]}"; do
    rm -rf "$dir/A" "$dir/B"
    # Hard links under the names the dumper gives pass s (its step and a running dump_index).
    python3 - "$src" "$dir" "$n" <<'EOF'
import os, re, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.listdir(src))
by_step = {}
for f in files:
    by_step.setdefault(int(re.match(r"step=(\d+)___", f).group(1)), []).append(f)
steps = sorted(by_step)
for side in ("A", "B"):
    d = os.path.join(out, side, "dump_20261201_120000_000000")
    os.makedirs(d)
    index = 0
    for s in range(n):
        for f in by_step[steps[s % len(steps)]]:
            index += 1
            name = re.sub(r"^step=\d+___", f"step={s}___", f)
            name = re.sub(r"___dump_index=\d+___", f"___dump_index={index}___", name)
            os.link(os.path.join(src, f), os.path.join(d, name))
EOF
    start=$(date +%s.%N)
    rc=0
    "$bin" compare "$dir/A" "$dir/B" --no-floor --format json >"$dir/report.json" 2>"$dir/stderr" || rc=$?
    end=$(date +%s.%N)
    if [[ $rc -ne 0 ]]; then
        echo "bench-sglang-listing: hsdiff exited $rc at N=$n:" >&2
        tail -3 "$dir/stderr" >&2
        exit 2
    fi
    python3 -c "import sys; n=int(sys.argv[1]); s=float(sys.argv[3])-float(sys.argv[2]); print(f'{n:8d} {s:10.2f} {1000*s/n:12.3f}')" "$n" "$start" "$end"
done
