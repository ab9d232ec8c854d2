"""Which hsdiff the package finds (this environment's, then $HSDIFF_BIN, then PATH) and the
version check, in interpreters with and without an hsdiff of their own."""

from __future__ import annotations

import os
import subprocess

import pytest

import hsdiff_capture
from conftest import fake_hsdiff, hsdiff_binary, path_with, path_without_hsdiff
from hsdiff_capture.binary import find_hsdiff, version_of

FIND = "from hsdiff_capture.binary import find_hsdiff; print(find_hsdiff().describe())"


def find_in(python, tmp_path, path: str, hsdiff_bin=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HSDIFF_BIN"}
    env["PATH"] = path
    if hsdiff_bin is not None:
        env["HSDIFF_BIN"] = str(hsdiff_bin)
    return subprocess.run([str(python), "-c", FIND], env=env, capture_output=True, text=True, timeout=120)


def test_the_environments_own_binary_comes_first_and_is_this_version(tmp_path, monkeypatch):
    # Even with $HSDIFF_BIN and PATH pointing at other binaries.
    other = fake_hsdiff(tmp_path / "other", hsdiff_capture.__version__)
    monkeypatch.setenv("HSDIFF_BIN", str(other))
    monkeypatch.setenv("PATH", path_with(other.parent))
    found = find_hsdiff()
    assert (found.path, found.source) == (hsdiff_binary(), "this environment's")
    assert version_of(found.path) == hsdiff_capture.__version__


def test_without_its_own_hsdiff_binary_then_path(tmp_path, bare_python):
    env_bin = fake_hsdiff(tmp_path / "env", hsdiff_capture.__version__)
    on_path = fake_hsdiff(tmp_path / "path", hsdiff_capture.__version__)
    r = find_in(bare_python, tmp_path, path_with(on_path.parent), hsdiff_bin=env_bin)
    assert r.returncode == 0 and r.stdout.strip() == f"{env_bin} ($HSDIFF_BIN)", r.stderr
    r = find_in(bare_python, tmp_path, path_with(on_path.parent))
    assert r.returncode == 0 and r.stdout.strip() == f"{on_path} (PATH)", r.stderr


@pytest.mark.parametrize("case", ["other version", "not hsdiff", "missing", "none at all"])
def test_refusals_name_the_binary_and_both_versions(tmp_path, bare_python, case):
    path, hsdiff_bin = path_without_hsdiff(tmp_path), None
    if case == "other version":
        hsdiff_bin = fake_hsdiff(tmp_path / "old", "0.0.1")
        want = (f"hsdiff at {hsdiff_bin} ($HSDIFF_BIN) is version 0.0.1, but hsdiff-capture is "
                f"{hsdiff_capture.__version__}")
    elif case == "not hsdiff":
        hsdiff_bin = tmp_path / "true"
        hsdiff_bin.write_text("#!/bin/sh\necho something else\n")
        hsdiff_bin.chmod(0o755)
        want = f"{hsdiff_bin} --version exited 0 and printed 'something else': not an hsdiff binary"
    elif case == "missing":
        hsdiff_bin = tmp_path / "nowhere" / "hsdiff"
        want = f"$HSDIFF_BIN={hsdiff_bin} is not an executable file"
    else:
        want = "no hsdiff binary: not in this environment ("
    r = find_in(bare_python, tmp_path, path, hsdiff_bin=hsdiff_bin)
    assert r.returncode != 0
    assert f"hsdiff_capture.errors.HsdiffError: {want}" in r.stderr, r.stderr

