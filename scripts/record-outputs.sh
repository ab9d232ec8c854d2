#!/usr/bin/env bash
# Records what a wide set of hsdiff commands print (stdout, stderr, exit code), one folder per
# command, so that two binaries' outputs can be diffed: `scripts/record-outputs.sh BIN OUTDIR`
# with the old and the new binary, then `diff -r OLD NEW`. Used to keep every user-visible output
# byte-identical through a refactor (only deliberate changes may show up in the diff).
#
# Paths in the outputs are made relative by running from the checkout's root; timings and thread
# counts are not in these commands' outputs except where noted (bench is left out: it prints
# measured times).
set -uo pipefail
cd "$(dirname "$0")/.."
bin="$(realpath "${1:?usage: record-outputs.sh BIN OUTDIR}")"
out="$(realpath -m "${2:?usage: record-outputs.sh BIN OUTDIR}")"
mkdir -p "$out"
# One fixed scratch folder, so that paths printed from it are the same in both recordings.
work=/tmp/hsdiff-record-outputs
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# What changes from one run to the next: creation times and progress ETAs.
# Dataset pairs run concurrently, so the progress lines' order and the free memory quoted in the
# workers line vary between runs: the progress lines are dropped and the memory figure masked.
normalise() {
    sed -i -E 's/"created": "[^"]*"/"created": "…"/g; s/ETA [0-9]+ s/ETA … s/g' "$@"
    sed -i -E 's/20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z/…Z/g' "$@"
    # A live run's two sides record their creation times, a second apart or not.
    sed -i -E '/^[0-9]+ more difference\(s\) \(none of them can change the numbers\)/d' "$@"
    sed -i -E '/^hsdiff: [0-9]+\/[0-9]+ pairs compared/d; s/half the available memory is [0-9]+ MiB/half the available memory is … MiB/' "$@"
}

n=0
record() {
    n=$((n + 1))
    local dir
    dir="$out/$(printf '%03d' "$n")"
    mkdir -p "$dir"
    printf '%s\n' "$*" > "$dir/command"
    "$bin" "$@" > "$dir/stdout" 2> "$dir/stderr" < /dev/null
    echo $? > "$dir/rc"
    normalise "$dir/stdout" "$dir/stderr"
    # Files a command wrote with --out / --plot, by name.
    for f in "$work"/*; do
        [ -e "$f" ] && mv "$f" "$dir/out.$(basename "$f")" && normalise "$dir/out.$(basename "$f")"
    done
}

team=tests/fixtures/team
pipes=tests/fixtures/pipelines/qwen3_5_tiny
dense=golden/qwen3_5_tiny
moe=golden/qwen3_next_moe_tiny

# Live runs, every format.
for fmt in table json markdown; do
    record --a fused --b reference --prompt fizzbuzz --dtype bf16 --format "$fmt"
done
record --a chunked --b reference --prompt fizzbuzz --dtype f32
record --a fused --b reference --prompt fizzbuzz --dtype bf16 --ops
record --a fused --b reference --model "$moe" --prompt fizzbuzz --dtype bf16
record --a fused --b reference --model "$dense" --prompt fizzbuzz --dtype f32 --format json

# Two files, with and without --model, in each format.
for fmt in table json markdown; do
    record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --format "$fmt"
    record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --model "$dense" --format "$fmt"
done
record compare "$team/dense.bf16.ids.pt" "$team/dense.bf16_no_qk_l2norm.ids.pt" --model "$dense"
record compare "$team/moe.bf16.ids.pt" "$team/moe.bf16_no_qk_l2norm.ids.pt" --model "$moe"
record compare "$team/moe.bf16_router.ids.pt" "$team/moe.bf16_no_qk_l2norm_router.ids.pt" --model "$moe"
record compare "$team/moe.bf16.ids.pt" "$team/moe.f32.ids.pt" --model "$dense"
record compare tests/fixtures/compare/dump_bf16.safetensors tests/fixtures/compare/dump_f32.safetensors
record compare tests/fixtures/compare/dump_f32.safetensors tests/fixtures/compare/dump_perturbed.safetensors
record compare tests/fixtures/compare/hs_tuple.pt tests/fixtures/compare/hs_dict.pt
record compare tests/fixtures/field/nan.f32.pt tests/fixtures/field/honest.f32.pt
record compare tests/fixtures/field/logits_honest.pt tests/fixtures/field/logits_offset.pt

# Datasets and shards.
record compare "$pipes/specforge_dflash" "$pipes/eval" --model "$dense" --draft-config "$pipes/draft_config.json"
record compare "$pipes/speculators" "$pipes/eval" --model "$dense"
record compare "$pipes/sglang/dumper" "$pipes/eval" --model "$dense"
record compare "$pipes/specforge_dflash" "$pipes/eval" --draft-config "$pipes/draft_config.json" --format json
for i in 0 1; do
    record compare "$pipes/specforge_dflash" "$pipes/eval" --draft-config "$pipes/draft_config.json" \
        --shard "$i/2" --format json --out "$work/part$i.json"
done
cp "$out/$(printf '%03d' $((n - 1)))/out.part0.json" "$work/p0.json" 2>/dev/null
cp "$out/$(printf '%03d' "$n")/out.part1.json" "$work/p1.json" 2>/dev/null
p0="$work/p0.json" p1="$work/p1.json"
n=$((n + 1)); dir="$out/$(printf '%03d' "$n")"; mkdir -p "$dir"
echo "merge p0 p1" > "$dir/command"
"$bin" merge "$p0" "$p1" > "$dir/stdout" 2> "$dir/stderr" < /dev/null; echo $? > "$dir/rc"
normalise "$dir/stdout" "$dir/stderr"
rm -f "$p0" "$p1"

# Paths, check, env-free commands, errors.
record paths --prompt fizzbuzz --dtype bf16
record check --golden golden/states/qwen3_5_tiny/fibonacci.f64.safetensors
record compare tests/fixtures/compare/bad_legacy.pt tests/fixtures/compare/hs_dict.pt
record compare tests/fixtures/compare/bad_short_storage.pt tests/fixtures/compare/hs_dict.pt
record compare /nonexistent.pt tests/fixtures/compare/hs_dict.pt
record --a fused --b nonesuch --prompt fizzbuzz
record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --shard 3/2
record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --layer-ids x
# Findings, MoE datasets, served engines, FP8, plots (the fixtures of tests/cli/{findings,moe,
# vllm,pipelines_sglang_served,fp8}.rs).
fx=tests/fixtures
record compare "$fx/findings/tokens/a" "$fx/findings/tokens/b"
record compare "$fx/findings/tokens/a" "$fx/findings/tokens/b_bos"
record compare "$fx/findings/tokens/a" "$fx/findings/tokens/b_bos" --allow-token-mismatch --format json
record compare "$fx/findings/tokens/a" "$fx/findings/tokens/b_all_bos"
record compare "$fx/findings/tokens/a" "$fx/findings/tokens/b_other" --format markdown
record compare "$fx/findings/nan/a.pt" "$fx/findings/nan/b.pt" --model "$dense"
record compare "$fx/findings/plaus/a.bf16.pt" "$fx/findings/plaus/b.bf16.pt" --model "$moe"
record compare "$fx/findings/plaus/a.bf16.pt" "$fx/findings/plaus/b.bf16.pt" --model "$dense"
for which in honest minus plus; do
    record compare "$fx/findings/slip/$which/rows_0-5000/data_0.ckpt" "$fx/findings/tokens/b/s0.pt" \
        --layer-ids-a 1,2,4,5,6 --model "$dense"
done
record compare "$fx/findings/batch/left.pt" "$fx/findings/batch/alone" --model "$dense"
record compare "$fx/findings/batch/nomask.pt" "$fx/findings/batch/alone" --model "$dense"
record compare "$fx/findings/hooks/vision_blocks.pt" "$team/dense.f32.ids.pt"
record compare "$fx/moe_dataset/train" "$fx/moe_dataset/eval" --model "$moe"
record compare "$fx/moe_dataset/train_router" "$fx/moe_dataset/eval_router" --model "$moe" --format json
record compare "$fx/moe_dataset/train_router" "$fx/moe_dataset/eval_router" --model "$moe" --format markdown
record compare "$fx/moe_dataset/bug_dt_bias_router.pt" "$fx/moe_dataset/eval_router/sample_00.pt" --model "$moe"
record compare "$fx/sglang_served/dumper" "$fx/sglang_served/eval" --model "$dense"
record compare "$fx/sglang_served/dumper_state_lost" "$fx/sglang_served/eval" --model "$dense"
record compare "$fx/vllm/pairs.bf16.pt" "$fx/vllm/transformers.bf16.pt" --model "$dense"
record compare "$fx/vllm/aux" "$fx/vllm/transformers.bf16.pt" --model "$dense" --draft-config "$fx/vllm/draft.json"
record compare "$fx/vllm/aux_shifted" "$fx/vllm/transformers.bf16.pt" --model "$dense" --draft-config "$fx/vllm/draft.json"
record compare "$fx/vllm/repeated/req-0.safetensors" "$fx/vllm/transformers.bf16.pt" --layer-ids 2,4,5
record compare "$fx/field/overflow.f16.pt" "$fx/field/overflow.f32.pt"
record compare "$fx/field/logits_honest.pt" "$fx/field/logits_bug.pt" --format json
record compare "$pipes/specforge_dflash" "$pipes/eval" --model "$dense" --draft-config "$pipes/draft_config.json" --plot "$work/dataset.svg"
record compare "$team/dense.bf16.ids.pt" "$team/dense.bf16_no_qk_l2norm.ids.pt" --model "$dense" --plot "$work/pair.svg"
record --a fused --b reference --prompt fizzbuzz --dtype bf16 --plot "$work/live.svg"
record --a fused --b reference --model golden/qwen3_5_tiny_fp8 --prompt fizzbuzz --dtype fp8
record paths --prompt fizzbuzz --dtype bf16 --format json
record paths --prompt fizzbuzz --dtype f32 --format markdown
record check --golden golden/states/qwen3_5_tiny/fibonacci.f64.safetensors --format json
record dump --out "$work/dump.safetensors" --prompt fizzbuzz --ops
record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --layer-ids 99 --model "$dense"
record compare "$team/dense.bf16.ids.pt" "$team/dense.f32.ids.pt" --tokens 1,2,x
record compare "$pipes/specforge_dflash" "$pipes/eval" --shard auto/2
echo "recorded $n commands in $out"
