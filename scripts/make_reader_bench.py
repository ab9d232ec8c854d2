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

usage: make_reader_bench.py KIND N OUT (run with a Python that has torch and safetensors)
"""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
BATCH = ROOT / "tests/fixtures/pipelines/qwen3_5_tiny/specforge_dflash_batch/batch.ckpt"


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


def main() -> None:
    kind, n, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if kind == "ckpt_gz":
        ckpt_gz(n, out)
    elif kind in ("tensors_st", "tensors_pt"):
        tensors(n, out, kind.split("_")[1])
    else:
        sys.exit(f"make_reader_bench: unknown kind {kind}")


if __name__ == "__main__":
    main()
