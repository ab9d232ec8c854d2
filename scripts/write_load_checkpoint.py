#!/usr/bin/env python3
"""Write a bf16 safetensors checkpoint of a Qwen3.5 text config, fast, for load timing only.

    python3 scripts/write_load_checkpoint.py CONFIG_DIR

writes CONFIG_DIR/model.safetensors with every tensor a dense qwen3_5_text config.json implies
(hsdiff's names: `model.*`, untied `lm_head.weight`). Needs only numpy. The values are sane but
not the golden recipe: each matrix is one 16 Mi-element N(0, 1) block, tiled and scaled by
1/sqrt(fan_in); A_log = log U(0.05, 2), dt_bias ~ U(-3, 0.5), conv ~ N(0, 0.25), norms
~ U(-0.5, 0.5) (as the recipe's ranges). scripts/gpu-check.sh --real-sizes uses it to time
hsdiff's checkpoint load from the page cache (`--random-weights` generates weights instead of
reading them, so it cannot measure that); hidden states of this model mean nothing.
"""

import json
import sys
from pathlib import Path

import numpy as np

BLOCK = 1 << 24


def bf16_bytes(x: np.ndarray) -> bytes:
    """Round float32 to bfloat16 (nearest even) and return the little-endian bytes."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def tensors(cfg: dict) -> dict:
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    out = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, ck = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    conv = 2 * hk * dk + hv * dv
    hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    inter = cfg["intermediate_size"]
    every = cfg["full_attention_interval"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = [h]
        out[p + "post_attention_layernorm.weight"] = [h]
        if (i + 1) % every:
            a = p + "linear_attn."
            out.update({a + "in_proj_qkv.weight": [conv, h], a + "in_proj_z.weight": [hv * dv, h],
                        a + "in_proj_b.weight": [hv, h], a + "in_proj_a.weight": [hv, h],
                        a + "conv1d.weight": [conv, 1, ck], a + "A_log": [hv], a + "dt_bias": [hv],
                        a + "norm.weight": [dv], a + "out_proj.weight": [h, hv * dv]})
        else:
            s = p + "self_attn."
            out.update({s + "q_proj.weight": [2 * hq * d, h], s + "k_proj.weight": [hkv * d, h],
                        s + "v_proj.weight": [hkv * d, h], s + "o_proj.weight": [h, hq * d],
                        s + "q_norm.weight": [d], s + "k_norm.weight": [d]})
        m = p + "mlp."
        out.update({m + "gate_proj.weight": [inter, h], m + "up_proj.weight": [inter, h],
                    m + "down_proj.weight": [h, inter]})
    return out


def main() -> int:
    folder = Path(sys.argv[1])
    cfg = json.loads((folder / "config.json").read_text())
    rng = np.random.default_rng(7)
    block = rng.standard_normal(BLOCK, dtype=np.float32)
    names = sorted(tensors(cfg).items())
    header, offset = {}, 0
    for name, shape in names:
        n = int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for name, shape in names:
            n = int(np.prod(shape))
            if name.endswith("A_log"):
                data = bf16_bytes(np.log(rng.uniform(0.05, 2.0, n)))
            elif name.endswith("dt_bias"):
                data = bf16_bytes(rng.uniform(-3.0, 0.5, n))
            elif name.endswith("conv1d.weight"):
                data = bf16_bytes(block[:n] * 0.5) if n <= BLOCK else None
            elif len(shape) == 1:
                data = bf16_bytes(rng.uniform(-0.5, 0.5, n))
            else:
                data = None
            if data is None:  # a matrix: the block, scaled, tiled
                scale = 0.5 if name.endswith("conv1d.weight") else shape[-1] ** -0.5
                tile = bf16_bytes(block * scale)
                whole, rest = divmod(2 * n, len(tile))
                for _ in range(whole):
                    f.write(tile)
                f.write(tile[:rest])
            else:
                f.write(data)
    print(f"{folder / 'model.safetensors'}: {len(names)} tensors, {offset / 1e9:.2f} GB of weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
