"""`hsdiff-capture`: load a transformers model, run one prompt (batch 1, prefill; no cache unless
--state) with the linear-attention implementation asked for, write an hsdiff dump — or, with `--ab`, two dumps from
one load and `hsdiff compare` on them."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path

from . import __version__
from .binary import ENV_VAR, Hsdiff, checked, locate
from .environment import local_folder
from .errors import CaptureError
from .fingerprint import torch_dtype_name
from .kernels import SETTINGS, Request
from .outputs import check_all
from .recorder import capture

PROG = "hsdiff-capture"
DESCRIPTION = ("Load a transformers model, run one prompt with the linear-attention implementation asked for, "
               "and write an hsdiff dump (with --ab: two dumps from one load, then `hsdiff compare` on them).")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION,
                                 epilog="docs/capture-pytorch.md in the hsdiff repository has the details.")
    ap.add_argument("--model", required=True, help="checkpoint folder or hub id")
    ap.add_argument("--class", dest="cls", default="auto-causal",
                    help="auto-causal (AutoModelForCausalLM, default), auto-vl (AutoModelForImageTextToText), "
                         "auto (AutoModel), or a transformers class name, e.g. Qwen3_5ForConditionalGeneration")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="TEXT, @FILE, or a built-in prompt name (default: fizzbuzz)")
    src.add_argument("--tokens", help="comma-separated token ids (bypasses the tokenizer)")
    ap.add_argument("--add-special-tokens", action="store_true",
                    help="let the tokenizer add BOS/EOS etc. (hsdiff adds none)")
    ap.add_argument("--dtype", default="f32", help="f32 (default), bf16, f16, f64")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    ap.add_argument("--attn-implementation", default=None,
                    help="eager, sdpa, flash_attention_2, … (default: transformers')")
    ap.add_argument("--experts-implementation", default=None,
                    help="MoE experts: eager, grouped_mm, … (default: transformers'; grouped_mm refuses f64)")
    ap.add_argument("--layers-path", default=None,
                    help="module path of the decoder-layer ModuleList, e.g. model.language_model.layers")
    ap.add_argument("--no-logits", action="store_true", help="do not store the logits")
    ap.add_argument("--state", action="store_true",
                    help="also store each linear-attention layer's final conv window and recurrent state "
                         "(state.layers.{i}.conv / .recurrent) from transformers' cache; the prefill then "
                         "runs with use_cache=True")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--linear-attention", default="auto", choices=SETTINGS,
                    help="auto: what transformers chose in this environment (default); torch: transformers' "
                         "torch functions for everything; fla: the kernel packages for everything "
                         "(fla for the delta rule and the gated norm, causal_conv1d for the convolution)")
    ap.add_argument("--conv", choices=("auto", "torch", "causal_conv1d"), help="short convolution only")
    ap.add_argument("--core", choices=("auto", "torch", "fla"), help="gated delta rule only")
    ap.add_argument("--norm", choices=("auto", "torch", "fla"), help="gated RMSNorm only")
    ap.add_argument("--ab", nargs="?", const="auto,torch", metavar="X,Y",
                    help="capture twice from one load, with settings X and Y of --linear-attention "
                         "(default auto,torch), to PREFIX.X.safetensors and PREFIX.Y.safetensors, then run "
                         "`hsdiff compare` on them when hsdiff is on PATH (its exit code is ours)")
    ap.add_argument("--out", required=True, type=Path, help="output .safetensors (with --ab: PREFIX)")
    return ap


def load_model(args, torch_dtype):
    import transformers

    if args.cls == "auto-causal":
        cls = transformers.AutoModelForCausalLM
    elif args.cls == "auto-vl":
        cls = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
    elif args.cls == "auto":
        cls = transformers.AutoModel
    else:
        cls = getattr(transformers, args.cls, None)
        if cls is None:
            raise CaptureError(f"--class {args.cls}: transformers has no such class")
    if looks_like_path(args.model) and not Path(args.model).expanduser().is_dir():
        what = "is not a folder" if Path(args.model).expanduser().exists() else "no such model folder"
        raise CaptureError(f"--model {args.model}: {what}")
    kwargs = {"trust_remote_code": args.trust_remote_code}
    if args.attn_implementation:
        kwargs["attn_implementation"] = args.attn_implementation
    if args.experts_implementation:
        kwargs["experts_implementation"] = args.experts_implementation
    try:
        try:
            model = cls.from_pretrained(args.model, dtype=torch_dtype, **kwargs)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = cls.from_pretrained(args.model, torch_dtype=torch_dtype, **kwargs)
    except Exception as e:  # noqa: BLE001 - one line, exit 2
        raise CaptureError(f"cannot load {args.model} with {getattr(cls, '__name__', cls)}: "
                           f"{type(e).__name__}: {e}") from None
    return model


def looks_like_path(model: str) -> bool:
    """A folder rather than a hub id (`org/name`): absolute, relative to `.`/`~`, more than one
    `/`, or an existing file system entry."""
    return (model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model
            or Path(model).exists())


def prompt_text(arg: str) -> str:
    """A file (`@FILE`), a built-in prompt (the same bytes as hsdiff's prompts/), or the text itself."""
    if arg.startswith("@"):
        try:
            return Path(arg[1:]).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CaptureError(f"--prompt {arg}: {e}") from None
    builtin = resources.files("hsdiff_capture").joinpath("prompts").joinpath(f"{arg}.txt")
    if builtin.is_file():
        return builtin.read_bytes().decode("utf-8")
    return arg


def token_ids(args) -> tuple[list[int], dict]:
    if args.tokens:
        try:
            ids = [int(x) for x in args.tokens.split(",") if x.strip()]
        except ValueError:
            raise CaptureError(f"--tokens {args.tokens!r}: not comma-separated integers") from None
        extra = {}
    else:
        import transformers

        label = args.prompt or "fizzbuzz"
        tok = transformers.AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        ids = tok(prompt_text(label), add_special_tokens=args.add_special_tokens)["input_ids"]
        extra = {"prompt": label, "add_special_tokens": bool(args.add_special_tokens)}
    if not ids:
        raise CaptureError("no tokens to run")
    return ids, extra


def ab_settings(value: str) -> list[str]:
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 2 or any(p not in SETTINGS for p in parts) or parts[0] == parts[1]:
        raise CaptureError(f"--ab {value}: expected two different settings of {'|'.join(SETTINGS)}, e.g. auto,torch")
    return parts


def ab_paths(prefix: Path, settings: list[str]) -> list[Path]:
    base = prefix.name.removesuffix(".safetensors")
    return [prefix.with_name(f"{base}.{s}.safetensors") for s in settings]


def run(args, note) -> int:
    torch_dtype_name(args.dtype)  # before the model load: fail fast
    if args.ab and (args.linear_attention != "auto" or args.conv or args.core or args.norm):
        raise CaptureError("--ab takes its two settings itself (--ab X,Y); "
                           "drop --linear-attention/--conv/--core/--norm")
    settings = ab_settings(args.ab) if args.ab else None
    requests = [Request.from_options(s) for s in settings] if settings else [
        Request.from_options(args.linear_attention, conv=args.conv, core=args.core, norm=args.norm)]
    for request in requests:  # before the (possibly long) model load: fail fast
        request.package_functions()
    # --ab's hsdiff, found and version-checked before the model load too (None: none here).
    found = locate() if settings else None
    hsdiff = checked(found) if found is not None else None
    # Every output checked and reserved before the model loads; never over the model's folder or
    # files or the prompt file (outputs.py).
    paths = ab_paths(args.out, settings) if settings else [args.out]
    prompt_file = Path(args.prompt[1:]) if args.prompt and args.prompt.startswith("@") else None
    outs = check_all([(p, "--out") for p in paths], [local_folder(args.model), prompt_file])
    try:
        for out in outs:
            out.reserve()
        return run_reserved(args, note, settings, outs, hsdiff)
    finally:
        for out in outs:
            out.discard()


def run_reserved(args, note, settings, outs, hsdiff: Hsdiff | None) -> int:
    import torch

    torch_dtype = getattr(torch, torch_dtype_name(args.dtype))
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CaptureError(f"--device {args.device}: torch.cuda.is_available() is False here")
    model = load_model(args, torch_dtype).to(device).eval()
    ids, extra = token_ids(args)
    extra["model"] = args.model
    common = {"logits": not args.no_logits, "layers_path": args.layers_path, "metadata": extra,
              "state": args.state}

    if settings is None:
        res = capture(model, ids, outs[0], linear_attention=args.linear_attention,
                      conv=args.conv, core=args.core, norm=args.norm, **common)
        note(describe(res))
        return 0
    paths = [out.given for out in outs]
    ran = []
    for setting, out in zip(settings, outs, strict=True):
        res = capture(model, ids, out, linear_attention=setting, **common)
        ran.append(what_ran(res.fingerprint))
        note(describe(res))
    if ran[0] == ran[1]:
        note(f"--ab {settings[0]},{settings[1]}: both sides ran the same implementations "
             f"({', '.join(f'{k}: {v}' for k, v in ran[0].items()) or 'none recorded'}), so the comparison "
             "does not test one against the other (is the kernel package importable here?)")
    if hsdiff is None:
        note(f"no hsdiff here (not in this environment, ${ENV_VAR} unset, none on PATH); compare with: "
             f"hsdiff compare {paths[0]} {paths[1]}")
        return 0
    note(f"running: hsdiff compare {paths[0]} {paths[1]} (hsdiff {__version__} at {hsdiff.describe()})")
    sys.stdout.flush()
    return subprocess.run([str(hsdiff.path), "compare", str(paths[0]), str(paths[1])]).returncode


def what_ran(fp: dict) -> dict:
    """Per linear-attention function, what actually ran (the fingerprint's `actual`)."""
    return {k: v.get("actual") for k, v in fp.get("linear_attention_impl", {}).items() if isinstance(v, dict)}


def describe(res) -> str:
    m = res.fingerprint
    calls = ", ".join(f"{k}×{v['calls']}" for k, v in m["linear_attention_impl"].items() if "calls" in v)
    return (f"wrote {len(res.tensors)} tensors for {m['tokens']} tokens to {res.path} ({m['model_class']}, "
            f"hooked {m['module_path']}, {m['dtype']}, {m['implementation']}; calls: {calls or 'none'})")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def note(msg: str) -> None:
        print(f"{PROG}: {msg}", file=sys.stderr)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminated)
    try:
        code = run(args, note)
    except CaptureError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        code = 2
    except Terminated as t:
        # The temp files are gone (the `finally`s ran): die of the signal, as without the handler.
        signal.signal(t.signum, signal.SIG_DFL)
        os.kill(os.getpid(), t.signum)
        code = 128 + t.signum
    sys.exit(code)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds through the `finally`s that remove temp files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminated(signum, _frame):
    raise Terminated(signum)
