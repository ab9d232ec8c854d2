#!/usr/bin/env python3
"""Regenerate hsdiff's golden files (everything under ``golden/``) with transformers + torch on the CPU.

What it writes (see docs/golden.md for the full description):

    golden/qwen3_5_tiny/            Qwen3_5ForConditionalGeneration checkpoint (bf16, one model.safetensors)
                                    + tokenizer.json + tokenizer_config.json
    golden/qwen3_next_moe_tiny/     Qwen3NextForCausalLM checkpoint (bf16, 2 shards + index, tied embeddings,
                                    legacy top-level rope_theta / partial_rotary_factor)
                                    + tokenizer.json + tokenizer_config.json
    golden/states/{model}/{prompt}.{mode}.safetensors
                                    captured hidden states; mode in f64 (strict float64), f32, bf16,
                                    hf64 (transformers' own "float64")
    golden/SUMMARY.md               versions, token counts, rel-L2 of every mode against strict f64

The output is deterministic: running the script twice gives the same bytes (seeded generators,
one CPU thread, deterministic algorithms).

It refuses to run (exit 2) when a fast-path kernel could be used: if ``fla``,
``causal_conv1d`` or ``kernels`` is importable, or if transformers' hub-kernel wrappers
(``use_kernel_func_from_hub_with_fallback``) resolved any gated-delta-rule / causal-conv1d
function to something other than its own PyTorch fallback. It also refuses other versions than
the pinned ones (transformers 5.24.0, torch 2.15.0), because the golden files are only meaningful
for a known reference.

Install (Python 3.11, Linux x86-64, only PyPI reachable)::

    python3 -m venv target/venv-golden
    target/venv-golden/bin/pip install --no-deps -r golden/requirements.txt
    target/venv-golden/bin/python golden/make.py          # about 10 s on 2 cores

``--no-deps`` keeps pip from resolving again; the requirements file lists the complete closure.
It includes the nvidia-* / cuda-* runtime wheels: PyPI's only Linux x86-64 torch 2.15.0 wheel is
the CUDA build, and its ``libtorch_cpu.so`` itself links ``libcudart.so.13`` and ``libcupti.so.13``
(and ``libtorch.so`` links the rest), so ``import torch`` fails without them even on a machine
without a GPU. No GPU is used: everything runs on the CPU. ``triton`` is listed for completeness
(torch declares it) but never imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import json
import math
import os
import random
import re
import shutil
import stat
import sys
from collections import Counter, OrderedDict
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

PINNED = {"transformers": "5.24.0", "torch": "2.15.0"}
REPO = Path(__file__).resolve().parent.parent
SEED = 20240917
FORBIDDEN_PACKAGES = ("fla", "causal_conv1d", "kernels")
MODES_FOR_PROMPT = {
    # prompt -> modes whose states are stored. Keeps golden/ near 8 MB: f64 truth for two prompts
    # (155 and 101 tokens: both cross the 64-token chunk boundary), transformers' own f32 / bf16 /
    # native-"float64" runs for fizzbuzz. hf64 is computed and summarised but not stored.
    "fizzbuzz": ("f64", "f32", "bf16", "hf64"),
    "binary_search": (),
    "reverse_words": (),
    "fibonacci": ("f64",),
}
STORED_MODES = ("f64", "f32", "bf16")
# What golden/ holds besides this script's outputs.
GENERATOR_FILES = ("make.py", "make_fp8.py", "requirements.txt", "__pycache__")
FAST_PATH_FUNCS = (
    "torch_chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule",
    "causal_conv1d_fn",
    "causal_conv1d_update",
)


def die(msg: str) -> None:
    print(f"make_golden: error: {msg}", file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------------------------
# Preflight: no fast-path packages, pinned versions
# ----------------------------------------------------------------------------------------------


def preflight_packages() -> None:
    for name in FORBIDDEN_PACKAGES:
        if importlib.util.find_spec(name) is not None:
            die(
                f"the package `{name}` is importable. The golden files must come from transformers' pure "
                f"PyTorch fallbacks; run this script in a virtual environment without `{name}` "
                f"(see docs/golden.md)."
            )


preflight_packages()

# The digests hsdiff-capture records, so that env-diff can tell the golden files' weights apart:
# the installed package's, or the checkout's when none is installed (the golden venv has none).
sys.path.append(str(REPO / "python" / "src"))
from hsdiff_capture.environment import sha256_file, weights_digest  # noqa: E402

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from transformers import (  # noqa: E402
    AutoTokenizer,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)
from transformers.models.qwen3_5 import modeling_qwen3_5  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

MODELING_MODULES = (modeling_qwen3_5, modeling_qwen3_next)


def preflight_versions(allow_other: bool) -> None:
    have = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
    bad = [f"{k} {have[k]} (pinned {v})" for k, v in PINNED.items() if have[k] != v]
    if bad and not allow_other:
        die("version mismatch: " + ", ".join(bad) + "; install golden/requirements.txt")


def resolve_fast_paths() -> dict[str, str]:
    """Inspect transformers' hub-kernel wrappers and return which implementation each one calls.

    `use_kernel_func_from_hub_with_fallback` resolves, at import time, `implementation` to either the
    original package's function (fla / causal_conv1d) or the decorated torch function, and keeps it in
    the closure of `wrapped`. We read that closure; anything but the torch fallback is refused.
    """
    from transformers.utils.import_utils import is_kernels_available

    if is_kernels_available():
        die("transformers reports `kernels` (hub kernels) as available; refusing (fast paths could be used)")
    resolved: dict[str, str] = {}
    for mod in MODELING_MODULES:
        for fname in FAST_PATH_FUNCS:
            wrapped = getattr(mod, fname)
            cells = dict(zip(wrapped.__code__.co_freevars, wrapped.__closure__ or ()))
            if "implementation" not in cells or "torch_function" not in cells:
                die(f"{mod.__name__}.{fname} is not the expected hub-kernel wrapper; cannot verify its implementation")
            impl = cells["implementation"].cell_contents
            torch_fn = cells["torch_function"].cell_contents
            is_new = cells["is_new_implementation"].cell_contents if "is_new_implementation" in cells else None
            where = f"{impl.__module__}.{impl.__qualname__}"
            if impl is not torch_fn or is_new or impl.__module__ != mod.__name__:
                die(f"{mod.__name__}.{fname} resolved to a fast path: {where}")
            resolved[f"{mod.__name__.rsplit('.', 1)[-1]}.{fname}"] = f"{where} (transformers torch fallback)"
    return resolved


class CallCounter:
    """Replace the module-level kernel functions by counting pass-throughs, to record what ran."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.capture_first_chunk: bool = False
        self.first_chunk: dict | None = None
        self._orig: dict[tuple, object] = {}

    def install(self) -> None:
        for mod in MODELING_MODULES:
            for fname in FAST_PATH_FUNCS:
                orig = getattr(mod, fname)
                self._orig[(mod, fname)] = orig
                setattr(mod, fname, self._make(mod, fname, orig))

    def _make(self, mod, fname, orig):
        def counted(*args, **kwargs):
            self.counts[fname] += 1
            out = orig(*args, **kwargs)
            if fname == "torch_chunk_gated_delta_rule" and self.capture_first_chunk and self.first_chunk is None:
                q, k, v = args[:3]
                self.first_chunk = {
                    "q": q.detach().clone(),
                    "k": k.detach().clone(),
                    "v": v.detach().clone(),
                    "g": kwargs["g"].detach().clone(),
                    "beta": kwargs["beta"].detach().clone(),
                    "use_qk_l2norm_in_kernel": kwargs.get("use_qk_l2norm_in_kernel"),
                    "initial_state": kwargs.get("initial_state"),
                    "out": out[0].detach().clone(),
                }
            return out

        counted.__name__ = fname
        return counted

    def reset(self) -> None:
        self.counts = Counter()
        self.first_chunk = None
        self.capture_first_chunk = False


# ----------------------------------------------------------------------------------------------
# Strict float64
# ----------------------------------------------------------------------------------------------

_LOW_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class StrictF64(TorchFunctionMode):
    """Run transformers' code in true float64.

    transformers' `dtype=torch.float64` still hard-casts to float32 in the RMSNorms (`x.float()`,
    `.to(torch.float32)`), RoPE (`dtype=torch.float`, `position_ids.float()`), the router and eager
    softmax (`dtype=torch.float32`) and the gated-delta-rule / conv fallbacks (`.to(torch.float32)`).
    This mode rewrites each of those requests to float64 and audits every torch call's outputs: any
    floating tensor below float64 is recorded as a violation (the caller fails on any).
    """

    def __init__(self) -> None:
        super().__init__()
        self.rewrites: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()

    @staticmethod
    def _name(func) -> str:
        return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = self._name(func)
        if func is torch.Tensor.float:
            func = torch.Tensor.double
            self.rewrites["Tensor.float"] += 1
        elif func is torch.Tensor.to:
            new_args = [args[0]]
            for a in args[1:]:
                if a in _LOW_FLOATS:
                    a = torch.float64
                    self.rewrites["Tensor.to(dtype)"] += 1
                elif isinstance(a, torch.Tensor) and a.dtype in _LOW_FLOATS:
                    a = torch.float64
                    self.rewrites["Tensor.to(tensor)"] += 1
                new_args.append(a)
            args = tuple(new_args)
        elif func is torch.Tensor.type_as:
            if isinstance(args[1], torch.Tensor) and args[1].dtype in _LOW_FLOATS:
                func, args = torch.Tensor.to, (args[0], torch.float64)
                self.rewrites["Tensor.type_as"] += 1
        if kwargs.get("dtype") in _LOW_FLOATS:
            kwargs["dtype"] = torch.float64
            self.rewrites[f"{name}(dtype=)"] += 1
        out = func(*args, **kwargs)
        self._audit(name, out)
        return out

    def _audit(self, name: str, out) -> None:
        if isinstance(out, torch.Tensor):
            if out.is_floating_point() and out.dtype != torch.float64:
                self.violations[f"{name} -> {out.dtype}"] += 1
        elif isinstance(out, (tuple, list)):
            for o in out:
                self._audit(name, o)


def rebuild_inv_freq_f64(rotary: torch.nn.Module, head_dim: int, rope: dict) -> None:
    theta = float(rope["rope_theta"])
    dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rotary.inv_freq = inv.clone()
    rotary.original_inv_freq = inv.clone()


def numpy_gdn_reference(cap: dict) -> np.ndarray:
    """Independent float64 gated delta rule (token by token), from the equations in gdn-spec.md.

    q, k: [1, T, Hk, dk]; v: [1, T, Hv, dv]; g, beta: [1, T, Hv]. Value head h uses key head h // (Hv/Hk).
    q, k are L2-normalised (x / sqrt(sum x^2 + 1e-6)); q is scaled by dk^-1/2.
    S_t = exp(g_t) S_{t-1};  S_t += k_t (beta_t (v_t - S_t^T k_t))^T;  o_t = S_t^T q_t.
    """
    q = cap["q"].numpy().astype(np.float64)[0]
    k = cap["k"].numpy().astype(np.float64)[0]
    v = cap["v"].numpy().astype(np.float64)[0]
    g = cap["g"].numpy().astype(np.float64)[0]
    beta = cap["beta"].numpy().astype(np.float64)[0]
    T, Hk, dk = q.shape
    _, Hv, dv = v.shape
    r = Hv // Hk
    out = np.zeros((T, Hv, dv), dtype=np.float64)
    for h in range(Hv):
        kh = h // r
        S = np.zeros((dk, dv), dtype=np.float64)
        for t in range(T):
            qt = q[t, kh] / math.sqrt(float(np.dot(q[t, kh], q[t, kh])) + 1e-6) / math.sqrt(dk)
            kt = k[t, kh] / math.sqrt(float(np.dot(k[t, kh], k[t, kh])) + 1e-6)
            S = S * math.exp(g[t, h])
            delta = beta[t, h] * (v[t, h] - S.T @ kt)
            S = S + np.outer(kt, delta)
            out[t, h] = S.T @ qt
    return out[None]


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


def code_corpus() -> list[str]:
    """A few hundred lines of code-like text (Python, Rust, JavaScript, C, shell), deterministic."""
    rng = random.Random(SEED)
    names = ["value", "index", "count", "total", "result", "items", "left", "right", "mid", "node",
             "key", "words", "line", "buffer", "size", "start", "end", "step", "prev", "next"]
    funcs = ["compute", "parse", "search", "reverse", "merge", "split", "update", "render", "load",
             "check", "sort", "find", "build", "insert", "remove", "format", "read", "write"]
    types_rs = ["i32", "u64", "usize", "f64", "String", "&str", "Vec<i32>", "Option<usize>", "bool"]
    lines: list[str] = []
    for _ in range(60):
        f, a, b = rng.choice(funcs), rng.choice(names), rng.choice(names)
        n = rng.randint(0, 100)
        lines += [
            f"def {f}_{a}({a}, {b}=None):",
            f'    """Return the {a} for the given {b}."""',
            f"    if {a} is None or len({a}) == 0:",
            f"        return {n}",
            f"    for i in range(len({a})):",
            f"        if {a}[i] % {rng.randint(2, 9)} == 0:",
            f"            {b} = {b} + {a}[i] if {b} else {a}[i]",
            f"    return {b}",
            "",
        ]
    for _ in range(45):
        f, a, b = rng.choice(funcs), rng.choice(names), rng.choice(names)
        ta, tb = rng.choice(types_rs), rng.choice(types_rs)
        lines += [
            f"fn {f}_{a}({a}: {ta}, {b}: {tb}) -> Result<{tb}, Error> {{",
            f"    let mut {b} = {b}.clone();",
            f"    while {a} < {rng.randint(1, 64)} {{",
            f"        {b} = {f}({a}, &{b})?;",
            "    }",
            f"    Ok({b})",
            "}",
            "",
        ]
    for _ in range(40):
        f, a, b = rng.choice(funcs), rng.choice(names), rng.choice(names)
        lines += [
            f"// {f} the {a} and return the new {b}",
            f"function {f}{a.capitalize()}({a}, {b}) {{",
            f"  const {b}s = {a}.split(' ').filter((x) => x.length > {rng.randint(0, 5)});",
            f"  return {b}s.map((x) => x.trim()).join(', ');",
            "}",
            "",
        ]
    for _ in range(30):
        f, a = rng.choice(funcs), rng.choice(names)
        lines += [
            f"int {f}_{a}(const int *{a}, size_t n) {{",
            f"    for (size_t i = 0; i < n; i++) {{ if ({a}[i] == {rng.randint(0, 9)}) return (int)i; }}",
            "    return -1;",
            "}",
        ]
    for _ in range(20):
        a = rng.choice(names)
        lines.append(f"# {a}: print the {a} and exit with status {rng.randint(0, 3)}")
        lines.append(f'echo "{a}=${{{a.upper()}}}" && exit {rng.randint(0, 3)}')
    return lines


def train_tokenizer(prompts: dict[str, str]) -> Tokenizer:
    # The pipeline is the one transformers' Qwen3_5Tokenizer builds (NFC normaliser, Qwen's split regex,
    # then ByteLevel without its own regex, ByteLevel decoder). AutoTokenizer always rebuilds that
    # pipeline around vocab + merges for model_type qwen3_5 (it ignores tokenizer_class there), so any
    # other pre-tokenizer in tokenizer.json would give different ids in transformers than in `tokenizers`.
    tok = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        min_frequency=2,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [prompts[k] for k in sorted(prompts)] + code_corpus()
    tok.train_from_iterator(corpus, trainer=trainer)
    if tok.get_vocab_size() != 384:
        die(f"trained tokenizer has {tok.get_vocab_size()} tokens, expected 384")
    return tok


# Qwen's pre-tokenizer regex (the same string transformers' Qwen3_5Tokenizer / Qwen2Tokenizer use).
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    # no special tokens at all (Qwen3_5Tokenizer would otherwise add <|endoftext|> as unk/eos/pad)
    "bos_token": None,
    "eos_token": None,
    "pad_token": None,
    "unk_token": None,
    "add_bos_token": False,
    "add_eos_token": False,
    "clean_up_tokenization_spaces": False,
    "model_max_length": 4096,
}


def write_tokenizer(tok: Tokenizer, folder: Path) -> None:
    tok.save(str(folder / "tokenizer.json"), pretty=True)
    (folder / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------------
# Models and the weight recipe (numerics.md, "A weight recipe that exercises every path")
# ----------------------------------------------------------------------------------------------

TEXT_COMMON = dict(
    vocab_size=384,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=128,
    linear_num_key_heads=2,
    linear_key_head_dim=16,
    linear_num_value_heads=4,
    linear_value_head_dim=24,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    max_position_embeddings=4096,
)


def qwen3_5_config() -> Qwen3_5Config:
    text = dict(
        TEXT_COMMON,
        num_hidden_layers=8,
        full_attention_interval=4,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=1,
        hidden_size=32,
        num_heads=2,
        intermediate_size=64,
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        in_channels=3,
        out_hidden_size=64,
        num_position_embeddings=16,
    )
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    lt = cfg.text_config.layer_types
    want = ["full_attention" if i in (3, 7) else "linear_attention" for i in range(8)]
    if lt != want:
        die(f"qwen3_5 layer_types derived as {lt}, expected {want}")
    return cfg


QWEN3_NEXT_LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention",
                          "linear_attention", "linear_attention", "full_attention"]


def qwen3_next_config() -> Qwen3NextConfig:
    return Qwen3NextConfig(
        **TEXT_COMMON,
        num_hidden_layers=6,
        layer_types=list(QWEN3_NEXT_LAYER_TYPES),
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[1],
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
    )


def recipe_for(name: str, param: torch.Tensor, module: torch.nn.Module, hidden: int):
    """Return (description, sampler) for one parameter, or None when no rule matches."""
    cls = type(module).__name__
    shape = tuple(param.shape)
    leaf = name.rsplit(".", 1)[-1]
    visual = ".visual." in f".{name}"

    def normal(var):
        return f"N(0,{var:.6g})", lambda g: torch.randn(shape, generator=g, dtype=torch.float64) * math.sqrt(var)

    def uniform(lo, hi):
        return f"U({lo},{hi})", lambda g: torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo

    if visual:
        # Vision tower: unused by text-only prompts, but every parameter still gets non-default values.
        if cls == "LayerNorm" and leaf == "weight":
            return uniform(0.5, 1.5)
        if leaf == "bias":
            return normal(1e-4)
        if cls == "Embedding":
            return normal(1.0)
        if leaf == "weight" and param.dim() >= 2:
            return normal(1.0 / math.prod(shape[1:]))
        return None
    if name.endswith("embed_tokens.weight"):
        return normal(1.0)
    if re.search(r"\.mlp\.gate\.weight$", name):  # MoE router
        return normal(4.0 / hidden)
    if leaf == "A_log":
        return "log U(0.05,2)", lambda g: torch.log(torch.rand(shape, generator=g, dtype=torch.float64) * 1.95 + 0.05)
    if leaf == "dt_bias":
        return uniform(-3.0, 0.5)
    if name.endswith("conv1d.weight"):
        return normal(0.25)
    if cls.endswith("RMSNormGated") and leaf == "weight":
        return uniform(0.5, 1.5)
    if cls.endswith("RMSNorm") and leaf == "weight":
        return uniform(-0.5, 0.5)
    if cls.endswith("Experts") and leaf in ("gate_up_proj", "down_proj") and param.dim() == 3:
        return normal(1.0 / shape[-1])  # [E, out, in]: fan_in is the last dim
    if isinstance(module, torch.nn.Linear) and leaf == "weight":
        return normal(1.0 / shape[1])
    return None


def overwrite_weights(model: torch.nn.Module, hidden: int, seed: int) -> list[tuple[str, str]]:
    gen = torch.Generator().manual_seed(seed)
    modules = dict(model.named_modules())
    done = []
    missed = []
    for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        mod = modules[name.rsplit(".", 1)[0]]
        rule = recipe_for(name, param, mod, hidden)
        if rule is None:
            missed.append(f"{name} ({type(mod).__name__}, {tuple(param.shape)})")
            continue
        desc, sample = rule
        with torch.no_grad():
            param.copy_(sample(gen).to(param.dtype))
        done.append((name, desc))
    if missed:
        die("weight recipe does not cover: " + ", ".join(missed))
    return done


def chmod_tree(folder: Path) -> None:
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            p.chmod(0o644)
        elif p.is_dir():
            p.chmod(0o755)
    folder.chmod(0o755)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_qwen3_5(out: Path, tok: Tokenizer) -> dict:
    torch.manual_seed(SEED)
    cfg = qwen3_5_config()
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    recipe = overwrite_weights(model, cfg.text_config.hidden_size, SEED + 1)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, max_shard_size="1GB")
    # layer_types must not be written explicitly for this model: readers derive it from
    # full_attention_interval (transformers' own save writes the derived list, so we edit it out).
    cfg_path = out / "config.json"
    cj = json.loads(cfg_path.read_text())
    cj["text_config"].pop("layer_types", None)
    cj["text_config"]["full_attention_interval"] = 4
    cfg_path.write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    write_tokenizer(tok, out)
    files = sorted(p.name for p in out.iterdir())
    if "model.safetensors" not in files or any(f.startswith("model-") for f in files):
        die(f"qwen3_5_tiny should be a single model.safetensors, got {files}")
    check_reload(out, Qwen3_5ForConditionalGeneration, model)
    re_cfg = Qwen3_5Config.from_pretrained(out)
    if re_cfg.text_config.layer_types != cfg.text_config.layer_types:
        die("qwen3_5 layer_types did not survive the config edit")
    with safe_open(out / "model.safetensors", "pt") as f:
        keys = sorted(f.keys())
    prefixes = sorted({k.split(".layers.")[0] if ".layers." in k else k.rsplit(".", 2)[0] for k in keys})
    if not any(k.startswith("model.language_model.layers.") for k in keys) \
            or not any(k.startswith("model.visual.") for k in keys) or "lm_head.weight" not in keys:
        die(f"qwen3_5_tiny key layout unexpected: {prefixes}")
    return {"recipe": recipe, "keys": keys}


def build_qwen3_next(out: Path, tok: Tokenizer) -> dict:
    torch.manual_seed(SEED)
    cfg = qwen3_next_config()
    model = Qwen3NextForCausalLM(cfg).eval()
    recipe = overwrite_weights(model, cfg.hidden_size, SEED + 2)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        die("qwen3_next lm_head is not tied to embed_tokens")
    # two shards: the shard limit is a bit over half of the bf16 parameter bytes
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    model.save_pretrained(out, max_shard_size=int(nbytes * 0.55))
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    if len(shards) != 2 or not (out / "model.safetensors.index.json").exists():
        die(f"qwen3_next_moe_tiny should have 2 shards + index, got {shards}")
    # legacy RoPE fields at the top level (as transformers 4.x checkpoints carry them)
    cfg_path = out / "config.json"
    cj = json.loads(cfg_path.read_text())
    rp = cj.pop("rope_parameters")
    if rp != {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}:
        die(f"unexpected rope_parameters written: {rp}")
    cj["rope_theta"] = 1000000.0
    cj["partial_rotary_factor"] = 0.25
    # and the 4.x spelling of the checkpoint dtype (transformers 5 writes `dtype`; model 1 keeps that)
    cj["torch_dtype"] = cj.pop("dtype")
    cfg_path.write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    re_cfg = Qwen3NextConfig.from_pretrained(out)
    if (re_cfg.rope_parameters.get("rope_theta") != 1000000.0
            or re_cfg.rope_parameters.get("partial_rotary_factor") != 0.25
            or re_cfg.rope_parameters.get("rope_type") != "default"):
        die(f"legacy rope fields not accepted by transformers: parsed {re_cfg.rope_parameters}")
    if re_cfg.dtype != torch.bfloat16:
        die(f"legacy `torch_dtype` not read back: {re_cfg.dtype}")
    if re_cfg.layer_types != QWEN3_NEXT_LAYER_TYPES or re_cfg.mlp_only_layers != [1]:
        die("qwen3_next layer_types / mlp_only_layers did not round-trip")
    write_tokenizer(tok, out)
    check_reload(out, Qwen3NextForCausalLM, model)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    keys = sorted(index["weight_map"])
    if any(k == "lm_head.weight" for k in keys):
        die("tied model wrote lm_head.weight")
    # experts are fused 3-D tensors in memory; record how transformers writes them
    per_expert = [k for k in keys if re.fullmatch(r"model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight", k)]
    fused = [k for k in keys if re.search(r"\.experts\.(gate_up_proj|down_proj)$", k)]
    moe_layers = [i for i in range(6) if i != 1]
    if fused or len(per_expert) != len(moe_layers) * 8 * 3:
        die(f"unexpected expert tensor layout on disk: {len(per_expert)} per-expert keys, fused {fused[:3]}")
    return {"recipe": recipe, "keys": keys, "shards": shards}


def check_reload(folder: Path, cls, model: torch.nn.Module) -> None:
    re_model = cls.from_pretrained(folder, dtype=torch.bfloat16).eval()
    a = dict(model.named_parameters())
    b = dict(re_model.named_parameters())
    if sorted(a) != sorted(b):
        die(f"{folder.name}: parameter names differ after reload")
    for k in a:
        if a[k].dtype != torch.bfloat16 or not torch.equal(a[k], b[k]):
            die(f"{folder.name}: {k} differs after save/reload")


# ----------------------------------------------------------------------------------------------
# Running the models and capturing states
# ----------------------------------------------------------------------------------------------

MODEL_SPECS = {
    "qwen3_5_tiny": {"cls": Qwen3_5ForConditionalGeneration},
    "qwen3_next_moe_tiny": {"cls": Qwen3NextForCausalLM},
}


def text_model(model):
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def text_config(model):
    cfg = model.config
    return cfg.text_config if hasattr(cfg, "text_config") else cfg


def load_for_mode(folder: Path, cls, mode: str):
    kw = {}
    if mode == "f64":
        dtype, attn = torch.float64, "eager"
        if cls is Qwen3NextForCausalLM:
            kw["experts_implementation"] = "eager"
    elif mode == "hf64":
        dtype, attn = torch.float64, "sdpa"
        if cls is Qwen3NextForCausalLM:
            # transformers' default `grouped_mm` experts refuse float64 (torch._grouped_mm: f32/bf16/f16 only)
            kw["experts_implementation"] = "eager"
    elif mode == "f32":
        dtype, attn = torch.float32, "sdpa"
    elif mode == "bf16":
        dtype, attn = torch.bfloat16, "sdpa"
    else:
        raise ValueError(mode)
    model = cls.from_pretrained(folder, dtype=dtype, attn_implementation=attn, **kw).eval()
    if mode == "f64":
        tc = text_config(model)
        rebuild_inv_freq_f64(text_model(model).rotary_emb, tc.head_dim, tc.rope_parameters)
    return model, dtype


def run_mode(model, dtype, mode: str, ids: torch.Tensor, counter: CallCounter) -> tuple[dict, dict]:
    tm = text_model(model)
    caps: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    hooks = []

    def save(name):
        def hook(_m, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            caps[name] = t.detach().clone().contiguous()
        return hook

    hooks.append(tm.embed_tokens.register_forward_hook(save("embed")))
    for i, layer in enumerate(tm.layers):
        hooks.append(layer.register_forward_hook(save(f"layers.{i}")))
    hooks.append(tm.norm.register_forward_hook(save("final_norm")))
    router_ids = {}
    for i, layer in enumerate(tm.layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is not None and type(gate).__name__.endswith("TopKRouter"):
            def rhook(_m, _inp, out, i=i):
                router_ids[i] = out[2].detach().clone().to(torch.int64).reshape(1, ids.shape[1], -1).contiguous()
            hooks.append(gate.register_forward_hook(rhook))

    counter.reset()
    counter.capture_first_chunk = mode == "f64"
    strict = StrictF64() if mode == "f64" else None
    with torch.inference_mode(), (strict if strict is not None else contextlib.nullcontext()):
        out = model(input_ids=ids, attention_mask=None, use_cache=False, output_hidden_states=True)
    for h in hooks:
        h.remove()
    info = {"calls": dict(counter.counts)}
    if strict is not None:
        if strict.violations:
            die(f"strict f64 audit: tensors below float64 were produced: {dict(strict.violations)}")
        info["strict_rewrites"] = dict(strict.rewrites)
        info["first_chunk"] = counter.first_chunk
    caps["logits"] = out.logits.detach().clone().contiguous()

    # cross-check the hooks against output_hidden_states (L+1 entries, last one after the final norm)
    hs = out.hidden_states
    L = len(tm.layers)
    if len(hs) != L + 1:
        die(f"output_hidden_states has {len(hs)} entries, expected {L + 1}")
    pairs = [("embed", hs[0])] + [(f"layers.{i}", hs[i + 1]) for i in range(L - 1)] + [("final_norm", hs[L])]
    for name, ref in pairs:
        if not torch.equal(caps[name], ref):
            die(f"hook capture {name} differs from output_hidden_states")
    for name, t in caps.items():
        if t.dtype != dtype:
            die(f"{name} captured as {t.dtype}, run dtype {dtype}")
        expect = (1, ids.shape[1], tm.config.vocab_size if name == "logits" else tm.config.hidden_size)
        if tuple(t.shape) != expect:
            die(f"{name} has shape {tuple(t.shape)}, expected {expect}")
    for i in sorted(router_ids):
        caps[f"router.{i}.topk_ids"] = router_ids[i]
    return caps, info


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x64, r64 = x.to(torch.float64), ref.to(torch.float64)
    return float(torch.linalg.vector_norm(x64 - r64) / torch.linalg.vector_norm(r64))


def fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}"



# ----------------------------------------------------------------------------------------------
# Cached decode (`--decode`): written to golden/decode/, leaving every other golden file untouched
# ----------------------------------------------------------------------------------------------

DECODE_PROMPT = "fizzbuzz"
# Prefill of tokens 0..DECODE_FROM (101 tokens: one full 64-token chunk and a partial one), then
# DECODE_STEPS − 1 tokens fed one at a time through the recurrent form.
DECODE_FROM = 100
DECODE_STEPS = 16
DECODE_MODES = ("f64", "f32", "bf16")


def run_decode(model, dtype, mode: str, ids: torch.Tensor, counter: CallCounter) -> tuple[dict, dict]:
    """transformers' own cached decode: prefill of ids[:, :P+1] with `use_cache=True`, then one token
    per call with the returned cache. Records the logits and every layer's output at positions
    P … P+K−1, and the final conv / recurrent state of every linear-attention layer."""
    tm = text_model(model)
    P, K = DECODE_FROM, DECODE_STEPS
    per_layer: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(tm.layers))}
    hooks = []
    for i, layer in enumerate(tm.layers):
        def hook(_m, _inp, out, i=i):
            t = out[0] if isinstance(out, tuple) else out
            per_layer[i].append(t[:, -1:].detach().clone())
        hooks.append(layer.register_forward_hook(hook))
    counter.reset()
    strict = StrictF64() if mode == "f64" else None
    logits = []
    with torch.inference_mode(), (strict if strict is not None else contextlib.nullcontext()):
        out = model(input_ids=ids[:, : P + 1], use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits[:, -1:].detach().clone())
        for m in range(1, K):
            out = model(input_ids=ids[:, P + m : P + m + 1], cache=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits[:, -1:].detach().clone())
    for h in hooks:
        h.remove()
    if strict is not None and strict.violations:
        die(f"strict f64 audit (decode): tensors below float64 were produced: {dict(strict.violations)}")
    caps: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    caps["decode.logits"] = torch.cat(logits, dim=1).contiguous()
    for i in range(len(tm.layers)):
        if len(per_layer[i]) != K:
            die(f"decode: layer {i} ran {len(per_layer[i])} times, expected {K}")
        caps[f"decode.layers.{i}"] = torch.cat(per_layer[i], dim=1).contiguous()
    cfg = text_config(tm)
    for i, kind in enumerate(cfg.layer_types):
        if kind != "linear_attention":
            continue
        layer = cache.layers[i]
        conv, rec = layer.conv_states[0], layer.recurrent_states[0]
        if conv is None or rec is None:
            die(f"decode: the cache holds no state for linear-attention layer {i}")
        caps[f"state.layers.{i}.conv"] = conv.detach().clone().contiguous()
        caps[f"state.layers.{i}.recurrent"] = rec.detach().clone().contiguous()
    info = {"calls": dict(counter.counts)}
    if strict is not None:
        info["strict_rewrites"] = dict(strict.rewrites)
    return caps, info


def make_decode_golden(golden: Path, out_root: Path, resolved: dict[str, str], counter: CallCounter) -> None:
    """Writes {out_root}/decode/{model}/{prompt}.{mode}.safetensors and {out_root}/decode/SUMMARY.md from
    the checkpoints and f64 prefill dumps under `golden`; nothing else is touched."""
    dec_root = out_root / "decode"
    if dec_root.exists():
        shutil.rmtree(dec_root)
    text = (REPO / "prompts" / f"{DECODE_PROMPT}.txt").read_bytes().decode("utf-8")
    rows = []
    for mname, spec in MODEL_SPECS.items():
        folder = golden / mname
        ids_list = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids
        ids = torch.tensor([ids_list], dtype=torch.int64)
        if ids.shape[1] < DECODE_FROM + DECODE_STEPS:
            die(f"{DECODE_PROMPT} has {ids.shape[1]} tokens, fewer than {DECODE_FROM + DECODE_STEPS}")
        prefill_f64 = safetensors.torch.load_file(str(golden / "states" / mname / f"{DECODE_PROMPT}.f64.safetensors"))
        if not torch.equal(prefill_f64["input_ids"], ids):
            die(f"{mname}: token ids differ from the committed f64 golden dump")
        states_dir = dec_root / mname
        states_dir.mkdir(parents=True)
        results = {}
        for mode in DECODE_MODES:
            model, dtype = load_for_mode(folder, spec["cls"], mode)
            caps, info = run_decode(model, dtype, mode, ids, counter)
            del model
            prefix = "modeling_qwen3_5." if mname == "qwen3_5_tiny" else "modeling_qwen3_next."
            impl = {
                k.split(".", 1)[1]: {"implementation": v, "calls": info["calls"].get(k.split(".", 1)[1], 0)}
                for k, v in resolved.items() if k.startswith(prefix)
            }
            if impl["torch_recurrent_gated_delta_rule"]["calls"] == 0 or impl["causal_conv1d_update"]["calls"] == 0:
                die("decode did not go through the recurrent rule / causal_conv1d_update")
            meta = {
                "format": "hsdiff.dump/v1",
                "source": "transformers",
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "mode": mode,
                "dtype": {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype],
                "model": mname,
                "weights_digest": weights_digest(folder),
                "config_sha256": sha256_file(folder / "config.json"),
                "tokenizer_sha256": sha256_file(folder / "tokenizer.json"),
                "prompt": DECODE_PROMPT,
                "decode_from": DECODE_FROM,
                "decode_steps": DECODE_STEPS,
                "path": "cached prefill of tokens 0..decode_from, then one token per forward call with the cache",
                "linear_attention_impl": impl,
                "tokens": int(ids.shape[1]),
            }
            if mode == "f64":
                meta["strict_f64"] = {
                    "method": "TorchFunctionMode rewriting float32 requests to float64; inv_freq rebuilt in float64",
                    "rewrites": info["strict_rewrites"],
                    "violations": 0,
                }
            tensors = OrderedDict([("input_ids", ids.contiguous())])
            tensors.update(caps)
            save_file(dict(tensors), str(states_dir / f"{DECODE_PROMPT}.{mode}.safetensors"),
                      metadata={"hsdiff": json.dumps(meta, sort_keys=True)})
            results[mode] = caps
        # Self-check: at strict f64 the cached decode equals the committed full prefill at the same positions.
        want = prefill_f64["logits"][:, DECODE_FROM: DECODE_FROM + DECODE_STEPS]
        err = rel_l2(results["f64"]["decode.logits"], want)
        if not err <= 1e-12:
            die(f"{mname}: strict f64 cached decode differs from the full prefill golden by {err:.3e}")
        for mode in DECODE_MODES:
            rows.append([mname, mode, fmt(rel_l2(results[mode]["decode.logits"], results["f64"]["decode.logits"])),
                         fmt(rel_l2(results[mode]["decode.logits"], want))])
    chmod_tree(dec_root)
    lines = ["# Golden cached decode: summary\n",
             "Generated by `golden/make.py --decode` (see docs/golden.md). Do not edit by hand.\n",
             f"transformers {transformers.__version__}, torch {torch.__version__}; prompt `{DECODE_PROMPT}`, "
             f"cached prefill of tokens 0..{DECODE_FROM}, then {DECODE_STEPS - 1} tokens one at a time.\n",
             "| model | mode | decode.logits rel L2 vs strict-f64 decode | vs strict-f64 full prefill (same positions) |",
             "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["\n## Files\n", "| file | bytes | sha256 |", "|---|---|---|"]
    for p in sorted(dec_root.rglob("*.safetensors")):
        lines.append(f"| {p.relative_to(out_root)} | {p.stat().st_size} | {sha256(p)[:16]} |")
    (dec_root / "SUMMARY.md").write_text("\n".join(lines) + "\n")
    (dec_root / "SUMMARY.md").chmod(0o644)
    print("\n".join(lines))


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def clear_outputs(out_root: Path) -> None:
    """Empties `out_root` (golden/ by default) of every earlier output, the FP8 files that
    make_fp8.py derives from this model included, and keeps the generators and their pins that
    live there."""
    out_root.mkdir(parents=True, exist_ok=True)
    for entry in out_root.iterdir():
        if entry.name in GENERATOR_FILES:
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "golden", help="output folder (default: golden/)")
    ap.add_argument("--allow-other-versions", action="store_true",
                    help="run with other transformers/torch versions (for experiments only; never commit the result)")
    ap.add_argument("--decode", action="store_true",
                    help="only (re)write golden/decode/: transformers' cached decode of the committed models")
    args = ap.parse_args()

    preflight_versions(args.allow_other_versions)
    if args.decode:
        resolved = resolve_fast_paths()
        counter = CallCounter()
        counter.install()
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(SEED)
        make_decode_golden(REPO / "golden", args.out, resolved, counter)
        return
    resolved = resolve_fast_paths()
    counter = CallCounter()
    counter.install()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)

    out_root: Path = args.out
    prompts = {p.stem: p.read_bytes().decode("utf-8") for p in sorted((REPO / "prompts").glob("*.txt"))}
    if sorted(prompts) != sorted(MODES_FOR_PROMPT):
        die(f"prompts/ holds {sorted(prompts)}, expected {sorted(MODES_FOR_PROMPT)}")

    clear_outputs(out_root)

    # --- tokenizer -----------------------------------------------------------------------------
    tok = train_tokenizer(prompts)

    # --- models --------------------------------------------------------------------------------
    built = {}
    for name, builder in (("qwen3_5_tiny", build_qwen3_5), ("qwen3_next_moe_tiny", build_qwen3_next)):
        folder = out_root / name
        folder.mkdir()
        built[name] = builder(folder, tok)

    # --- token ids: AutoTokenizer must load tokenizer.json verbatim -----------------------------
    token_ids: dict[str, list[int]] = {}
    tok_classes: dict[str, str] = {}
    for name in built:
        auto = AutoTokenizer.from_pretrained(out_root / name)
        raw = Tokenizer.from_file(str(out_root / name / "tokenizer.json"))
        a_js = json.loads(auto.backend_tokenizer.to_str())
        f_js = json.loads(raw.to_str())
        for part in ("normalizer", "pre_tokenizer", "decoder"):
            if a_js[part] != f_js[part]:
                die(f"{name}: AutoTokenizer ({type(auto).__name__}) {part} differs from tokenizer.json")
        if a_js["model"]["vocab"] != f_js["model"]["vocab"] or a_js["model"]["merges"] != f_js["model"]["merges"]:
            die(f"{name}: AutoTokenizer vocab/merges differ from tokenizer.json")
        if a_js["added_tokens"] or f_js["added_tokens"] or len(auto) != 384:
            die(f"{name}: unexpected special/added tokens ({a_js['added_tokens']}, len {len(auto)})")
        tok_classes[name] = type(auto).__name__
        for pname, text in prompts.items():
            a = auto(text, add_special_tokens=False)["input_ids"]
            b = raw.encode(text, add_special_tokens=False).ids
            c = tok.encode(text, add_special_tokens=False).ids
            if not (a == b == c):
                die(f"AutoTokenizer ids differ from tokenizers ids for {pname} ({name})")
            if auto.decode(a) != text:
                die(f"tokenizer does not round-trip {pname}")
            if pname in token_ids and token_ids[pname] != a:
                die("tokenizers differ between model folders")
            token_ids[pname] = a

    # --- states --------------------------------------------------------------------------------
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                "numpy": np.__version__, "python": sys.version.split()[0]}
    summary_rows = []
    gdn_checks = []
    run_info = {}
    for mname, spec in MODEL_SPECS.items():
        folder = out_root / mname
        states_dir = out_root / "states" / mname
        states_dir.mkdir(parents=True)
        results: dict[tuple[str, str], dict] = {}
        for mode in ("f64", "f32", "bf16", "hf64"):
            prompts_for_mode = [p for p in sorted(prompts) if mode in MODES_FOR_PROMPT[p]]
            model, dtype = load_for_mode(folder, spec["cls"], mode)
            attn = model.config._attn_implementation if not hasattr(model.config, "text_config") \
                else model.config.text_config._attn_implementation
            experts_impl = (getattr(text_config(model), "_experts_implementation", None)
                            if getattr(text_config(model), "num_experts", 0) else None)
            for pname in prompts_for_mode:
                ids = torch.tensor([token_ids[pname]], dtype=torch.int64)
                caps, info = run_mode(model, dtype, mode, ids, counter)
                if mode == "f64":
                    fc = info.pop("first_chunk")
                    if fc is None or fc["q"].dtype != torch.float64 or fc["out"].dtype != torch.float64:
                        die("layer-0 gated delta rule inputs were not captured in float64")
                    if not fc["use_qk_l2norm_in_kernel"] or fc["initial_state"] is not None:
                        die("unexpected gated delta rule call arguments in layer 0")
                    ref = numpy_gdn_reference(fc)
                    got = fc["out"].numpy()
                    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                    gdn_checks.append((mname, pname, err))
                    if not err <= 1e-12:
                        die(f"strict f64 layer-0 GDN vs numpy reference: rel L2 {err:.3e} > 1e-12")
                impl = {
                    k.split(".", 1)[1]: {"implementation": v, "calls": info["calls"].get(k.split(".", 1)[1], 0)}
                    for k, v in resolved.items()
                    if k.startswith(("modeling_qwen3_5." if mname == "qwen3_5_tiny" else "modeling_qwen3_next."))
                }
                if impl["torch_chunk_gated_delta_rule"]["calls"] == 0 or impl["causal_conv1d_fn"]["calls"] == 0:
                    die("the gated delta rule / conv fallbacks were not called; cannot record what ran")
                meta = {
                    "format": "hsdiff.dump/v1",
                    "source": "transformers",
                    "transformers": transformers.__version__,
                    "torch": torch.__version__,
                    "mode": mode,
                    "dtype": {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype],
                    "model": mname,
                    # The same digests hsdiff and hsdiff-capture record, so that env-diff can tell
                    # the golden model from another one by content rather than by name.
                    "weights_digest": weights_digest(folder),
                    "config_sha256": sha256_file(folder / "config.json"),
                    "tokenizer_sha256": sha256_file(folder / "tokenizer.json"),
                    "prompt": pname,
                    "attn_implementation": attn,
                    "linear_attention_impl": impl,
                    "tokens": int(ids.shape[1]),
                }
                if experts_impl is not None:
                    meta["experts_implementation"] = experts_impl
                if mode == "f64":
                    meta["strict_f64"] = {
                        "method": "TorchFunctionMode rewriting float32 requests to float64; inv_freq rebuilt in float64",
                        "rewrites": info["strict_rewrites"],
                        "violations": 0,
                        "layer0_gdn_vs_numpy_rel_l2": err,
                    }
                if mode == "hf64":
                    meta["note"] = "transformers' native float64 (hard float32 casts in norms, RoPE, router, GDN fallbacks)"
                tensors = OrderedDict([("input_ids", ids.contiguous())])
                tensors.update(caps)
                if mode in STORED_MODES:
                    path = states_dir / f"{pname}.{mode}.safetensors"
                    save_file(dict(tensors), str(path), metadata={"hsdiff": json.dumps(meta, sort_keys=True)})
                results[(pname, mode)] = caps
                run_info[(mname, mode)] = {"attn": attn, "experts": experts_impl, "impl": impl}
            del model
        # summary: every mode vs strict f64
        L = sum(1 for k in results[("fizzbuzz", "f64")] if k.startswith("layers."))
        for (pname, mode), caps in sorted(results.items(), key=lambda kv: (kv[0][0], ["f64", "f32", "bf16", "hf64"].index(kv[0][1]))):
            if mode == "f64":
                continue
            ref = results[(pname, "f64")]
            argmax = float((caps["logits"].argmax(-1) == ref["logits"].argmax(-1)).double().mean())
            row = [mname, pname, mode, fmt(rel_l2(caps["layers.0"], ref["layers.0"])),
                   fmt(rel_l2(caps[f"layers.{L - 1}"], ref[f"layers.{L - 1}"])),
                   fmt(rel_l2(caps["logits"], ref["logits"])),
                   f"{(caps['logits'].double() - ref['logits']).abs().max().item():.2e}",
                   f"{100 * argmax:.1f}%"]
            rk = sorted(k for k in ref if k.startswith("router."))
            if rk:
                agree = []
                for k in rk:
                    a = torch.sort(caps[k], dim=-1).values
                    b = torch.sort(ref[k], dim=-1).values
                    agree.append(float((a == b).all(-1).double().mean()))
                row.append(" ".join(f"{100 * x:.0f}%" for x in agree))
            else:
                row.append("—")
            summary_rows.append(row)

    for folder in (out_root / "qwen3_5_tiny", out_root / "qwen3_next_moe_tiny", out_root / "states"):
        chmod_tree(folder)

    # --- summary -------------------------------------------------------------------------------
    header = ["model", "prompt", "mode", "layers.0 rel L2", "last layer rel L2", "logits rel L2",
              "logits max abs", "argmax agree", "routing agree (per MoE layer)"]
    lines = []
    lines.append("# Golden files: summary\n")
    lines.append("Generated by `golden/make.py` (see docs/golden.md). Do not edit by hand.\n")
    lines.append("## Versions\n")
    for k, v in versions.items():
        lines.append(f"- {k} {v}")
    lines.append("\n## Tokens per prompt (byte-level BPE, vocab 384, no special tokens)\n")
    lines.append("| prompt | bytes | tokens |")
    lines.append("|---|---|---|")
    for pname in sorted(prompts):
        lines.append(f"| {pname} | {len(prompts[pname].encode('utf-8'))} | {len(token_ids[pname])} |")
    lines.append("\nAutoTokenizer class: " + ", ".join(f"{k} → {v}" for k, v in tok_classes.items())
                 + " (both checked equal to tokenizer.json: pipeline, vocab, merges, ids)")
    lines.append("\n## What ran\n")
    lines.append("| model | mode | attention | experts | chunk GDN | recurrent GDN | conv1d fn | conv1d update |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for (mname, mode), ri in run_info.items():
        impl = ri["impl"]
        lines.append(
            f"| {mname} | {mode} | {ri['attn']} | {ri['experts'] or '—'} | "
            + " | ".join(
                f"torch fallback ×{impl[f]['calls']}" if impl[f]["calls"] else "torch fallback (not called)"
                for f in FAST_PATH_FUNCS
            )
            + " |"
        )
    lines.append("\n## Every mode against strict float64 (rel L2 = ‖x − ref‖₂ / ‖ref‖₂ over the whole tensor)\n")
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in summary_rows:
        lines.append("| " + " | ".join(row) + " |")
    lines.append("\n## Strict float64 layer-0 gated delta rule vs independent numpy float64 recurrence\n")
    lines.append("| model | prompt | rel L2 |")
    lines.append("|---|---|---|")
    for mname, pname, err in gdn_checks:
        lines.append(f"| {mname} | {pname} | {err:.2e} |")
    lines.append("\n## Files\n")
    lines.append("| file | bytes | sha256 |")
    lines.append("|---|---|---|")
    # The files of the folders written above (not the generators beside them).
    written = ("qwen3_5_tiny", "qwen3_next_moe_tiny", "states")
    for p in sorted(q for folder in written for q in (out_root / folder).rglob("*")):
        if p.is_file():
            lines.append(f"| {p.relative_to(out_root)} | {p.stat().st_size} | {sha256(p)[:16]} |")
    text = "\n".join(lines) + "\n"
    (out_root / "SUMMARY.md").write_text(text)
    (out_root / "SUMMARY.md").chmod(0o644)
    out_root.chmod(0o755)
    print(text)
    expert_keys = [k for k in built["qwen3_next_moe_tiny"]["keys"] if ".experts." in k]
    print("expert tensors on disk (layer 0):", [k for k in expert_keys if k.startswith("model.layers.0.")][:6], "...")
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    print(f"golden/ total: {total} bytes")
    # Written after SUMMARY.md, which therefore lists the prefill files only; decode/ has its own.
    make_decode_golden(out_root, out_root, resolved, counter)


if __name__ == "__main__":
    main()
