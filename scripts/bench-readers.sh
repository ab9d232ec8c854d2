#!/usr/bin/env bash
# Reader scaling bench (issue 33, quadratic readers): each input at 1/4, 1/2 and full size, timed
# through `hsdiff compare A B --no-floor` (no model run), printing the median of R runs' CPU
# seconds (user + sys: wall time on a loaded machine is noise), those per item, and the time per
# item over that at 1/4 size — with linear readers it stays within 1.5×:
#   sglang    SGLang dumper folders of 1 250, 2 500 and 5 000 passes (hard-linked fixture passes)
#   ckpt_gz   a SpecForge DFlash `.ckpt.gz` batch of 250, 500 and 1 000 rows (each row a sample)
#   st, pt    a safetensors / torch.save file of 25 000, 50 000 and 100 000 one-element tensors
#             (the .pt run raises --limit pickle-objects, ~40 pickled objects per tensor)
# Inputs are written by scripts/make_reader_bench.py with a Python that has torch.
#
# usage: scripts/bench-readers.sh [--hsdiff BIN] [--python PY] [--repeats R] [KIND ...]
#   defaults: BIN=target/release/hsdiff, PY=python3, R=3, KIND = sglang ckpt_gz st pt
set -euo pipefail
shopt -s inherit_errexit

bin=""
py="python3"
repeats=3
kinds=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --hsdiff) bin="$2"; shift 2 ;;
        --python) py="$2"; shift 2 ;;
        --repeats) repeats="$2"; shift 2 ;;
        -*) echo "bench-readers: unknown argument $1" >&2; exit 2 ;;
        *) kinds+=("$1"); shift ;;
    esac
done
[[ ${#kinds[@]} -gt 0 ]] || kinds=(sglang ckpt_gz st pt)
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${bin:-$root/target/release/hsdiff}"
[[ -x "$bin" ]] || { echo "bench-readers: no hsdiff binary at $bin (cargo build --release --locked, or --hsdiff BIN)" >&2; exit 2; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/hsdiff-bench-readers.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

# cpu_compare KIND N A B [FLAG ...]: one timed compare (the flags after its arguments); prints
# its CPU seconds.
cpu_compare() {
    local kind="$1" n="$2" a="$3" b="$4"
    shift 4
    local rc=0
    /usr/bin/time -f '%U %S' -o "$dir/cpu" \
        "$bin" compare "$a" "$b" --no-floor --format json "$@" >"$dir/report.json" 2>"$dir/stderr" || rc=$?
    if [[ $rc -gt 1 ]]; then
        echo "bench-readers: hsdiff exited $rc on $kind N=$n:" >&2
        tail -3 "$dir/stderr" >&2
        exit 2
    fi
    tail -1 "$dir/cpu" | awk '{ print $1 + $2 }'
}

# time_kind KIND N A B [FLAG ...]: R timed compares; prints the kind's line (median CPU seconds,
# per item, per item over the first size's) and keeps the first size's per-item time.
quarter_us=""
time_kind() {
    local kind="$1" n="$2"
    local runs=()
    for ((r = 0; r < repeats; r++)); do runs+=("$(cpu_compare "$@")"); done
    local line
    line="$(python3 - "$kind" "$n" "${quarter_us:-0}" "${runs[@]}" <<'PY'
import statistics, sys
kind, n, quarter = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
runs = [float(x) for x in sys.argv[4:]]
s = statistics.median(runs)
us = 1e6 * s / n
ratio = f"{us / quarter:.2f}x" if quarter > 0 else "1.00x"
spread = " ".join(f"{x:.2f}" for x in runs)
print(f"{kind:>8} {n:8d} {s:10.2f} {us:12.1f} {ratio:>8}   [{spread}]")
PY
)"
    echo "$line"
    [[ -n $quarter_us ]] || quarter_us="$(awk '{ print $4 }' <<<"$line")"
}

printf '%8s %8s %10s %12s %8s   %s\n' kind items cpu_s us/item vs_1/4 runs
for kind in "${kinds[@]}"; do
    quarter_us=""
    case "$kind" in
        sglang)
            for n in 1250 2500 5000; do
                rm -rf "$dir/sg"
                "$py" "$root/scripts/make_reader_bench.py" sglang "$n" "$dir/sg"
                time_kind sglang "$n" "$dir/sg/A" "$dir/sg/B"
            done
            ;;
        ckpt_gz)
            for n in 250 500 1000; do
                rm -rf "$dir/gz"
                "$py" "$root/scripts/make_reader_bench.py" ckpt_gz "$n" "$dir/gz"
                time_kind ckpt_gz "$n" "$dir/gz/a/batch.ckpt.gz" "$dir/gz/b/batch.ckpt.gz" \
                    --draft-config "$root/tests/fixtures/pipelines/qwen3_5_tiny/draft_config.json"
            done
            ;;
        st | pt)
            local_ext=safetensors
            [[ $kind == pt ]] && local_ext=pt
            for n in 25000 50000 100000; do
                rm -rf "$dir/t"
                "$py" "$root/scripts/make_reader_bench.py" "tensors_$kind" "$n" "$dir/t"
                local_flags=()
                [[ $kind == pt ]] && local_flags=(--limit "pickle-objects=$((100 * n))")
                time_kind "$kind" "$n" "$dir/t/a.$local_ext" "$dir/t/b.$local_ext" "${local_flags[@]}"
            done
            ;;
        *) echo "bench-readers: unknown kind $kind (sglang, ckpt_gz, st, pt)" >&2; exit 2 ;;
    esac
done
