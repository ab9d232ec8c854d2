#!/usr/bin/env bash
# Reader scaling bench (issue 33, quadratic readers): each input at 1/4 and at full size, timed
# through `hsdiff compare A B --no-floor` (no model run), printing its CPU seconds (user + sys: wall
# time on a loaded machine is noise) and those per item — with
# linear readers it stays within 1.5× from 1/4 to full size:
#   sglang    an SGLang dumper folder of 1 250 and 5 000 passes (scripts/bench-sglang-listing.sh)
#   ckpt_gz   a SpecForge DFlash `.ckpt.gz` batch of 250 and 1 000 rows (each row a sample)
#   st, pt    a safetensors / torch.save file of 25 000 and 100 000 one-element tensors
#             (the .pt run raises --limit pickle-objects, ~40 pickled objects per tensor)
# Inputs are written by scripts/make_reader_bench.py with a Python that has torch.
#
# usage: scripts/bench-readers.sh [--hsdiff BIN] [--python PY] [KIND ...]
#   defaults: BIN=target/release/hsdiff, PY=python3, KIND = sglang ckpt_gz st pt
set -euo pipefail
shopt -s inherit_errexit

bin=""
py="python3"
kinds=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --hsdiff) bin="$2"; shift 2 ;;
        --python) py="$2"; shift 2 ;;
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

# time_compare KIND N A B [FLAG ...]: one timed compare (the flags after its arguments), its
# line printed.
time_compare() {
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
    python3 -c "import sys; n=int(sys.argv[2]); s=float(sys.argv[3])+float(sys.argv[4]); print(f'{sys.argv[1]:>8} {n:8d} {s:10.2f} {1e6*s/n:12.1f}')" "$kind" "$n" $(tail -1 "$dir/cpu")
}

printf '%8s %8s %10s %12s\n' kind items cpu_s us/item
for kind in "${kinds[@]}"; do
    case "$kind" in
        sglang)
            "$root/scripts/bench-sglang-listing.sh" --hsdiff "$bin" 1250 5000 | tail -n +2 |
                while read -r n s _; do
                    python3 -c "import sys; n=int(sys.argv[1]); s=float(sys.argv[2]); print(f'  sglang {n:8d} {s:10.2f} {1e6*s/n:12.1f}')" "$n" "$s"
                done
            ;;
        ckpt_gz)
            for n in 250 1000; do
                rm -rf "$dir/gz"
                "$py" "$root/scripts/make_reader_bench.py" ckpt_gz "$n" "$dir/gz"
                time_compare ckpt_gz "$n" "$dir/gz/a/batch.ckpt.gz" "$dir/gz/b/batch.ckpt.gz" \
                    --draft-config "$root/tests/fixtures/pipelines/qwen3_5_tiny/draft_config.json"
            done
            ;;
        st | pt)
            for n in 25000 100000; do
                rm -rf "$dir/t"
                "$py" "$root/scripts/make_reader_bench.py" "tensors_$kind" "$n" "$dir/t"
                local_flags=()
                [[ $kind == pt ]] && local_flags=(--limit "pickle-objects=$((100 * n))")
                time_compare "$kind" "$n" "$dir/t/a.$([[ $kind == st ]] && echo safetensors || echo pt)" \
                    "$dir/t/b.$([[ $kind == st ]] && echo safetensors || echo pt)" "${local_flags[@]}"
            done
            ;;
        *) echo "bench-readers: unknown kind $kind (sglang, ckpt_gz, st, pt)" >&2; exit 2 ;;
    esac
done
