"""`hsdiff_capture.compare()`: hsdiff's JSON report from Python with the exit code, options as
flags, exit 2 raised with hsdiff's message."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import GOLDEN_MODEL, REPO, hsdiff_binary
from hsdiff_capture import HsdiffError, compare
from hsdiff_capture.compare import flags

PIPELINES = REPO / "tests" / "fixtures" / "pipelines" / "qwen3_5_tiny"
DATASET = (PIPELINES / "specforge_dflash", PIPELINES / "eval")
COMPARE = REPO / "tests" / "fixtures" / "compare"


def cli_json(*args: str) -> tuple[int, dict]:
    r = subprocess.run([str(hsdiff_binary()), "compare", *args, "--format", "json"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def without(report: dict, *keys: str) -> dict:
    return {k: v for k, v in report.items() if k not in keys}


def test_same_captures_give_exit_code_0_and_the_clis_report(absent_dump):
    report = compare(absent_dump, absent_dump)
    assert report["exit_code"] == 0
    code, cli = cli_json(str(absent_dump), str(absent_dump))
    assert code == 0 and without(report, "exit_code", "command") == without(cli, "command")


def test_a_planted_bug_gives_exit_code_1():
    # tests/cli's pair with a perturbation planted in one layer.
    a, b = COMPARE / "dump_f32.safetensors", COMPARE / "dump_perturbed.safetensors"
    report = compare(a, b)
    assert report["exit_code"] == 1 and report["verdict"] == "mismatch"
    code, cli = cli_json(str(a), str(b))
    assert code == 1 and without(report, "exit_code", "command") == without(cli, "command")


def test_options_become_flags_on_a_dataset():
    a, b = DATASET
    cfg = PIPELINES / "draft_config.json"
    report = compare(a, b, draft_config=cfg, model=GOLDEN_MODEL)
    code, cli = cli_json(str(a), str(b), "--draft-config", str(cfg), "--model", str(GOLDEN_MODEL))
    assert report["exit_code"] == code == 1
    assert without(report, "exit_code", "command") == without(cli, "command")
    # A list becomes a comma-separated value: the draft config's layers, given by hand.
    listed = compare(a, b, layer_ids=[1, 2, 4, 5, 6], model=GOLDEN_MODEL, fail_on="never")
    code, cli = cli_json(str(a), str(b), "--layer-ids", "1,2,4,5,6", "--model", str(GOLDEN_MODEL),
                         "--fail-on", "never")
    assert listed["exit_code"] == code == 0
    assert without(listed, "exit_code", "command") == without(cli, "command")


def test_flags_spelling():
    assert flags({"layer_ids": [1, 2], "no_floor": True, "plot": None, "shift": 0, "model": False,
                  "map": {"x": "y", "u": "v"}}) == [
        "--layer-ids", "1,2", "--no-floor", "--shift", "0", "--map", "x=y", "--map", "u=v"]
    for reserved in ("format", "out"):
        with pytest.raises(HsdiffError, match=f"{reserved}= is not an option here"):
            flags({reserved: "x"})


def test_exit_2_raises_with_hsdiffs_message(tmp_path, absent_dump):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(HsdiffError) as e:
        compare(missing, absent_dump)
    assert str(e.value).startswith("hsdiff compare exited 2: hsdiff: error: ")
    assert str(missing) in str(e.value)
    with pytest.raises(HsdiffError, match="exited 2: hsdiff: error: --draft-config: give the layer ids once"):
        compare(*DATASET, draft_config=PIPELINES / "draft_config.json", layer_ids=[1])
