#!/usr/bin/env python3
"""Capture the hidden states of a Hugging Face transformers model into an hsdiff dump.

Loads the model with transformers (a `…ForCausalLM`, a `…ForConditionalGeneration` or a bare
`AutoModel`), finds its decoder layers wherever they live, hooks them, runs one prompt (batch 1,
no cache, prefill) and writes a safetensors file hsdiff reads like its own dumps:

    input_ids   int64 [1, T]
    embed       [1, T, H]   output of embed_tokens
    layers.{i}  [1, T, H]   output of decoder layer i (before the final norm), every i
    final_norm  [1, T, H]   after the final norm
    logits      [1, T, V]   (models with an LM head; --no-logits leaves them out)

plus, under the safetensors metadata key `hsdiff`, a JSON fingerprint of the PyTorch side: library
versions, which kernel packages import (and why not), which implementation transformers resolved for
every linear-attention function, device, dtype, attention implementation and the module path hooked.
See docs/capture-pytorch.md.

    python scripts/capture_hf.py --model DIR --prompt "def fib(n):" --dtype bf16 --device cuda --out a.safetensors
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import socket
import struct
import sys
from pathlib import Path

SCRIPT_VERSION = "1"
REPO = Path(__file__).resolve().parent.parent

# hsdiff's names for dtypes (the same strings hsdiff's own dumps record).
DTYPES = {
    "f32": "float32", "float32": "float32", "fp32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f16": "float16", "float16": "float16", "fp16": "float16",
    "f64": "float64", "float64": "float64",
}
HSDIFF_DTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}

# The linear-attention functions transformers can take from a kernel package (name given to
# `use_kernel_func_from_hub_with_fallback`, package), and the names the modeling code calls them by.
LINEAR_ATTENTION_FUNCS = {
    "causal_conv1d_fn": ("causal_conv1d", ["causal_conv1d_fn"]),
    "causal_conv1d_update": ("causal_conv1d", ["causal_conv1d_update"]),
    "chunk_gated_delta_rule": ("fla", ["torch_chunk_gated_delta_rule", "chunk_gated_delta_rule"]),
    "fused_recurrent_gated_delta_rule": (
        "fla", ["torch_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule", "recurrent_gated_delta_rule"]),
}
KERNEL_PACKAGES = {
    # import name → distribution
    "fla": "flash-linear-attention",
    "fla.ops.gated_delta_rule": "flash-linear-attention",
    "causal_conv1d": "causal-conv1d",
    "kernels": "kernels",
    "triton": "triton",
}

# CPU features hsdiff records (Rust names), from /proc/cpuinfo flag names.
CPU_FEATURES = [
    ("sse4.2", "sse4_2"), ("avx", "avx"), ("avx2", "avx2"), ("fma", "fma"), ("f16c", "f16c"),
    ("avx512f", "avx512f"), ("avx512bw", "avx512bw"), ("avx512vl", "avx512vl"), ("avx512dq", "avx512dq"),
    ("avx512vnni", "avx512_vnni"), ("avx512bf16", "avx512_bf16"), ("avx512fp16", "avx512_fp16"),
]

# weights digest: must equal hsdiff's `weights_digest` (src/fingerprint.rs).
DIGEST_METHOD = "sampled-sha256-v1"
DIGEST_WHOLE_BELOW = 64 << 10
DIGEST_WINDOW = 4 << 10
DIGEST_STRIDE = 1 << 20


def die(msg: str) -> None:
    print(f"capture_hf: error: {msg}", file=sys.stderr)
    sys.exit(2)


def note(msg: str) -> None:
    print(f"capture_hf: {msg}", file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# Environment facts
# ----------------------------------------------------------------------------------------------


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_import(name: str) -> dict:
    """Whether `name` imports here, its version, and the error text if it does not."""
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure is a fact to record
        text = f"{type(e).__name__}: {e}".strip().splitlines()
        return {"importable": False, "version": version_of(KERNEL_PACKAGES.get(name, name)),
                "error": text[0] if text else type(e).__name__}
    ver = getattr(mod, "__version__", None) or version_of(KERNEL_PACKAGES.get(name, name))
    return {"importable": True, "version": None if ver is None else str(ver), "error": None}


def cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    for key in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == key and v.strip():
                return v.strip()
    return platform.processor() or None


def cpu_features() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags: set[str] = set()
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in ("flags", "Features"):
            flags = set(v.split())
            break
    return [ours for ours, theirs in CPU_FEATURES if theirs in flags]


def nvidia_driver() -> str | None:
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    _, _, rest = line.partition("Kernel Module")
    parts = rest.split()
    return parts[0] if parts else None


def sha256_file(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def token_ids_sha256(ids: list[int]) -> str:
    return hashlib.sha256(b"".join(struct.pack("<I", i) for i in ids)).hexdigest()


def safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    return [single] if single.is_file() else []


def weights_digest(folder: Path) -> str | None:
    """hsdiff's `sampled-sha256-v1` digest (see docs/capture-pytorch.md): per tensor, in name order
    across shards, SHA-256 over name, NUL, dtype, shape, data length and the data (whole up to
    64 KiB, else a 4 KiB window every 1 MiB plus the last 4 KiB)."""
    files = safetensors_files(folder)
    if not files:
        return None
    entries = {}
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name, info in header.items():
            entries[name] = (path, 8 + n, info)
    h = hashlib.sha256()
    handles = {}
    try:
        for name in sorted(entries, key=lambda s: s.encode("utf-8")):
            path, base, info = entries[name]
            f = handles.get(path) or handles.setdefault(path, open(path, "rb"))
            start, end = info["data_offsets"]
            length = end - start
            h.update(name.encode("utf-8") + b"\0")
            h.update(info["dtype"].encode())
            h.update(struct.pack("<Q", len(info["shape"])))
            for d in info["shape"]:
                h.update(struct.pack("<Q", d))
            h.update(struct.pack("<Q", length))

            def read(off: int, size: int) -> bytes:
                f.seek(base + start + off)
                return f.read(size)

            if length <= DIGEST_WHOLE_BELOW:
                h.update(read(0, length))
                continue
            last = length - DIGEST_WINDOW
            off = 0
            while off < last:
                h.update(read(off, DIGEST_WINDOW))
                off += DIGEST_STRIDE
            h.update(read(last, DIGEST_WINDOW))
    finally:
        for f in handles.values():
            f.close()
    return f"{DIGEST_METHOD}:{h.hexdigest()}"


def local_folder(model_id: str) -> Path | None:
    p = Path(model_id)
    if p.is_dir():
        return p
    try:  # a hub id already in the local cache
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:  # noqa: BLE001
        return None


# ----------------------------------------------------------------------------------------------
# What transformers resolved
# ----------------------------------------------------------------------------------------------


def qualname(obj) -> str:
    mod = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}.{name}"


def closure_cells(fn) -> dict:
    """Free variables of `fn` (following `__wrapped__`), e.g. the hub-kernel wrapper's choice."""
    seen = 0
    while fn is not None and seen < 8:
        code = getattr(fn, "__code__", None)
        if code is not None and fn.__closure__:
            cells = {}
            for k, c in zip(code.co_freevars, fn.__closure__):
                try:
                    cells[k] = c.cell_contents
                except ValueError:
                    pass
            if "implementation" in cells:
                return cells
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return {}


def resolve_linear_attention(model, modeling, linear_layer) -> dict:
    """For every linear-attention function: what transformers will call, and whether it is a fast
    path (a kernel package or a hub kernel) or transformers' torch fallback."""
    out = {}
    for func, (package, symbols) in LINEAR_ATTENTION_FUNCS.items():
        entry = None
        # 5.15+ (use_kernel_func_from_hub_with_fallback): the module-level wrapper keeps its choice
        # in its closure.
        for sym in symbols:
            fn = getattr(modeling, sym, None) if modeling is not None else None
            if fn is None:
                continue
            cells = closure_cells(fn)
            if cells:
                impl, torch_fn = cells.get("implementation"), cells.get("torch_function")
                fast = impl is not None and impl is not torch_fn
                entry = {
                    "implementation": qualname(impl) + ("" if fast else " (transformers torch fallback)"),
                    "fast": bool(fast),
                    "package": package,
                    "symbol": f"{modeling.__name__}.{sym}",
                    "resolved_by": "use_kernel_func_from_hub_with_fallback",
                }
                break
        # Older transformers (≤ 5.14): module globals set from the packages when available (None
        # otherwise), and the layer keeps the function it will call as an attribute.
        if entry is None:
            attr = getattr(linear_layer, func, None) if linear_layer is not None else None
            glob = getattr(modeling, func, None) if modeling is not None else None
            chosen = attr if callable(attr) else glob
            if callable(chosen):
                mod = getattr(chosen, "__module__", "") or ""
                fast = not mod.startswith("transformers.")
                entry = {
                    "implementation": qualname(chosen) + ("" if fast else " (transformers torch fallback)"),
                    "fast": bool(fast),
                    "package": package,
                    "symbol": f"{getattr(modeling, '__name__', '?')}.{func}",
                    "resolved_by": "layer attribute" if callable(attr) else "module global",
                }
            elif modeling is not None and hasattr(modeling, func):
                entry = {
                    "implementation": "transformers torch fallback (package function is None)",
                    "fast": False,
                    "package": package,
                    "symbol": f"{modeling.__name__}.{func}",
                    "resolved_by": "module global",
                }
        if entry is None:
            entry = {"implementation": "not used by this model", "fast": False, "package": package}
        out[func] = entry
    # The gated RMSNorm after the delta rule.
    norm = getattr(linear_layer, "norm", None) if linear_layer is not None else None
    if norm is not None:
        cls = type(norm)
        fwd = getattr(norm, "forward", None)
        fwd_q = qualname(getattr(fwd, "__func__", fwd))
        fast = (not cls.__module__.startswith("transformers.")) or "Fused" in cls.__name__ \
            or not fwd_q.startswith("transformers.")
        out["gated_norm"] = {"implementation": qualname(cls), "forward": fwd_q, "fast": bool(fast)}
    return out


def summary_implementation(impl: dict) -> str:
    fast = sorted(k for k, v in impl.items() if v.get("fast"))
    used = [k for k, v in impl.items() if v.get("implementation") != "not used by this model"]
    if not used:
        return "transformers/no-linear-attention"
    if not fast:
        return "transformers/torch-fallback"
    if len(fast) == len(used):
        return "transformers/fast-path"
    return "transformers/mixed(fast: " + ",".join(fast) + ")"


class CallCounter:
    """Counts calls of the module-level linear-attention functions during the run."""

    def __init__(self, modeling) -> None:
        self.modeling = modeling
        self.counts: dict[str, int] = {}
        self.saved: list[tuple[str, object]] = []

    def __enter__(self):
        if self.modeling is None:
            return self
        for func, (_pkg, symbols) in LINEAR_ATTENTION_FUNCS.items():
            for sym in symbols:
                orig = getattr(self.modeling, sym, None)
                if not callable(orig):
                    continue
                self.saved.append((sym, orig))
                self.counts.setdefault(func, 0)

                def counted(*a, _orig=orig, _func=func, **kw):
                    self.counts[_func] += 1
                    return _orig(*a, **kw)

                setattr(self.modeling, sym, counted)
                break
        return self

    def __exit__(self, *exc):
        for sym, orig in self.saved:
            setattr(self.modeling, sym, orig)
        return False


# ----------------------------------------------------------------------------------------------
# Model structure
# ----------------------------------------------------------------------------------------------


def find_decoder_layers(model, override: str | None):
    """The ModuleList of decoder layers: `override`, else the longest ModuleList of *DecoderLayer
    modules outside the vision tower (else the longest list of one repeated class)."""
    import torch.nn as nn

    if override:
        mod = model
        for part in override.split("."):
            mod = getattr(mod, part, None)
            if mod is None:
                die(f"--layers-path {override}: no module `{part}`")
        if not isinstance(mod, nn.ModuleList):
            die(f"--layers-path {override} is a {type(mod).__name__}, not a ModuleList")
        return override, mod
    best, fallback = None, None
    for path, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0:
            continue
        if any(v in path.lower() for v in ("visual", "vision", "vit", "audio", "mtp")):
            continue
        classes = {type(m).__name__ for m in mod}
        if len(classes) != 1 and not all("DecoderLayer" in c for c in classes):
            continue
        if all("DecoderLayer" in c for c in classes):
            if best is None or len(mod) > len(best[1]):
                best = (path, mod)
        elif fallback is None or len(mod) > len(fallback[1]):
            fallback = (path, mod)
    found = best or fallback
    if found is None:
        die("no decoder-layer ModuleList found in the model; pass --layers-path")
    return found


def parent_of(model, path: str):
    mod = model
    for part in path.split(".")[:-1]:
        mod = getattr(mod, part)
    return mod


def first_output(out):
    if isinstance(out, (tuple, list)):
        return out[0]
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder or hub id")
    ap.add_argument("--class", dest="cls", default="auto-causal",
                    help="auto-causal (AutoModelForCausalLM, default), auto-vl (AutoModelForImageTextToText), "
                         "auto (AutoModel), or a transformers class name, e.g. Qwen3_5ForConditionalGeneration")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="TEXT, @FILE, or the name of a prompt in prompts/ (default: fizzbuzz)")
    src.add_argument("--tokens", help="comma-separated token ids (bypasses the tokenizer)")
    ap.add_argument("--add-special-tokens", action="store_true",
                    help="let the tokenizer add BOS/EOS etc. (hsdiff adds none)")
    ap.add_argument("--dtype", default="f32", help="f32 (default), bf16, f16, f64")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    ap.add_argument("--attn-implementation", default=None, help="eager, sdpa, flash_attention_2, … (default: transformers')")
    ap.add_argument("--experts-implementation", default=None,
                    help="MoE experts: eager, grouped_mm, … (default: transformers'; grouped_mm refuses f64)")
    ap.add_argument("--layers-path", default=None,
                    help="module path of the decoder-layer ModuleList, e.g. model.language_model.layers (default: found)")
    ap.add_argument("--no-logits", action="store_true", help="do not store the logits")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--out", required=True, type=Path, help="output .safetensors")
    args = ap.parse_args()

    if args.dtype.lower() not in DTYPES:
        die(f"unknown dtype {args.dtype!r} (f32, bf16, f16, f64)")

    import torch
    import transformers
    from safetensors.torch import save_file

    torch_dtype = getattr(torch, DTYPES[args.dtype.lower()])
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        die(f"--device {args.device}: torch.cuda.is_available() is False here")

    # --- packages: probed before the model is loaded, as transformers does ---------------------
    packages = {name: probe_import(name) for name in KERNEL_PACKAGES}

    # --- model ---------------------------------------------------------------------------------
    if args.cls == "auto-causal":
        cls = transformers.AutoModelForCausalLM
    elif args.cls == "auto-vl":
        cls = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
    elif args.cls == "auto":
        cls = transformers.AutoModel
    else:
        cls = getattr(transformers, args.cls, None)
        if cls is None:
            die(f"--class {args.cls}: transformers has no such class")
    kwargs = {"trust_remote_code": args.trust_remote_code}
    if args.attn_implementation:
        kwargs["attn_implementation"] = args.attn_implementation
    if args.experts_implementation:
        kwargs["experts_implementation"] = args.experts_implementation
    try:
        try:
            model = cls.from_pretrained(args.model, dtype=torch_dtype, **kwargs)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = cls.from_pretrained(args.model, torch_dtype=torch_dtype, **kwargs)
    except Exception as e:  # noqa: BLE001
        die(f"cannot load {args.model} with {getattr(cls, '__name__', cls)}: {type(e).__name__}: {e}")
    model = model.to(device).eval()

    layers_path, layers = find_decoder_layers(model, args.layers_path)
    text_model = parent_of(model, layers_path)
    embed = getattr(text_model, "embed_tokens", None)
    if embed is None:
        embed = model.get_input_embeddings()
    final_norm = getattr(text_model, "norm", None)
    modeling = sys.modules.get(type(layers[0]).__module__)
    linear_layer = next((getattr(l, "linear_attn") for l in layers if hasattr(l, "linear_attn")), None)

    # --- input ---------------------------------------------------------------------------------
    folder = local_folder(args.model)
    prompt_label = None
    if args.tokens:
        try:
            ids = [int(x) for x in args.tokens.split(",") if x.strip()]
        except ValueError:
            die(f"--tokens {args.tokens!r}: not comma-separated integers")
    else:
        arg = args.prompt or "fizzbuzz"
        if arg.startswith("@"):
            text = Path(arg[1:]).read_bytes().decode("utf-8")
        elif (REPO / "prompts" / f"{arg}.txt").is_file():
            text = (REPO / "prompts" / f"{arg}.txt").read_bytes().decode("utf-8")
        else:
            text = arg
        prompt_label = arg
        tok = transformers.AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        ids = tok(text, add_special_tokens=args.add_special_tokens)["input_ids"]
    if not ids:
        die("no tokens to run")
    input_ids = torch.tensor([ids], dtype=torch.int64, device=device)

    # --- hooks and run -------------------------------------------------------------------------
    caps: dict[str, torch.Tensor] = {}

    def save(name):
        def hook(_m, _inp, out):
            caps[name] = first_output(out).detach().to("cpu").contiguous().clone()
        return hook

    hooks = [embed.register_forward_hook(save("embed"))]
    hooks += [layer.register_forward_hook(save(f"layers.{i}")) for i, layer in enumerate(layers)]
    if final_norm is not None:
        hooks.append(final_norm.register_forward_hook(save("final_norm")))
    try:
        with torch.inference_mode(), CallCounter(modeling) as counter:
            out = model(input_ids=input_ids, use_cache=False)
    except Exception as e:  # noqa: BLE001
        text = (str(e).strip().splitlines() or [""])[0]
        hint = ""
        if torch_dtype == torch.float64 and "Double" in text:
            hint = " (float64: try --attn-implementation eager --experts-implementation eager)"
        die(f"the forward pass failed: {type(e).__name__}: {text}{hint}")
    for h in hooks:
        h.remove()
    logits = getattr(out, "logits", None)
    if logits is not None and not args.no_logits:
        caps["logits"] = logits.detach().to("cpu").contiguous().clone()
    missing = [f"layers.{i}" for i in range(len(layers)) if f"layers.{i}" not in caps]
    if missing or "embed" not in caps:
        die(f"hooks did not fire for: {(['embed'] if 'embed' not in caps else []) + missing}")

    # --- fingerprint ---------------------------------------------------------------------------
    impl = resolve_linear_attention(model, modeling, linear_layer)
    for func, n in counter.counts.items():
        impl.setdefault(func, {})["calls"] = n
    cfg = getattr(model.config, "text_config", None) or model.config
    attn = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    experts = getattr(cfg, "_experts_implementation", None)
    from transformers.utils import import_utils

    availability = {}
    for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_kernels_available"):
        f = getattr(import_utils, fn, None)
        if f is not None:
            try:
                availability[fn] = bool(f())
            except Exception as e:  # noqa: BLE001
                availability[fn] = f"error: {type(e).__name__}: {e}"
    dtype_label = HSDIFF_DTYPE[DTYPES[args.dtype.lower()]]
    meta = {
        "format": "hsdiff.dump/v1",
        "source": "pytorch",
        "tool": f"scripts/capture_hf.py v{SCRIPT_VERSION}",
        "backend": "transformers",
        "implementation": summary_implementation(impl),
        "linear_attention_impl": impl,
        "kernel_packages": packages,
        "transformers_availability": availability,
        "hub_kernels": {
            "USE_HUB_KERNELS": os.environ.get("USE_HUB_KERNELS"),
            "model_use_kernels": bool(getattr(model, "use_kernels", False)),
        },
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "fla": packages["fla"]["version"],
        "causal_conv1d": packages["causal_conv1d"]["version"],
        "triton": packages["triton"]["version"],
        "kernels": packages["kernels"]["version"],
        "dtype": dtype_label,
        "torch_dtype": str(torch_dtype),
        "device": str(device) if device.type == "cpu" or device.index is not None else f"{device.type}:0",
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "torch_cpu_capability": getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)(),
        "threads": int(torch.get_num_threads()),
        "gpu_driver": nvidia_driver(),
        "hostname": socket.gethostname(),
        "os": f"{platform.system().lower()}-{platform.machine()}",
        "attn_implementation": attn,
        "model": args.model,
        "model_class": type(model).__name__,
        "module_path": layers_path,
        "layers": len(layers),
        "tokens": len(ids),
        "token_ids_sha256": token_ids_sha256(ids),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if experts and getattr(cfg, "num_experts", 0):
        meta["experts_implementation"] = experts
    if prompt_label is not None:
        meta["prompt"] = prompt_label
        meta["add_special_tokens"] = bool(args.add_special_tokens)
    if device.type == "cuda":
        idx = device.index or 0
        meta["device_name"] = torch.cuda.get_device_name(idx)
        meta["gpu_compute_capability"] = "%d.%d" % torch.cuda.get_device_capability(idx)
        meta["cuda_version"] = torch.version.cuda
        meta["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        meta["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    else:
        meta["device_name"] = meta["cpu"]
    if folder is not None:
        meta["config_sha256"] = sha256_file(folder / "config.json")
        meta["tokenizer_sha256"] = sha256_file(folder / "tokenizer.json")
        meta["weights_digest"] = weights_digest(folder)
    meta = {k: v for k, v in meta.items() if v is not None}

    tensors = {"input_ids": input_ids.to("cpu").contiguous()}
    tensors.update(caps)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out), metadata={"hsdiff": json.dumps(meta, sort_keys=True)})
    calls = ", ".join(f"{k}×{v}" for k, v in counter.counts.items())
    note(f"wrote {len(tensors)} tensors for {len(ids)} tokens to {args.out} "
         f"({type(model).__name__}, hooked {layers_path}, {dtype_label}, {meta['implementation']}; calls: {calls or 'none'})")


if __name__ == "__main__":
    main()
