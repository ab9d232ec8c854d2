"""The JSON fingerprint stored under the safetensors metadata key `hsdiff`: the same field names
as hsdiff's own dumps where they mean the same thing (docs/capture-pytorch.md lists every field)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket

from . import __version__
from .environment import (
    cpu_features,
    cpu_model,
    local_folder,
    nvidia_driver,
    sha256_file,
    token_ids_sha256,
    weights_digest,
)
from .errors import CaptureError
from .kernels import summary_implementation

# torch dtype name → hsdiff's label.
HSDIFF_DTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}
# The names `dtype=` / `--dtype` take → torch's dtype name: exactly the names hsdiff's `--dtype`
# accepts for these dtypes, case and all (tests/fixtures/dtype_names.txt holds both sides to it).
DTYPE_NAMES = {
    "f32": "float32", "float32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f16": "float16", "float16": "float16",
    "f64": "float64", "float64": "float64",
}


def torch_dtype_name(name: str) -> str:
    """torch's name of the dtype hsdiff calls `name` (`f32`, `bf16`, …, or torch's own name)."""
    if name not in DTYPE_NAMES:
        raise CaptureError(f"unknown dtype {name!r} (f32, bf16, f16, f64, or torch's float32, bfloat16, float16, "
                           "float64)")
    return DTYPE_NAMES[name]


def dtype_label(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return HSDIFF_DTYPE.get(name, name)


def device_label(device) -> str:
    if device.type == "cpu":
        return "cpu"
    return f"{device.type}:{device.index or 0}"


def transformers_availability() -> dict:
    from transformers.utils import import_utils

    out: dict[str, bool | str] = {}
    for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_kernels_available"):
        f = getattr(import_utils, fn, None)
        if f is not None:
            try:
                out[fn] = bool(f())
            except Exception as e:  # noqa: BLE001 - recorded as what transformers said
                out[fn] = f"error: {type(e).__name__}: {e}"
    return out


def build(model, tm, forcing, packages: dict, ids: list[int], run_dtype, stored_dtype, device,
          captured_layers: list[int], extra: dict) -> dict:
    import torch
    import transformers

    impl = forcing.fingerprint()
    cfg = getattr(model.config, "text_config", None) or model.config
    attn = getattr(cfg, "_attn_implementation", None) or getattr(model.config, "_attn_implementation", None)
    experts = getattr(cfg, "_experts_implementation", None)
    model_id = extra.pop("model", None) or getattr(model, "name_or_path", None) or None
    meta = {
        "format": "hsdiff.dump/v1",
        "source": "pytorch",
        "tool": f"hsdiff-capture {__version__}",
        "backend": "transformers",
        "implementation": summary_implementation(impl),
        "linear_attention_request": forcing.request.as_dict(),
        "linear_attention_impl": impl,
        "kernel_packages": packages,
        "transformers_availability": transformers_availability(),
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
        "dtype": dtype_label(run_dtype),
        "torch_dtype": str(run_dtype),
        "device": device_label(device),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "torch_cpu_capability": getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)(),
        "threads": int(torch.get_num_threads()),
        "gpu_driver": nvidia_driver(),
        "hostname": socket.gethostname(),
        "os": f"{platform.system().lower()}-{platform.machine()}",
        "attn_implementation": attn,
        "model": model_id,
        "model_class": type(model).__name__,
        "module_path": tm.layers_path,
        "layers": len(tm.layers),
        "training": bool(model.training),
        "tokens": len(ids),
        "token_ids_sha256": token_ids_sha256(ids),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if len(captured_layers) != len(tm.layers):
        meta["captured_layers"] = captured_layers
    if stored_dtype is not None and stored_dtype != run_dtype:
        meta["stored_dtype"] = dtype_label(stored_dtype)
    if getattr(cfg, "num_experts", 0):
        # hsdiff checks the router choices of the dump against them (docs/capture-pytorch.md).
        meta["num_experts"] = int(cfg.num_experts)
        meta["num_experts_per_tok"] = int(cfg.num_experts_per_tok)
        if experts:
            meta["experts_implementation"] = experts
    if device.type == "cuda":
        idx = device.index or 0
        meta["device_name"] = torch.cuda.get_device_name(idx)
        meta["gpu_compute_capability"] = "{}.{}".format(*torch.cuda.get_device_capability(idx))
        meta["cuda_version"] = torch.version.cuda
        meta["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        meta["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    else:
        meta["device_name"] = meta["cpu"]
    folder = local_folder(model_id)
    if folder is not None:
        meta["config_sha256"] = sha256_file(folder / "config.json")
        meta["tokenizer_sha256"] = sha256_file(folder / "tokenizer.json")
        meta["weights_digest"] = weights_digest(folder)
    meta.update(extra)
    return {k: v for k, v in meta.items() if v is not None}
