#!/usr/bin/env python3
"""Inputs of scripts/bench-readers.sh (issue 33, quadratic readers), written as the tools write
them, at a size N:

    ckpt_gz N OUT      a SpecForge DFlash batch of N rows compressed as `--compress` does
                       (torch.save {input_ids, loss_mask, attention_mask [N, T], hidden_states
                       [N, T, 5·H]} in bf16, gzip): the rows of
                       tests/fixtures/pipelines/qwen3_5_tiny/specforge_dflash_batch/batch.ckpt,
                       repeated, written to OUT/a/batch.ckpt.gz and OUT/b/batch.ckpt.gz
    tensors_st N OUT   a safetensors file of N one-element f32 hidden states (`layers.{i}`,
                       [1, 1, 1]: one token of width 1, as torch's save_file writes a dict of
                       them): OUT/a.safetensors and OUT/b.safetensors (B = A + 1e-6 relative,
                       seeded)
    tensors_pt N OUT   the same as torch.save dicts: OUT/a.pt and OUT/b.pt
    sglang N OUT       two SGLang dumper folders of N passes each, OUT/A and OUT/B: hard links to
                       the 8 files of each of the 3 passes of
                       tests/fixtures/pipelines/qwen3_5_tiny/sglang/dumper, renamed to steps
                       0..N-1 with a running dump_index (no new bytes: the time is the reader's)

usage: make_reader_bench.py KIND N OUT (run with a Python that has torch and safetensors)
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
BATCH = ROOT / "tests/fixtures/pipelines/qwen3_5_tiny/specforge_dflash_batch/batch.ckpt"
DUMPER = ROOT / "tests/fixtures/pipelines/qwen3_5_tiny/sglang/dumper/dump_20261201_120000_000000"


def ckpt_gz(n: int, out: Path) -> None:
    batch = torch.load(BATCH)
    rows = batch["input_ids"].shape[0]
    pick = torch.arange(n) % rows
    big = {k: v[pick].contiguous() for k, v in batch.items()}
    buf = io.BytesIO()
    torch.save(big, buf)
    data = gzip.compress(buf.getvalue(), mtime=0)
    for side in ("a", "b"):
        (out / side).mkdir(parents=True, exist_ok=True)
        (out / side / "batch.ckpt.gz").write_bytes(data)


def tensors(n: int, out: Path, kind: str) -> None:
    g = torch.Generator().manual_seed(33)
    a = torch.randn(n, generator=g)
    b = a * (1 + 1e-6 * torch.randn(n, generator=g))
    out.mkdir(parents=True, exist_ok=True)
    for side, values in (("a", a), ("b", b)):
        d = {f"layers.{i}": values[i : i + 1].reshape(1, 1, 1).clone() for i in range(n)}
        if kind == "st":
            save_file(d, out / f"{side}.safetensors")
        else:
            torch.save(d, out / f"{side}.pt")


def sglang(n: int, out: Path) -> None:
    by_step: dict[int, list[str]] = {}
    for f in sorted(os.listdir(DUMPER)):
        by_step.setdefault(int(re.match(r"step=(\d+)___", f).group(1)), []).append(f)
    steps = sorted(by_step)
    for side in ("A", "B"):
        d = out / side / DUMPER.name
        d.mkdir(parents=True)
        index = 0
        for s in range(n):
            for f in by_step[steps[s % len(steps)]]:
                index += 1
                name = re.sub(r"^step=\d+___", f"step={s}___", f)
                name = re.sub(r"___dump_index=\d+___", f"___dump_index={index}___", name)
                os.link(DUMPER / f, d / name)


def main() -> None:
    kind, n, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if kind == "ckpt_gz":
        ckpt_gz(n, out)
    elif kind in ("tensors_st", "tensors_pt"):
        tensors(n, out, kind.split("_")[1])
    elif kind == "sglang":
        sglang(n, out)
    else:
        sys.exit(f"make_reader_bench: unknown kind {kind}")


if __name__ == "__main__":
    main()
