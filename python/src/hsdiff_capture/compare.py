"""`compare(a, b, **options)`: `hsdiff compare a b --format json` from Python, so a training or
evaluation script can gate on the verdict (docs/capture-pytorch.md, "hsdiff from Python")."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from .binary import Hsdiff, find_hsdiff
from .errors import HsdiffError

# compare() chooses these itself: the report comes back as the return value.
RESERVED = ("format", "out")


def flags(options: Mapping[str, Any]) -> list[str]:
    """Keyword options as `hsdiff compare` flags: `layer_ids=[1, 2]` → `--layer-ids 1,2`,
    `no_floor=True` → `--no-floor`, `False`/`None` → left out, a mapping → the flag once per item
    (`map={"x": "y"}` → `--map x=y`), anything else → its `str()`."""
    out: list[str] = []
    for key, value in options.items():
        if key in RESERVED:
            raise HsdiffError(f"compare(): {key}= is not an option here: compare() asks hsdiff for JSON and "
                              "returns the report (write it with json.dump)")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                out += [flag, f"{k}={v}"]
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def compare(a: str | os.PathLike[str], b: str | os.PathLike[str], *, hsdiff: Hsdiff | None = None,
            **options: Any) -> dict[str, Any]:
    """Runs `hsdiff compare a b --format json [flags(options)]` and returns its JSON report with
    one key added: `exit_code`, hsdiff's (0 no divergence, 1 divergence flagged by `--fail-on`).
    Exit 2 (trouble: a bad file, a missing tensor, …) raises HsdiffError with hsdiff's message.
    `hsdiff` is the binary to run (default: `find_hsdiff()`, this environment's first)."""
    binary = hsdiff if hsdiff is not None else find_hsdiff()
    cmd = [str(binary.path), "compare", os.fspath(a), os.fspath(b), "--format", "json", *flags(options)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        said = r.stderr.strip() or f"no message (stdout: {r.stdout.strip()[:200]!r})"
        raise HsdiffError(f"hsdiff compare exited {r.returncode}: {said}")
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise HsdiffError(f"hsdiff compare exited {r.returncode} without a JSON report on stdout ({e})") from e
    if not isinstance(report, dict):
        raise HsdiffError(f"hsdiff compare printed JSON that is no report object: {r.stdout[:200]!r}")
    report["exit_code"] = r.returncode
    return report
