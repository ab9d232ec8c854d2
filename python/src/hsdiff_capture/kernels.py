"""Which implementation runs each linear-attention function, and forcing one in-process.

transformers picks, once at import of the modeling module, between a kernel package
(`causal_conv1d` for the short convolution, `fla` for the gated delta rule and, before 5.15, the
gated RMSNorm) and its own torch fallback:

- 5.15+ wraps each function in `use_kernel_func_from_hub_with_fallback`, which keeps the choice
  (`implementation`, `torch_function`) in the closure of a module-level wrapper the layer calls by
  name (`torch_chunk_gated_delta_rule`, `causal_conv1d_fn`, …);
- up to 5.14 the module globals are the package functions or None, and each GatedDeltaNet layer
  copies its choice into instance attributes (`self.chunk_gated_delta_rule`, …) at construction;
  the gated norm is fla's `FusedRMSNormGated` when fla was available.

`LinearAttentionForcing` reads that choice, and for the duration of a capture replaces what the
layers call (the module-level name in 5.15+, the layer attributes before) by the implementation
asked for — the torch function itself, or the package function, called with the same argument
filtering as transformers' wrapper — and counts the calls. Everything is restored on exit.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from .environment import first_line, probe_import
from .errors import CaptureError

# Per group: the choices besides "auto"/"torch" and the package that provides them.
GROUP_PACKAGE = {"conv": "causal_conv1d", "core": "fla", "norm": "fla"}
SETTINGS = ("auto", "torch", "fla")  # --linear-attention; "fla" = the kernel packages everywhere


@dataclass(frozen=True)
class FuncSpec:
    name: str  # fingerprint key
    group: str  # conv | core
    package_module: str  # where the package defines `name`
    new_symbol: str  # 5.15+: module-level wrapper in the modeling module
    old_attr: str  # ≤ 5.14: GatedDeltaNet instance attribute
    old_torch: str | None  # ≤ 5.14: module-level torch function (None: the layer's inline path)


FUNCS = [
    FuncSpec("causal_conv1d_fn", "conv", "causal_conv1d", "causal_conv1d_fn", "causal_conv1d_fn", None),
    FuncSpec("causal_conv1d_update", "conv", "causal_conv1d", "causal_conv1d_update", "causal_conv1d_update",
             "torch_causal_conv1d_update"),
    FuncSpec("chunk_gated_delta_rule", "core", "fla.ops.gated_delta_rule", "torch_chunk_gated_delta_rule",
             "chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"),
    FuncSpec("fused_recurrent_gated_delta_rule", "core", "fla.ops.gated_delta_rule",
             "torch_recurrent_gated_delta_rule", "recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule"),
]
NORM = "gated_norm"
FLA_NORM_MODULE, FLA_NORM_CLASS = "fla.modules", "FusedRMSNormGated"
NEW_ERA = "use_kernel_func_from_hub_with_fallback"
MISSING = object()


@dataclass(frozen=True)
class Request:
    """What to run per group: "auto" (the environment's choice), "torch", or the package name."""

    conv: str = "auto"
    core: str = "auto"
    norm: str = "auto"

    @classmethod
    def from_options(cls, setting: str = "auto", conv: str | None = None, core: str | None = None,
                     norm: str | None = None) -> Request:
        if setting not in SETTINGS:
            raise CaptureError(f"linear attention {setting!r}: expected one of {', '.join(SETTINGS)}")
        base = {g: (GROUP_PACKAGE[g] if setting == "fla" else setting) for g in GROUP_PACKAGE}
        for group, value in (("conv", conv), ("core", core), ("norm", norm)):
            if value is None:
                continue
            allowed = ("auto", "torch", GROUP_PACKAGE[group])
            if value not in allowed:
                raise CaptureError(f"--{group} {value!r}: expected one of {', '.join(allowed)}")
            base[group] = value
        return cls(**base)

    def get(self, group: str) -> str:
        return getattr(self, group)

    def forces(self) -> bool:
        return any(self.get(g) != "auto" for g in GROUP_PACKAGE)

    def as_dict(self) -> dict:
        return {g: self.get(g) for g in GROUP_PACKAGE}

    def package_functions(self) -> tuple[dict, object]:
        """The package functions (by FuncSpec name) and fla norm class asked for, imported now;
        CaptureError if any does not import (a package asked for is never silently skipped, also
        when the model turns out not to use it)."""
        funcs = {spec.name: package_function(spec.package_module, spec.name, spec.group)
                 for spec in FUNCS if self.get(spec.group) == GROUP_PACKAGE[spec.group]}
        norm_cls = package_function(FLA_NORM_MODULE, FLA_NORM_CLASS, "norm") if self.norm == "fla" else None
        return funcs, norm_cls


def qualname(obj) -> str:
    mod = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}.{name}"


def closure_cells(fn) -> dict:
    """Free variables of `fn` or of what it wraps (`__wrapped__`) that hold an `implementation`:
    the state of transformers' `use_kernel_func_from_hub_with_fallback` wrapper."""
    for _ in range(8):
        if fn is None:
            break
        code = getattr(fn, "__code__", None)
        if code is not None and getattr(fn, "__closure__", None):
            cells = {}
            for k, c in zip(code.co_freevars, fn.__closure__, strict=True):
                try:
                    cells[k] = c.cell_contents
                except ValueError:  # an empty cell
                    pass
            if "implementation" in cells and "torch_function" in cells:
                return cells
        fn = getattr(fn, "__wrapped__", None)
    return {}


def package_function(module: str, name: str, group: str):
    """The package's own function, or CaptureError saying why it cannot be had (never a fallback)."""
    try:
        fn = getattr(importlib.import_module(module), name, None)
    except Exception as e:  # noqa: BLE001 - the reason is the message
        raise CaptureError(f"{group}={module.split('.')[0]} asked for, but `{module}` does not import: "
                           f"{first_line(e)}") from None
    if not callable(fn):
        raise CaptureError(f"{group}={module.split('.')[0]} asked for, but `{module}` has no function `{name}`")
    return fn


def filtered_call(fn):
    """Calls `fn` with only the keyword arguments its signature names, as transformers' wrapper does
    (the layer passes e.g. `cu_seqlens` that not every implementation takes)."""
    params = tuple(inspect.signature(fn).parameters)

    def call(*args, **kwargs):
        return fn(*args, **{k: v for k, v in kwargs.items() if k in params})

    return call


def torch_fallback_call(fn, name: str):
    """transformers' fallback branch: refuses packed sequences (the torch functions cannot keep them
    apart, transformers raises too), else the torch function with filtered keywords."""
    call = filtered_call(fn)

    def fallback(*args, **kwargs):
        if kwargs.get("cu_seqlens") is not None or kwargs.get("seq_idx") is not None:
            raise ValueError(f"`{name}` forced to torch cannot keep packed sequences apart (cu_seqlens/seq_idx given)")
        return call(*args, **kwargs)

    return fallback


def kind_of(fn, torch_fn) -> str:
    """"torch" for transformers' own function (or its inline path, None), else the package's top name."""
    if fn is None or fn is torch_fn:
        return "torch"
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith("transformers."):
        return "torch"
    return mod.split(".")[0] or "?"


NORM_NEW_ERA = "transformers' own class (5.15+)"


def environment_reason(kind: str, package: str, era: str) -> str:
    if kind != "torch":
        return f"{package} imported when transformers loaded the modeling module"
    probe = probe_import(package)
    if not probe["importable"]:
        return f"{package} does not import ({probe['error']})"
    if era == NEW_ERA:
        return f"{package} imports now but did not when transformers loaded the modeling module"
    if era == NORM_NEW_ERA:
        return "transformers 5.15+ always builds its own gated norm (fla's only through hub kernels)"
    return (f"{package} imports, but transformers ≤ 5.14 takes it only when it and CUDA are available "
            f"when the modeling module is loaded")


class LinearAttentionForcing:
    """Context manager: runs the forward with the implementations `request` asks for, counts the
    calls, and afterwards describes per function what was asked, what the environment had chosen,
    what ran and why (`fingerprint()`)."""

    def __init__(self, tm, request: Request, hub_kernels: bool = False) -> None:
        self.tm = tm
        self.request = request
        self.hub_kernels = hub_kernels
        self.entries: dict[str, dict] = {}
        self.counts: dict[str, int] = {}
        self.undo: list = []

    # -- setup -----------------------------------------------------------------------------------

    def __enter__(self):
        if self.hub_kernels and self.request.forces():
            raise CaptureError("the model uses hub kernels (use_kernels=True), which replace layer forwards; "
                               "forcing an implementation is not supported there — load it without use_kernels")
        wanted, fla_norm_cls = self.request.package_functions()
        try:
            for spec in FUNCS:
                self._function(spec, wanted.get(spec.name))
            self._norm(fla_norm_cls)
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc):
        self._restore()
        return False

    def _restore(self) -> None:
        while self.undo:
            self.undo.pop()()

    def _counting(self, name: str, fn):
        self.counts.setdefault(name, 0)

        def counted(*args, **kwargs):
            self.counts[name] += 1
            return fn(*args, **kwargs)

        return counted

    def _record(self, spec_name: str, group: str, package: str, era: str, symbol: str,
                env_kind: str, env_impl, actual_kind: str, actual_impl) -> None:
        requested = self.request.get(group)
        env_reason = environment_reason(env_kind, package, era)
        if requested == "auto":
            reason = f"environment's choice: {env_reason}"
        elif actual_kind == env_kind:
            reason = f"asked for {requested}; already the environment's choice ({env_reason})"
        else:
            reason = f"forced to {requested} in-process; the environment had {env_kind} ({env_reason})"
        torch_note = " (transformers torch fallback)" if actual_kind == "torch" else ""
        impl_name = "inline torch path of the layer" if actual_impl is None else qualname(actual_impl)
        self.entries[spec_name] = {
            "requested": requested,
            "environment": env_kind,
            "environment_implementation": "inline torch path of the layer" if env_impl is None else qualname(env_impl),
            "actual": actual_kind,
            "reason": reason,
            "implementation": impl_name + torch_note,
            "fast": actual_kind != "torch",
            "package": package,
            "symbol": symbol,
            "resolved_by": era,
        }

    # -- the four functions ----------------------------------------------------------------------

    def _function(self, spec: FuncSpec, package_fn) -> None:
        modeling = self.tm.modeling
        package = GROUP_PACKAGE[spec.group]
        requested = self.request.get(spec.group)
        wrapper = getattr(modeling, spec.new_symbol, None) if modeling is not None else None
        cells = closure_cells(wrapper) if wrapper is not None else {}
        if cells:
            self._new_era(spec, modeling, wrapper, cells, package, requested, package_fn)
        elif self.tm.linear_layers and hasattr(self.tm.linear_layers[0], spec.old_attr):
            self._old_era(spec, modeling, package, requested, package_fn)
        else:
            self.entries[spec.name] = {"requested": requested, "environment": "not used", "actual": "not used",
                                       "reason": "the model has no linear-attention layer calling it",
                                       "implementation": "not used by this model", "fast": False,
                                       "package": package}

    def _new_era(self, spec, modeling, wrapper, cells, package, requested, package_fn) -> None:
        impl, torch_fn = cells["implementation"], cells["torch_function"]
        env_kind = kind_of(impl, torch_fn)
        if requested == "auto" or requested == env_kind:
            call, actual_kind, actual_impl = wrapper, env_kind, impl
        elif requested == "torch":
            call, actual_kind, actual_impl = torch_fallback_call(torch_fn, spec.name), "torch", torch_fn
        else:
            call, actual_kind, actual_impl = filtered_call(package_fn), requested, package_fn
        setattr(modeling, spec.new_symbol, self._counting(spec.name, call))
        self.undo.append(lambda: setattr(modeling, spec.new_symbol, wrapper))
        self._record(spec.name, spec.group, package, NEW_ERA, f"{modeling.__name__}.{spec.new_symbol}",
                     env_kind, impl, actual_kind, actual_impl)

    def _old_era(self, spec, modeling, package, requested, package_fn) -> None:
        torch_fn = getattr(modeling, spec.old_torch, None) if spec.old_torch else None
        layers = self.tm.linear_layers
        current = getattr(layers[0], spec.old_attr)
        env_kind = kind_of(current, torch_fn)
        if requested == "auto" or requested == env_kind:
            target, actual_kind, actual_impl = current, env_kind, current
        elif requested == "torch":
            target, actual_kind, actual_impl = torch_fn, "torch", torch_fn  # None: the layer's inline path
        else:
            target, actual_kind, actual_impl = filtered_call(package_fn), requested, package_fn
        for layer in layers:
            saved = layer.__dict__.get(spec.old_attr, MISSING)
            # None selects the layer's inline torch path (causal_conv1d_fn only): nothing to count.
            setattr(layer, spec.old_attr, None if target is None else self._counting(spec.name, target))
            self.undo.append(lambda obj=layer, s=saved: delattr(obj, spec.old_attr) if s is MISSING
                             else setattr(obj, spec.old_attr, s))
        self._record(spec.name, spec.group, package, "layer attribute",
                     f"{type(layers[0]).__name__}.{spec.old_attr}", env_kind, current, actual_kind, actual_impl)

    # -- the gated norm --------------------------------------------------------------------------

    def _torch_norm_class(self):
        """transformers' own gated RMSNorm class in the modeling module (`…RMSNormGated`)."""
        modeling = self.tm.modeling
        for name in dir(modeling):
            obj = getattr(modeling, name)
            if isinstance(obj, type) and name.endswith("RMSNormGated") and obj.__module__ == modeling.__name__:
                return obj
        raise CaptureError(f"norm=torch asked for, but {modeling.__name__} defines no …RMSNormGated class")

    def _norm(self, fla_norm_cls) -> None:
        norms = [n for n in (getattr(layer, "norm", None) for layer in self.tm.linear_layers) if n is not None]
        requested = self.request.norm
        if not norms:
            self.entries[NORM] = {"requested": requested, "environment": "not used", "actual": "not used",
                                  "reason": "the model has no linear-attention layer", "fast": False,
                                  "implementation": "not used by this model", "package": "fla"}
            return
        cls = type(norms[0])
        env_kind = "fla" if cls.__module__.split(".")[0] == "fla" else "torch"
        actual_kind, actual_cls = env_kind, cls
        if requested not in ("auto", env_kind):
            actual_kind = requested
            actual_cls = self._torch_norm_class() if requested == "torch" else fla_norm_cls
            for norm in norms:
                self._replace_norm(norm, actual_cls, requested)
        self.counts.setdefault(NORM, 0)
        for norm in norms:
            handle = norm.register_forward_hook(lambda *_: self.counts.__setitem__(NORM, self.counts[NORM] + 1))
            self.undo.append(handle.remove)
        # ≤ 5.14 modeling modules hold a `FusedRMSNormGated` global (fla's class or None).
        era = "layer attribute" if hasattr(self.tm.modeling, FLA_NORM_CLASS) else NORM_NEW_ERA
        self._record(NORM, "norm", "fla", era, f"{type(self.tm.linear_layers[0]).__name__}.norm",
                     env_kind, cls, actual_kind, actual_cls)
        self.entries[NORM]["forward"] = qualname(getattr(actual_cls, "forward", None))

    def _replace_norm(self, norm, target_cls, requested: str) -> None:
        """Routes `norm`'s forward to a `target_cls` module that shares its weight (an instance
        attribute `forward`, removed on exit; the model's parameters and state dict are untouched)."""
        weight = norm.weight
        eps = getattr(norm, "variance_epsilon", None)
        if eps is None:
            eps = norm.eps
        hidden = weight.shape[0]
        if requested == "torch":
            replacement = target_cls(hidden, eps=eps)
        else:
            replacement = target_cls(hidden, eps=eps, activation=getattr(norm, "activation", "silu"),
                                     device=weight.device, dtype=weight.dtype)
        replacement.weight = weight
        replacement.train(norm.training)
        saved = norm.__dict__.get("forward", MISSING)
        object.__setattr__(norm, "forward", replacement.forward)
        self.undo.append(lambda: object.__delattr__(norm, "forward") if saved is MISSING
                         else object.__setattr__(norm, "forward", saved))

    # -- result ----------------------------------------------------------------------------------

    def fingerprint(self) -> dict:
        out = {}
        for name, entry in self.entries.items():
            e = dict(entry)
            if name in self.counts:
                e["calls"] = self.counts[name]
            out[name] = e
        return out


def summary_implementation(impl: dict) -> str:
    """`transformers/torch-fallback`, `transformers/fast-path` or `transformers/mixed(fast: …)`."""
    used = [k for k, v in impl.items() if v.get("actual") != "not used"]
    fast = sorted(k for k in used if impl[k].get("fast"))
    if not used:
        return "transformers/no-linear-attention"
    if not fast:
        return "transformers/torch-fallback"
    if len(fast) == len(used):
        return "transformers/fast-path"
    return "transformers/mixed(fast: " + ",".join(fast) + ")"
