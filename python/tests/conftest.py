"""Shared fixtures: the golden tiny model, stand-in kernel packages, running the installed
`hsdiff-capture` command, reading dumps.

Runs with the packages of python/tests/requirements.txt and hsdiff-capture installed
(scripts/test.sh does both)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN_GENERATOR = REPO / "golden" / "make.py"
GOLDEN_MODEL = REPO / "golden" / "qwen3_5_tiny"
GOLDEN_FIZZBUZZ_F32 = REPO / "golden" / "states" / "qwen3_5_tiny" / "fizzbuzz.f32.safetensors"

# Stand-ins for the kernel packages, with the real packages' module paths and signatures. Their
# outputs are deliberately 25 % larger than the torch functions' (a stand-in must be told apart
# from the fallback in the hidden states, not only in the fingerprint).
STANDIN = {
    "fla/__init__.py": '__version__ = "0.0.0+hsdiff-standin"\n',
    "fla/ops/__init__.py": "",
    "fla/ops/gated_delta_rule/__init__.py": '''
        import torch

        def _rule(q, k, v, g, beta, initial_state=None, output_final_state=False):
            o = (1.25 * v.float() * beta.float()[..., None]).to(v.dtype)
            b, _, h, dv = v.shape
            state = torch.zeros(b, h, k.shape[-1], dv, dtype=torch.float32, device=v.device)
            return o, (state if output_final_state else None)

        def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                                   cu_seqlens=None, use_qk_l2norm_in_kernel=False):
            return _rule(q, k, v, g, beta, initial_state, output_final_state)

        def fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                                             output_final_state=False, cu_seqlens=None,
                                             use_qk_l2norm_in_kernel=False):
            return _rule(q, k, v, g, beta, initial_state, output_final_state)
    ''',
    "fla/modules/__init__.py": '''
        import torch
        import torch.nn.functional as F
        from torch import nn

        class FusedRMSNormGated(nn.Module):
            def __init__(self, hidden_size, elementwise_affine=True, eps=1e-5, activation="swish",
                         device=None, dtype=None):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
                self.eps = eps
                self.activation = activation

            def forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
                y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
                return 1.25 * y * F.silu(g)
    ''',
    "causal_conv1d/__init__.py": '''
        import torch.nn.functional as F

        __version__ = "0.0.0+hsdiff-standin"

        def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                             return_final_states=False, final_states_out=None, activation=None):
            out = F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])
            return 1.25 * F.silu(out[..., : x.shape[-1]])

        def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None):
            raise NotImplementedError("decode is not exercised by the tests")
    ''',
}


@pytest.fixture(scope="session")
def standin(tmp_path_factory) -> Path:
    """A folder with stand-in `fla` and `causal_conv1d` packages, to put on PYTHONPATH/sys.path."""
    root = tmp_path_factory.mktemp("standin")
    for rel, text in STANDIN.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def cli_command() -> list[str]:
    """The installed console script next to this interpreter (what `pip install ./python` made)."""
    exe = Path(sys.executable).parent / "hsdiff-capture"
    assert exe.is_file(), f"{exe} missing: install the package first (pip install ./python; scripts/test.sh does)"
    return [str(exe)]


def run_cli(args: list[str], standin: Path | None = None, path: str | None = None,
            python: Path | None = None,
            hsdiff_bin: Path | None = None) -> subprocess.CompletedProcess:
    """The installed `hsdiff-capture`, or `python -m hsdiff_capture` with another interpreter
    (`bare_python`: one whose environment has no hsdiff of its own)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("HSDIFF_BIN", None)
    if standin is not None:
        env["PYTHONPATH"] = str(standin)
    if path is not None:
        env["PATH"] = path
    if hsdiff_bin is not None:
        env["HSDIFF_BIN"] = str(hsdiff_bin)
    if python is not None:
        cmd = [str(python), "-m", "hsdiff_capture"]
    else:
        cmd = cli_command()
    return subprocess.run(cmd + args, env=env, capture_output=True, text=True, timeout=600)


def read_dump(path: Path) -> tuple[dict, dict]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["hsdiff"])
        return {k: f.get_tensor(k) for k in f.keys()}, meta


def rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def assert_bit_identical(a: dict, b: dict) -> None:
    import torch

    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert not a[k].is_floating_point() or not torch.isnan(a[k]).any(), f"{k} has NaN"
        assert torch.equal(a[k], b[k]), f"{k} differs"


@pytest.fixture(scope="session")
def golden_here() -> dict:
    """golden/make.py's f32 record of the golden model on fizzbuzz (its own `load_for_mode` and
    `run_mode`), made now, on this machine. The committed golden file was made on another CPU,
    and torch's f32 kernels round differently per instruction set (AVX-512 vs AMX, MKL's
    blocking), so checks of "the same bits as golden/make.py" compare against this record; the
    committed file is checked against it within the f32 band (test_api.py)."""
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN_GENERATOR)
    assert spec is not None and spec.loader is not None
    make_golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_golden)
    committed, _ = read_dump(GOLDEN_FIZZBUZZ_F32)
    ids = committed["input_ids"]
    model, dtype = make_golden.load_for_mode(GOLDEN_MODEL, make_golden.Qwen3_5ForConditionalGeneration, "f32")
    caps, _ = make_golden.run_mode(model, dtype, "f32", ids, make_golden.CallCounter())
    return {"input_ids": ids, **caps}


@pytest.fixture(scope="session")
def fizzbuzz_args() -> list[str]:
    return ["--model", str(GOLDEN_MODEL), "--prompt", "fizzbuzz", "--dtype", "f32"]


@pytest.fixture(scope="session")
def absent_dump(tmp_path_factory, fizzbuzz_args) -> Path:
    """The default capture where neither fla nor causal_conv1d is importable."""
    out = tmp_path_factory.mktemp("absent") / "absent.safetensors"
    r = run_cli([*fizzbuzz_args, "--out", str(out)])
    assert r.returncode == 0, r.stderr
    return out


def hsdiff_binary() -> Path:
    """The hsdiff this environment's wheel installed next to the interpreter (scripts/test.sh
    builds the wheel at the repository root and installs it here)."""
    path = Path(sys.executable).parent / "hsdiff"
    assert path.is_file(), f"{path} missing: install the wheel first (maturin build; scripts/test.sh does)"
    return path


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> Path:
    """An interpreter of a venv that sees this environment's packages (a .pth file) but has no
    `hsdiff` of its own in its bin/: where the package must fall back to $HSDIFF_BIN and PATH."""
    import sysconfig

    root = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Every site folder this interpreter sees (its purelib, and any that a .pth there added).
    sites = [p for p in sys.path if p.endswith("site-packages")] or [sysconfig.get_paths()["purelib"]]
    (Path(purelib) / "zz-hsdiff-test-base.pth").write_text("".join(f"{p}\n" for p in sites))
    assert not (root / "bin" / "hsdiff").exists()
    return python


def fake_hsdiff(folder: Path, version: str, code: int = 2) -> Path:
    """A stand-in `hsdiff` in `folder`: answers `--version` with `version`, records any other
    arguments in folder/args and exits `code`."""
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "hsdiff"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "hsdiff {version}"; exit 0; fi\n'
                    f'echo "$@" > {folder}/args\nexit {code}\n')
    fake.chmod(0o755)
    return fake


def path_with(folder: Path) -> str:
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


def path_without_hsdiff(tmp: Path) -> str:
    """PATH with only the folders needed, none holding an `hsdiff`."""
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "hsdiff").exists()]
    assert shutil.which("hsdiff", path=os.pathsep.join(keep)) is None
    return os.pathsep.join(keep)
