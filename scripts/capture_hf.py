#!/usr/bin/env python3
"""Capture the hidden states of a Hugging Face transformers model into an hsdiff dump.

A thin wrapper around the `hsdiff_capture` package in python/ (installable with
`pip install ./python`, which gives the same command as `hsdiff-capture`), kept so that existing
commands keep working from a checkout without installing anything:

    python scripts/capture_hf.py --model DIR --prompt "def fib(n):" --dtype bf16 --device cuda --out a.safetensors

See docs/capture-pytorch.md.
"""

import sys
from pathlib import Path

# The checkout's package first, so the script always runs the code next to it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from hsdiff_capture.cli import main  # noqa: E402
# scripts/make_golden.py takes the digests from here (`from capture_hf import …`).
from hsdiff_capture.environment import sha256_file, weights_digest  # noqa: E402

__all__ = ["main", "sha256_file", "weights_digest"]

if __name__ == "__main__":
    main(prog="capture_hf")
