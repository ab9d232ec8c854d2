"""`python -m hsdiff_capture.ray A B --shards N --out FILE [compare options…]`: a dataset
comparison as N Ray tasks, one `hsdiff compare … --shard I/N` each, on an existing cluster
(`--address`) or a local one; a failed or killed shard is run again; then `hsdiff merge` writes
the JSON report to FILE and prints the table, and the exit code is the merge's (0 nothing
flagged, 1 flagged, 2 trouble). Needs Ray (`pip install .[ray]`); nothing else in the package
imports it. docs/datasets.md, "Ray"."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from .binary import find_hsdiff
from .errors import HsdiffError
from .shards import Attempt, part_path, run_shard

PROG = "python -m hsdiff_capture.ray"
# Set by this runner for every shard; given among the compare options they would contradict it.
OWN_FLAGS = ("--shard", "--format", "--out")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Compare two datasets as N Ray tasks (one `hsdiff compare --shard I/N` each), retry failed "
                    "shards, merge the parts.",
        epilog="Every other option is passed to each shard's `hsdiff compare` (e.g. --draft-config FILE "
               "--model DIR); A and B come first. Paths must be the same on every node (shared storage); "
               "relative ones are taken from this folder. docs/datasets.md has the details.")
    ap.add_argument("a", metavar="A", help="side A (a dataset folder)")
    ap.add_argument("b", metavar="B", help="side B")
    ap.add_argument("--shards", type=positive, required=True, metavar="N", help="number of shards (Ray tasks)")
    ap.add_argument("--out", required=True, metavar="FILE", help="the merged JSON report")
    ap.add_argument("--parts", metavar="DIR", help="folder of the shards' parts (default: FILE.parts)")
    ap.add_argument("--address", metavar="ADDR",
                    help="an existing Ray cluster (ray.init(address=ADDR)); default: $RAY_ADDRESS, else a local one")
    ap.add_argument("--tries", type=positive, default=3, metavar="K", help="runs of a shard before giving up (3)")
    ap.add_argument("--cpus-per-shard", type=float, default=1.0, metavar="C", help="Ray's num_cpus per task (1)")
    ap.add_argument("--fail-on", choices=("drift", "mismatch", "never"),
                    help="passed to every shard and to the merge (the merged exit code)")
    ap.add_argument("--plot", metavar="FILE", help="passed to the merge only")
    return ap


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a whole number ≥ 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a whole number ≥ 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args, passthrough = ap.parse_known_args(argv)
    for flag in passthrough:
        if flag.split("=", 1)[0] in OWN_FLAGS:
            ap.error(f"{flag.split('=', 1)[0]} is set by the runner for each shard; it takes --shards N and --out FILE")
    try:
        return run(args, passthrough)
    except HsdiffError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


def note(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, passthrough: list[str]) -> int:
    import ray

    hsdiff = find_hsdiff()
    out = Path(args.out).absolute()
    parts = Path(args.parts).absolute() if args.parts else out.with_name(out.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    compare_args = [args.a, args.b, *passthrough]
    if args.fail_on:
        compare_args += ["--fail-on", args.fail_on]
    n, cwd = args.shards, os.getcwd()

    if not ray.is_initialized():
        ray.init(address=args.address)
    # Retries are this loop's (it sees hsdiff's exit code and says why); Ray's own, for a worker
    # that died, stay as they are.
    task = ray.remote(num_cpus=args.cpus_per_shard)(run_shard)

    def submit(index: int):
        return task.remote(compare_args, index, n, str(part_path(parts, index)), cwd)

    note(f"{n} shards of hsdiff compare {' '.join(compare_args)}; parts in {parts}")
    pending = {submit(i): (i, 1) for i in range(n)}
    finished: dict[int, int] = {}
    failed: dict[int, str] = {}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        index, attempt = pending.pop(ready[0])
        try:
            result: Attempt = ray.get(ready[0])
            ok, why = result.finished(), result.why()
        except ray.exceptions.RayError as e:
            ok, why = False, f"the Ray task failed: {str(e).strip().splitlines()[-1]}"
        if ok:
            finished[index] = result.code
            note(f"shard {index}/{n} done (exit {result.code}, on {result.where}; {len(finished)} of {n} done): "
                 f"{result.last_words}")
        elif attempt < args.tries:
            note(f"shard {index}/{n}: {why}; running it again (try {attempt + 1} of {args.tries})")
            pending[submit(index)] = (index, attempt + 1)
        else:
            failed[index] = why
            note(f"shard {index}/{n}: {why}; gave up after {args.tries} tries")
    if failed:
        note(f"error: {len(failed)} of {n} shards did not finish ({', '.join(map(str, sorted(failed)))}); "
             f"nothing merged. Run the same command again to redo them")
        return 2

    part_files = [str(part_path(parts, i)) for i in range(n)]
    merge = [str(hsdiff.path), "merge", *part_files]
    if args.fail_on:
        merge += ["--fail-on", args.fail_on]
    plot = ["--plot", args.plot] if args.plot else []
    code = subprocess.run([*merge, "--format", "json", "--out", str(out), *plot]).returncode
    if code not in (0, 1):
        note(f"error: hsdiff merge exited {code}")
        return 2
    note(f"merged {n} parts into {out} (hsdiff at {hsdiff.describe()})")
    sys.stdout.flush()
    table = subprocess.run(merge).returncode
    if table != code:
        note(f"error: hsdiff merge exited {code} for the JSON report but {table} for the table")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
