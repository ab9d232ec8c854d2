"""Facts about the machine and the files: package versions and import probes, CPU model and
features, NVIDIA driver, file hashes and hsdiff's sampled weights digest (the same algorithm as
`weights_digest` in hsdiff's src/capture/fingerprint.rs, bit for bit)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import platform
import struct
from pathlib import Path
from typing import BinaryIO

# Kernel packages whose presence changes what transformers runs: import name → distribution.
KERNEL_PACKAGES = {
    "fla": "flash-linear-attention",
    "fla.ops.gated_delta_rule": "flash-linear-attention",
    "causal_conv1d": "causal-conv1d",
    "kernels": "kernels",
    "triton": "triton",
}

# CPU features hsdiff records (its names), from /proc/cpuinfo flag names.
CPU_FEATURES = [
    ("sse4.2", "sse4_2"), ("avx", "avx"), ("avx2", "avx2"), ("fma", "fma"), ("f16c", "f16c"),
    ("avx512f", "avx512f"), ("avx512bw", "avx512bw"), ("avx512vl", "avx512vl"), ("avx512dq", "avx512dq"),
    ("avx512vnni", "avx512_vnni"), ("avx512bf16", "avx512_bf16"), ("avx512fp16", "avx512_fp16"),
]

DIGEST_METHOD = "sampled-sha256-v1"
DIGEST_WHOLE_BELOW = 64 << 10
DIGEST_WINDOW = 4 << 10
DIGEST_STRIDE = 1 << 20


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0] if text else type(e).__name__


def probe_import(name: str) -> dict:
    """Whether `name` imports here, its version, and the error text if it does not."""
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure is a fact to record
        return {"importable": False, "version": version_of(KERNEL_PACKAGES.get(name, name)),
                "error": first_line(e)}
    ver = getattr(mod, "__version__", None) or version_of(KERNEL_PACKAGES.get(name, name))
    return {"importable": True, "version": None if ver is None else str(ver), "error": None}


def kernel_packages() -> dict:
    return {name: probe_import(name) for name in KERNEL_PACKAGES}


def cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    for key in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == key and v.strip():
                return v.strip()
    return platform.processor() or None


def cpu_features() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags: set[str] = set()
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in ("flags", "Features"):
            flags = set(v.split())
            break
    return [ours for ours, theirs in CPU_FEATURES if theirs in flags]


def nvidia_driver() -> str | None:
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    _, _, rest = line.partition("Kernel Module")
    parts = rest.split()
    return parts[0] if parts else None


def sha256_file(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def token_ids_sha256(ids: list[int]) -> str:
    """SHA-256 of the ids as little-endian u32 (hsdiff's `token_ids_sha256`)."""
    return hashlib.sha256(b"".join(struct.pack("<I", i) for i in ids)).hexdigest()


def safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    return [single] if single.is_file() else []


def weights_digest(folder: Path) -> str | None:
    """hsdiff's `sampled-sha256-v1` digest (docs/capture-pytorch.md): per tensor, in name order
    across shards, SHA-256 over name, NUL, dtype, shape, data length and the data (whole up to
    64 KiB, else a 4 KiB window every 1 MiB plus the last 4 KiB)."""
    files = safetensors_files(folder)
    if not files:
        return None
    entries = {}
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name, info in header.items():
            entries[name] = (path, 8 + n, info)
    h = hashlib.sha256()
    handles: dict[Path, BinaryIO] = {}
    try:
        for name in sorted(entries, key=lambda s: s.encode("utf-8")):
            path, base, info = entries[name]
            src = handles.get(path) or handles.setdefault(path, open(path, "rb"))
            start, end = info["data_offsets"]
            length = end - start
            h.update(name.encode("utf-8") + b"\0")
            h.update(info["dtype"].encode())
            h.update(struct.pack("<Q", len(info["shape"])))
            for d in info["shape"]:
                h.update(struct.pack("<Q", d))
            h.update(struct.pack("<Q", length))

            def read(off: int, size: int, src: BinaryIO = src, at: int = base + start) -> bytes:
                src.seek(at + off)
                return src.read(size)

            if length <= DIGEST_WHOLE_BELOW:
                h.update(read(0, length))
                continue
            last = length - DIGEST_WINDOW
            off = 0
            while off < last:
                h.update(read(off, DIGEST_WINDOW))
                off += DIGEST_STRIDE
            h.update(read(last, DIGEST_WINDOW))
    finally:
        for src in handles.values():
            src.close()
    return f"{DIGEST_METHOD}:{h.hexdigest()}"


def local_folder(model_id: str | None) -> Path | None:
    """The checkpoint folder behind `model_id`: a local path, or a hub id already in the cache."""
    if not model_id:
        return None
    p = Path(model_id)
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached / not a hub id: no digests, recorded as absent
        return None
