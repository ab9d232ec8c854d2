#!/usr/bin/env python3
"""Measure the rounding floors hsdiff itself produces and write ``data/honest_floors.json``, the
table behind `compare`'s uncalibrated rule (src/compare/verdict.rs, docs/reading-a-report.md#the-uncalibrated-rule).

For each geometry (real configurations with ``--random-weights``, few layers where a layer is
large, and the golden geometries made deep) the ``fused`` backend is dumped at f64 and at each
dtype on the same random token ids; the rel L2 of every captured hidden state against the f64
dump is the honest floor at that depth. Transformers' own golden captures (bf16 / f32 against
their strict-f64 capture) are measured too. Needs only an hsdiff binary (no torch):

    python3 data/measure_honest_floors.py --hsdiff target/debug/hsdiff --work "${TMPDIR:-/tmp}/floors"

Dumps already in --work are reused. On a loaded 2-core box (debug build) the whole set takes
about 15 minutes, most of it the 9B/27B/80B layers.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROPE = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}
QWEN3_5 = dict(model_type="qwen3_5_text", attention_bias=False, hidden_act="silu", linear_conv_kernel_dim=4,
               linear_key_head_dim=128, linear_value_head_dim=128, rms_norm_eps=1e-6, max_position_embeddings=4096,
               full_attention_interval=4, head_dim=256, rope_parameters=ROPE, vocab_size=4096)
# Real geometries (docs in ../shared/docs/gdn-spec.md; 9B: the Qwen3.5 config defaults). The
# vocabulary is cut to 4096: it only sizes the logits row, which is not measured.
GEOMETRIES = {
    "qwen3_5_0_8b": (dict(QWEN3_5, hidden_size=1024, num_attention_heads=8, num_key_value_heads=2,
                          intermediate_size=3584, linear_num_key_heads=16, linear_num_value_heads=16,
                          tie_word_embeddings=True), 4, 32),
    "qwen3_5_9b": (dict(QWEN3_5, hidden_size=4096, num_attention_heads=16, num_key_value_heads=4,
                        intermediate_size=12288, linear_num_key_heads=16, linear_num_value_heads=32,
                        tie_word_embeddings=False), 2, 32),
    "qwen3_5_27b": (dict(QWEN3_5, hidden_size=5120, num_attention_heads=24, num_key_value_heads=4,
                         intermediate_size=17408, linear_num_key_heads=16, linear_num_value_heads=48,
                         tie_word_embeddings=False), 2, 32),
    "qwen3_next_80b_a3b": (dict(model_type="qwen3_next", hidden_size=2048, num_attention_heads=16,
                                num_key_value_heads=2, head_dim=256, intermediate_size=5120,
                                linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                                linear_num_key_heads=16, linear_num_value_heads=32, full_attention_interval=4,
                                num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                                shared_expert_intermediate_size=512, norm_topk_prob=True, decoder_sparse_step=1,
                                mlp_only_layers=[], rope_theta=1e7, partial_rotary_factor=0.25, rms_norm_eps=1e-6,
                                tie_word_embeddings=False, max_position_embeddings=4096, vocab_size=4096,
                                hidden_act="silu", attention_bias=False), 1, 16),
}
# The golden geometries, made deep (the layer-type pattern repeated).
DEEP = {"qwen3_5_tiny": 64, "qwen3_next_moe_tiny": 48}
DTYPES = ("f32", "bf16", "f16")


def config_of(name: str) -> tuple[dict, int, int]:
    if name in GEOMETRIES:
        cfg, layers, tokens = GEOMETRIES[name]
        return dict(cfg, num_hidden_layers=layers), layers, tokens
    cfg = json.loads((ROOT / "golden" / name / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    layers = DEEP[name]
    text["num_hidden_layers"] = layers
    if "layer_types" in text:
        pattern = text["layer_types"]
        text["layer_types"] = [pattern[i % len(pattern)] for i in range(layers)]
    return cfg, layers, 64


def rows(hsdiff: str, a: Path, b: Path) -> list[tuple[str, int, float]]:
    out = subprocess.run([hsdiff, "compare", str(a), str(b), "--no-floor", "--format", "json"],
                         capture_output=True, text=True)
    # Exit 1 (something flagged) still writes the report: only the numbers are wanted here.
    if out.returncode not in (0, 1):
        raise SystemExit(f"hsdiff compare {a} {b}: {out.stderr.strip()}")
    report = json.loads(out.stdout)
    return [(t["name"], t["depth"], t["rel_l2"]) for t in report["tensors"]
            if t["kind"] in ("layer", "linear_attention", "full_attention", "final_norm")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hsdiff", default=str(ROOT / "target" / "debug" / "hsdiff"))
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, default=ROOT / "data" / "honest_floors.json")
    args = p.parse_args()
    measured = []
    for name in list(GEOMETRIES) + list(DEEP):
        cfg, layers, tokens = config_of(name)
        folder = args.work / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
        text = cfg.get("text_config", cfg)
        rng = random.Random(7)
        ids = ",".join(str(rng.randrange(text["vocab_size"])) for _ in range(tokens))
        dtypes = DTYPES if name in DEEP else ("f32", "bf16")
        for d in ("f64",) + dtypes:
            dump = args.work / f"{name}.{d}.safetensors"
            if not dump.exists():
                print(f"dump {name} {d}", file=sys.stderr, flush=True)
                subprocess.run([args.hsdiff, "dump", "--backend", "fused", "--model", str(folder),
                                "--random-weights", "7", "--tokens", ids, "--dtype", d, "--out", str(dump)],
                               check=True, capture_output=True)
        for d in dtypes:
            r = rows(args.hsdiff, args.work / f"{name}.f64.safetensors", args.work / f"{name}.{d}.safetensors")
            measured.append({"geometry": name, "source": "hsdiff fused, --random-weights 7",
                             "hidden_size": text["hidden_size"], "layers": layers, "tokens": tokens,
                             "experts": text.get("num_experts", 0), "dtype": d,
                             "tensor": [n for n, _, _ in r], "depth": [x for _, x, _ in r],
                             "rel_l2": [float(f"{v:.3e}") for _, _, v in r]})
    for model in ("qwen3_5_tiny", "qwen3_next_moe_tiny"):
        states = ROOT / "golden" / "states" / model
        for d in ("f32", "bf16"):
            r = rows(args.hsdiff, states / "fizzbuzz.f64.safetensors", states / f"fizzbuzz.{d}.safetensors")
            measured.append({"geometry": model, "source": "transformers' golden capture vs its strict-f64 capture",
                             "hidden_size": 64, "layers": max(x for _, x, _ in r), "tokens": 155,
                             "experts": 8 if "moe" in model else 0, "dtype": d,
                             "tensor": [n for n, _, _ in r], "depth": [x for _, x, _ in r],
                             "rel_l2": [float(f"{v:.3e}") for _, _, v in r]})
    table = {
        "about": "Rounding floors measured by data/measure_honest_floors.py: rel L2 of each captured "
                 "hidden state at `dtype` against the f64 run of the same implementation on the same tokens. "
                 "src/compare/verdict.rs derives the uncalibrated rule's expected floor from it: per dtype, the largest "
                 "rel_l2 / (depth + 1) over every entry.",
        "measured": measured,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    for d in DTYPES:
        c = max((v / (x + 1) for m in measured if m["dtype"] == d for x, v in zip(m["depth"], m["rel_l2"]) if x > 0),
                default=0)
        print(f"{d}: largest rel L2 / (depth + 1) = {c:.2e}")


if __name__ == "__main__":
    main()
