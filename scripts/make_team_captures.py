#!/usr/bin/env python3
"""Write ``tests/fixtures/team/``: hidden states captured the way the team in the project brief
captured them, for ``tests/cli/verdicts.rs`` (issue 19).

Plain transformers on the CPU, ``register_forward_hook`` on decoder layers 1, 3 and 5 of the
golden tiny models, ``torch.save({1: h1, 3: h3, 5: h5})`` — sometimes with ``input_ids``,
sometimes ``.float()`` / ``.double()`` before saving — and real bugs planted in transformers'
torch fallback of the gated delta rule (``torch_chunk_gated_delta_rule``, patched by name in the
modeling module, which is how the layer's forward looks it up):

    {m}.bf16.ids.pt             bf16 run, {1, 3, 5: layer outputs, "input_ids"}
    {m}.bf16.pt                 the same tensors without input_ids (the team's own format)
    {m}.bf16_as_f32.ids.pt      the bf16 run saved with .float() (what saving for numpy does)
    {m}.bf16_as_f64.ids.pt      … and with .double()                                (dense only)
    {m}.bf16_automodel.ids.pt   the bf16 run through AutoModel (``language_model.layers`` /
                                ``layers``) instead of the causal-LM class: bit-identical
    {m}.bf16_chunk16.ids.pt     honest: the fallback with chunk_size=16 instead of 64
    {m}.bf16_no_qk_l2norm.ids.pt  BUG: q/k L2 normalisation skipped in every linear-attention layer
    {m}.bf16_router.ids.pt      the bf16 run with each MoE layer's top-k router ids
                                (``router.{i}.topk_ids``, as hsdiff-capture records them)     (MoE only)
    {m}.bf16_no_qk_l2norm_router.ids.pt  the bug, with router ids                             (MoE only)
    {m}.f32.ids.pt              f32 run
    {m}.f32.pt                  … without input_ids
    {m}.f32_chunk16.ids.pt      honest: chunk_size=16, f32
    {m}.f32_g_bf16.ids.pt       BUG: the decay g rounded to bf16 before the kernel, in an f32 run
    moe_long.bf16.ids.pt, moe_long.bf16_no_qk_l2norm.ids.pt, moe_long.f32.ids.pt
                                the honest bf16 run, the q/k-norm bug and the f32 run on a 192-token prompt
                                (the prompt repeated): enough tokens that the truth has a near-tie
                                router margin somewhere on nearly every token
    {m}.f32_hidden_states.ids.pt  {1: hidden_states[1], 3: …[3], 5: …[5]} from
                                output_hidden_states: the classic off-by-one against the hooks
    dense.f32_all_layers.ids.pt hooks on every layer {0: h0, …, 7: h7} + input_ids
    dense.f32_layer_N.npz       np.savez(layer_0=hs[0], …, layer_8=hs[8], input_ids=…) of
                                output_hidden_states (the last entry is after the final norm)
    dense.f32_arr_N.npz         np.savez(*hs, input_ids=…): the same arrays as arr_0 … arr_8
    prompt.txt                  the prompt; its token ids (golden tokenizer, no special tokens)
                                are the files' input_ids
    MANIFEST.json               the prompt's ids; per file: the rel L2 of each captured layer against the f32
                                honest run of the same model (what the planted bugs cost)

``{m}`` is ``dense`` (golden/qwen3_5_tiny, 8 layers) or ``moe`` (golden/qwen3_next_moe_tiny,
6 layers, 8 experts, top-2). The prompt is 32 tokens so the files stay a few KB.

Run from the repository root with torch + transformers (the pinned set of
scripts/requirements-golden.txt; no fla / causal-conv1d, so transformers runs its torch fallback):

    /work/pyvenv/bin/python scripts/make_team_captures.py

Deterministic tensors (fixed prompt, one CPU thread); ``.pt`` files are not byte-stable
(torch.save writes a random serialization id).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

for _pkg in ("fla", "causal_conv1d"):
    if importlib.util.find_spec(_pkg) is not None:
        sys.exit(f"make_team_captures: `{_pkg}` is importable; these captures must come from transformers' torch fallback")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import (  # noqa: E402
    AutoModel,
    AutoModelForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3NextForCausalLM,
)
from transformers.models.qwen3_5 import modeling_qwen3_5  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "team"
HOOKED = (1, 3, 5)
PROMPT = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print('FizzBuzz')\n"
TOKENS = 32

MODELS = {
    "dense": (ROOT / "golden" / "qwen3_5_tiny", Qwen3_5ForConditionalGeneration, modeling_qwen3_5),
    "moe": (ROOT / "golden" / "qwen3_next_moe_tiny", Qwen3NextForCausalLM, modeling_qwen3_next),
}


LONG_TOKENS = 192


def prompt_ids(tokens: int = TOKENS) -> tuple[str, list[int]]:
    """The prompt (repeated as needed) cut to the longest prefix of at most `tokens` tokens, and
    its ids."""
    tok = Tokenizer.from_file(str(MODELS["dense"][0] / "tokenizer.json"))
    text = PROMPT * (1 + tokens // TOKENS)
    while len(tok.encode(text, add_special_tokens=False).ids) > tokens:
        text = text[:-1]
    return text, tok.encode(text, add_special_tokens=False).ids


def short_prompt_ids() -> tuple[str, list[int]]:
    """The prompt cut to the longest prefix of at most TOKENS tokens, and its ids."""
    tok = Tokenizer.from_file(str(MODELS["dense"][0] / "tokenizer.json"))
    text = PROMPT
    while len(tok.encode(text, add_special_tokens=False).ids) > TOKENS:
        text = text[:-1]
    ids = tok.encode(text, add_special_tokens=False).ids
    moe_tok = Tokenizer.from_file(str(MODELS["moe"][0] / "tokenizer.json"))
    assert moe_tok.encode(text, add_special_tokens=False).ids == ids, "the golden models share a tokenizer"
    return text, ids


@contextlib.contextmanager
def patched_kernel(module, **change):
    """Runs transformers' torch_chunk_gated_delta_rule with `change` applied to its call:
    `chunk_size=16`, `use_qk_l2norm_in_kernel=False`, or `g_dtype=torch.bfloat16` (g rounded to
    that dtype and back before the kernel)."""
    orig = module.torch_chunk_gated_delta_rule
    g_dtype = change.pop("g_dtype", None)
    calls = []

    def wrapper(*args, **kwargs):
        kwargs.update(change)
        if g_dtype is not None:
            g = kwargs["g"]
            kwargs["g"] = g.to(g_dtype).to(g.dtype)
        calls.append(1)
        return orig(*args, **kwargs)

    module.torch_chunk_gated_delta_rule = wrapper
    try:
        yield calls
    finally:
        module.torch_chunk_gated_delta_rule = orig
    if (change or g_dtype is not None) and not calls:
        raise SystemExit("make_team_captures: the patched gated delta rule was never called")


def text_layers(model):
    """The decoder layers, wherever this class keeps them."""
    inner = getattr(model, "model", model)
    inner = getattr(inner, "language_model", inner)
    return inner.layers


def run(model, ids, *, router: bool = False):
    """Hooks on HOOKED layers (and every layer, for dense.f32_all_layers), the
    output_hidden_states tuple, and the MoE layers' top-k router ids."""
    layers = text_layers(model)
    caps, routers, handles = {}, {}, []
    for i, layer in enumerate(layers):
        def hook(_m, _inp, out, i=i):
            caps[i] = (out[0] if isinstance(out, tuple) else out).detach().clone().contiguous()

        handles.append(layer.register_forward_hook(hook))
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if router and gate is not None and type(gate).__name__.endswith("TopKRouter"):
            def rhook(_m, _inp, out, i=i):
                routers[i] = out[2].detach().clone().to(torch.int64).reshape(1, ids.shape[1], -1).contiguous()

            handles.append(gate.register_forward_hook(rhook))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    for h in handles:
        h.remove()
    hs = [t.detach().clone().contiguous() for t in out.hidden_states]
    assert len(hs) == len(layers) + 1
    for i in range(len(layers) - 1):
        assert torch.equal(hs[i + 1], caps[i]), f"hook on layer {i} differs from hidden_states[{i + 1}]"
    return caps, hs, routers


def load(name: str, dtype, cls=None):
    folder, default_cls, _ = MODELS[name]
    return (cls or default_cls).from_pretrained(folder, dtype=dtype, attn_implementation="sdpa").eval()


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    text, id_list = short_prompt_ids()
    (OUT / "prompt.txt").write_text(text)
    ids = torch.tensor([id_list], dtype=torch.int64)
    manifest = {"prompt_tokens": len(id_list), "prompt_ids": id_list, "hooked_layers": list(HOOKED), "files": {}}

    def keep(caps):
        return {i: caps[i] for i in HOOKED}

    def save(fname: str, tensors: dict, with_ids: bool, against: dict | None):
        obj = dict(tensors)
        if with_ids:
            obj["input_ids"] = ids
        torch.save(obj, OUT / fname)
        if against is not None:
            manifest["files"][fname] = {
                str(i): rel_l2(tensors[i], against[i]) for i in HOOKED if i in tensors and not isinstance(i, str)
            }

    for name, (_, _, module) in MODELS.items():
        f32 = load(name, torch.float32)
        honest32, hs32, _ = run(f32, ids)
        save(f"{name}.f32.ids.pt", keep(honest32), True, honest32)
        save(f"{name}.f32.pt", keep(honest32), False, None)
        with patched_kernel(module, chunk_size=16):
            c, _, _ = run(f32, ids)
        save(f"{name}.f32_chunk16.ids.pt", keep(c), True, honest32)
        with patched_kernel(module, g_dtype=torch.bfloat16):
            c, _, _ = run(f32, ids)
        save(f"{name}.f32_g_bf16.ids.pt", keep(c), True, honest32)
        save(f"{name}.f32_hidden_states.ids.pt", {i: hs32[i] for i in HOOKED}, True, None)
        if name == "dense":
            save("dense.f32_all_layers.ids.pt", dict(honest32), True, honest32)
            np.savez(OUT / "dense.f32_layer_N.npz", **{f"layer_{i}": t.numpy() for i, t in enumerate(hs32)},
                     input_ids=ids.numpy())
            np.savez(OUT / "dense.f32_arr_N.npz", *[t.numpy() for t in hs32], input_ids=ids.numpy())
        del f32

        bf16 = load(name, torch.bfloat16)
        honest, _, routers = run(bf16, ids, router=name == "moe")
        save(f"{name}.bf16.ids.pt", keep(honest), True, honest32)
        save(f"{name}.bf16.pt", keep(honest), False, None)
        save(f"{name}.bf16_as_f32.ids.pt", {i: honest[i].float() for i in HOOKED}, True, None)
        if name == "dense":
            save(f"{name}.bf16_as_f64.ids.pt", {i: honest[i].double() for i in HOOKED}, True, None)
        with patched_kernel(module, chunk_size=16):
            c, _, _ = run(bf16, ids)
        save(f"{name}.bf16_chunk16.ids.pt", keep(c), True, honest32)
        with patched_kernel(module, use_qk_l2norm_in_kernel=False):
            bug, _, bug_routers = run(bf16, ids, router=name == "moe")
        save(f"{name}.bf16_no_qk_l2norm.ids.pt", keep(bug), True, honest32)
        if routers:
            r = {f"router.{i}.topk_ids": t for i, t in routers.items()}
            save(f"{name}.bf16_router.ids.pt", {**keep(honest), **r}, True, None)
            r = {f"router.{i}.topk_ids": t for i, t in bug_routers.items()}
            save(f"{name}.bf16_no_qk_l2norm_router.ids.pt", {**keep(bug), **r}, True, None)
        del bf16

        # The brief's second bug: the same run through another class reaches the layers by
        # another path (AutoModel: `language_model.layers` / `layers`), with identical numbers.
        auto = AutoModel.from_pretrained(MODELS[name][0], dtype=torch.bfloat16, attn_implementation="sdpa").eval()
        a, _, _ = run_base(auto, ids)
        for i in HOOKED:
            assert torch.equal(a[i], honest[i]), f"{name}: AutoModel layer {i} differs from the causal-LM class"
        save(f"{name}.bf16_automodel.ids.pt", keep(a), True, None)
        del auto
        if name == "moe":
            causal = AutoModelForCausalLM.from_pretrained(MODELS[name][0], dtype=torch.bfloat16,
                                                          attn_implementation="sdpa").eval()
            c, _, _ = run(causal, ids)
            assert all(torch.equal(c[i], honest[i]) for i in HOOKED)

    # The MoE bug on a longer prompt: near-tie router margins then cover nearly every token.
    _, long_ids = prompt_ids(LONG_TOKENS)
    long = torch.tensor([long_ids], dtype=torch.int64)
    bf16 = load("moe", torch.bfloat16)
    honest, _, _ = run(bf16, long)
    with patched_kernel(modeling_qwen3_next, use_qk_l2norm_in_kernel=False):
        bug, _, _ = run(bf16, long)
    honest32, _, _ = run(load("moe", torch.float32), long)
    for fname, caps in [("moe_long.bf16.ids.pt", honest), ("moe_long.bf16_no_qk_l2norm.ids.pt", bug),
                        ("moe_long.f32.ids.pt", honest32)]:
        torch.save({**keep(caps), "input_ids": long}, OUT / fname)
    manifest["moe_long_tokens"] = len(long_ids)

    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    for p in sorted(OUT.iterdir()):
        print(f"{p.stat().st_size:>8}  {p.relative_to(ROOT)}")


def run_base(model, ids):
    """`run` for a base model (AutoModel): no logits, the layers' hooks only."""
    layers = text_layers(model)
    caps, handles = {}, []
    for i, layer in enumerate(layers):
        def hook(_m, _inp, out, i=i):
            caps[i] = (out[0] if isinstance(out, tuple) else out).detach().clone().contiguous()

        handles.append(layer.register_forward_hook(hook))
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()
    return caps, None, None


if __name__ == "__main__":
    sys.exit(main())
