"""transformers ≤ 5.14 ("era A": module globals, GatedDeltaNet layer attributes, fla's norm class
chosen at construction), run with the pinned transformers 5.14.1 overlay venv that scripts/test.sh
makes ($HSDIFF_ERA_A_PYTHON). Era A takes the packages only with CUDA, so on a CPU machine its
own choice is always torch; what is checked here is that forcing works through the layer
attributes, that `torch` is the package-free result bit for bit, and that 5.14 and 5.24 agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GOLDEN_FIZZBUZZ_F32, REPO, assert_bit_identical, hsdiff_binary, read_dump, rel_l2

# hsdiff's f32 band (rel L2 against the float64 truth, as in tests/golden_parity.rs): two
# transformers releases run the same math with different op order.
F32_BAND = 1e-5


@pytest.fixture(scope="module")
def era_a_python() -> str:
    exe = os.environ.get("HSDIFF_ERA_A_PYTHON")
    assert exe and Path(exe).is_file(), "HSDIFF_ERA_A_PYTHON unset or missing: run scripts/test.sh"
    return exe


def capture(python: str, out: Path, flags: list[str], standin: Path | None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if standin is not None:
        env["PYTHONPATH"] = str(standin)
    cmd = [python, "-m", "hsdiff_capture", "--model", str(REPO / "golden" / "qwen3_5_tiny"),
           "--prompt", "fizzbuzz", "--out", str(out), *flags]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return read_dump(out)


def test_era_a_forcing(era_a_python, standin, tmp_path):
    absent, m_absent = capture(era_a_python, tmp_path / "absent.safetensors", [], None)
    assert m_absent["transformers"] == "5.14.1"
    for e in m_absent["linear_attention_impl"].values():
        assert (e["resolved_by"], e["environment"], e["actual"]) == ("layer attribute", "torch", "torch")
    golden, _ = read_dump(GOLDEN_FIZZBUZZ_F32)
    for k in absent:
        if k != "input_ids":
            assert rel_l2(absent[k], golden[k]) <= F32_BAND, k

    forced, m_forced = capture(era_a_python, tmp_path / "torch.safetensors", ["--linear-attention", "torch"], standin)
    assert_bit_identical(forced, absent)
    e = m_forced["linear_attention_impl"]["chunk_gated_delta_rule"]
    assert m_forced["kernel_packages"]["fla"]["importable"] is True
    assert "takes it only when it and CUDA are available" in e["reason"]

    fla, m_fla = capture(era_a_python, tmp_path / "fla.safetensors", ["--linear-attention", "fla"], standin)
    assert rel_l2(fla["layers.0"], absent["layers.0"]) > 1e-2
    impl = m_fla["linear_attention_impl"]
    for name, kind in (("causal_conv1d_fn", "causal_conv1d"), ("chunk_gated_delta_rule", "fla"), ("gated_norm", "fla")):
        assert (impl[name]["environment"], impl[name]["actual"], impl[name]["calls"]) == ("torch", kind, 6), name
        assert impl[name]["reason"].startswith("forced to"), name
    assert m_fla["implementation"] == "transformers/fast-path"


def test_era_a_state(era_a_python, tmp_path):
    """transformers 5.14 keeps the final states where 5.24 does: `--state` reads them, and both
    releases' f32 states lie within the f32 band of the float64 truth (hsdiff's f64 run, equal to
    transformers' strict float64 to ~1e-14: its cached prefill of the whole prompt). Compared with
    each other, two f32 runs differ by up to the sum of their errors, which depends on the CPU's
    kernels: the truth is the fixed point."""
    old, _ = capture(era_a_python, tmp_path / "a.safetensors", ["--state"], None)
    new, _ = capture(sys.executable, tmp_path / "b.safetensors", ["--state"], None)
    states = sorted(k for k in new if k.startswith("state."))
    assert states and sorted(k for k in old if k.startswith("state.")) == states
    truth = f64_states(tmp_path / "truth.safetensors", len(new["input_ids"][0]))
    for k in states:
        assert old[k].shape == new[k].shape == truth[k].shape and old[k].dtype == new[k].dtype, k
        assert rel_l2(old[k], truth[k]) <= F32_BAND, k
        assert rel_l2(new[k], truth[k]) <= F32_BAND, k


def f64_states(out: Path, tokens: int) -> dict:
    """The final states after the prompt from `hsdiff dump --dtype f64` (a cached prefill of all
    `tokens` and no decode step)."""
    r = subprocess.run([str(hsdiff_binary()), "dump", "--model", str(REPO / "golden" / "qwen3_5_tiny"),
                        "--prompt", "fizzbuzz", "--dtype", "f64", "--decode-from", str(tokens - 1),
                        "--decode-steps", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return read_dump(out)[0]
