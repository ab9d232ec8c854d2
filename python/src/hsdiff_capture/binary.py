"""Which `hsdiff` binary the package runs, and the check that it is this package's version.

Looked for in this order, the first found wins:
1. this environment's scripts folder (`sysconfig`'s, e.g. `.venv/bin`; `~/.local/bin` when the
   package is a `pip install --user` one): where the wheel that carries both installs it, so an
   environment is consistent even when it is not activated;
2. `$HSDIFF_BIN`, a path to the binary;
3. `PATH`.
A binary whose `hsdiff --version` is not this package's version is refused: the capture side
and the comparing side read and write one dump format, and a mismatch is found here, not as a
puzzling error halfway through a comparison."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import HsdiffError

ENV_VAR = "HSDIFF_BIN"


@dataclass(frozen=True)
class Hsdiff:
    """A located binary and where it was found (`source`, said in every log line)."""

    path: Path
    source: str

    def describe(self) -> str:
        return f"{self.path} ({self.source})"


def locate() -> Hsdiff | None:
    """The first `hsdiff` of: this environment, `$HSDIFF_BIN`, `PATH`; None when there is none.
    A `$HSDIFF_BIN` that is set but names no executable file is an error, never skipped."""
    scripts = own_scripts()
    own = shutil.which("hsdiff", path=scripts) if scripts else None
    if own is not None:
        return Hsdiff(Path(own), "this environment's")
    env = os.environ.get(ENV_VAR)
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise HsdiffError(f"${ENV_VAR}={env} is not an executable file")
        return Hsdiff(Path(env), f"${ENV_VAR}")
    found = shutil.which("hsdiff")
    return Hsdiff(Path(found), "PATH") if found is not None else None


def own_scripts() -> str | None:
    """The scripts folder of the installation this package is part of."""
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and Path(__file__).resolve().is_relative_to(Path(user_site).resolve()):
        return sysconfig.get_path("scripts", f"{os.name}_user")
    return sysconfig.get_path("scripts")


def version_of(path: Path) -> str:
    """The version `path --version` prints (`hsdiff X.Y.Z`)."""
    try:
        r = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HsdiffError(f"{path} --version: {e}") from e
    words = r.stdout.split()
    if r.returncode != 0 or len(words) != 2 or words[0] != "hsdiff":
        said = (r.stdout + r.stderr).strip() or "nothing"
        raise HsdiffError(f"{path} --version exited {r.returncode} and printed {said!r}: not an hsdiff binary")
    return words[1]


def checked(found: Hsdiff) -> Hsdiff:
    """`found`, once its version is this package's; HsdiffError naming both otherwise."""
    theirs = version_of(found.path)
    if theirs != __version__:
        raise HsdiffError(f"hsdiff at {found.describe()} is version {theirs}, but hsdiff-capture is {__version__}: "
                          f"install the wheel of one version (pip install hsdiff-{__version__}-*.whl) or point "
                          f"${ENV_VAR} at an hsdiff {__version__}")
    return found


def find_hsdiff() -> Hsdiff:
    """The binary to run, version-checked; HsdiffError when there is none."""
    found = locate()
    if found is None:
        raise HsdiffError(f"no hsdiff binary: not in this environment ({own_scripts()}), "
                          f"${ENV_VAR} unset, none on PATH (pip install the hsdiff wheel, or set ${ENV_VAR})")
    return checked(found)
