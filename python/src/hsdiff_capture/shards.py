"""One shard of a dataset comparison and the merge of the parts, as `hsdiff` commands (the
contract in docs/datasets.md, "Beyond one machine"). No scheduler here: `hsdiff_capture.ray` runs
`run_shard` as Ray tasks; anything else that can run a function or a command can do the same."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .binary import find_hsdiff

# A shard's exit codes that mean it finished (0 nothing flagged, 1 something flagged); anything
# else (2 trouble, or killed by a signal) is a shard to run again.
FINISHED = (0, 1)


@dataclass(frozen=True)
class Attempt:
    """One run of one shard: hsdiff's exit code (negative: killed by that signal), the last line
    of its stderr, and where it ran."""

    index: int
    code: int
    last_words: str
    where: str

    def finished(self) -> bool:
        return self.code in FINISHED

    def why(self) -> str:
        """What went wrong, in one line."""
        if self.code < 0:
            try:
                name = signal.Signals(-self.code).name
            except ValueError:
                name = f"signal {-self.code}"
            return f"hsdiff was killed by {name} on {self.where}"
        return f"hsdiff exited {self.code} on {self.where}: {self.last_words or 'no message'}"


def part_path(parts: Path, index: int) -> Path:
    return parts / f"part-{index}.json"


def shard_command(compare_args: list[str], index: int, total: int, part: Path) -> list[str]:
    """`compare A B OPTS --shard I/N --format json --out PART` (without the binary)."""
    return ["compare", *compare_args, "--shard", f"{index}/{total}", "--format", "json", "--out", str(part)]


def run_shard(compare_args: list[str], index: int, total: int, part: str, cwd: str) -> Attempt:
    """Runs shard `index` of `total` with the hsdiff of the environment this runs in (a worker's),
    in `cwd` (the driver's folder, so relative paths mean what they meant there). A part already
    complete for the same run is skipped by hsdiff itself (resume, docs/datasets.md); anything
    else at `part` is redone."""
    where = f"{socket.gethostname()} (pid {os.getpid()})"
    if not os.path.isdir(cwd):
        return Attempt(index, 2, f"the driver's folder {cwd} is not on this node (use paths on shared storage)", where)
    hsdiff = find_hsdiff()
    cmd = [str(hsdiff.path), *shard_command(compare_args, index, total, Path(part))]
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    return Attempt(index, r.returncode, lines[-1] if lines else "", where)
