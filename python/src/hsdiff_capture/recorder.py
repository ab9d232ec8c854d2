"""The API: `recording(model, out=…)` hooks an already-loaded model for whatever forward the
caller runs inside the block; `capture(model, input_ids, out=…)` runs one prefill forward under
`recording` (without a cache, or with one when the final states are asked for: `state=True`).
Both leave the model as they found it (hooks removed, forced implementations restored), also when the forward fails."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from . import fingerprint, names
from .environment import kernel_packages
from .errors import CaptureError
from .kernels import LinearAttentionForcing, Request
from .outputs import Output, Protected, model_inputs, write_safetensors
from .states import final_states
from .structure import first_output, text_model

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self, Unpack

# What `out` may be: a path, or an Output checked beforehand (the CLI checks all its targets first).
OutPath = str | os.PathLike[str] | Output


@dataclass
class CaptureResult:
    path: Path
    tensors: dict[str, torch.Tensor]  # name → CPU tensor, as written
    fingerprint: dict[str, Any]


class CaptureOptions(TypedDict, total=False):
    """The keyword options `capture` passes on to `recording`."""

    linear_attention: str
    conv: str | None
    core: str | None
    norm: str | None
    layers_path: str | None
    logits: bool
    metadata: dict[str, Any] | None
    state: bool


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """None, a torch dtype, or one of hsdiff's names (`f32`, `bf16`, `f16`, `f64`, `float32`, …)."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, fingerprint.torch_dtype_name(dtype))


class recording:  # noqa: N801 - used as `with hsdiff_capture.recording(...)`, like a function
    """Records the first forward pass of `model` run inside the block (later ones, e.g. gradient
    checkpointing's recomputation, are ignored), batch row `batch_row`, and writes the dump on a
    clean exit. `layers`: indices of the decoder layers to keep (None: all); `dtype`: the dtype to
    store the tensors in (None: as computed). `linear_attention`/`conv`/`core`/`norm` force the
    implementation for the duration (see kernels.Request). `state`: also record each
    linear-attention layer's final conv window and recurrent state from the cache the forward
    returns (`state.layers.{i}.conv` / `.recurrent`, see states.py); the forward must then run
    with `use_cache=True`."""

    def __init__(self, model: torch.nn.Module, out: OutPath, layers: Iterable[int] | None = None,
                 dtype: torch.dtype | str | None = None, *, batch_row: int = 0, logits: bool = True,
                 layers_path: str | None = None, linear_attention: str = "auto", conv: str | None = None,
                 core: str | None = None, norm: str | None = None, metadata: dict[str, Any] | None = None,
                 state: bool = False) -> None:
        self.model = model
        # Checked now, before any forward: never the model's own folder or files (outputs.py).
        self.output = out if isinstance(out, Output) else Output(out, "out", Protected(model_inputs(model)))
        self.out = self.output.given
        self.stored_dtype = resolve_dtype(dtype)
        self.batch_row = batch_row
        self.keep_logits = logits
        self.keep_state = state
        self.request = Request.from_options(linear_attention, conv=conv, core=core, norm=norm)
        self.extra = dict(metadata or {})
        self.tm = text_model(model, layers_path)
        n = len(self.tm.layers)
        given = None if layers is None else list(layers)  # an iterator is read once
        wanted = list(range(n)) if given is None else sorted(set(given))
        bad = [i for i in wanted if not isinstance(i, int) or not 0 <= i < n]
        if bad or not wanted:
            raise CaptureError(f"layers {given}: the model has decoder layers 0..{n - 1}")
        self.wanted = wanted
        self.linear = [i for i, layer in enumerate(self.tm.layers) if hasattr(layer, "linear_attn")]
        self.caps: dict = {}
        self.done = False
        self.handles: list = []
        self.forcing: LinearAttentionForcing | None = None
        self.result: CaptureResult | None = None

    # -- hooks -------------------------------------------------------------------------------------

    def _take(self, t):
        if t.dim() < 2 or t.shape[0] <= self.batch_row:
            raise CaptureError(f"batch row {self.batch_row}: the tensor has shape {list(t.shape)}")
        t = t.detach()[self.batch_row:self.batch_row + 1]
        if self.stored_dtype is not None and t.is_floating_point():
            t = t.to(self.stored_dtype)
        return t.to("cpu").contiguous().clone()

    def _save(self, name):
        def hook(_module, _inputs, output):
            if not self.done and name not in self.caps:
                self.caps[name] = self._take(first_output(output))
        return hook

    def _router(self, i):
        def hook(_module, _inputs, output):
            if self.done or names.router_topk_ids(i) in self.caps:
                return
            logits, ids = router_outputs(output)
            # The router sees the batch flattened to [B * T, …]; input_ids (recorded before any
            # layer runs) give T.
            if ids is None or names.INPUT_IDS not in self.caps:
                return
            rows = self.caps[names.INPUT_IDS].shape[-1]
            take = slice(self.batch_row * rows, (self.batch_row + 1) * rows)
            topk = ids.detach()[take].to(torch_int64()).reshape(1, rows, -1)
            self.caps[names.router_topk_ids(i)] = topk.cpu().clone()
            if logits is not None:
                self.caps[names.router_logits(i)] = logits.detach()[take].float().reshape(1, rows, -1).cpu().clone()
        return hook

    def _inputs(self, _module, args, kwargs):
        if self.done or names.INPUT_IDS in self.caps:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise CaptureError("the forward was called without input_ids (inputs_embeds only): "
                               "the dump needs the token ids")
        self.caps[names.INPUT_IDS] = self._take(ids)

    def _finished(self, _module, _inputs, output):
        if self.done:
            return
        logits = getattr(output, "logits", None)
        if logits is not None and self.keep_logits:
            self.caps[names.LOGITS] = self._take(logits)
        if self.keep_state:
            states = final_states(getattr(output, "past_key_values", None), self.linear)
            for name, t in states.items():
                self.caps[name] = self._take(t)
        self.done = True

    # -- context -----------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.packages = kernel_packages()  # probed before forcing imports anything
        self.forcing = LinearAttentionForcing(self.tm, self.request,
                                              hub_kernels=bool(getattr(self.model, "use_kernels", False)))
        self.forcing.__enter__()
        try:
            tm = self.tm
            self.handles.append(self.model.register_forward_pre_hook(self._inputs, with_kwargs=True))
            self.handles.append(tm.embed.register_forward_hook(self._save(names.EMBED)))
            for i in self.wanted:
                self.handles.append(tm.layers[i].register_forward_hook(self._save(names.layer(i))))
            # Every MoE layer's router choice (a few ints per token): with them hsdiff sets aside
            # exactly the tokens whose experts differ from the truth's, instead of judging the
            # layer with flips it cannot locate (docs/reading-a-report.md#routing-flips).
            for i, layer in enumerate(tm.layers):
                gate = router_of(layer)
                if gate is not None:
                    self.handles.append(gate.register_forward_hook(self._router(i)))
            if tm.final_norm is not None:
                self.handles.append(tm.final_norm.register_forward_hook(self._save(names.FINAL_NORM)))
            self.handles.append(self.model.register_forward_hook(self._finished))
        except BaseException:
            self._remove()
            raise
        return self

    def _remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.forcing is not None:
            self.forcing.__exit__(None, None, None)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._remove()
        if exc_type is not None:
            return False
        self.result = self._write()
        return False

    def _always(self) -> list[str]:
        """The names every dump holds, in the order written: the token ids, the embedding, the
        decoder layers asked for."""
        return [names.INPUT_IDS, names.EMBED] + [names.layer(i) for i in self.wanted]

    def _write(self) -> CaptureResult:
        if not self.done:
            raise CaptureError("recording(): no forward pass of the model ran inside the block")
        missing = [k for k in self._always() if k not in self.caps]
        if missing:
            raise CaptureError(f"hooks did not fire for: {', '.join(missing)}")
        param = next(self.tm.layers[self.wanted[0]].parameters())
        ids = [int(x) for x in self.caps[names.INPUT_IDS][0].tolist()]
        meta = fingerprint.build(self.model, self.tm, self.forcing, self.packages, ids, param.dtype,
                                 self.stored_dtype, param.device, self.wanted, dict(self.extra))
        states = [n for n in self.caps if names.is_state(n)] if self.keep_state else []
        routers = sorted((n for n in self.caps if names.is_router(n)), key=names.router_key)
        order = self._always() + states + [names.FINAL_NORM, names.LOGITS] + routers
        tensors = {k: self.caps[k] for k in order if k in self.caps}
        write_safetensors(self.output, tensors, {"hsdiff": json.dumps(meta, sort_keys=True)})
        return CaptureResult(self.out, tensors, meta)


def router_of(layer):
    """The top-k router of an MoE decoder layer (transformers' `…TopKRouter` at `mlp.gate`), or
    None for a dense layer."""
    gate = getattr(getattr(layer, "mlp", None), "gate", None)
    return gate if gate is not None and type(gate).__name__.endswith("TopKRouter") else None


def router_outputs(output):
    """(router logits, top-k expert ids) of a router's forward output: transformers' routers
    return (logits, scores, indices)."""
    if isinstance(output, tuple) and len(output) >= 3 and not output[2].is_floating_point():
        return output[0], output[2]
    return None, None


def torch_int64():
    import torch

    return torch.int64


def capture(model: torch.nn.Module, input_ids: Sequence[int] | torch.Tensor, out: OutPath,
            layers: Iterable[int] | None = None, dtype: torch.dtype | str | None = None,
            **options: Unpack[CaptureOptions]) -> CaptureResult:
    """Runs one forward pass of `model` (batch 1, under `torch.inference_mode`; `use_cache=False`,
    or True with `state=True`, whose cache gives the final states) on `input_ids` (a list of ids or
    a [T] / [1, T] tensor) and writes the dump to `out`. Takes the options of `recording`
    (linear_attention, conv, core, norm, layers_path, logits, metadata, state)."""
    import torch

    ids = torch.as_tensor(input_ids, dtype=torch.int64)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise CaptureError(f"input_ids of shape {list(ids.shape)}: expected [T] or [1, T] with T > 0")
    device = next(model.parameters()).device
    rec = recording(model, out, layers=layers, dtype=dtype, **options)
    with rec:
        try:
            with torch.inference_mode():
                model(input_ids=ids.to(device), use_cache=bool(options.get("state", False)))
        except CaptureError:
            raise
        except Exception as e:
            text = (str(e).strip().splitlines() or [""])[0]
            hint = ""
            if next(model.parameters()).dtype == torch.float64 and "Double" in text:
                hint = " (float64: try attn_implementation/experts_implementation eager)"
            raise CaptureError(f"the forward pass failed: {type(e).__name__}: {text}{hint}") from e
    if rec.result is None:  # a clean exit of the block writes it, or raises
        raise CaptureError("capture(): the dump was not written")
    return rec.result
