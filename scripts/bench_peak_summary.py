#!/usr/bin/env python3
"""Summarise scripts/bench-peak-report.sh's output folder as Markdown (issue 24's figures).

    python3 scripts/bench_peak_summary.py OUT

Reads whichever of OUT/{gemm,fused,bf16,torch}.json and OUT/live-stderr.txt exist (a step that
was stopped leaves its file out, and its lines say "not measured"):

- the products' and the fused forwards' GFLOP/s as fractions of the FMA peak measured in the same
  process (`gflops` / `peak_gflops`);
- fused bf16 against transformers' bf16 forward (issue 24 item 3: ≥ 1.0× where there is no AMX);
- the live run's wall time against the sum of its passes' bench times: A = fused bf16, B =
  reference bf16 (also the bf16 floor), truth = fused f64 (item 4: ≤ 1.1×), and against the sum of
  the passes' own times in that run (what the run spends outside its forward passes).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def rows(out: Path, name: str) -> list[dict]:
    path = out / f"{name}.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())["rows"]


def measured(rs: list[dict], name: str, dtype: str) -> dict | None:
    for r in rs:
        if r.get("name") == name and r.get("dtype") == dtype and r.get("status") == "measured":
            return r
    return None


def fraction(r: dict | None) -> str:
    if r is None or r.get("gflops") is None:
        return "not measured"
    peak = r.get("peak_gflops")
    share = f" = **{100 * r['gflops'] / peak:.0f} %** of {peak:.1f}" if peak else ""
    return f"{r['gflops']:.1f} GFLOP/s{share}"


def seconds(label: str) -> float:
    """A progress line's duration (`12.3 s`, `1m05s`, `1h02m`) in seconds."""
    if m := re.fullmatch(r"([\d.]+) s", label):
        return float(m[1])
    if m := re.fullmatch(r"(\d+)m(\d+)s", label):
        return 60 * int(m[1]) + int(m[2])
    if m := re.fullmatch(r"(\d+)h(\d+)m", label):
        return 3600 * int(m[1]) + 60 * int(m[2])
    raise ValueError(f"duration {label!r}")


def wall_seconds(text: str) -> float | None:
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    if not m:
        return None
    return 3600 * int(m[1] or 0) + 60 * int(m[2]) + float(m[3])


def main() -> int:
    out = Path(sys.argv[1])
    print(f"# issue 24 measurements ({out})\n")
    log = out / "log.txt"
    if log.exists():
        print("```\n" + log.read_text().strip() + "\n```\n")

    print("## Products (`bench gemm`, m = 512, medians)\n")
    print("| shape | dtype | hsdiff | candle |\n|---|---|---|---|")
    gemm = rows(out, "gemm")
    for r in gemm:
        if r["implementation"].startswith("hsdiff"):
            candle = next(
                (c for c in gemm if c["shape"] == r["shape"] and c["dtype"] == r["dtype"]
                 and c["implementation"].startswith("candle")),
                None,
            )
            print(f"| {r['shape']} {r['m']}×{r['n']}×{r['k']} | {r['dtype']} | {fraction(r)} "
                  f"| {fraction(candle)} |")
    if not gemm:
        print("| — | — | not measured | — |")

    fused = rows(out, "fused")
    print("\n## Whole forward, fused (`bench forward`, bench model, T = 512)\n")
    for dtype in ("f32", "f64"):
        r = measured(fused, "fused", dtype)
        ms = f", {r['median_ms'] / 1e3:.2f} s" if r else ""
        print(f"- fused {dtype}: {fraction(r)}{ms}")

    bf16, torch = rows(out, "bf16"), rows(out, "torch")
    ours, theirs = measured(bf16, "fused", "bf16"), measured(torch, "torch", "bf16")
    print("\n## bf16 against transformers (item 3)\n")
    for label, r in (("hsdiff fused bf16", ours), ("hsdiff reference bf16", measured(bf16, "reference", "bf16")),
                     ("transformers bf16", theirs), ("transformers f32", measured(torch, "torch", "f32")),
                     ("hsdiff fused f32", measured(fused, "fused", "f32"))):
        print(f"- {label}: " + (f"{r['median_ms'] / 1e3:.2f} s" if r else "not measured"))
    if ours and theirs:
        print(f"- transformers bf16 / hsdiff fused bf16: **{theirs['median_ms'] / ours['median_ms']:.2f}×**")

    print("\n## Live run against its passes (item 4)\n")
    stderr = out / "live-stderr.txt"
    text = stderr.read_text() if stderr.exists() else ""
    wall = wall_seconds(text)
    passes = [(m[1], seconds(m[2])) for m in
              re.finditer(r"hsdiff: (.+?): \d+ layers, \d+ tokens in (.+?) \(", text)]
    for label, s in passes:
        print(f"- pass {label}: {s:.1f} s")
    bench = [measured(bf16, "fused", "bf16"), measured(bf16, "reference", "bf16"),
             measured(fused, "fused", "f64")]
    if wall is None:
        print("- live run: not measured")
        return 0
    print(f"- wall time: {wall:.1f} s")
    if passes:
        own = sum(s for _, s in passes)
        print(f"- wall / sum of the run's own passes ({own:.1f} s): {wall / own:.2f}×")
    if all(bench):
        total = sum(r["median_ms"] for r in bench) / 1e3
        print(f"- wall / sum of the passes' bench times (A fused bf16 + B reference bf16 + truth "
              f"fused f64 = {total:.1f} s): **{wall / total:.2f}×** (target ≤ 1.1×)")
    else:
        print("- sum of the passes' bench times: not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
