#!/usr/bin/env python3
"""Write the small fixture files of ``tests/cli/compare.rs`` (``tests/fixtures/compare/``).

The golden tiny Qwen3.5 model (``golden/qwen3_5_tiny``) is run with transformers on the CPU in
float32 on 8 fixed token ids; its hidden states are then saved in every format
``hsdiff compare`` reads, under every name convention it understands:

    dump_f32.safetensors      hsdiff dump format (our names, ``hsdiff`` metadata), written from PyTorch,
                              fingerprint of a machine WITHOUT the fast path (torch fallback)
    dump_fast.safetensors     the same tensors, fingerprint of a machine WITH fla + causal-conv1d
                              (fast path available): the environment-difference fixture
    dump_bf16.safetensors     the same tensors rounded to bf16, fingerprint dtype bf16
    dump_perturbed.safetensors  layers.5 perturbed by ~1e-2 relative: a mismatch at layers.5
    dump_tokens.safetensors   the same tensors with input_ids[3] changed: token-mismatch refusal
    hooks.safetensors         plain safetensors (no metadata), forward-hook module paths
                              ``model.language_model.layers.N`` / ``embed_tokens`` / ``norm``
    shifted.safetensors       plain safetensors, the common bug: hidden_states[i] saved as
                              ``layers.{i}`` (i = 0..7, the embedding counted as a layer)
    hs_tuple.pt               torch.save(out.hidden_states): the L+1 = 9 tuple (f32)
    hs_bf16.pt                torch.save(list(out.hidden_states) in bf16): a list, bf16 storages
    hs_dict.pt                torch.save({"input_ids", "hidden_states": list, "logits", "hsdiff": {…}})
    hs_stacked.npy            np.save(torch.stack(hidden_states).numpy()): [9, 1, 8, 64]
    hs.npz                    np.savez(f, *hidden_states, input_ids=…): arr_0 … arr_8
    hs_compressed.npz         np.savez_compressed with names hidden_states_0 … hidden_states_8
    custom.npz                names no convention knows (``emb``, ``block3``): for --map
    bad_short_storage.pt      malformed: hs_tuple.pt with one storage cut short inside the archive
    bad_view.pt               malformed: a non-contiguous view saved as is
    bad_legacy.pt             malformed: torch.save's pre-1.6 (non-zip) format

Truncated and garbage files are made by the tests themselves from these.

Run (from the repository root, any Python with torch + transformers + safetensors + numpy; the
pinned set is scripts/requirements-golden.txt)::

    /work/venv-golden/bin/python scripts/make_compare_fixtures.py

The tensors are deterministic (fixed ids, one CPU thread); the ``.pt`` files are not byte-stable
because torch.save writes a random serialization id.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen3_5ForConditionalGeneration  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "golden" / "qwen3_5_tiny"
OUT = ROOT / "tests" / "fixtures" / "compare"
IDS = [17, 200, 45, 300, 3, 99, 150, 7]


def fingerprint(fast: bool, dtype: str = "f32") -> dict:
    """A PyTorch-side fingerprint, as scripts/capture_hf.py records one."""
    if fast:
        kernels = {
            "fla": {"available": True, "version": "0.3.2"},
            "causal_conv1d": {"available": True, "version": "1.5.2"},
        }
        impl = "fla.ops.gated_delta_rule.chunk_gated_delta_rule"
    else:
        kernels = {
            "fla": {"available": False, "error": "No module named 'fla'"},
            "causal_conv1d": {"available": False, "error": "No module named 'causal_conv1d'"},
        }
        impl = "torch_chunk_gated_delta_rule (transformers torch fallback)"
    return {
        "format": "hsdiff.dump/v1",
        "source": "pytorch",
        "backend": "transformers",
        "implementation": impl,
        "linear_attention_impl": impl,
        "fast_path": fast,
        "kernels": kernels,
        "dtype": dtype,
        "device": "cpu",
        "attn_implementation": "sdpa",
        "torch": str(torch.__version__),
        "transformers": __import__("transformers").__version__,
        "key_layout": "model.model.language_model.layers",
        "hostname": "eval-node" if fast else "train-node",
        "created": "2026-01-02T03:04:05Z" if fast else "2026-01-01T00:00:00Z",
        "tokens": len(IDS),
    }


def st(path: Path, tensors: dict, fp: dict | None) -> None:
    meta = {"hsdiff": json.dumps(fp, sort_keys=True)} if fp is not None else None
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    model = Qwen3_5ForConditionalGeneration.from_pretrained(
        MODEL, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    tm = model.model.language_model
    ids = torch.tensor([IDS], dtype=torch.int64)
    hooks: dict[str, torch.Tensor] = {}

    def save(name):
        def hook(_m, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            hooks[name] = t.detach().clone().contiguous()

        return hook

    handles = [tm.embed_tokens.register_forward_hook(save("embed"))]
    for i, layer in enumerate(tm.layers):
        handles.append(layer.register_forward_hook(save(f"layers.{i}")))
    handles.append(tm.norm.register_forward_hook(save("final_norm")))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    for h in handles:
        h.remove()
    hs = tuple(t.detach().clone().contiguous() for t in out.hidden_states)
    logits = out.logits.detach().clone().contiguous()
    L = len(tm.layers)
    assert len(hs) == L + 1
    assert torch.equal(hs[0], hooks["embed"]) and torch.equal(hs[L], hooks["final_norm"])
    for i in range(L - 1):
        assert torch.equal(hs[i + 1], hooks[f"layers.{i}"])

    ours = {"input_ids": ids, **hooks}
    st(OUT / "dump_f32.safetensors", {**ours, "logits": logits}, fingerprint(False))
    st(OUT / "dump_fast.safetensors", {**ours, "logits": logits}, fingerprint(True))
    st(
        OUT / "dump_bf16.safetensors",
        {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in ours.items()},
        fingerprint(False, "bf16"),
    )
    g = torch.Generator().manual_seed(5)
    perturbed = dict(ours)
    x = perturbed["layers.5"]
    perturbed["layers.5"] = x + 1e-2 * x.pow(2).mean().sqrt() * torch.randn(x.shape, generator=g)
    st(OUT / "dump_perturbed.safetensors", perturbed, fingerprint(False))
    other = dict(ours)
    other_ids = ids.clone()
    other_ids[0, 3] = 301
    other["input_ids"] = other_ids
    st(OUT / "dump_tokens.safetensors", other, fingerprint(False))

    prefix = "model.language_model."
    hook_names = {"input_ids": ids, prefix + "embed_tokens": hooks["embed"], prefix + "norm": hooks["final_norm"]}
    for i in range(L):
        hook_names[f"{prefix}layers.{i}"] = hooks[f"layers.{i}"]
    st(OUT / "hooks.safetensors", hook_names, None)
    st(OUT / "shifted.safetensors", {f"layers.{i}": hs[i] for i in range(L)}, None)

    torch.save(hs, OUT / "hs_tuple.pt")
    torch.save([t.to(torch.bfloat16) for t in hs], OUT / "hs_bf16.pt")
    torch.save(
        {"input_ids": ids, "hidden_states": list(hs), "logits": logits, "hsdiff": fingerprint(False)},
        OUT / "hs_dict.pt",
    )
    np.save(OUT / "hs_stacked.npy", torch.stack(hs).numpy())
    np.savez(OUT / "hs.npz", *[t.numpy() for t in hs], input_ids=ids.numpy())
    np.savez_compressed(OUT / "hs_compressed.npz", **{f"hidden_states_{i}": t.numpy() for i, t in enumerate(hs)})
    np.savez(OUT / "custom.npz", emb=hs[0].numpy(), block3=hooks["layers.3"].numpy())

    src = zipfile.ZipFile(OUT / "hs_tuple.pt")
    with zipfile.ZipFile(OUT / "bad_short_storage.pt", "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data/3"):
                data = data[:100]
            dst.writestr(info.filename, data)
    torch.save({"layers.0": hs[1][:, :, :32]}, OUT / "bad_view.pt")
    torch.save({"layers.0": hs[1]}, OUT / "bad_legacy.pt", _use_new_zipfile_serialization=False)

    for p in sorted(OUT.iterdir()):
        print(f"{p.stat().st_size:>8}  {p.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
