"""The package's outputs under hsdiff's output policy (hsdiff_capture/outputs.py): never over an
input (the model folder and its files, the prompt file, an engine's spool), atomic replace through
a temp sibling keeping the replaced file's mode, devices and FIFOs written in place, names the file
system cannot take refused before the model loads, no temp file left by an error or a signal."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
import transformers

import hsdiff_capture
from conftest import GOLDEN_MODEL, cli_command, read_dump, run_cli
from hsdiff_capture import CaptureError, engines, outputs

IDS = [9, 41, 3, 77, 12, 5]


def digest(folder: Path) -> dict:
    """Every file under `folder` with its bytes and mode."""
    return {p.relative_to(folder): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def model_copy(tmp_path) -> Path:
    """The golden tiny model in a folder of the test's own (a failing test must not damage golden/)."""
    dst = tmp_path / "model"
    shutil.copytree(GOLDEN_MODEL, dst)
    return dst


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The golden model loaded from a copy, so its `name_or_path` is a folder the test may watch."""
    folder = tmp_path_factory.mktemp("loaded") / "model"
    shutil.copytree(GOLDEN_MODEL, folder)
    m = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return m, folder


def refused(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("target", ["config.json", "model.safetensors", "tokenizer_config.json",
                                    "new.safetensors", "."])
def test_the_cli_never_writes_into_the_model_folder_over_its_files(model_copy, target):
    before = digest(model_copy)
    r = run_cli(["--model", str(model_copy), "--tokens", "1,2,3", "--out", str(model_copy / target)])
    refused(r, "--out")
    assert digest(model_copy) == before


def test_the_cli_refuses_the_model_file_by_another_spelling_and_by_a_hard_link(model_copy, tmp_path):
    before = digest(model_copy)
    link = tmp_path / "link.safetensors"
    os.link(model_copy / "model.safetensors", link)
    for out in [model_copy / ".." / "model" / "config.json", link]:
        refused(run_cli(["--model", str(model_copy), "--tokens", "1,2", "--out", str(out)]),
                "one of this command's inputs")
    assert digest(model_copy) == before


def test_the_cli_never_writes_over_the_prompt_file(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def fizzbuzz(n):\n")
    r = run_cli(["--model", str(GOLDEN_MODEL), "--prompt", f"@{prompt}", "--out", str(prompt)])
    refused(r, "one of this command's inputs")
    assert prompt.read_text() == "def fizzbuzz(n):\n"


def test_a_name_the_file_system_cannot_take_is_refused_before_the_model_loads(tmp_path):
    too_long = "r" * (outputs.name_max(tmp_path) + 1)
    started = time.monotonic()
    r = run_cli(["--model", str(GOLDEN_MODEL), "--tokens", "1,2", "--out", str(tmp_path / too_long)])
    refused(r, "the file name is", "at most")
    assert list(tmp_path.iterdir()) == []
    # With --ab the names made from the prefix are checked too.
    prefix = "p" * (outputs.name_max(tmp_path) - len(".auto.safetensors") + 1)
    refused(run_cli(["--model", str(GOLDEN_MODEL), "--tokens", "1,2", "--ab", "--out", str(tmp_path / prefix)]),
            "the file name is")
    assert list(tmp_path.iterdir()) == []
    assert time.monotonic() - started < 120


def test_a_legal_name_too_long_for_a_plain_temp_suffix_gets_a_shorter_temp_name(loaded, tmp_path):
    model, _ = loaded
    name = "r" * (outputs.name_max(tmp_path) - len(".safetensors")) + ".safetensors"
    res = hsdiff_capture.capture(model, IDS, out=tmp_path / name)
    assert [p.name for p in tmp_path.iterdir()] == [name]
    tensors, _ = read_dump(res.path)
    assert tensors["input_ids"].tolist() == [IDS]


def test_the_api_never_writes_over_the_loaded_models_files(loaded):
    model, folder = loaded
    before = digest(folder)
    for name in ["config.json", "model.safetensors", "added.safetensors"]:
        with pytest.raises(CaptureError, match="out: "):
            hsdiff_capture.capture(model, IDS, out=folder / name)
    assert digest(folder) == before


def test_a_replaced_dump_is_replaced_whole_and_keeps_its_mode(loaded, tmp_path):
    model, _ = loaded
    target = tmp_path / "run.safetensors"
    target.write_bytes(b"an older dump")
    os.chmod(target, 0o640)
    hsdiff_capture.capture(model, IDS, out=target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    tensors, _ = read_dump(target)
    assert tensors["input_ids"].tolist() == [IDS]
    assert [p.name for p in tmp_path.iterdir()] == ["run.safetensors"]


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_dump_gets_the_mode_the_umask_gives(loaded, tmp_path, mask):
    model, _ = loaded
    target = tmp_path / f"new-{mask:03o}.safetensors"
    old = os.umask(mask)
    try:
        hsdiff_capture.capture(model, IDS, out=target)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_a_writer_that_fails_half_way_leaves_the_old_file_and_no_temp_file(loaded, tmp_path, monkeypatch):
    import safetensors.torch

    model, _ = loaded
    target = tmp_path / "run.safetensors"
    target.write_bytes(b"the previous run")

    def half(tensors, path, metadata=None):
        Path(path).write_bytes(b"half a dump")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", half)
    with pytest.raises(CaptureError, match="cannot write: No space left on device"):
        hsdiff_capture.capture(model, IDS, out=target)
    assert target.read_bytes() == b"the previous run"
    assert [p.name for p in tmp_path.iterdir()] == ["run.safetensors"]


def test_a_fifo_and_dev_null_are_written_in_place(loaded, tmp_path):
    import safetensors.torch

    model, _ = loaded
    regular = hsdiff_capture.capture(model, IDS, out=tmp_path / "regular.safetensors")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    deadline = time.monotonic() + 30
    while True:  # the writer opens without blocking: wait until the reader has the FIFO open
        try:
            res = hsdiff_capture.capture(model, IDS, out=fifo)
            break
        except CaptureError as e:
            assert "no process reads" in str(e) and time.monotonic() < deadline, e
            time.sleep(0.05)
    reader.join(30)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    streamed = safetensors.torch.load(got[0])
    for name, t in regular.tensors.items():
        assert torch.equal(streamed[name], t), name
    assert res.path == fifo
    hsdiff_capture.capture(model, IDS, out="/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "regular.safetensors"]


def test_a_fifo_nobody_reads_is_an_error_not_a_hang(loaded, tmp_path):
    model, _ = loaded
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CaptureError, match="a FIFO that no process reads"):
        hsdiff_capture.capture(model, IDS, out=fifo)


def test_two_spellings_of_one_target_and_non_files_are_refused(tmp_path):
    with pytest.raises(CaptureError, match="name the same file"):
        outputs.check_all([(tmp_path / "r.safetensors", "--out"), (tmp_path / "." / "r.safetensors", "--out")], [])
    with pytest.raises(CaptureError, match="a directory"):
        outputs.check_all([(tmp_path, "--out")], [])
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(CaptureError, match="symbolic link to a file that does not exist"):
        outputs.check_all([(tmp_path / "dangling", "--out")], [])
    # One stream can take several outputs.
    assert len(outputs.check_all([("/dev/null", "--out"), ("/dev/null", "--out")], [])) == 2


def test_the_engine_dump_never_lands_on_the_spooled_passes(tmp_path):
    spool = engines.EngineSpool(tmp_path / "spool", num_layers=1)
    (spool.dir / "embed@000000.safetensors").write_bytes(b"a spooled pass")
    with pytest.raises(CaptureError, match="one of this command's inputs"):
        spool.write_dump(spool.dir / "embed@000000.safetensors", [1, 2], engine="sglang", model=str(GOLDEN_MODEL))
    assert (spool.dir / "embed@000000.safetensors").read_bytes() == b"a spooled pass"


def test_sigterm_during_the_model_load_leaves_no_temp_file(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([*cli_command(), "--model", str(GOLDEN_MODEL), "--tokens", "1,2,3", "--out",
                             str(out_dir / "run.safetensors")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(out_dir.iterdir()):  # the reservation: made before torch is imported
        assert proc.poll() is None and time.monotonic() < deadline, "no temp file was reserved"
        time.sleep(0.01)
    assert [p.name.startswith(".run.safetensors.hsdiff-capture-") for p in out_dir.iterdir()] == [True]
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)
    assert proc.returncode == -signal.SIGTERM, proc.stderr.read()
    assert list(out_dir.iterdir()) == []
