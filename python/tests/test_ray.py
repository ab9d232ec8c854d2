"""`python -m hsdiff_capture.ray` on a local Ray cluster (`ray.init(num_cpus=2)`, with the token
authentication a new local cluster of Ray ≥ 2.59 turns on by default): a dataset fixture in 3
shards, the hsdiff of one shard killed mid-run by this test and run again by the runner, and the
merged report equal to the unsharded run's verdict and rows."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import GOLDEN_MODEL, REPO, path_without_hsdiff
from hsdiff_capture import compare

PIPELINES = REPO / "tests" / "fixtures" / "pipelines" / "qwen3_5_tiny"
A, B = PIPELINES / "specforge_dflash", PIPELINES / "eval"
OPTIONS = ["--draft-config", str(PIPELINES / "draft_config.json"), "--model", str(GOLDEN_MODEL)]


@pytest.fixture(scope="module")
def cluster():
    """A local cluster of 2 CPUs started here; the runner joins it with --address. The token is
    given in the environment, so nothing is written to ~/.ray."""
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    try:
        # Imported only now: Ray reads RAY_AUTH_MODE into its configuration when it is imported.
        import ray

        info = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20)
        yield info.address_info["gcs_address"], auth
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def runner(args: list[str], env_extra: dict, tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, **env_extra, "PATH": path_without_hsdiff(tmp_path)}
    env.pop("HSDIFF_BIN", None)
    return subprocess.Popen([sys.executable, "-m", "hsdiff_capture.ray", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def shard_processes(marker: str, shard: str) -> list[int]:
    """The pids of running `hsdiff compare … --shard SHARD …` processes whose arguments hold `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/hsdiff") and shard.encode() in argv and any(marker.encode() in a for a in argv):
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def killed_run(cluster, tmp_path_factory):
    """The unsharded comparison, and the runner's 3 shards with shard 1's hsdiff killed (SIGKILL,
    no clean-up, as on a pre-empted node) as soon as this test sees it running."""
    address, auth = cluster
    tmp = tmp_path_factory.mktemp("killed")
    whole = compare(A, B, draft_config=OPTIONS[1], model=GOLDEN_MODEL)
    out = tmp / "merged.json"
    args = [str(A), str(B), "--shards", "3", "--address", address, "--out", str(out), *OPTIONS]
    p = runner(args, auth, tmp)
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and p.poll() is None and time.monotonic() < deadline:
        pids = shard_processes(str(tmp), "1/3")
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
    stdout, stderr = p.communicate(timeout=600)
    merged = json.loads(out.read_text()) if out.is_file() else None
    return {"whole": whole, "merged": merged, "code": p.returncode, "stdout": stdout, "stderr": stderr,
            "killed": killed, "parts": tmp / "merged.json.parts", "args": args, "auth": auth, "tmp": tmp}


def test_the_killed_shard_is_run_again(killed_run):
    run = killed_run
    assert run["killed"] is not None, f"shard 1/3 never seen running:\n{run['stderr']}"
    assert "shard 1/3: hsdiff was killed by SIGKILL on " in run["stderr"], run["stderr"]
    assert "running it again (try 2 of 3)" in run["stderr"], run["stderr"]
    for i in range(3):
        assert f"shard {i}/3 done (exit " in run["stderr"], run["stderr"]
    # A SIGKILL can land while hsdiff writes its part: the atomic write's temporary (`.part-1.json…`,
    # hidden) is then left behind — nothing can clean up after SIGKILL — and never read as a part.
    parts = sorted(q.name for q in run["parts"].iterdir() if not q.name.startswith("."))
    assert parts == ["part-0.json", "part-1.json", "part-2.json"]


def test_the_same_command_again_resumes_every_complete_part(killed_run):
    run = killed_run
    before = {q.name: q.read_bytes() for q in run["parts"].iterdir()}
    p = runner(run["args"], run["auth"], run["tmp"])
    _, stderr = p.communicate(timeout=600)
    assert p.returncode == run["code"], stderr
    for i in range(3):
        assert f"part-{i}.json: a complete part of this run (shard {i}/3, digest verified): skipped" in stderr, stderr
    assert {q.name: q.read_bytes() for q in run["parts"].iterdir()} == before
    assert json.loads((run["tmp"] / "merged.json").read_text()) == run["merged"]


def test_the_merge_equals_the_unsharded_run(killed_run):
    run = killed_run
    whole, merged = run["whole"], run["merged"]
    assert run["code"] == whole["exit_code"] == 1, run["stderr"]
    assert merged is not None, run["stderr"]
    for key in ("verdict", "summary", "pairs_total", "unpaired_a", "unpaired_b", "failed", "shard"):
        assert merged[key] == whole[key], key
    assert [(s["id"], s["verdict"], s["first_divergent"]) for s in merged["samples"]] == [
        (s["id"], s["verdict"], s["first_divergent"]) for s in whole["samples"]]
    assert [(r["name"], r["flagged"], r["worst_sample"]) for r in merged["layers"]] == [
        (r["name"], r["flagged"], r["worst_sample"]) for r in whole["layers"]]
    assert merged["summary"] in run["stdout"]  # the merge's table leads with the same sentence


def test_the_merge_is_bit_equal_to_the_unsharded_run(killed_run):
    whole, merged = killed_run["whole"], killed_run["merged"]
    assert {k: v for k, v in merged.items() if k != "command"} == {
        k: v for k, v in whole.items() if k not in ("command", "exit_code")}


def test_a_shard_that_keeps_failing_is_reported_and_nothing_merged(cluster, tmp_path):
    address, auth = cluster
    out = tmp_path / "never.json"
    p = runner([str(A), str(tmp_path / "no-such-dataset"), "--shards", "2", "--tries", "2", "--address", address,
                "--out", str(out), *OPTIONS], auth, tmp_path)
    _, stderr = p.communicate(timeout=600)
    assert p.returncode == 2, stderr
    assert "gave up after 2 tries" in stderr and "no-such-dataset" in stderr, stderr
    assert "2 of 2 shards did not finish (0, 1); nothing merged" in stderr, stderr
    assert not out.exists()


def test_the_runner_refuses_options_it_sets_itself(tmp_path):
    p = runner([str(A), str(B), "--shards", "2", "--out", str(tmp_path / "x.json"), "--shard", "0/2"], {}, tmp_path)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == 2
    assert "--shard is set by the runner for each shard" in stderr, stderr
