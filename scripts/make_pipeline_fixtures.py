#!/usr/bin/env python3
"""Write the drafter-pipeline fixtures of ``tests/cli/pipelines.rs`` (``tests/fixtures/pipelines/``).

Both golden models (``golden/qwen3_5_tiny``, 8 layers; ``golden/qwen3_next_moe_tiny``, 6 layers;
hidden size 64) are run with transformers on the CPU on a few fixed prompts (random token ids),
and each sample is saved exactly as each pipeline saves it — key names, shapes, dtypes, file
names and folders as in the pipelines' code (read, not copied; see docs/file-formats.md):

    specforge_dflash/rows_0-5000/data_{i}.ckpt   SpecForge DFlash: torch.save {input_ids [T], loss_mask [T],
                                                 hidden_states [1, T, k·H]} (bf16), layers of
                                                 draft_config.json's dflash_config.target_layer_ids;
                                                 data_1 carries a PLANTED BUG: layer 4 (qwen3_5_tiny;
                                                 layer 3 for the MoE model) perturbed by 25% relative;
                                                 data_3 has tokens no other set has (a "tokens differ" pair)
    specforge_dflash_gz/rows_0-5000/data_0.ckpt.gz  the same as data_0, gzip-compressed (--compress)
    specforge_dflash_batch/batch.ckpt            the three prompts as one right-padded batch:
                                                 hidden_states [3, Tmax, k·H], input_ids / loss_mask /
                                                 attention_mask [3, Tmax] (padding zeros)
    specforge_eagle3/rows_0-5000/data_{i}.ckpt   SpecForge EAGLE-3: {input_ids, loss_mask,
                                                 aux_hidden_state [1, T, 3H] (outputs of [1, L/2-1, L-4]),
                                                 hidden_state [1, T, H] (after the final norm)} (bf16)
    speculators/hs_{i}.safetensors               vLLM speculators: {hidden_states [T, 4, H], token_ids [T]}
                                                 (bf16), vLLM ids [2, L/2, L-3, L] = transformers'
                                                 hidden_states[id], id L the last layer's output
                                                 BEFORE the final norm; hs_3 has data_3's id, not its tokens
    modelopt/{conversation_id}.pt                Model-Optimizer (HF path): {input_ids [T],
                                                 hidden_states [T, H] (last_hidden_state),
                                                 aux_hidden_states [T, 3H] (outputs of {1, L/2-1, L-4}),
                                                 loss_mask [T], conversation_id (a string)} (bf16)
    ge_data/0/data_{i}.ckpt                      EAGLE-1/2 ge_data: {input_ids [T], hidden_state [T, H]
                                                 (hidden_states[-1], after the norm), loss_mask [T]} (fp16)
    eval/prompt_{i}.safetensors                  the "eval box": hsdiff_capture.capture() dumps (bf16,
                                                 eager attention) of the three prompts and one more (prompt_3)
    draft_config.json                            a DFlash drafter config naming the layers

The MoE model has 6 layers, where the pipelines' default ids repeat a layer ([1, 2, 2]); its
EAGLE-3 / Model-Optimizer / speculators files use the ids in its draft_config.json instead
(``eagle_aux_hidden_state_layer_ids``; the tests pass them).

Run from the repository root::

    /work/pyvenv/bin/python scripts/make_pipeline_fixtures.py

The tensors are deterministic (fixed ids, one CPU thread); the ``.pt``/``.ckpt`` files are not
byte-stable (torch.save writes a random serialization id).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen3_5ForConditionalGeneration, Qwen3NextForCausalLM  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
import hsdiff_capture  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "pipelines"

MODELS = {
    "qwen3_5_tiny": {
        "cls": Qwen3_5ForConditionalGeneration,
        "dflash_ids": [1, 2, 4, 5, 6],
        # The pipelines' defaults for L = 8.
        "eagle_ids": [1, 3, 4],
        "vllm_ids": [2, 4, 5, 8],
        "planted_layer": 4,
    },
    "qwen3_next_moe_tiny": {
        "cls": Qwen3NextForCausalLM,
        "dflash_ids": [1, 2, 3, 4, 5],
        "eagle_ids": [1, 2, 3],
        "vllm_ids": [2, 3, 4, 6],
        "planted_layer": 3,
    },
}

# Three prompts of random ids (lengths 10, 13, 16), one more only the eval box has, and one
# only data_3 / hs_3 have (each with its own tokens).
GEN = torch.Generator().manual_seed(20)
PROMPTS = [torch.randint(1, 384, (n,), generator=GEN).tolist() for n in (10, 13, 16)]
EVAL_ONLY = torch.randint(1, 384, (11,), generator=GEN).tolist()
DFLASH_ONLY = torch.randint(1, 384, (9,), generator=GEN).tolist()
VLLM_ONLY = torch.randint(1, 384, (9,), generator=GEN).tolist()
CONVERSATION_IDS = ["conv-7f3a", "conv-02bc", "conv-c991"]


def text_model(model):
    inner = model.model
    return getattr(inner, "language_model", inner)


def forward(model, ids: list[int]) -> dict[str, torch.Tensor]:
    """embed, layers.{i} (each decoder layer's output, before the final norm), final_norm:
    [T, H] each, from hooks (checked against output_hidden_states)."""
    tm = text_model(model)
    got: dict[str, torch.Tensor] = {}

    def save(name):
        def hook(_m, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            got[name] = t.detach()[0].clone()

        return hook

    handles = [tm.embed_tokens.register_forward_hook(save("embed"))]
    for i, layer in enumerate(tm.layers):
        handles.append(layer.register_forward_hook(save(f"layers.{i}")))
    handles.append(tm.norm.register_forward_hook(save("final_norm")))
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    for h in handles:
        h.remove()
    hs = out.hidden_states
    L = len(tm.layers)
    assert len(hs) == L + 1
    assert torch.equal(hs[L][0], got["final_norm"]), "hidden_states[L] is after the final norm"
    for i in range(L - 1):
        assert torch.equal(hs[i + 1][0], got[f"layers.{i}"])
    return got


def hf_index(states: dict, k: int, L: int) -> torch.Tensor:
    """transformers' hidden_states[k], except that k = L is the last layer's raw output (as vLLM
    captures it), not the normed state."""
    return states["embed"] if k == 0 else states[f"layers.{k - 1}"]


def loss_mask(n: int) -> torch.Tensor:
    # The assistant turn: the second half of the sample.
    m = torch.zeros(n, dtype=torch.long)
    m[n // 2 :] = 1
    return m


def perturb(t: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    noise = torch.randn(t.shape, generator=g, dtype=torch.float32)
    tf = t.float()
    return (tf + 0.25 * tf.norm() / noise.norm() * noise).to(t.dtype)


def write(name: str, spec: dict) -> None:
    folder = ROOT / "golden" / name
    out = OUT / name
    if out.exists():
        shutil.rmtree(out)
    bf16 = spec["cls"].from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    f32 = spec["cls"].from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    eager = spec["cls"].from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="eager").eval()
    L = len(text_model(bf16).layers)
    (out).mkdir(parents=True)
    (out / "draft_config.json").write_text(
        json.dumps(
            {
                "architectures": ["DFlashDraftModel"],
                "num_target_layers": L,
                "dflash_config": {"target_layer_ids": spec["dflash_ids"], "mask_token_id": 1},
                "eagle_aux_hidden_state_layer_ids": spec["eagle_ids"],
            },
            indent=2,
        )
        + "\n"
    )

    samples = [forward(bf16, ids) for ids in PROMPTS]

    # SpecForge DFlash, with the planted bug in data_1 and data_3 of other tokens.
    rows = out / "specforge_dflash" / "rows_0-5000"
    rows.mkdir(parents=True)

    def dflash(ids, st, planted=False):
        parts = [st[f"layers.{i}"] for i in spec["dflash_ids"]]
        if planted:
            j = spec["dflash_ids"].index(spec["planted_layer"])
            parts[j] = perturb(parts[j])
        return {
            "input_ids": torch.tensor(ids),
            "loss_mask": loss_mask(len(ids)),
            "hidden_states": torch.cat(parts, dim=-1).unsqueeze(0).contiguous(),
        }

    for i, (ids, st) in enumerate(zip(PROMPTS, samples)):
        torch.save(dflash(ids, st, planted=i == 1), rows / f"data_{i}.ckpt")
    torch.save(dflash(DFLASH_ONLY, forward(bf16, DFLASH_ONLY)), rows / "data_3.ckpt")

    gz = out / "specforge_dflash_gz" / "rows_0-5000"
    gz.mkdir(parents=True)
    raw = (rows / "data_0.ckpt").read_bytes()
    (gz / "data_0.ckpt.gz").write_bytes(gzip.compress(raw, mtime=0))

    # One right-padded batch of the three prompts.
    tmax = max(len(p) for p in PROMPTS)
    k = len(spec["dflash_ids"])
    H = samples[0]["embed"].shape[-1]
    hs = torch.zeros(3, tmax, k * H, dtype=torch.bfloat16)
    ids_b = torch.zeros(3, tmax, dtype=torch.long)
    am = torch.zeros(3, tmax, dtype=torch.long)
    lm = torch.zeros(3, tmax, dtype=torch.long)
    for b, (ids, st) in enumerate(zip(PROMPTS, samples)):
        n = len(ids)
        d = dflash(ids, st)
        hs[b, :n] = d["hidden_states"][0]
        ids_b[b, :n] = d["input_ids"]
        am[b, :n] = 1
        lm[b, :n] = d["loss_mask"]
    batch = out / "specforge_dflash_batch"
    batch.mkdir(parents=True)
    torch.save(
        {"input_ids": ids_b, "attention_mask": am, "loss_mask": lm, "hidden_states": hs},
        batch / "batch.ckpt",
    )

    # SpecForge EAGLE-3.
    rows = out / "specforge_eagle3" / "rows_0-5000"
    rows.mkdir(parents=True)
    for i, (ids, st) in enumerate(zip(PROMPTS, samples)):
        aux = torch.cat([st[f"layers.{j}"] for j in spec["eagle_ids"]], dim=-1)
        torch.save(
            {
                "input_ids": torch.tensor(ids),
                "loss_mask": loss_mask(len(ids)),
                "hidden_state": st["final_norm"].unsqueeze(0).clone(),
                "aux_hidden_state": aux.unsqueeze(0).contiguous(),
            },
            rows / f"data_{i}.ckpt",
        )

    # vLLM speculators.
    spec_dir = out / "speculators"
    spec_dir.mkdir(parents=True)

    def vllm(ids, st):
        hs = torch.stack([hf_index(st, k, L) for k in spec["vllm_ids"]], dim=1).contiguous()
        return {"hidden_states": hs, "token_ids": torch.tensor(ids)}

    for i, (ids, st) in enumerate(zip(PROMPTS, samples)):
        save_file(vllm(ids, st), str(spec_dir / f"hs_{i}.safetensors"))
    save_file(vllm(VLLM_ONLY, forward(bf16, VLLM_ONLY)), str(spec_dir / "hs_3.safetensors"))

    # Model-Optimizer.
    mo = out / "modelopt"
    mo.mkdir(parents=True)
    for cid, ids, st in zip(CONVERSATION_IDS, PROMPTS, samples):
        aux = torch.cat([st[f"layers.{j}"] for j in spec["eagle_ids"]], dim=-1).contiguous()
        torch.save(
            {
                "input_ids": torch.tensor(ids),
                "hidden_states": st["final_norm"].clone(),
                "aux_hidden_states": aux,
                "loss_mask": loss_mask(len(ids)),
                "conversation_id": cid,
            },
            mo / f"{cid}.pt",
        )

    # EAGLE-1/2 ge_data (fp16 storage of the f32 run).
    ge = out / "ge_data" / "0"
    ge.mkdir(parents=True)
    for i, ids in enumerate(PROMPTS):
        st = forward(f32, ids)
        torch.save(
            {
                "input_ids": torch.tensor(ids),
                "hidden_state": st["final_norm"].half().contiguous(),
                "loss_mask": loss_mask(len(ids)),
            },
            ge / f"data_{i}.ckpt",
        )

    # The eval box: hsdiff-capture dumps in bf16.
    ev = out / "eval"
    ev.mkdir(parents=True)
    for i, ids in enumerate(PROMPTS + [EVAL_ONLY]):
        hsdiff_capture.capture(eager, ids, out=str(ev / f"prompt_{i}.safetensors"))
    print(f"wrote {out}")


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for name, spec in MODELS.items():
        write(name, spec)


if __name__ == "__main__":
    main()
