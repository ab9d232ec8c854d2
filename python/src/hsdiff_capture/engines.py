"""Capturing per-layer hidden states from a serving engine (SGLang, vLLM) into an hsdiff dump.

Engines run the model in worker processes and replay CUDA graphs, so the capture is done by
forward hooks registered *in the worker* that write each forward's output to a spool folder, and
assembled into a dump by the calling process afterwards:

- SGLang: its `forward_hooks` server argument (a list of {name, target_modules, hook_factory,
  config}) registers `spool_hook_factory` on `model.embed_tokens`, `model.layers.{i}` and
  `model.norm` when the model runner starts (`sglang_engine_kwargs`);
- vLLM: `LLM.apply_model(fn)` runs `fn(model)` in every worker (`attach_vllm`/`detach_vllm`).

Both engines' decoder layers return `(hidden_states, residual)` with the residual add deferred to
the next layer's fused norm; the residual stream hsdiff compares (transformers' layer output) is
their sum, which the hook stores. Tokens are flattened (`[num_tokens, H]`); a chunked prefill is
several forwards, concatenated here in order. Only what the hooks see while the spool is armed is
kept (not warm-up or graph-capture passes), and only on tensor-parallel rank 0.

Neither engine installs on a CPU machine: the engine calls (`sglang.Engine`, `vllm.LLM`,
`apply_model`) are written against their public APIs and have NOT been run here; the spool hook,
the SGLang hook specification and the assembly are plain torch and tested (python/tests).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

from . import __version__, names
from .environment import kernel_packages, local_folder, sha256_file, token_ids_sha256, version_of, weights_digest
from .errors import CaptureError
from .fingerprint import dtype_label
from .outputs import Output, Protected, write_safetensors

ARMED = "ARMED"
FACTORY = "hsdiff_capture.engines:spool_hook_factory"


def _rank0() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def stream_of(output, sum_residual: bool):
    """The tensor hsdiff wants from a module's output. A decoder layer's `(hidden, residual)`:
    their sum, the residual stream (`sum_residual`; a residual of None, e.g. before the first add,
    adds nothing). A fused final norm's `(normed, residual)`: `normed`. A tensor: itself."""
    if not isinstance(output, (tuple, list)):
        return output
    if sum_residual and len(output) >= 2 and output[1] is not None:
        return output[0] + output[1]
    return output[0]


def spool_hook_factory(config: dict):
    """A forward hook writing `config["tensor"]`'s output of every armed forward to
    `config["dir"]/{tensor}@{n}.safetensors` (n counts this hook's writes); the decoder layers'
    `(hidden, residual)` are summed (`stream_of`)."""
    from safetensors.torch import save_file

    folder, tensor = Path(config["dir"]), config["tensor"]
    sum_residual = tensor.startswith("layers.")
    count = [0]

    def hook(_module, _inputs, output):
        if not (folder / ARMED).exists() or not _rank0():
            return None
        t = stream_of(output, sum_residual)
        save_file({"t": t.detach().to("cpu").contiguous()}, str(folder / f"{tensor}@{count[0]:06d}.safetensors"))
        count[0] += 1
        return None

    return hook


def tensor_modules(num_layers: int, prefix: str = "model") -> dict[str, str]:
    """hsdiff tensor name → engine module name (`prefix.embed_tokens`, `prefix.layers.{i}`, `prefix.norm`)."""
    modules = {names.EMBED: f"{prefix}.embed_tokens"}
    modules.update({names.layer(i): f"{prefix}.layers.{i}" for i in range(num_layers)})
    modules[names.FINAL_NORM] = f"{prefix}.norm"
    return modules


class EngineSpool:
    """A spool folder the in-worker hooks write to, armed only around the request to capture."""

    def __init__(self, folder, num_layers: int, prefix: str = "model") -> None:
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        if any(self.dir.glob("*@*.safetensors")):
            raise CaptureError(f"{self.dir}: spool folder is not empty (left from another capture)")
        self.num_layers = num_layers
        self.prefix = prefix
        self.modules = tensor_modules(num_layers, prefix)

    # -- SGLang --------------------------------------------------------------------------------

    def sglang_engine_kwargs(self) -> dict:
        """Keyword arguments for `sglang.Engine(model_path=…, **kwargs)`: the hooks, no CUDA
        graphs (a replayed graph runs no Python hooks) and no radix cache (a cached prefix is not
        recomputed, so its hidden states would be missing)."""
        hooks = [{"name": f"hsdiff:{tensor}", "target_modules": [module], "hook_factory": FACTORY,
                  "config": {"dir": str(self.dir), "tensor": tensor}}
                 for tensor, module in self.modules.items()]
        return {"forward_hooks": hooks, "disable_cuda_graph": True, "disable_radix_cache": True}

    # -- vLLM ----------------------------------------------------------------------------------

    def attach_vllm(self, llm) -> None:
        """Registers the hooks in every vLLM worker (`LLM.apply_model`). Create the LLM with
        `enforce_eager=True` (no CUDA graphs) and `enable_prefix_caching=False`."""
        if not getattr(getattr(llm.llm_engine, "model_config", None), "enforce_eager", True):
            raise CaptureError("vLLM: create the LLM with enforce_eager=True (CUDA graphs run no hooks)")
        llm.apply_model(functools.partial(_vllm_attach, str(self.dir), self.modules))

    def detach_vllm(self, llm) -> None:
        llm.apply_model(_vllm_detach)

    # -- both ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def armed(self):
        (self.dir / ARMED).touch()
        try:
            yield self
        finally:
            (self.dir / ARMED).unlink(missing_ok=True)

    def assemble(self, token_ids: list[int]) -> dict:
        """The dump's tensors: per hsdiff name, the armed passes concatenated along the tokens
        until they cover the prompt (`[1, T, H]`); a decode pass after the prefill is not used."""
        import torch
        from safetensors.torch import load_file

        n = len(token_ids)
        tensors = {names.INPUT_IDS: torch.tensor([token_ids], dtype=torch.int64)}
        for tensor in self.modules:
            files = sorted(self.dir.glob(f"{tensor}@*.safetensors"))
            if not files:
                raise CaptureError(f"{self.dir}: no spooled output for `{tensor}` ({self.modules[tensor]}); "
                                   "did the hooks attach, and was the request run while armed?")
            parts, total = [], 0
            for f in files:
                t = load_file(str(f))["t"]
                if t.dim() == 3 and t.shape[0] == 1:  # an engine that keeps the batch dimension
                    t = t[0]
                if t.dim() != 2:
                    raise CaptureError(f"{f}: expected [tokens, hidden], got {list(t.shape)}")
                parts.append(t)
                total += t.shape[0]
                if total >= n:
                    break
            if total != n:
                raise CaptureError(f"`{tensor}`: the spooled passes hold {total} tokens, the prompt has {n} "
                                   "(prefix cache on, or several requests while armed?)")
            tensors[tensor] = torch.cat(parts, dim=0).unsqueeze(0).contiguous()
        return tensors

    def write_dump(self, out, token_ids: list[int], engine: str, model: str, engine_args: dict | None = None,
                   prompt: str | None = None) -> Path:
        # Never over the model's files or the spooled passes this reads (outputs.py).
        target = Output(out, "out", Protected([local_folder(model), self.dir]))
        tensors = self.assemble(token_ids)
        meta = engine_fingerprint(engine, model, tensors, token_ids, self.prefix, self.num_layers,
                                  engine_args or {}, prompt)
        write_safetensors(target, tensors, {"hsdiff": json.dumps(meta, sort_keys=True)})
        return target.given


def _vllm_attach(folder: str, modules: dict, model) -> int:
    """Runs in a vLLM worker: hooks on the modules by name; handles kept on the model."""
    by_name = dict(model.named_modules())
    handles = []
    for tensor, name in modules.items():
        mod = by_name.get(name)
        if mod is None:
            raise RuntimeError(f"hsdiff_capture: no module {name} in the vLLM model {type(model).__name__}")
        handles.append(mod.register_forward_hook(spool_hook_factory({"dir": folder, "tensor": tensor})))
    model._hsdiff_capture_handles = handles
    return len(handles)


def _vllm_detach(model) -> int:
    handles = getattr(model, "_hsdiff_capture_handles", [])
    for h in handles:
        h.remove()
    model._hsdiff_capture_handles = []
    return len(handles)


def engine_fingerprint(engine: str, model: str, tensors: dict, token_ids: list[int], prefix: str,
                       num_layers: int, engine_args: dict, prompt: str | None) -> dict:
    import torch

    dist = {"sglang": "sglang", "vllm": "vllm"}.get(engine, engine)
    version = version_of(dist)
    packages = kernel_packages()
    meta = {
        "format": "hsdiff.dump/v1",
        "source": "pytorch",
        "tool": f"hsdiff-capture {__version__} (engines)",
        "backend": engine,
        "implementation": f"{engine}/{version or 'unknown'}",
        engine: version,
        "engine_args": {k: engine_args[k] for k in sorted(engine_args)},
        "kernel_packages": packages,
        "torch": torch.__version__,
        "fla": packages["fla"]["version"],
        "causal_conv1d": packages["causal_conv1d"]["version"],
        "triton": packages["triton"]["version"],
        "dtype": dtype_label(tensors[names.layer(0)].dtype) if names.layer(0) in tensors else None,
        "model": model,
        "module_path": f"{prefix}.layers",
        "layers": num_layers,
        "tokens": len(token_ids),
        "token_ids_sha256": token_ids_sha256(token_ids),
        "prompt": prompt,
    }
    folder = local_folder(model)
    if folder is not None:
        meta["config_sha256"] = sha256_file(folder / "config.json")
        meta["tokenizer_sha256"] = sha256_file(folder / "tokenizer.json")
        meta["weights_digest"] = weights_digest(folder)
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        meta["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return {k: v for k, v in meta.items() if v is not None}
