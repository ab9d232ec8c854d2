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
    specforge_dflash_batch_nomask/batch.ckpt     (qwen3_5_tiny) the batch of specforge_dflash_batch without its
                                                 attention_mask: samples 0 and 1 end in zero rows (padding)
    specforge_dflash_batch_nomask_zeroed/batch_zeroed.ckpt
                                                 the same with sample 2's last position (a real token) zeroed on
                                                 every layer: zero on this side only, a divergence, not padding
    sglang/dumper/dump_20261201_120000_000000/   SGLang's dumper (DUMPER_ENABLE=1, non-intrusive hooks,
                                                 filtered to layers sglang_ids): one torch.save
                                                 {value, meta} per tensor, named by its tags
                                                 (step=S___rank=0___dump_index=I___name=…___recompute_status=disabled___layer_id=N.pt);
                                                 per forward pass (step S = prompt S of the three, one
                                                 request each): the core field
                                                 input_ids, non_intrusive__model.layers.N.output.0 (the
                                                 layer's hidden_states: its MLP output) and .output.1 (its
                                                 residual: the stream before the MLP's add), and
                                                 non_intrusive__model.norm.output.0 (bf16, eager attention)
    sglang/dumper_inputs/dump_…/                 (qwen3_5_tiny only, as the next two) prompts 0 and 1 dumped at the inputs of layer id+1
                                                 (….layers.{N+1}.inputs.hidden_states / .inputs.residual: the
                                                 pair layer N returned, the +1 of SGLang's aux capture);
                                                 layer 0's inputs.hidden_states is the embedding
    sglang/dumper_tp2/dump_…/                    two tensor-parallel ranks (rank=0, rank=1) of prompts 0 and 1,
                                                 layer sglang_ids[0]: output.0 split along h
                                                 (meta dims "t h[tp]", half the columns per rank), output.1
                                                 whole on each rank (dims "t h # tp:replicated"),
                                                 input_ids on both ranks; meta sglang_parallel_info
                                                 tp_rank / tp_size 2
    sglang/dumper_tp2_nodims/dump_…/             the same, prompt 0 only, without `dims` in the meta (refused)
    sglang/dumper_bare/sglang_dump_1764590400.123/
                                                 the dumper before `meta` (forward_pass_id=1___rank=0___name=…___dump_index=…[___layer_id=…].pt,
                                                 torch.save of the bare tensor): prompt 0, layer sglang_ids[0]
    sglang/tensor_dump/TP0_PP0_Rank0_pid4242/Pass{n:05}.pt
                                                 --debug-tensor-dump-output-folder (prompts 0 and 1): per forward pass a dict of
                                                 leaf-module outputs: model.embed_tokens,
                                                 model.layers.N.input_layernorm (layer 0: the normed tensor;
                                                 then [normed, residual], residual = hidden_states + residual
                                                 of layer N-1), model.norm [normed, residual],
                                                 model.forward_batch_info.{input_ids,seq_lens,positions}, and
                                                 from pass 1 on the previous pass's `model` output (as the
                                                 hook's order saves it). Only these leaves are written (the
                                                 attention / MLP leaves SGLang also saves are left out to keep
                                                 the fixture small)
    sglang/tensor_dump_batch/TP0_PP0_Rank0_pid4242/Pass00000.pt
                                                 (qwen3_5_tiny only, as the next two) one prefill pass of two
                                                 requests, prompts 0 and 1 (SGLang batches concurrent
                                                 prompts: tokens concatenated, seq_lens [10, 13]); each
                                                 request computed on its own, as varlen attention does
    sglang/dumper_batch/dump_…/                  the dumper's step 0 of the same two requests (input_ids and
                                                 seq_lens core fields, layers sglang_ids)
    sglang/tensor_dump_decode/TP0_PP0_Rank0_pid4242/Pass00000.pt
                                                 a decode pass of the two requests: one token each (the
                                                 last prompt token's rows), seq_lens [10, 13] (refused: the requests' positions cannot be told
                                                 apart from a pass that holds 2 tokens)

The MoE model has 6 layers, where the pipelines' default ids repeat a layer ([1, 2, 2]); its
EAGLE-3 / Model-Optimizer / speculators files use the ids in its draft_config.json instead
(``eagle_aux_hidden_state_layer_ids``; the tests pass them).

SGLang itself is not run (it needs a GPU and its own kernels): its files are emulated from its
code — python/sglang/srt/debug_utils/dumper.py (sgl-project/sglang at 00d35548c30a58ac5925d3b59d01c634120d8d98:
_Dumper._dump_single's file name and {value, meta}, _NonIntrusiveDumper's names),
debug_utils/tensor_dump_forward_hook.py (19fed5ff26ba438998e95408ff4e954fa6f014a1), the decoder layers
of models/qwen3_5.py (005fa711897e800d45bc46e72e02ab730fca3b31: a layer returns (hidden_states,
residual), the add fused into the next RMSNorm) and the comparator's dims notation
(debug_utils/comparator/dims_spec). The (hidden_states, residual) split is the model's own: hooks on
transformers' forward take the MLP's output and the post-attention norm's input (the residual
stream), whose bf16 sum is checked to be the layer's output.

Run from the repository root::

    /work/pyvenv/bin/python scripts/make_pipeline_fixtures.py
    /work/pyvenv/bin/python scripts/make_pipeline_fixtures.py --only sglang   # the sglang/ folders only
    /work/pyvenv/bin/python scripts/make_pipeline_fixtures.py --only padding  # the *_nomask batches only

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
        # The layers SGLang's dumper is filtered to (the planted one among them), and whether
        # the dumper's other variants (inputs, tensor parallelism) are written for this model.
        "sglang_ids": [1, 4, 6],
        "sglang_variants": True,
    },
    "qwen3_next_moe_tiny": {
        "cls": Qwen3NextForCausalLM,
        "dflash_ids": [1, 2, 3, 4, 5],
        "eagle_ids": [1, 2, 3],
        "vllm_ids": [2, 3, 4, 6],
        "planted_layer": 3,
        "sglang_ids": [1, 3, 5],
        "sglang_variants": False,
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


def forward_split(model, ids: list[int]) -> dict:
    """Per decoder layer N: its input (the previous layer's output), the post-attention residual
    stream (input of post_attention_layernorm) and the MLP's output — SGLang's (residual,
    hidden_states) pair — plus the input_layernorm's output, the embedding and the final norm's
    output; [T, H] each. The pair's bf16 sum is checked to be the layer's output."""
    tm = text_model(model)
    got: dict = {}

    def keep(key, pick):
        def hook(_m, inp, out):
            t = pick(inp, out)
            t = t[0] if isinstance(t, tuple) else t
            got[key] = t.detach()[0].clone()

        return hook

    handles = [tm.embed_tokens.register_forward_hook(keep("embed", lambda i, o: o))]
    for n, layer in enumerate(tm.layers):
        handles += [
            layer.register_forward_hook(keep(("out", n), lambda i, o: o)),
            layer.input_layernorm.register_forward_hook(keep(("in_norm", n), lambda i, o: o)),
            layer.post_attention_layernorm.register_forward_hook(keep(("residual", n), lambda i, o: i[0])),
            layer.mlp.register_forward_hook(keep(("hidden", n), lambda i, o: o)),
        ]
    handles.append(tm.norm.register_forward_hook(keep("final_norm", lambda i, o: o)))
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    for h in handles:
        h.remove()
    for n in range(len(tm.layers)):
        s = (got[("hidden", n)].float() + got[("residual", n)].float()).to(got[("out", n)].dtype)
        assert torch.equal(s, got[("out", n)]), f"layer {n}: hidden + residual is not its output"
    return got


EXP = "dump_20261201_120000_000000"


def parallel_info(tp_rank: int, tp_size: int) -> dict:
    # _SGLangPlugin.collect_parallel_info() of a run without pipeline/expert/attention-dp parallelism.
    return {
        "tp_rank": tp_rank, "tp_size": tp_size, "pp_rank": 0, "pp_size": 1,
        "moe_ep_rank": 0, "moe_ep_size": 1, "moe_tp_rank": tp_rank, "moe_tp_size": tp_size,
        "moe_dp_rank": 0, "moe_dp_size": 1, "enable_dp_attention": False,
        "attn_tp_rank": tp_rank, "attn_tp_size": tp_size, "attn_dp_rank": 0, "attn_dp_size": 1,
        "local_attn_dp_rank": 0, "local_attn_dp_size": 1, "attn_cp_rank": 0, "attn_cp_size": 1,
    }


class Dumper:
    """_Dumper._dump_single: file `step=…___rank=…___dump_index=…___name=…___recompute_status=disabled[___layer_id=…].pt`
    holding {"value": tensor, "meta": {**full_kwargs, **static_meta, **meta_only_fields}}."""

    def __init__(self, folder: Path, rank: int, tp_size: int):
        self.dir = folder / EXP
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank, self.tp_size, self.index = rank, tp_size, 0

    def dump(self, step: int, name: str, value: torch.Tensor, layer_id=None, dims=None):
        self.index += 1
        full = {"step": step, "rank": self.rank, "dump_index": self.index, "name": name,
                "recompute_status": "disabled"}
        if layer_id is not None:
            full["layer_id"] = layer_id
        meta = dict(full, world_rank=self.rank, world_size=self.tp_size,
                    sglang_parallel_info=parallel_info(self.rank, self.tp_size))
        if dims is not None:
            meta["dims"] = dims
        fname = "___".join(f"{k}={v}" for k, v in full.items()) + ".pt"
        torch.save({"value": value.contiguous().clone(), "meta": meta}, self.dir / fname)


def write_sglang(name: str, spec: dict) -> None:
    folder = ROOT / "golden" / name
    out = OUT / name / "sglang"
    if out.exists():
        shutil.rmtree(out)
    eager = spec["cls"].from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="eager").eval()
    L = len(text_model(eager).layers)
    ids_n = spec["sglang_ids"]
    prompts = PROMPTS
    runs = [forward_split(eager, ids) for ids in prompts]
    layer = "non_intrusive__model.layers"

    # Outputs of the DFlash layers (a DUMPER_FILTER on layer_id), every forward pass.
    d = Dumper(out / "dumper", 0, 1)
    for step, (ids, st) in enumerate(zip(prompts, runs)):
        d.dump(step, "input_ids", torch.tensor(ids))
        for n in ids_n:
            d.dump(step, f"{layer}.{n}.output.0", st[("hidden", n)], layer_id=n)
            d.dump(step, f"{layer}.{n}.output.1", st[("residual", n)], layer_id=n)
        d.dump(step, "non_intrusive__model.norm.output.0", st["final_norm"])

    # The same forward passes at the inputs of layer id + 1 (and layer 0's: the embedding).
    variants = spec["sglang_variants"]
    d = Dumper(out / "dumper_inputs", 0, 1) if variants else None
    for step, (ids, st) in enumerate(zip(prompts[:2], runs) if variants else []):
        d.dump(step, "input_ids", torch.tensor(ids))
        d.dump(step, f"{layer}.0.inputs.hidden_states", st["embed"], layer_id=0)
        for n in [k for k in ids_n if k + 1 < L]:
            d.dump(step, f"{layer}.{n + 1}.inputs.hidden_states", st[("hidden", n)], layer_id=n + 1)
            d.dump(step, f"{layer}.{n + 1}.inputs.residual", st[("residual", n)], layer_id=n + 1)

    # Two tensor-parallel ranks, with and without `dims`.
    for sub, steps, dims in (("dumper_tp2", 2, True), ("dumper_tp2_nodims", 1, False)) if variants else []:
        ranks = [Dumper(out / sub, r, 2) for r in range(2)]
        for step in range(steps):
            st = runs[step]
            for r, d in enumerate(ranks):
                d.dump(step, "input_ids", torch.tensor(prompts[step]))
                for n in ids_n[:1]:
                    h = st[("hidden", n)]
                    half = h.shape[-1] // 2
                    d.dump(step, f"{layer}.{n}.output.0", h[:, r * half:(r + 1) * half], layer_id=n,
                           dims="t h[tp]" if dims else None)
                    d.dump(step, f"{layer}.{n}.output.1", st[("residual", n)], layer_id=n,
                           dims="t h # tp:replicated" if dims else None)

    # The dumper before `meta` and `step` (earlier dumper.py: on_forward_pass_start(), torch.save(value, path)): `forward_pass_id`,
    # the bare tensor, folder sglang_dump_{time}; prompt 0, one layer.
    if variants:
        bare = out / "dumper_bare" / "sglang_dump_1764590400.123"
        bare.mkdir(parents=True)
        n, st = ids_n[0], runs[0]
        for k, (nm, t, lid) in enumerate(
            [
                ("input_ids", torch.tensor(prompts[0]), None),
                (f"{layer}.{n}.output.0", st[("hidden", n)], n),
                (f"{layer}.{n}.output.1", st[("residual", n)], n),
            ],
            start=1,
        ):
            tags = {"forward_pass_id": 1, "rank": 0, "name": nm, "dump_index": k}
            if lid is not None:
                tags["layer_id"] = lid
            torch.save(t.contiguous().clone(), bare / ("___".join(f"{a}={b}" for a, b in tags.items()) + ".pt"))

    # --debug-tensor-dump-output-folder.
    rank_dir = out / "tensor_dump" / "TP0_PP0_Rank0_pid4242"
    rank_dir.mkdir(parents=True)
    previous = None
    for p, (ids, st) in enumerate(zip(prompts[:2], runs)):
        tensors: dict = {"model.embed_tokens": st["embed"]}
        for n in range(L):
            normed = st[("in_norm", n)]
            # input_layernorm(hidden_states, residual) returns (normed, hidden_states + residual).
            tensors[f"model.layers.{n}.input_layernorm"] = (
                normed if n == 0 else [normed, st[("out", n - 1)]]
            )
        tensors["model.norm"] = [st["final_norm"], st[("out", L - 1)]]
        tensors["model.forward_batch_info.input_ids"] = torch.tensor(ids)
        tensors["model.forward_batch_info.seq_lens"] = torch.tensor([len(ids)])
        tensors["model.forward_batch_info.positions"] = torch.arange(len(ids))
        if previous is not None:
            tensors["model"] = previous
        previous = st["final_norm"]
        torch.save(tensors, rank_dir / f"Pass{p:05d}.pt")

    if variants:
        write_sglang_batches(out, prompts[:2], runs[:2], L, ids_n)
    print(f"wrote {out}")


def tensor_dump_pass(runs: list, L: int, ids: list[int], seq_lens: list[int], positions: list[int]) -> dict:
    """One Pass{n}.pt dict of the requests `runs` (per-request forward_split results, [T, H] each)
    batched into one forward pass: every tensor the requests' rows concatenated."""
    cat = lambda pick: torch.cat([pick(st) for st in runs])
    tensors: dict = {"model.embed_tokens": cat(lambda st: st["embed"])}
    for n in range(L):
        normed = cat(lambda st: st[("in_norm", n)])
        tensors[f"model.layers.{n}.input_layernorm"] = (
            normed if n == 0 else [normed, cat(lambda st: st[("out", n - 1)])]
        )
    tensors["model.norm"] = [cat(lambda st: st["final_norm"]), cat(lambda st: st[("out", L - 1)])]
    tensors["model.forward_batch_info.input_ids"] = torch.tensor(ids)
    tensors["model.forward_batch_info.seq_lens"] = torch.tensor(seq_lens)
    tensors["model.forward_batch_info.positions"] = torch.tensor(positions)
    return tensors


def write_sglang_batches(out: Path, prompts: list, runs: list, L: int, ids_n: list) -> None:
    """Forward passes batching two requests: a prefill pass of both prompts (each request is a
    sample), in both dump formats, and a decode pass of one token per request (refused)."""
    ids = [t for p in prompts for t in p]
    lens = [len(p) for p in prompts]
    rank_dir = out / "tensor_dump_batch" / "TP0_PP0_Rank0_pid4242"
    rank_dir.mkdir(parents=True)
    positions = [i for n in lens for i in range(n)]
    torch.save(tensor_dump_pass(runs, L, ids, lens, positions), rank_dir / "Pass00000.pt")

    layer = "non_intrusive__model.layers"
    d = Dumper(out / "dumper_batch", 0, 1)
    d.dump(0, "input_ids", torch.tensor(ids))
    d.dump(0, "seq_lens", torch.tensor(lens))
    for n in ids_n:
        d.dump(0, f"{layer}.{n}.output.0", torch.cat([st[("hidden", n)] for st in runs]), layer_id=n)
        d.dump(0, f"{layer}.{n}.output.1", torch.cat([st[("residual", n)] for st in runs]), layer_id=n)
    d.dump(0, "non_intrusive__model.norm.output.0", torch.cat([st["final_norm"] for st in runs]))

    # A decode pass: one row per request, the token at its last position fed on its own (as
    # each decode step feeds one); seq_lens counts each request's whole length so far.
    last = [{k: v[-1:] for k, v in st.items()} for st in runs]
    rank_dir = out / "tensor_dump_decode" / "TP0_PP0_Rank0_pid4242"
    rank_dir.mkdir(parents=True)
    decode_ids = [p[-1] for p in prompts]
    torch.save(tensor_dump_pass(last, L, decode_ids, lens, [n - 1 for n in lens]),
               rank_dir / "Pass00000.pt")


def write_padding(name: str, spec: dict) -> None:
    """The DFlash batch of the three prompts, right-padded with zeros and no attention_mask."""
    folder = ROOT / "golden" / name
    bf16 = spec["cls"].from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    samples = [forward(bf16, ids) for ids in PROMPTS]
    tmax = max(len(p) for p in PROMPTS)
    parts = lambda st: torch.cat([st[f"layers.{i}"] for i in spec["dflash_ids"]], dim=-1)
    hs = torch.zeros(3, tmax, len(spec["dflash_ids"]) * samples[0]["embed"].shape[-1], dtype=torch.bfloat16)
    ids_b = torch.zeros(3, tmax, dtype=torch.long)
    lm = torch.zeros(3, tmax, dtype=torch.long)
    for b, (ids, st) in enumerate(zip(PROMPTS, samples)):
        n = len(ids)
        hs[b, :n] = parts(st)
        ids_b[b, :n] = torch.tensor(ids)
        lm[b, :n] = loss_mask(n)
    for sub, fname, zero_last in (
        ("specforge_dflash_batch_nomask", "batch.ckpt", False),
        ("specforge_dflash_batch_nomask_zeroed", "batch_zeroed.ckpt", True),
    ):
        out = OUT / name / sub
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        h = hs.clone()
        if zero_last:
            assert len(PROMPTS[2]) == tmax, "sample 2 has no padding"
            h[2, tmax - 1] = 0
        torch.save({"input_ids": ids_b, "loss_mask": lm, "hidden_states": h}, out / fname)
    print(f"wrote {OUT / name}/specforge_dflash_batch_nomask*")


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    only = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--only" else None
    for name, spec in MODELS.items():
        if only is None:
            write(name, spec)
        if only in (None, "sglang"):
            write_sglang(name, spec)
        if only in (None, "padding") and name == "qwen3_5_tiny":
            write_padding(name, spec)


if __name__ == "__main__":
    main()
