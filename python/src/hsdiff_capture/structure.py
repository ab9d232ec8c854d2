"""Where the parts hsdiff captures live in a loaded model: the decoder-layer list (wherever a
ForCausalLM, ForConditionalGeneration or bare model keeps it), the embedding, the final norm, the
modeling module and the linear-attention layers."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .errors import CaptureError

# ModuleLists under these path parts are never the text decoder.
NOT_TEXT = ("visual", "vision", "vit", "audio", "mtp")


@dataclass
class TextModel:
    layers_path: str
    layers: Any  # nn.ModuleList
    embed: Any  # nn.Module
    final_norm: Any  # nn.Module or None
    modeling: Any  # the module that defines the decoder-layer class, or None
    linear_layers: list  # the `linear_attn` modules, in layer order


def find_decoder_layers(model, override: str | None = None):
    """(path, ModuleList) of the decoder layers: `override`, else the longest ModuleList of
    *DecoderLayer modules outside a vision/audio/MTP path (else the longest list of one class)."""
    import torch.nn as nn

    if override:
        mod = model
        for part in override.split("."):
            mod = getattr(mod, part, None)
            if mod is None:
                raise CaptureError(f"layers path {override}: no module `{part}`")
        if not isinstance(mod, nn.ModuleList):
            raise CaptureError(f"layers path {override} is a {type(mod).__name__}, not a ModuleList")
        return override, mod
    best, fallback = None, None
    for path, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) == 0:
            continue
        if any(v in path.lower() for v in NOT_TEXT):
            continue
        classes = {type(m).__name__ for m in mod}
        decoder = all("DecoderLayer" in c for c in classes)
        if len(classes) != 1 and not decoder:
            continue
        if decoder:
            if best is None or len(mod) > len(best[1]):
                best = (path, mod)
        elif fallback is None or len(mod) > len(fallback[1]):
            fallback = (path, mod)
    found = best or fallback
    if found is None:
        raise CaptureError("no decoder-layer ModuleList found in the model; pass the layers path")
    return found


def parent_of(model, path: str):
    mod = model
    for part in path.split(".")[:-1]:
        mod = getattr(mod, part)
    return mod


def first_output(out):
    """The hidden states in a module's output (decoder layers may return tuples)."""
    if isinstance(out, (tuple, list)):
        return out[0]
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out


def text_model(model, layers_path: str | None = None) -> TextModel:
    path, layers = find_decoder_layers(model, layers_path)
    parent = parent_of(model, path)
    embed = getattr(parent, "embed_tokens", None)
    if embed is None:
        embed = model.get_input_embeddings()
    return TextModel(
        layers_path=path,
        layers=layers,
        embed=embed,
        final_norm=getattr(parent, "norm", None),
        modeling=sys.modules.get(type(layers[0]).__module__),
        linear_layers=[layer.linear_attn for layer in layers if hasattr(layer, "linear_attn")],
    )
