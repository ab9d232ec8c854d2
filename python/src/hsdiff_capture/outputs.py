"""The files the package writes (dumps), under hsdiff's output policy (docs/file-formats.md#outputs):
a target is never one of the run's inputs (the model folder and every file in it, the prompt
file, an engine's spool folder), two spellings of one file are one target (compared by device and
inode, or by resolved path for a file that does not exist yet), and every target is checked — and,
in the command line, reserved with a temp file beside it — before the model loads, so a folder
without write access or a name the file system cannot take fails first. A regular file is written
to its temp sibling, flushed to disk and renamed over the target, keeping a replaced file's mode:
an error, Ctrl-C or SIGTERM half-way leave the old file (or none) and no temp file behind. A
character device or FIFO (`/dev/null`, a pipe) is written in place; a directory, block device or
socket is refused. The same rules as hsdiff's src/util/output/."""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import CaptureError

# Folder levels and most entries walked under one input folder (as hsdiff: a dataset side is
# searched 8 folders deep, and the folder itself is one more level).
WALK_DEPTH = 9
WALK_ENTRIES = 200_000

_counter = itertools.count()


def is_model_file(name: str) -> bool:
    """Files a model folder holds that an output must never replace or add."""
    return (name in ("config.json", "tokenizer.json") or name.endswith(".safetensors")
            or name.endswith(".safetensors.index.json"))


def _id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class Protected:
    """What a run reads, by identity: the files `inputs` name, and each folder with every file
    under it. Paths that do not exist are skipped (reading them fails on its own)."""

    def __init__(self, inputs: Iterable[os.PathLike | str | None] = ()) -> None:
        self.files: set[tuple[int, int]] = set()
        self.folders: set[tuple[int, int]] = set()
        self._budget = WALK_ENTRIES
        for p in inputs:
            if p is None:
                continue
            try:
                st = os.stat(p)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                self._walk(Path(p), WALK_DEPTH)
            else:
                self.files.add(_id(st))

    def _walk(self, folder: Path, depth: int) -> None:
        try:
            st = os.stat(folder)
        except OSError:
            return
        if _id(st) in self.folders:
            return
        self.folders.add(_id(st))
        if depth == 0:
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if self._budget == 0:
                return
            self._budget -= 1
            try:
                st = os.stat(entry.path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                self._walk(Path(entry.path), depth - 1)
            else:
                self.files.add(_id(st))


def name_max(folder: Path) -> int:
    """The longest file name the folder's file system takes (statvfs), or 255."""
    try:
        return os.statvfs(folder).f_namemax or 255
    except OSError:
        return 255


def _existing_ancestor(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


class Output:
    """One target, checked when made (see the module's description); `reserve()` creates its temp
    sibling, `write()` fills and renames it, `discard()` drops an unwritten reservation."""

    def __init__(self, path: os.PathLike | str, what: str = "out", inputs: Protected | None = None) -> None:
        self.given = Path(path)
        self.what = what
        self.protected = inputs if inputs is not None else Protected()
        self.tmp: Path | None = None
        self.new_mode: int | None = None  # set by reserve()
        # What identifies the target: its resolved path (not yet there) or its (device, inode).
        self.key: tuple[str, str | tuple[int, int]]
        self._inspect()

    def _refuse(self, why: str) -> CaptureError:
        return CaptureError(f"{self.given}: {self.what}: {why}")

    def _check_length(self, path: Path) -> None:
        n = len(os.fsencode(path.name))
        limit = name_max(_existing_ancestor(path.parent))
        if n > limit:
            raise self._refuse(f"the file name is {n} bytes; this file system takes at most {limit}")

    def _inspect(self) -> None:
        """Sets `real` (links resolved), `stream` (a device or FIFO), `key` (identity) — or refuses."""
        path = self.given
        if not path.name or path.name in (".", ".."):
            raise self._refuse("needs a file name")
        self._check_length(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise self._refuse(e.strerror or str(e)) from None
        if st is None:
            if os.path.lexists(path):
                raise self._refuse("is a symbolic link to a file that does not exist: give the file itself")
            parent = path.parent
            try:
                pst = os.stat(parent)
            except OSError:
                pst = None
            if pst is not None and not stat.S_ISDIR(pst.st_mode):
                raise self._refuse(f"{parent} is not a folder")
            if pst is not None and _id(pst) in self.protected.folders and is_model_file(path.name):
                raise self._refuse(f"would add a model file to {parent}, one of this command's inputs: "
                                   "choose another folder")
            self.real = Path(os.path.realpath(parent)) / path.name
            self._check_length(self.real)
            self.stream, self.key = False, ("path", str(self.real))
            return
        self.real = Path(os.path.realpath(path))
        mode = st.st_mode
        if stat.S_ISREG(mode):
            if _id(st) in self.protected.files:
                raise self._refuse("is one of this command's inputs: choose another file")
            self._check_length(self.real)
            self.stream = False
        elif stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            self.stream = True
        else:
            kind = "a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else "a socket"
            raise self._refuse(f"exists and is {kind}, not a regular file: hsdiff-capture writes regular files "
                               "(replaced whole), character devices and FIFOs")
        self.key = ("id", _id(st))

    def _temp_name(self) -> Path:
        """`.NAME.hsdiff-capture-PID-N.tmp` beside the target, NAME shortened (on a character
        boundary) so that the whole fits the file system's name limit."""
        suffix = f".hsdiff-capture-{os.getpid()}-{next(_counter)}.tmp"
        room = max(name_max(_existing_ancestor(self.real.parent)) - len(suffix) - 1, 0)
        name = os.fsencode(self.real.name)[:room].decode("utf-8", "ignore")
        return self.real.parent / f".{name}{suffix}"

    def reserve(self) -> None:
        """Creates the temp file now (the target's folder too, as the package always did), so that
        a folder without write access fails before the work. Nothing for a device or FIFO."""
        if self.stream or self.tmp is not None:
            return
        try:
            self.real.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._temp_name()
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            # The mode the umask gives a new file: writers that make their own file (safetensors'
            # save_file makes it 0600) are given it back before the rename.
            self.new_mode = stat.S_IMODE(os.stat(tmp).st_mode)
        except OSError as e:
            raise self._refuse(f"cannot create a file in {self.real.parent}: {e.strerror or e}") from None
        self.tmp = tmp

    def discard(self) -> None:
        if self.tmp is not None:
            try:
                self.tmp.unlink()
            except FileNotFoundError:
                pass
            self.tmp = None

    def write(self, to_file: Callable[[str], None], to_bytes: Callable[[], bytes]) -> None:
        """A regular file: `to_file(temp path)` writes it, then it is flushed, given the replaced
        file's mode and renamed over the target. A device or FIFO: `to_bytes()` is written in place."""
        if self.stream:
            self._write_in_place(to_bytes())
            return
        self.reserve()
        tmp, new_mode = self.tmp, self.new_mode
        if tmp is None or new_mode is None:  # reserve() made both: a regular file always gets them
            raise self._refuse("no temporary file was reserved")
        try:
            to_file(str(tmp))
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            # The target may have changed while the forward ran: check it again.
            self._inspect()
            if self.stream:
                raise self._refuse("became a device or FIFO while hsdiff-capture ran")
            try:
                mode = stat.S_IMODE(os.stat(self.real).st_mode)
            except FileNotFoundError:
                mode = new_mode  # a new file gets the mode the umask gives
            os.chmod(tmp, mode)
            os.replace(tmp, self.real)
            self.tmp = None
        except CaptureError:
            raise
        except Exception as e:  # noqa: BLE001 - the writer's error (a full disk, …), one line
            why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).splitlines() or [""])[0]
            raise CaptureError(f"{self.given}: cannot write: {why or type(e).__name__}") from None
        finally:
            self.discard()

    def _write_in_place(self, data: bytes) -> None:
        """Opened without blocking, so that a FIFO nobody reads is an error now rather than a hang."""
        try:
            fd = os.open(self.given, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                raise self._refuse("is a FIFO that no process reads: start the reader first") from None
            raise self._refuse(f"cannot open it for writing: {e.strerror or e}") from None
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            raise CaptureError(f"{self.given}: cannot write: {e.strerror or e}") from None
        finally:
            os.close(fd)


def check_all(targets: list[tuple[os.PathLike | str, str]], inputs: Iterable[os.PathLike | str | None]) -> list[Output]:
    """Checks every target of a run against its inputs and each other (a device or FIFO may take
    several outputs; a file takes one)."""
    protected = Protected(inputs)
    outs: list[Output] = []
    for path, what in targets:
        out = Output(path, what, protected)
        other = next((o for o in outs if o.key == out.key), None)
        if other is not None and not out.stream:
            raise CaptureError(f"{out.given}: {what} and {other.what} name the same file ({other.given}): "
                               "give each its own")
        outs.append(out)
    return outs


def model_inputs(model) -> list[Path]:
    """The local checkpoint folder a loaded model came from (`name_or_path`), if there is one."""
    for name in (getattr(model, "name_or_path", None),
                 getattr(getattr(model, "config", None), "_name_or_path", None)):
        if name and Path(name).is_dir():
            return [Path(name)]
    return []


def write_safetensors(out: Output, tensors: dict, metadata: dict) -> None:
    """A dump through `out`: safetensors' own writer into the temp file, or its bytes in place."""
    from safetensors.torch import save, save_file

    out.write(lambda path: save_file(tensors, path, metadata=metadata), lambda: save(tensors, metadata=metadata))
