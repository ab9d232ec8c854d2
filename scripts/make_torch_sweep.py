#!/usr/bin/env python3
"""Writes tests/fixtures/torch_sweep/: 200 small files written by torch.save, the way people
save hidden states, plus manifest.json describing what each one holds.

Run once with the golden venv (torch 2.15 CPU):  python scripts/make_torch_sweep.py

Why: the zip layout torch writes depends on the file name (the archive's inner folder is the
file's stem, which shifts every offset and the alignment padding), on the tensor count and on the
dtypes. tests/inputs/torch_sweep.rs opens every file and checks names, shapes, dtypes, a sum and a
position-weighted sum of the values against the manifest, so a reader that refuses or misreads any layout fails the test.

Each file: a random name of 1–40 characters (letters, digits, `_`, `-`, `.`), 1–64 tensors of one
dtype (bf16, f16 or f32) drawn from a seeded normal, in one of four containers: a flat dict, a
nested dict, a tuple (the output_hidden_states convention), or a dict holding a list and a tuple.
"""

import json
import random
import string
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "torch_sweep"
COUNT = 200
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
NAME_CHARS = string.ascii_letters + string.digits + "_-."


def random_name(rng: random.Random) -> str:
    n = rng.randint(1, 40)
    name = "".join(rng.choice(NAME_CHARS) for _ in range(n))
    # A leading dot would hide the file; keep names visible and unique-looking.
    return "f" + name[1:] if name.startswith(".") else name


def tensor(rng: random.Random, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    shape = rng.choice([(1, rng.randint(1, 5), rng.randint(1, 12)), (rng.randint(1, 4), rng.randint(1, 9))])
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)


def position_weights(n: int) -> torch.Tensor:
    return (torch.arange(n, dtype=torch.float64) % 7) + 1


def describe(prefix: str, obj, out: dict):
    """Flattens the saved object the way hsdiff names tensors: dotted keys and indices."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = {
            "shape": list(obj.shape),
            "dtype": {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[obj.dtype],
            "sum": float(obj.double().sum()),
            # Position-weighted (row-major index mod 7, + 1): a transposed or permuted read that
            # keeps the plain sum changes this one.
            "weighted_sum": float((obj.double().flatten() * position_weights(obj.numel())).sum()),
        }
    elif isinstance(obj, dict):
        for k, v in obj.items():
            describe(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        for i, v in enumerate(obj):
            describe(f"{prefix}.{i}" if prefix else str(i), v, out)


def build(rng: random.Random, gen: torch.Generator, dtype: torch.dtype, n: int):
    kind = rng.choice(["flat", "nested", "tuple", "mixed"])
    ts = [tensor(rng, gen, dtype) for _ in range(n)]
    if kind == "flat":
        return kind, {f"layers.{i}": t for i, t in enumerate(ts)}
    if kind == "nested":
        obj: dict = {}
        for i, t in enumerate(ts):
            obj.setdefault(f"block{i % 3}", {}).setdefault(f"sub{i % 2}", {})[f"t{i}"] = t
        return kind, obj
    if kind == "tuple":
        return kind, tuple(ts)
    half = n // 2
    return kind, {"hidden_states": list(ts[:half]), "extra": tuple(ts[half:])}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    rng = random.Random(20261130)
    gen = torch.Generator().manual_seed(11)
    manifest = {}
    names = set()
    while len(manifest) < COUNT:
        stem = random_name(rng)
        if stem.lower() in names or stem == "manifest":
            continue
        names.add(stem.lower())
        file = f"{stem}.pt"
        dtype_label = rng.choice(list(DTYPES))
        # Spread the tensor counts over 1–64, with both ends always present.
        i = len(manifest)
        n = 1 if i == 0 else 64 if i == 1 else rng.randint(1, 64)
        kind, obj = build(rng, gen, DTYPES[dtype_label], n)
        torch.save(obj, OUT / file)
        tensors: dict = {}
        describe("", obj, tensors)
        manifest[file] = {"kind": kind, "dtype": dtype_label, "tensors": tensors}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum((OUT / f).stat().st_size for f in manifest)
    print(f"wrote {len(manifest)} files ({total} bytes) to {OUT}")


if __name__ == "__main__":
    main()
