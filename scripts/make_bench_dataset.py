#!/usr/bin/env python3
"""Writes the two sides of `scripts/bench-dataset.sh`'s dataset: N samples in SpecForge
DFlash's layout (`rows_0-N/data_{i}.ckpt`, torch.save {input_ids [T], loss_mask [T],
hidden_states [1, T, k·H] bf16}) for side A, and the same samples for side B with bf16
rounding-noise-level differences (each value times 1 + 2⁻⁸·z, z standard normal, rounded to bf16
again), so that the two sides are different files with the same token ids.

Random values, not a model's: the bench measures reading and comparing, not a verdict.

usage: make_bench_dataset.py OUT_DIR N [--tokens T] [--hidden H] [--layers K] [--seed S]
"""

import argparse
import os
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("n", type=int)
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=5120)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--seed", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    gen = torch.Generator().manual_seed(args.seed)
    t, width = args.tokens, args.layers * args.hidden
    rows = f"rows_0-{args.n}"
    for side in ("A", "B"):
        (args.out / side / rows).mkdir(parents=True, exist_ok=True)
    for i in range(args.n):
        ids = torch.randint(0, 151_000, (t,), generator=gen)
        loss_mask = torch.ones(t, dtype=torch.long)
        a = torch.randn((1, t, width), generator=gen).bfloat16()
        noise = torch.randn((1, t, width), generator=gen)
        b = (a.float() * (1 + noise * 2.0**-8)).bfloat16()
        del noise
        for side, h in (("A", a), ("B", b)):
            torch.save(
                {"input_ids": ids, "loss_mask": loss_mask, "hidden_states": h},
                args.out / side / rows / f"data_{i}.ckpt",
            )
        del a, b


if __name__ == "__main__":
    main()
