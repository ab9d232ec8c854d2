"""The API on an already-loaded model: `capture` and `recording`, forcing in-process, the
fingerprint, and nothing left behind."""

from __future__ import annotations

import hashlib
import re
import struct
import sys

import pytest
import torch
import transformers

import hsdiff_capture
from conftest import GOLDEN_FIZZBUZZ_F32, GOLDEN_MODEL, assert_bit_identical, read_dump, rel_l2
from hsdiff_capture import CaptureError

# hsdiff's f32 band (rel L2): batch-2 training-mode forwards may block matmuls differently from the
# batch-1 golden run, which moves f32 results by a few ulps per op over 8 layers.
F32_BAND = 1e-5


@pytest.fixture(scope="module")
def golden(golden_here):
    """golden/make.py's f32 capture made on this machine, and the committed file's fingerprint."""
    return golden_here, read_dump(GOLDEN_FIZZBUZZ_F32)[1]


def test_the_committed_golden_capture_is_this_machines_within_the_f32_band(golden):
    committed, _ = read_dump(GOLDEN_FIZZBUZZ_F32)
    assert sorted(committed) == sorted(golden[0])
    assert torch.equal(committed["input_ids"], golden[0]["input_ids"])
    for k in committed:
        if k != "input_ids":
            assert rel_l2(golden[0][k], committed[k]) <= F32_BAND, k


@pytest.fixture(scope="module")
def model():
    m = transformers.AutoModelForCausalLM.from_pretrained(str(GOLDEN_MODEL), dtype=torch.float32).eval()
    return m


def hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def modeling_state(model) -> dict:
    mod = sys.modules[type(model.model.layers[0]).__module__]
    names = ("causal_conv1d_fn", "causal_conv1d_update", "torch_chunk_gated_delta_rule",
             "torch_recurrent_gated_delta_rule")
    norms = [layer.linear_attn.norm.__dict__.get("forward") for layer in model.model.layers
             if hasattr(layer, "linear_attn")]
    return {"funcs": {n: getattr(mod, n) for n in names}, "norm_forwards": norms, "hooks": hook_count(model)}


def test_capture_on_a_loaded_model_is_the_golden_capture(model, golden, tmp_path):
    before = modeling_state(model)
    ids = golden[0]["input_ids"][0].tolist()
    res = hsdiff_capture.capture(model, ids, out=tmp_path / "api.safetensors")
    tensors, meta = read_dump(res.path)
    assert_bit_identical(tensors, golden[0])
    assert res.fingerprint == meta and sorted(res.tensors) == sorted(tensors)
    assert modeling_state(model) == before


@pytest.mark.parametrize("cls,path", [
    ("Qwen3_5ForCausalLM", "model.layers"),
    ("Qwen3_5ForConditionalGeneration", "model.language_model.layers"),
    ("AutoModel", "language_model.layers"),
])
def test_finds_the_decoder_layers_wherever_they_live(cls, path, golden, tmp_path):
    m = getattr(transformers, cls).from_pretrained(str(GOLDEN_MODEL), dtype=torch.float32).eval()
    res = hsdiff_capture.capture(m, golden[0]["input_ids"], out=tmp_path / f"{cls}.safetensors")
    assert res.fingerprint["module_path"] == path
    expected = {k: v for k, v in golden[0].items() if cls != "AutoModel" or k != "logits"}
    assert_bit_identical(res.tensors, expected)  # a bare model has no head, so no logits


def test_fingerprint_fields(model, golden, tmp_path):
    res = hsdiff_capture.capture(model, golden[0]["input_ids"], out=tmp_path / "fp.safetensors")
    m, g = res.fingerprint, golden[1]
    # The digests hsdiff computes for the folder (golden/make.py records the same method).
    for key in ("weights_digest", "config_sha256", "tokenizer_sha256", "tokens"):
        assert m[key] == g[key], key
    ids = golden[0]["input_ids"][0].tolist()
    assert m["token_ids_sha256"] == hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()
    assert (m["format"], m["source"], m["backend"], m["dtype"], m["device"]) == (
        "hsdiff.dump/v1", "pytorch", "transformers", "f32", "cpu")
    assert (m["model_class"], m["module_path"], m["layers"], m["training"]) == (
        "Qwen3_5ForCausalLM", "model.layers", 8, False)
    assert m["tool"] == f"hsdiff-capture {hsdiff_capture.__version__}"
    assert m["torch"] == torch.__version__ and m["transformers"] == transformers.__version__
    assert m["kernel_packages"]["fla"] == {"importable": False, "version": None,
                                           "error": "ModuleNotFoundError: No module named 'fla'"}
    impl = m["linear_attention_impl"]
    assert sorted(impl) == ["causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                            "fused_recurrent_gated_delta_rule", "gated_norm"]
    for name, e in impl.items():
        for key in ("requested", "environment", "actual", "reason", "implementation", "fast", "package", "calls"):
            assert key in e, (name, key)
        assert (e["requested"], e["environment"], e["actual"], e["fast"]) == ("auto", "torch", "torch", False)
    # Prefill: the chunked rule, the convolution and the norm once per linear-attention layer.
    assert [impl[k]["calls"] for k in sorted(impl)] == [6, 0, 6, 0, 6]
    assert impl["chunk_gated_delta_rule"]["resolved_by"] == "use_kernel_func_from_hub_with_fallback"
    assert "fla does not import (ModuleNotFoundError" in impl["chunk_gated_delta_rule"]["reason"]


def test_layers_and_dtype_select_what_is_stored(model, golden, tmp_path):
    res = hsdiff_capture.capture(model, golden[0]["input_ids"], out=tmp_path / "sub.safetensors",
                                 layers=[3, 0], dtype="bf16")
    t = res.tensors
    assert sorted(t) == ["embed", "final_norm", "input_ids", "layers.0", "layers.3", "logits"]
    for k in ("embed", "layers.0", "layers.3", "final_norm", "logits"):
        assert t[k].dtype == torch.bfloat16 and torch.equal(t[k], golden[0][k].to(torch.bfloat16)), k
    assert res.fingerprint["captured_layers"] == [0, 3]
    assert (res.fingerprint["dtype"], res.fingerprint["stored_dtype"]) == ("f32", "bf16")


def test_forcing_a_package_in_process_and_restoring(model, golden, tmp_path, standin, monkeypatch):
    monkeypatch.syspath_prepend(str(standin))
    before = modeling_state(model)
    try:
        res = hsdiff_capture.capture(model, golden[0]["input_ids"], out=tmp_path / "fla.safetensors",
                                     core="fla", norm="fla")
        e = res.fingerprint["linear_attention_impl"]["chunk_gated_delta_rule"]
        # transformers resolved torch at import (fla was absent then); the stand-in was forced.
        assert (e["environment"], e["actual"], e["calls"]) == ("torch", "fla", 6)
        assert e["reason"].startswith("forced to fla in-process")
        assert "imports now but did not when transformers loaded" in e["reason"]
        assert rel_l2(res.tensors["layers.0"], golden[0]["layers.0"]) > 1e-2
        assert modeling_state(model) == before
        again = hsdiff_capture.capture(model, golden[0]["input_ids"], out=tmp_path / "again.safetensors")
        assert_bit_identical(again.tensors, golden[0])
    finally:
        for name in [n for n in sys.modules if n == "fla" or n.startswith("fla.")]:
            del sys.modules[name]


def test_recording_a_training_step_keeps_batch_row_0(model, golden, tmp_path):
    ids = golden[0]["input_ids"]
    other = torch.randint(0, model.config.get_text_config().vocab_size, ids.shape,
                          generator=torch.Generator().manual_seed(1234))
    batch = torch.cat([ids, other])
    before = modeling_state(model)
    model.train()
    try:
        with hsdiff_capture.recording(model, out=tmp_path / "step.safetensors") as rec:
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            model(input_ids=batch)  # a second forward in the block is not recorded
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert torch.isfinite(loss)
    tensors, meta = read_dump(rec.result.path)
    assert meta["training"] is True
    assert torch.equal(tensors["input_ids"], ids)
    for k in ("embed", *(f"layers.{i}" for i in range(8)), "final_norm", "logits"):
        assert tensors[k].shape == golden[0][k].shape, k
        assert not torch.isnan(tensors[k]).any(), k
        assert rel_l2(tensors[k], golden[0][k]) <= F32_BAND, k
    assert modeling_state(model) == before


def test_recording_errors_leave_nothing_behind(model, golden, tmp_path):
    before = modeling_state(model)
    with pytest.raises(CaptureError, match="no forward pass"):
        with hsdiff_capture.recording(model, out=tmp_path / "none.safetensors"):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with hsdiff_capture.recording(model, out=tmp_path / "boom.safetensors"):
            raise RuntimeError("boom")
    with pytest.raises(CaptureError, match=re.escape("decoder layers 0..7")):
        hsdiff_capture.recording(model, out=tmp_path / "x.safetensors", layers=[8])
    with pytest.raises(CaptureError, match="expected \\[T\\] or \\[1, T\\]"):
        hsdiff_capture.capture(model, torch.zeros(2, 3, dtype=torch.int64), out=tmp_path / "b.safetensors")
    with pytest.raises(CaptureError, match=re.escape("fla.ops.gated_delta_rule` does not import")):
        hsdiff_capture.capture(model, golden[0]["input_ids"], out=tmp_path / "f.safetensors", core="fla")
    assert modeling_state(model) == before
    assert not any(tmp_path.iterdir())


def test_moe_captures_record_every_moe_layers_router_choice(tmp_path):
    """hsdiff sets routing flips aside only where a side's own router choice is shown: the
    package records each MoE layer's top-k ids (and router logits), the same choices as the
    golden capture of the same run."""
    folder = GOLDEN_MODEL.parent / "qwen3_next_moe_tiny"
    golden_f32 = GOLDEN_MODEL.parent / "states" / "qwen3_next_moe_tiny" / "fizzbuzz.f32.safetensors"
    want, _ = read_dump(golden_f32)
    m = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    res = hsdiff_capture.capture(m, want["input_ids"], out=tmp_path / "moe.safetensors", layers=[3])
    tensors, meta = read_dump(res.path)
    # What hsdiff checks the router ids against (src/formats/router_ids.rs).
    assert (meta["num_experts"], meta["num_experts_per_tok"]) == (8, 2)
    routed = sorted(int(k.split(".")[1]) for k in tensors if k.endswith(".topk_ids"))
    assert routed == [0, 2, 3, 4, 5]  # every MoE layer (layer 1 is dense), not only the kept one
    tokens = want["input_ids"].shape[-1]
    for i in routed:
        ids = tensors[f"router.{i}.topk_ids"]
        assert ids.dtype == torch.int64 and list(ids.shape) == [1, tokens, 2]
        assert list(tensors[f"router.{i}.logits"].shape) == [1, tokens, 8]
        agree = (ids.sort(-1).values == want[f"router.{i}.topk_ids"].sort(-1).values).all(-1).float().mean()
        assert agree >= 0.95, (i, float(agree))  # f32 on two machines: near-ties may differ
