"""`--state` / `state=True`: the final conv window and recurrent state of every linear-attention
layer, read from transformers' cache after the prefill, equal hsdiff's own f64 dump states on both
golden models (strict-f64 capture), pair with hsdiff's state rows in `hsdiff compare`, and leave
the hidden states as a no-cache capture has them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import GOLDEN_GENERATOR, REPO, assert_bit_identical, hsdiff_binary, read_dump, rel_l2, run_cli

MODELS = ("qwen3_5_tiny", "qwen3_next_moe_tiny")
# f64 rounding over 8 layers and 155 tokens (transformers and hsdiff sum in different orders):
# measured ≤ 1e-14 (see docs/capture-pytorch.md); anything like a layout or precision slip is
# ≥ 1e-7 (f32) or O(1).
F64_BOUND = 1e-12

# The package's `capture` under golden/make.py's strict-f64 mode (every float32 request rewritten
# to float64 and audited; the model loaded as the golden files were, RoPE's inv_freq rebuilt in
# float64 — transformers computes it in float32 at init, 1e-10 off from layer 3 on), on the golden
# f64 dump's token ids. Runs in its own interpreter: the mode and golden/make.py's import-time
# checks stay out of this process.
STRICT_CAPTURE = textwrap.dedent("""
    import importlib.util
    import sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("make_golden", sys.argv[1])
    make_golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_golden)
    MODEL_SPECS, StrictF64, load_for_mode = make_golden.MODEL_SPECS, make_golden.StrictF64, make_golden.load_for_mode
    import hsdiff_capture
    from safetensors import safe_open

    folder, golden, out = Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    model, _ = load_for_mode(folder, MODEL_SPECS[folder.name]["cls"], "f64")
    with safe_open(golden, "pt") as f:
        ids = f.get_tensor("input_ids")
    strict = StrictF64()
    with strict:
        hsdiff_capture.capture(model, ids, out, state=True, metadata={"prompt": "fizzbuzz"})
    if strict.violations:
        sys.exit(f"strict f64 audit: tensors below float64: {dict(strict.violations)}")
""")


def linear_layers(model: str) -> list[int]:
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(str(REPO / "golden" / model))
    cfg = getattr(cfg, "text_config", cfg)
    return [i for i, kind in enumerate(cfg.layer_types) if kind == "linear_attention"]


@pytest.fixture(scope="module", params=MODELS)
def f64_pair(request, tmp_path_factory):
    """(model, package strict-f64 capture with states, hsdiff f64 reference dump) on fizzbuzz."""
    model = request.param
    tmp = tmp_path_factory.mktemp(f"state-{model}")
    golden = REPO / "golden" / "states" / model / "fizzbuzz.f64.safetensors"
    pkg = tmp / "pkg.safetensors"
    r = subprocess.run([sys.executable, "-c", STRICT_CAPTURE, str(GOLDEN_GENERATOR), str(REPO / "golden" / model),
                        str(golden), str(pkg)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ids, _ = read_dump(golden)
    tokens = ",".join(str(int(x)) for x in ids["input_ids"].flatten())
    ours = tmp / "hsdiff.safetensors"
    r = subprocess.run([str(hsdiff_binary()), "dump", "--model", str(REPO / "golden" / model), "--dtype", "f64",
                        "--backend", "reference", "--tokens", tokens, "--out", str(ours)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return model, pkg, ours


def test_package_states_equal_hsdiff_f64_states(f64_pair):
    model, pkg, ours = f64_pair
    a, meta = read_dump(pkg)
    b, _ = read_dump(ours)
    import torch

    layers = linear_layers(model)
    assert layers
    names = [f"state.layers.{i}.{kind}" for i in layers for kind in ("conv", "recurrent")]
    assert sorted(n for n in a if n.startswith("state.")) == sorted(names)
    assert sorted(n for n in b if n.startswith("state.")) == sorted(names)
    worst = 0.0
    for n in names:
        assert a[n].shape == b[n].shape and a[n].dtype == b[n].dtype == torch.float64, n
        assert torch.isfinite(a[n]).all() and b[n].norm() > 0, n
        worst = max(worst, rel_l2(a[n], b[n]))
    assert worst <= F64_BOUND, f"{model}: worst state rel L2 {worst:.2e}"
    print(f"{model}: worst state rel L2 package vs hsdiff (f64) {worst:.2e}")
    assert meta["dtype"] == "f64"


def test_compare_shows_the_state_rows(f64_pair, tmp_path):
    model, pkg, ours = f64_pair
    report = tmp_path / "r.json"
    r = subprocess.run([str(hsdiff_binary()), "compare", str(pkg), str(ours), "--model", str(REPO / "golden" / model),
                        "--format", "json", "--out", str(report)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rep = json.loads(report.read_text())
    rows = {t["name"]: t for t in rep["tensors"]}
    order = [t["name"] for t in rep["tensors"]]
    last_layer = max(i for i, t in enumerate(rep["tensors"]) if t["kind"] in ("linear_attention", "full_attention"))
    for i in linear_layers(model):
        row = rows[f"state.layers.{i}.recurrent"]
        assert row["kind"] == "state" and row["verdict"] == "ok", row
        assert row["rel_l2"] <= F64_BOUND, row
        # After the decoder layers, before the final norm.
        assert last_layer < order.index(row["name"]) < order.index("final_norm"), order
    assert any("conv window" in n for n in rep["notes"]), rep["notes"]


def test_state_capture_leaves_the_hidden_states_alone(fizzbuzz_args, absent_dump, tmp_path):
    out = tmp_path / "state.safetensors"
    r = run_cli([*fizzbuzz_args, "--state", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    with_state, _ = read_dump(out)
    without, _ = read_dump(absent_dump)
    states = {k: v for k, v in with_state.items() if k.startswith("state.")}
    assert len(states) == 2 * len(linear_layers("qwen3_5_tiny"))
    assert_bit_identical({k: v for k, v in with_state.items() if k not in states}, without)
    import torch

    # f32 run: conv window in the compute dtype, recurrent state as transformers keeps it (float32).
    assert all(v.dtype == torch.float32 for v in states.values())

    # Only one side holds states: compare says so instead of dropping them silently.
    r = subprocess.run([str(hsdiff_binary()), "compare", str(out), str(absent_dump), "--no-floor"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "final states only in A" in r.stderr + r.stdout
