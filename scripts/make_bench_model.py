#!/usr/bin/env python3
"""Write the whole-forward benchmark model of ``hsdiff bench forward`` (docs/performance.md).

A text-only Qwen3.5 checkpoint (``Qwen3_5ForCausalLM``, ``model_type: qwen3_5_text``, keys
``model.layers.*``) with Qwen3.5-27B's widths but only 4 decoder layers and a small vocabulary:

    hidden 5120, intermediate 17408, 24 query heads / 4 kv heads, head_dim 256 (gated attention
    output), linear attention Hk 16 / Hv 48 / dk = dv = 128, conv kernel 4, layers
    [linear, linear, linear, full] (full_attention_interval 4), RoPE θ 1e7 on 25 % of head_dim
    (mrope_section [11, 11, 10], interleaved), untied lm_head, vocab 4096 (27B: 248320 — the
    embedding lookup costs nothing and the lm_head is one 5120 × vocab matmul, so a small vocab
    keeps the benchmark about the decoder layers).

Weights are random, from golden/make.py's recipe (``recipe_for``: N(0, 1/fan_in) matrices,
A_log ~ log U(0.05, 2), dt_bias ~ U(-3, 0.5), conv N(0, 0.25), norms U(±0.5) / U(0.5, 1.5)),
seeded, stored in bfloat16 in one model.safetensors (about 3.1 GB). The model is built on the
meta device and each tensor is sampled and written on its own, so memory stays near the size
of the largest tensor.

    python scripts/make_bench_model.py --out "${XDG_CACHE_HOME:-$HOME/.cache}/hsdiff/bench-model"

with the Python of golden/requirements.txt.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def load_golden_generator():
    """golden/make.py as a module: the same environment checks and weight recipe as the golden files."""
    path = Path(__file__).resolve().parent.parent / "golden" / "make.py"
    spec = importlib.util.spec_from_file_location("make_golden", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_golden = load_golden_generator()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

SEED = 20250101


def bench_config(vocab: int, layers: int) -> Qwen3_5TextConfig:
    return Qwen3_5TextConfig(
        vocab_size=vocab,
        hidden_size=5120,
        intermediate_size=17408,
        num_hidden_layers=layers,
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=48,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        full_attention_interval=4,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        max_position_embeddings=262144,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (outside the repository, e.g. ~/.cache/hsdiff/bench-model)")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()

    cfg = bench_config(args.vocab, args.layers)
    cfg.dtype = torch.bfloat16
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(cfg)
    modules = dict(model.named_modules())
    gen = torch.Generator().manual_seed(args.seed)
    tensors: dict[str, torch.Tensor] = {}
    total = 0
    for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        rule = make_golden.recipe_for(name, param, modules[name.rsplit(".", 1)[0]], cfg.hidden_size)
        if rule is None:
            make_golden.die(f"weight recipe does not cover {name} {tuple(param.shape)}")
        _desc, sample = rule
        tensors[name] = sample(gen).to(torch.bfloat16).contiguous()
        total += param.numel()
        print(f"  {name:60s} {tuple(param.shape)}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(args.out)
    cj = json.loads((args.out / "config.json").read_text())
    cj["architectures"] = ["Qwen3_5ForCausalLM"]
    (args.out / "config.json").write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    print(f"make_bench_model: wrote {total / 1e9:.2f} B parameters (bf16) to {args.out}; "
          f"layer types {cfg.layer_types}", file=sys.stderr)


if __name__ == "__main__":
    main()
