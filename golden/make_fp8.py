#!/usr/bin/env python3
"""Make hsdiff's FP8 golden files from the golden tiny Qwen3.5 model, with torch on the CPU.

What it writes (docs/golden.md, "FP8"):

    golden/qwen3_5_tiny_fp8/        golden/qwen3_5_tiny quantised the way the official Qwen FP8
                                    checkpoints are: every Linear of the decoder layers in
                                    F8_E4M3 with BF16 `weight_scale_inv` block scales, everything
                                    else (embeddings, lm_head, norms, conv1d, A_log, dt_bias,
                                    in_proj_a / in_proj_b, the vision tower) kept in BF16, and a
                                    `quantization_config` in config.json. The tiny model is 64
                                    wide, narrower than one 128 block, so the block is [48, 40]:
                                    not square (a transposed scale grid shows) and dividing none
                                    of the widths (64, 96, 128, 160, 256), so every weight has
                                    partial edge blocks along both sides and several column
                                    blocks.
    golden/states/qwen3_5_tiny_fp8/fizzbuzz.f64.safetensors
                                    transformers' strict-float64 run (golden/make.py's StrictF64)
                                    of the dequantised weights, W = fp8 · scale in float64
                                    (exact), on the first 40 tokens of the fizzbuzz prompt.
    tests/fixtures/fp8/served.safetensors
                                    an independent torch implementation of the W8A8 arithmetic
                                    vLLM / SGLang serve block-FP8 checkpoints with (see
                                    `served_linear`), on fresh random bf16 inputs for four of the
                                    checkpoint's quantised Linears, with fp32 and UE8M0
                                    activation scales; and torch's own decoding of all 256 codes
                                    of float8_e4m3fn and float8_e5m2.

Deterministic (seeded, one thread). Run with the pinned venv (golden/requirements.txt):
`python golden/make_fp8.py`, after golden/make.py (which removes these files).
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path


def load_golden_generator():
    """golden/make.py as a module: its helpers (strict f64, the capture hooks, digests)."""
    spec = importlib.util.spec_from_file_location("make_golden", Path(__file__).resolve().parent / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mg = load_golden_generator()

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

REPO = mg.REPO
SOURCE = REPO / "golden" / "qwen3_5_tiny"
OUT = REPO / "golden" / "qwen3_5_tiny_fp8"
STATES = REPO / "golden" / "states" / "qwen3_5_tiny_fp8"
SERVED = REPO / "tests" / "fixtures" / "fp8" / "served.safetensors"
BLOCK = (48, 40)
TOKENS = 40
FP8_MAX = 448.0
# Decoder-layer Linears that the official Qwen3.5 FP8 checkpoints quantise.
QUANTISED = ("in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj",
             "gate_proj", "up_proj", "down_proj")
NOT_CONVERTED = ["lm_head", "model.visual", "model.language_model.embed_tokens",
                 "linear_attn.in_proj_a", "linear_attn.in_proj_b"]
SERVED_LINEARS = ("model.language_model.layers.0.linear_attn.in_proj_qkv",
                  "model.language_model.layers.0.linear_attn.out_proj",
                  "model.language_model.layers.3.self_attn.q_proj",
                  "model.language_model.layers.1.mlp.down_proj")


def is_quantised(name: str) -> bool:
    parts = name.split(".")
    return (name.startswith("model.language_model.layers.") and parts[-1] == "weight"
            and parts[-2] in QUANTISED)


def expand(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Block scales [ceil(rows/b0), ceil(cols/b1)] spread over the [rows, cols] weight."""
    b0, b1 = BLOCK
    return scales.repeat_interleave(b0, 0).repeat_interleave(b1, 1)[:rows, :cols]


def quantise(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A bf16 weight as F8_E4M3 codes and BF16 block scales: per block amax / 448, rounded to
    bf16, then the weight divided by its (rounded) scale, clamped to ±448 and rounded to e4m3."""
    rows, cols = w.shape
    b0, b1 = BLOCK
    gr, gc = math.ceil(rows / b0), math.ceil(cols / b1)
    padded = torch.zeros(gr * b0, gc * b1, dtype=torch.float32)
    padded[:rows, :cols] = w.float().abs()
    amax = padded.reshape(gr, b0, gc, b1).amax(dim=(1, 3))
    scales = (amax / FP8_MAX).to(torch.bfloat16)
    scales = torch.where(scales == 0, torch.ones_like(scales), scales)
    q = (w.float() / expand(scales.float(), rows, cols)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scales


def dequantise(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """W = fp8 · scale in float64: exact (4 × 8 significant bits)."""
    rows, cols = q.shape
    return q.double() * expand(scales.double(), rows, cols)


# ----------------------------------------------------------------------------------------------
# The served W8A8 arithmetic (vLLM / SGLang `apply_w8a8_block_fp8_linear` with dynamic per-token
# group activation quantisation), written here from the recipe, independently of hsdiff's Rust.
# ----------------------------------------------------------------------------------------------

def activation_quant(x: torch.Tensor, group: int, ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, K] float32 → (e4m3 values as float32 [T, K], scales [T, ceil(K/group)] float32)."""
    T, K = x.shape
    qs, ss = [], []
    for g in range(0, K, group):
        blk = x[:, g:g + group]
        s = torch.clamp(blk.abs().amax(dim=1, keepdim=True), min=1e-10) / FP8_MAX
        if ue8m0:
            s = torch.clamp(s, min=1e-10)  # vLLM floors the scale itself before rounding it up
            mant, exp = torch.frexp(s)  # s = mant · 2^exp, mant in [0.5, 1)
            s = torch.where(mant == 0.5, s, torch.ldexp(torch.ones_like(s), exp))
        qs.append((blk / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float())
        ss.append(s)
    return torch.cat(qs, dim=1), torch.cat(ss, dim=1)


def served_linear(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, ue8m0: bool) -> torch.Tensor:
    """y = x Wᵀ served: per column block, the exact dot of the e4m3 values rounded to float32, times
    the activation scale, times the weight scale, added to a float32 accumulator; bf16 output."""
    b0, b1 = BLOCK
    T, K = x.shape
    N = q.shape[0]
    qa, sa = activation_quant(x.float(), b1, ue8m0)
    w = q.float()
    sw = scales.float().repeat_interleave(b0, 0)[:N]  # [N, column blocks]
    acc = torch.zeros(T, N, dtype=torch.float32)
    for kb in range(math.ceil(K / b1)):
        cols = slice(kb * b1, min((kb + 1) * b1, K))
        dot = (qa[:, cols].double() @ w[:, cols].double().T).float()
        acc = acc + (dot * sa[:, kb:kb + 1]) * sw[None, :, kb]
    return acc.to(torch.bfloat16)


def served_inputs(K: int, gen: torch.Generator) -> torch.Tensor:
    """Fresh random bf16 activations [7, K]: typical rows, one all-zero row (the 1e-10 floor), one
    row with an outlier 300× its neighbours, one tiny row (e4m3 subnormals), one huge row, one so
    small that the UE8M0 scale's floor applies."""
    x = torch.randn(7, K, generator=gen, dtype=torch.float64)
    x[2] = 0.0
    x[3, K // 3] *= 300.0
    x[4] *= 1e-6
    x[6] *= 1e-9  # below 448e-10: the UE8M0 scale's own 1e-10 floor
    x[5] *= 1e4
    return x.to(torch.bfloat16)


def main() -> None:
    mg.preflight_versions(False)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    resolved = mg.resolve_fast_paths()
    counter = mg.CallCounter()
    counter.install()

    with safe_open(str(SOURCE / "model.safetensors"), "pt") as f:
        source = OrderedDict((k, f.get_tensor(k)) for k in sorted(f.keys()))
    quantised: OrderedDict[str, torch.Tensor] = OrderedDict()
    dequantised: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name, t in source.items():
        if is_quantised(name):
            q, s = quantise(t)
            quantised[name] = q
            quantised[name[: -len("weight")] + "weight_scale_inv"] = s
            dequantised[name] = dequantise(q, s)
        else:
            quantised[name] = t
            dequantised[name] = t.double()
    if not any(is_quantised(n) for n in source):
        mg.die("no Linear weight of the source checkpoint matched the quantised names")

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    save_file(dict(quantised), str(OUT / "model.safetensors"), metadata={"format": "pt"})
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(SOURCE / f, OUT / f)
    config = json.loads((SOURCE / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(BLOCK),
        "modules_to_not_convert": NOT_CONVERTED,
    }
    (OUT / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    # --- the strict-f64 transformers run of the dequantised weights ----------------------------
    text = (REPO / "prompts" / "fizzbuzz.txt").read_bytes().decode("utf-8")
    ids_list = mg.Tokenizer.from_file(str(OUT / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    ids = torch.tensor([ids_list[:TOKENS]], dtype=torch.int64)
    cls = mg.MODEL_SPECS["qwen3_5_tiny"]["cls"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_file(dict(dequantised), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(SOURCE / "config.json", tmp / "config.json")
        model, dtype = mg.load_for_mode(tmp, cls, "f64")
        caps, info = mg.run_mode(model, dtype, "f64", ids, counter)
        del model
    impl = {k.split(".", 1)[1]: {"implementation": v, "calls": info["calls"].get(k.split(".", 1)[1], 0)}
            for k, v in resolved.items() if k.startswith("modeling_qwen3_5.")}
    if impl["torch_chunk_gated_delta_rule"]["calls"] == 0 or impl["causal_conv1d_fn"]["calls"] == 0:
        mg.die("the gated delta rule / conv fallbacks were not called; cannot record what ran")
    meta = {
        "format": "hsdiff.dump/v1",
        "source": "transformers",
        "transformers": mg.transformers.__version__,
        "torch": torch.__version__,
        "mode": "f64",
        "dtype": "float64",
        "model": "qwen3_5_tiny_fp8",
        "weights_digest": mg.weights_digest(OUT),
        "config_sha256": mg.sha256_file(OUT / "config.json"),
        "tokenizer_sha256": mg.sha256_file(OUT / "tokenizer.json"),
        "prompt": "fizzbuzz",
        "attn_implementation": "eager",
        "linear_attention_impl": impl,
        "tokens": int(ids.shape[1]),
        "weights": "dequantised in float64 from the FP8 checkpoint (fp8 value × block scale, exact)",
        "strict_f64": {
            "method": "TorchFunctionMode rewriting float32 requests to float64; inv_freq rebuilt in float64",
            "rewrites": info["strict_rewrites"],
            "violations": 0,
        },
    }
    tensors = OrderedDict([("input_ids", ids.contiguous())])
    tensors.update(caps)
    if STATES.exists():
        shutil.rmtree(STATES)
    STATES.mkdir(parents=True)
    save_file(dict(tensors), str(STATES / "fizzbuzz.f64.safetensors"),
              metadata={"hsdiff": json.dumps(meta, sort_keys=True)})

    # --- the served arithmetic on fresh inputs, and torch's decoding of every code --------------
    gen = torch.Generator().manual_seed(mg.SEED + 21)
    served: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name in SERVED_LINEARS:
        q = quantised[name + ".weight"]
        s = quantised[name + ".weight_scale_inv"]
        x = served_inputs(q.shape[1], gen)
        served[name + ".x"] = x
        served[name + ".y"] = served_linear(x, q, s, ue8m0=False)
        served[name + ".y_ue8m0"] = served_linear(x, q, s, ue8m0=True)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    served["codes.e4m3"] = codes.view(torch.float8_e4m3fn).float()
    served["codes.e5m2"] = codes.view(torch.float8_e5m2).float()
    SERVED.parent.mkdir(parents=True, exist_ok=True)
    save_file(dict(served), str(SERVED), metadata={
        "block": json.dumps(list(BLOCK)),
        "recipe": "served_linear in golden/make_fp8.py",
        "torch": torch.__version__,
    })

    # --- what FP8 weights do to the model, for the record ----------------------------------------
    truth = load_file(str(REPO / "golden" / "states" / "qwen3_5_tiny" / "fizzbuzz.f64.safetensors"))
    for key in ("layers.0", "layers.7", "logits"):
        ref = truth[key][:, :TOKENS]
        print(f"{key}: FP8 weights move the f64 run by rel L2 {mg.rel_l2(caps[key], ref):.3e}")
    n_q = sum(1 for n in source if is_quantised(n))
    print(f"quantised {n_q} weights with block {list(BLOCK)}; wrote {OUT}, {STATES}, {SERVED}")


if __name__ == "__main__":
    main()
