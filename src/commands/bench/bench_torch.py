#!/usr/bin/env python3
"""The PyTorch side of ``hsdiff bench``: transformers' own CPU code on the same inputs as hsdiff.

Two modes, each run in a fresh process (so its peak RSS is its own):

    bench_torch.py core --inputs IN.safetensors --out OUT.safetensors [--recurrent]
        transformers' ``torch_chunk_gated_delta_rule`` (and, with --recurrent,
        ``torch_recurrent_gated_delta_rule``) from ``modeling_qwen3_5`` on q, k, v, g, beta read
        from IN (as ``hsdiff bench core`` writes them), with ``use_qk_l2norm_in_kernel=True`` and
        ``output_final_state=True`` — the call the model makes, and what hsdiff's backends return.

    bench_torch.py forward --model DIR --dtype f32|bf16 --inputs IDS.safetensors --out OUT.safetensors
        ``Qwen3_5ForCausalLM.from_pretrained(DIR)`` (sdpa attention, torch fallbacks for the
        linear attention), one prefill forward of ``input_ids`` from IDS with ``use_cache=False``.

Common options: ``--threads N`` (``torch.set_num_threads``), ``--repeats R`` timed calls after
``--warmup W`` untimed ones. Each mode prints one line per measured function on stdout,
``HSDIFF_BENCH_RESULT {json}`` (times in ms, RSS from /proc/self/status), and writes its output
tensor(s) to OUT for hsdiff's agreement check.

It refuses to run (exit 2) if a fast path could be used instead of transformers' torch
fallbacks: no fla / causal_conv1d / kernels importable, and every hub-kernel wrapper resolved to
the torch function (the check golden/make.py makes too).

The hsdiff binary carries this file (``include_str!``) and writes it into its run's work folder,
so ``hsdiff bench … --torch PYTHON`` needs no checkout; it imports nothing but torch,
transformers and safetensors for the same reason. See docs/performance.md for standalone use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

FORBIDDEN_PACKAGES = ("fla", "causal_conv1d", "kernels")
FAST_PATH_FUNCS = (
    "torch_chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule",
    "causal_conv1d_fn",
    "causal_conv1d_update",
)


def die(msg: str) -> None:
    print(f"bench_torch: error: {msg}", file=sys.stderr)
    sys.exit(2)


# Before transformers is imported: its modeling modules pick a package at import time.
for _name in FORBIDDEN_PACKAGES:
    if importlib.util.find_spec(_name) is not None:
        die(f"the package `{_name}` is importable; the bench measures transformers' pure PyTorch "
            f"fallbacks, so run it with a Python without `{_name}` (docs/performance.md)")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

TAG = "HSDIFF_BENCH_RESULT "


def proc_status_kib(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def report(name: str, implementation: str, times_ms: list[float], rss_before: int | None, output: str) -> None:
    print(TAG + json.dumps({
        "name": name,
        "implementation": implementation,
        "times_ms": times_ms,
        "rss_before_kib": rss_before,
        "peak_rss_kib": proc_status_kib("VmHWM"),
        "output": output,
        "threads": torch.get_num_threads(),
    }), flush=True)


def timed(fn, warmup: int, repeats: int):
    out = None
    times = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        out = fn()
        ms = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            times.append(ms)
    return out, times


def versions() -> str:
    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def run_core(args) -> None:
    inputs = load_file(str(args.inputs))
    q, k, v, g, beta = (inputs[n] for n in ("q", "k", "v", "g", "beta"))
    rss_before = proc_status_kib("VmRSS")
    outputs = {}

    def chunk():
        return modeling_qwen3_5.torch_chunk_gated_delta_rule(
            q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True, use_qk_l2norm_in_kernel=True
        )

    with torch.inference_mode():
        (out, _state), times = timed(chunk, args.warmup, args.repeats)
    outputs["out"] = out.contiguous()
    report("torch_chunk", f"transformers torch_chunk_gated_delta_rule (torch {torch.__version__})", times, rss_before, "out")

    if args.recurrent:
        def recurrent():
            return modeling_qwen3_5.torch_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, initial_state=None, output_final_state=True, use_qk_l2norm_in_kernel=True
            )

        with torch.inference_mode():
            (out, _state), times = timed(recurrent, min(args.warmup, 1), args.repeats)
        outputs["out_recurrent"] = out.contiguous()
        report("torch_recurrent", f"transformers torch_recurrent_gated_delta_rule (torch {torch.__version__})", times, rss_before,
               "out_recurrent")
    save_file(outputs, str(args.out))


def run_forward(args) -> None:
    from transformers import Qwen3_5ForCausalLM

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}[args.dtype]
    ids = load_file(str(args.inputs))["input_ids"].to(torch.int64)
    model = Qwen3_5ForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa").eval()
    rss_before = proc_status_kib("VmRSS")
    calls = {"chunk": 0}
    orig = modeling_qwen3_5.torch_chunk_gated_delta_rule

    def counted(*a, **kw):
        calls["chunk"] += 1
        return orig(*a, **kw)

    # The layers look the function up in the module at call time; count to prove the fallback ran.
    modeling_qwen3_5.torch_chunk_gated_delta_rule = counted
    try:
        with torch.inference_mode():
            out, times = timed(lambda: model(input_ids=ids, use_cache=False), args.warmup, args.repeats)
    finally:
        modeling_qwen3_5.torch_chunk_gated_delta_rule = orig
    linear_layers = sum(1 for t in model.config.layer_types if t == "linear_attention")
    runs = args.warmup + args.repeats
    if calls["chunk"] != linear_layers * runs:
        die(
            f"expected {linear_layers * runs} torch_chunk_gated_delta_rule calls, counted {calls['chunk']}"
        )
    save_file({"logits": out.logits.contiguous()}, str(args.out))
    report("torch", f"transformers {transformers.__version__} forward (sdpa, torch fallbacks)", times,
           rss_before, "logits")


def refuse_fast_paths() -> None:
    """Exits 2 unless every hub-kernel wrapper (`use_kernel_func_from_hub_with_fallback`, which
    keeps its choice in the closure of `wrapped`) resolved to transformers' own torch function."""
    from transformers.utils.import_utils import is_kernels_available

    if is_kernels_available():
        die("transformers reports `kernels` (hub kernels) as available; refusing (fast paths could be used)")
    for mod in (modeling_qwen3_5, modeling_qwen3_next):
        for fname in FAST_PATH_FUNCS:
            wrapped = getattr(mod, fname)
            cells = dict(zip(wrapped.__code__.co_freevars, wrapped.__closure__ or (), strict=True))
            if "implementation" not in cells or "torch_function" not in cells:
                die(f"{mod.__name__}.{fname} is not the expected hub-kernel wrapper; cannot verify it")
            impl = cells["implementation"].cell_contents
            is_new = cells["is_new_implementation"].cell_contents if "is_new_implementation" in cells else None
            if impl is not cells["torch_function"].cell_contents or is_new or impl.__module__ != mod.__name__:
                die(f"{mod.__name__}.{fname} resolved to a fast path: {impl.__module__}.{impl.__qualname__}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for name in ("core", "forward"):
        p = sub.add_parser(name)
        p.add_argument("--inputs", type=Path, required=True)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
        p.add_argument("--repeats", type=int, default=3)
        p.add_argument("--warmup", type=int, default=1)
        if name == "core":
            p.add_argument("--recurrent", action="store_true",
                           help="also time torch_recurrent_gated_delta_rule (one Python step per token)")
        else:
            p.add_argument("--model", type=Path, required=True)
            p.add_argument("--dtype", default="f32", choices=("f32", "bf16", "f16", "f64"))
    args = ap.parse_args()
    refuse_fast_paths()
    torch.set_num_threads(args.threads)
    print(f"bench_torch: {versions()}, {torch.get_num_threads()} threads", file=sys.stderr)
    if args.mode == "core":
        run_core(args)
    else:
        run_forward(args)


if __name__ == "__main__":
    main()
