"""The pure-Python parts of the serving-engine adapter (the engines themselves do not install on
a CPU machine): the SGLang hook specification, the spool hook on (hidden, residual) outputs,
arming, and the assembly of chunked passes into a dump."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from conftest import GOLDEN_MODEL, read_dump
from hsdiff_capture import CaptureError, engines


class Layer(nn.Module):
    """An engine-style decoder layer: returns (hidden, residual) with the add deferred."""

    def __init__(self, h: int, seed: int) -> None:
        super().__init__()
        self.lin = nn.Linear(h, h)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(h, h, generator=torch.Generator().manual_seed(seed)) / h ** 0.5)

    def forward(self, hidden, residual):
        residual = hidden if residual is None else hidden + residual
        return self.lin(residual), residual


class Norm(nn.Module):
    def forward(self, hidden, residual):
        x = hidden + residual
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), x


class Inner(nn.Module):
    def __init__(self, h: int, n: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(50, h)
        self.layers = nn.ModuleList(Layer(h, s) for s in range(n))
        self.norm = Norm()


class EngineModel(nn.Module):
    def __init__(self, h: int = 16, n: int = 3) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.model = Inner(h, n)

    def forward(self, ids):
        """ids: [num_tokens] (flattened, as engines run). Also returns the true residual stream."""
        h, residual, streams = self.model.embed_tokens(ids), None, []
        for layer in self.model.layers:
            h, residual = layer(h, residual)
            streams.append(h + residual)
        return self.model.norm(h, residual)[0], streams


def attach(model, spool):
    """What SGLang's hook manager does with sglang_engine_kwargs()['forward_hooks']."""
    handles, by_name = [], dict(model.named_modules())
    for spec in spool.sglang_engine_kwargs()["forward_hooks"]:
        module_name, fn = spec["hook_factory"].split(":")
        factory = getattr(importlib.import_module(module_name), fn)
        for target in spec["target_modules"]:
            handles.append(by_name[target].register_forward_hook(factory(spec["config"])))
    return handles


def test_sglang_kwargs_name_every_tensor_once(tmp_path):
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=3)
    kw = spool.sglang_engine_kwargs()
    assert kw["disable_cuda_graph"] is True and kw["disable_radix_cache"] is True
    targets = [s["target_modules"] for s in kw["forward_hooks"]]
    assert targets == [["model.embed_tokens"], ["model.layers.0"], ["model.layers.1"], ["model.layers.2"],
                       ["model.norm"]]
    assert {s["hook_factory"] for s in kw["forward_hooks"]} == {"hsdiff_capture.engines:spool_hook_factory"}


def test_chunked_prefill_is_assembled_into_the_residual_stream(tmp_path):
    model, ids = EngineModel(), torch.randint(0, 50, (11,), generator=torch.Generator().manual_seed(3))
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=3)
    handles = attach(model, spool)
    with torch.no_grad():
        model(ids[:4])  # a warm-up pass before arming: not recorded
        with spool.armed():
            # A prefill chunked in two passes; each pass's residual restarts (no cross-chunk state
            # in this toy model), so the expected stream is computed per chunk the same way.
            final_a, streams_a = model(ids[:7])
            final_b, streams_b = model(ids[7:])
    for h in handles:
        h.remove()
    out = spool.write_dump(tmp_path / "engine.safetensors", ids.tolist(), engine="sglang", model=str(GOLDEN_MODEL),
                           engine_args={"tp_size": 1})
    t, meta = read_dump(out)
    assert torch.equal(t["input_ids"], ids.unsqueeze(0))
    for i in range(3):
        assert torch.equal(t[f"layers.{i}"], torch.cat([streams_a[i], streams_b[i]]).unsqueeze(0))
    assert torch.equal(t["final_norm"], torch.cat([final_a, final_b]).unsqueeze(0))
    assert t["embed"].shape == (1, 11, 16)
    assert (meta["backend"], meta["source"], meta["tokens"], meta["module_path"]) == ("sglang", "pytorch", 11,
                                                                                    "model.layers")
    assert meta["engine_args"] == {"tp_size": 1} and "weights_digest" in meta


def test_assembly_refuses_a_token_count_that_does_not_match(tmp_path):
    model, ids = EngineModel(), torch.arange(6)
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=3)
    handles = attach(model, spool)
    with torch.no_grad(), spool.armed():
        model(ids[:4])  # e.g. a cached prefix: only 4 of 6 tokens recomputed
    for h in handles:
        h.remove()
    with pytest.raises(CaptureError, match="hold 4 tokens, the prompt has 6"):
        spool.assemble(ids.tolist())
    with pytest.raises(CaptureError, match="not empty"):
        engines.EngineSpool(tmp_path / "spool", num_layers=3)


def test_nothing_spooled_is_an_error(tmp_path):
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=2)
    with pytest.raises(CaptureError, match="no spooled output for `embed`"):
        spool.assemble([1, 2, 3])


def test_vllm_attach_and_detach_in_the_worker_function(tmp_path):
    model = EngineModel()
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=3)
    assert engines._vllm_attach(str(spool.dir), spool.modules, model) == 5
    with torch.no_grad(), spool.armed():
        model(torch.arange(5))
    assert engines._vllm_detach(model) == 5
    assert all(not m._forward_hooks for m in model.modules())
    assert spool.assemble(list(range(5)))["layers.2"].shape == (1, 5, 16)
