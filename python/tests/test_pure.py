"""The package's pure-Python parts, without torch: the dtype names (held to hsdiff's by one
golden list), argument parsing, tensor names, the output policy, and the typed public API."""

from __future__ import annotations

import inspect
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO
from hsdiff_capture import (
    CaptureError,
    capture,
    cli,
    engines,
    fingerprint,
    names,
    outputs,
    recording,
    states,
)

TORCH_NAME = {"f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def golden_dtype_names() -> list[tuple[str, str | None]]:
    """(name, hsdiff's label or None for a name hsdiff rejects) from tests/fixtures/dtype_names.txt,
    the list src/cli/values.rs's tests hold hsdiff's `--dtype` to."""
    rows = []
    for line in (REPO / "tests/fixtures/dtype_names.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, label = line.split()
            rows.append((name, None if label == "-" else label))
    return rows


def test_dtype_names_are_exactly_hsdiffs():
    rows = golden_dtype_names()
    assert len(rows) >= 20
    for name, label in rows:
        if label in TORCH_NAME:
            assert fingerprint.torch_dtype_name(name) == TORCH_NAME[label], name
        else:
            # Rejected by hsdiff, or fp8 / fp8-ue8m0 (hsdiff's W8A8 serving emulation, not a dtype
            # a torch capture stores).
            with pytest.raises(CaptureError, match=f"unknown dtype '{name}'"):
                fingerprint.torch_dtype_name(name)
    # No name of the package's own beyond the list.
    assert set(fingerprint.DTYPE_NAMES) == {n for n, label in rows if label in TORCH_NAME}
    # The fingerprint's labels are hsdiff's.
    assert {fingerprint.dtype_label(f"torch.{t}") for t in TORCH_NAME.values()} == set(TORCH_NAME)


def test_the_package_imports_and_parses_arguments_without_torch():
    code = (
        "import sys\n"
        "for m in ('torch', 'transformers', 'safetensors', 'numpy'): sys.modules[m] = None\n"
        "import hsdiff_capture, hsdiff_capture.cli as c\n"
        "a = c.parser().parse_args(['--model', 'm', '--out', 'o.safetensors'])\n"
        "print(a.dtype, a.linear_attention, a.ab)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "f32 auto None\n"


def test_argument_parsing():
    ap = cli.parser()
    a = ap.parse_args(["--model", "m", "--out", "p", "--ab", "--dtype", "bf16", "--tokens", "1,2"])
    assert (a.ab, a.dtype, a.tokens, a.prompt) == ("auto,torch", "bf16", "1,2", None)
    with pytest.raises(SystemExit) as e:  # --prompt and --tokens exclude each other
        ap.parse_args(["--model", "m", "--out", "p", "--prompt", "x", "--tokens", "1"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        ap.parse_args(["--model", "m", "--out", "p", "--linear-attention", "fast"])

    assert cli.token_ids(ap.parse_args(["--model", "m", "--out", "p", "--tokens", "7, 8,9,"])) == ([7, 8, 9], {})
    with pytest.raises(CaptureError, match="--tokens '1,x': not comma-separated integers"):
        cli.token_ids(ap.parse_args(["--model", "m", "--out", "p", "--tokens", "1,x"]))
    with pytest.raises(CaptureError, match="no tokens to run"):
        cli.token_ids(ap.parse_args(["--model", "m", "--out", "p", "--tokens", ","]))

    assert cli.ab_settings("torch, fla") == ["torch", "fla"]
    for bad in ("auto", "auto,auto", "auto,fast", "auto,torch,fla"):
        with pytest.raises(CaptureError, match=f"--ab {bad}: expected two different settings"):
            cli.ab_settings(bad)

    for path in ("/abs", "./rel", "~/m", "a/b/c"):
        assert cli.looks_like_path(path), path
    assert not cli.looks_like_path("Qwen/Qwen3.5-0.8B-no-such-folder-here")


def test_prompts(tmp_path):
    assert cli.prompt_text("fizzbuzz") == (REPO / "prompts/fizzbuzz.txt").read_text()
    assert cli.prompt_text("not a built-in prompt") == "not a built-in prompt"
    f = tmp_path / "p.txt"
    f.write_bytes("héllo\n".encode())
    assert cli.prompt_text(f"@{f}") == "héllo\n"
    with pytest.raises(CaptureError, match=f"--prompt @{tmp_path}/absent.txt: "):
        cli.prompt_text(f"@{tmp_path}/absent.txt")


def test_names():
    # The --ab dumps: PREFIX.X.safetensors, a `.safetensors` the prefix ends in not doubled.
    assert [p.name for p in cli.ab_paths(REPO / "run.safetensors", ["auto", "torch"])] == [
        "run.auto.safetensors", "run.torch.safetensors"]
    assert [p.name for p in cli.ab_paths(REPO / "run", ["fla", "torch"])] == ["run.fla.safetensors",
                                                                            "run.torch.safetensors"]
    # Router tensors in layer order, numerically.
    routers = ["router.10.logits", "router.2.topk_ids", "router.2.logits", "router.1.topk_ids"]
    assert sorted(routers, key=names.router_key) == [
        "router.1.topk_ids", "router.2.logits", "router.2.topk_ids", "router.10.logits"]


def golden_tensor_names() -> list[str]:
    """tests/fixtures/tensor_names.txt: every kind of name hsdiff reads, for a 3-layer hybrid MoE
    model (layers 0 and 1 linear attention), which src/capture/key.rs's tests parse."""
    lines = (REPO / "tests/fixtures/tensor_names.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_tensor_names_are_hsdiffs():
    golden = golden_tensor_names()
    layers, linear = range(3), [0, 1]
    written = [names.INPUT_IDS, names.EMBED, names.FINAL_NORM, names.LOGITS]
    written += [names.layer(i) for i in layers]
    written += [f(i) for i in layers for f in (names.router_topk_ids, names.router_logits)]
    written += [f(i) for i in linear for f in (names.state_conv, names.state_recurrent)]
    # What the writers name, through the same functions: the final states from a cache ...
    cache = SimpleNamespace(layers=[SimpleNamespace(conv_states={0: f"conv{i}"}, recurrent_states={0: f"rec{i}"})
                                    for i in layers])
    found = states.final_states(cache, linear)
    assert list(found.values()) == ["conv0", "rec0", "conv1", "rec1"]
    written += list(found)
    # ... and an engine's spooled modules.
    written += list(engines.tensor_modules(len(layers)))
    missing = [n for n in written if n not in golden]
    assert not missing, f"written by hsdiff-capture but not hsdiff's names: {missing}"
    # The recorder's predicates pick out of the list exactly the states and routers it writes.
    assert [n for n in golden if names.is_state(n)] == list(found)
    routers = [f(i) for i in layers for f in (names.router_topk_ids, names.router_logits)]
    assert [n for n in golden if names.is_router(n) and n in written] == routers


def test_output_policy(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hi")
    inputs = [model, prompt]
    with pytest.raises(CaptureError, match="is one of this command's inputs"):
        outputs.check_all([(model / "config.json", "--out")], inputs)
    with pytest.raises(CaptureError, match="is one of this command's inputs"):
        outputs.check_all([(prompt, "--out")], inputs)
    with pytest.raises(CaptureError, match="would add a model file to"):
        outputs.check_all([(model / "new.safetensors", "--out")], inputs)
    [ok] = outputs.check_all([(tmp_path / "run.safetensors", "--out")], inputs)
    assert ok.given == tmp_path / "run.safetensors" and not ok.stream
    assert outputs.is_model_file("model-00001-of-00002.safetensors")
    assert outputs.is_model_file("model.safetensors.index.json")
    assert not outputs.is_model_file("generation_config.json")


def test_the_public_api_is_typed():
    for fn in (capture, recording.__init__, recording.__enter__, recording.__exit__):
        sig = inspect.signature(fn)
        untyped = [p.name for p in sig.parameters.values()
                   if p.name != "self" and p.annotation is inspect.Parameter.empty]
        assert not untyped, f"{fn.__qualname__}: {untyped}"
        assert sig.return_annotation is not inspect.Signature.empty, fn.__qualname__
