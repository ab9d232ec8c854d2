"""The final conv window and recurrent state of every linear-attention layer, read from the cache
object transformers returns after a prefill with `use_cache=True`, named and laid out as hsdiff's
own dumps: `state.layers.{i}.conv` `[1, conv_dim, conv_kernel]` (the last conv_kernel inputs of
the convolution, oldest first) and `state.layers.{i}.recurrent` `[1, Hv, dk, dv]`.

transformers keeps both already in that layout (conv_states `[B, conv_dim, K]`, recurrent_states
`[B, Hv, dk, dv]`), so nothing is transposed; the dtypes are left as transformers made them (the
conv window in the compute dtype, the recurrent state in float32 from the torch fallback, or
float64 under a strict-f64 run), as hsdiff stores them. The cache keeps them per decoder layer
as `cache.layers[i].conv_states[0]` / `.recurrent_states[0]` (a dict of state indices per layer;
the same in transformers 5.14 and 5.24). Any other cache is refused by name."""

from __future__ import annotations

from . import names
from .errors import CaptureError


def _layer_states(cache, i: int):
    """(conv, recurrent) state index 0 of decoder layer i; None where there is none."""
    layers = getattr(cache, "layers", None)
    layer = layers[i] if layers is not None and i < len(layers) else None
    conv, rec = getattr(layer, "conv_states", None), getattr(layer, "recurrent_states", None)
    if not isinstance(conv, dict) or not isinstance(rec, dict):
        return None, None
    return conv.get(0), rec.get(0)


def final_states(cache, linear_layers: list[int]) -> dict:
    """`{name: tensor}` for each decoder layer index in `linear_layers`, in layer order (conv,
    then recurrent). Raises CaptureError naming the layer when the cache lacks one."""
    if cache is None:
        raise CaptureError("state: the forward returned no cache (past_key_values is None); "
                           "the model must support use_cache=True")
    out = {}
    for i in linear_layers:
        conv, rec = _layer_states(cache, i)
        if conv is None or rec is None:
            raise CaptureError(f"state: the {type(cache).__name__} holds no conv/recurrent state for "
                               f"linear-attention layer {i}")
        out[names.state_conv(i)] = conv
        out[names.state_recurrent(i)] = rec
    return out
