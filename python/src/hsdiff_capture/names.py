"""hsdiff's tensor names, as the package writes them: the contract with hsdiff's reader
(`Key` in src/capture/key.rs), held to it by tests/fixtures/tensor_names.txt
(python/tests/test_pure.py)."""

from __future__ import annotations

INPUT_IDS = "input_ids"
EMBED = "embed"
FINAL_NORM = "final_norm"
LOGITS = "logits"


def layer(i: int) -> str:
    """The output of decoder layer `i` (the residual stream after it)."""
    return f"layers.{i}"


def state_conv(i: int) -> str:
    """The conv window of linear-attention layer `i` after the last token."""
    return f"state.layers.{i}.conv"


def state_recurrent(i: int) -> str:
    """The recurrent state of linear-attention layer `i` after the last token."""
    return f"state.layers.{i}.recurrent"


def router_topk_ids(i: int) -> str:
    """The experts the router of MoE layer `i` chose per token."""
    return f"router.{i}.topk_ids"


def router_logits(i: int) -> str:
    """The router logits of MoE layer `i`."""
    return f"router.{i}.logits"


def is_state(name: str) -> bool:
    return name.startswith("state.layers.")


def is_router(name: str) -> bool:
    return name.startswith("router.")


def router_key(name: str) -> tuple[int, str]:
    """A router name's sort key: by layer, numerically, then by field."""
    _, i, what = name.split(".", 2)
    return int(i), what
