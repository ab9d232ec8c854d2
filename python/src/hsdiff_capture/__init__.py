"""Capture per-layer hidden states of a PyTorch / transformers model into an hsdiff dump.

    import hsdiff_capture
    hsdiff_capture.capture(model, input_ids, out="run.safetensors")        # one no-cache forward
    hsdiff_capture.capture(model, input_ids, out="s.safetensors", state=True)  # + final states
    with hsdiff_capture.recording(model, out="step.safetensors"):          # whatever forward runs
        loss = model(**batch).loss
    report = hsdiff_capture.compare("train.safetensors", "eval.safetensors")  # hsdiff's JSON report
    if report["exit_code"] != 0: ...

See docs/capture-pytorch.md.
"""

__version__ = "0.1.0"

from .compare import compare
from .errors import CaptureError, HsdiffError
from .kernels import Request
from .recorder import CaptureResult, capture, recording

__all__ = ["CaptureError", "CaptureResult", "HsdiffError", "Request", "__version__", "capture", "compare", "recording"]
