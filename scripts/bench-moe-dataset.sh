#!/usr/bin/env bash
# The calibrated MoE dataset bench: times `hsdiff compare A B --model golden/qwen3_next_moe_tiny`
# on the 20-sample honest MoE dataset of tests/fixtures/moe_dataset (captures without router ids,
# where routing is recovered from the states, and with them), REPEAT times per binary, and
# prints each binary's median wall seconds and user+sys CPU seconds. Compare a binary with the
# one it changes (e.g. main's) on the same machine in one run: the ratio is what counts.
#
# usage: scripts/bench-moe-dataset.sh [--repeat R] [--pair train,eval] BIN [BIN…]
#   defaults: R=5, pair train,eval
set -euo pipefail
shopt -s inherit_errexit

repeat=5
pair="train,eval"
bins=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --repeat) repeat="$2"; shift 2 ;;
        --pair) pair="$2"; shift 2 ;;
        -*) echo "bench-moe-dataset: unknown option $1" >&2; exit 2 ;;
        *) bins+=("$1"); shift ;;
    esac
done
(( ${#bins[@]} > 0 )) || { echo "usage: scripts/bench-moe-dataset.sh [--repeat R] [--pair A,B] BIN [BIN…]" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench-moe-dataset: needs /usr/bin/time (GNU time)" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
set_dir="$root/tests/fixtures/moe_dataset"
a="$set_dir/${pair%%,*}"
b="$set_dir/${pair##*,}"
model="$root/golden/qwen3_next_moe_tiny"
out="$(mktemp -d "${TMPDIR:-/tmp}/hsdiff-bench-moe.XXXXXX")"
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for bin in "${bins[@]}"; do
    [[ -x "$bin" ]] || { echo "bench-moe-dataset: no binary at $bin" >&2; exit 2; }
    : > "$out/wall"; : > "$out/cpu"
    for _ in $(seq "$repeat"); do
        # Exit 1 (a flagged sample) is a result, not a failure of the bench.
        /usr/bin/time -f '%e %U %S' -o "$out/t" "$bin" compare "$a" "$b" --model "$model" --format json \
            > "$out/report.json" 2> /dev/null || [[ $? == 1 ]]
        read -r wall user sys < "$out/t"
        echo "$wall" >> "$out/wall"
        awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}' >> "$out/cpu"
    done
    printf '%s\t%s runs\tmedian wall %s s\tmedian CPU %s s\n' "$bin" "$repeat" \
        "$(median < "$out/wall")" "$(median < "$out/cpu")"
done
