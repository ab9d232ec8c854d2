#!/usr/bin/env python3
"""Write the index-keyed capture layouts of ``tests/cli/compare.rs`` (``tests/fixtures/layouts/``).

People who hook a few decoder layers save them by index. These files hold transformers' own
bf16 states of the golden tiny Qwen3.5 model on ``fizzbuzz``
(``golden/states/qwen3_5_tiny/fizzbuzz.bf16.safetensors``, made by scripts/make_golden.py) for
layers 1, 3 and 5, with the token ids, in the layouts the issue lists:

    idx_int.pt       torch.save({1: h1, 3: h3, 5: h5, "input_ids": ids})
    idx_layer.pt     torch.save({"layer_1": h1, "layer_3": h3, "layer_5": h5, "input_ids": ids})
    idx_nested.pt    torch.save({"hidden_states": {1: h1, 3: h3, 5: h5}, "prompt": "fizzbuzz",
                                 "input_ids": ids})
    idx_input.pt     torch.save({"hidden_states": {2: h1, 4: h3, 6: h5}, "input_ids": ids}):
                     indices in the ``output_hidden_states`` sense (hidden_states[N] = the input
                     of layer N = the output of layer N - 1), which hsdiff must find from evidence

where hN is the output of decoder layer N. Run from the repository root with any Python that
has torch and safetensors (the pinned set is scripts/requirements-golden.txt)::

    /work/venv-golden/bin/python scripts/make_layout_fixtures.py

torch.save writes a random serialization id, so the files are not byte-stable; the tensors are.
"""

from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "golden/states/qwen3_5_tiny/fizzbuzz.bf16.safetensors"
OUT = ROOT / "tests/fixtures/layouts"


def main() -> None:
    states = load_file(str(SRC))
    ids = states["input_ids"].clone()
    h = {i: states[f"layers.{i}"].clone() for i in (1, 3, 5)}
    OUT.mkdir(parents=True, exist_ok=True)
    torch.save({1: h[1], 3: h[3], 5: h[5], "input_ids": ids}, OUT / "idx_int.pt")
    torch.save({f"layer_{i}": t for i, t in h.items()} | {"input_ids": ids}, OUT / "idx_layer.pt")
    torch.save(
        {"hidden_states": dict(h), "prompt": "fizzbuzz", "input_ids": ids},
        OUT / "idx_nested.pt",
    )
    torch.save(
        {"hidden_states": {i + 1: t for i, t in h.items()}, "input_ids": ids},
        OUT / "idx_input.pt",
    )
    for p in sorted(OUT.glob("idx_*.pt")):
        print(p.relative_to(ROOT), p.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
