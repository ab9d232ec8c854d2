"""Packaging: the built-in prompts shipped with the package are hsdiff's bytes; one version for
the crate, the package and the binary; the root wheel carries both; `pip install ./python` alone
still makes the capture package."""

import shutil
import subprocess
import sys
import zipfile
from importlib import metadata, resources
from pathlib import Path

import hsdiff_capture
from conftest import REPO, hsdiff_binary
from hsdiff_capture.binary import version_of

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_shipped_prompts_are_hsdiffs():
    shipped = {p.name: p.read_bytes() for p in resources.files("hsdiff_capture").joinpath("prompts").iterdir()
               if p.name.endswith(".txt")}
    ours = {p.name: p.read_bytes() for p in (REPO / "prompts").glob("*.txt")}
    assert shipped == ours and len(ours) == 4


def test_one_version_for_the_crate_the_package_and_the_binary():
    # Cargo.toml's version is the one source: the root wheel's metadata is made from it
    # (pyproject.toml's dynamic version), the package's __version__ must equal it, and so must
    # the binary's `--version`.
    crate = tomllib.loads((REPO / "Cargo.toml").read_text())["package"]["version"]
    assert hsdiff_capture.__version__ == crate
    assert metadata.version("hsdiff") == crate
    assert version_of(hsdiff_binary()) == crate
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()
    assert resources.files("hsdiff_capture").joinpath("py.typed").is_file()


def test_the_root_wheel_installed_the_binary_the_package_and_its_command():
    dist = metadata.distribution("hsdiff")
    files = {str(f) for f in dist.files or []}
    bindir = hsdiff_binary().parent
    for name in ("hsdiff", "hsdiff-capture"):
        assert any(f.endswith(f"bin/{name}") for f in files), sorted(files)
        assert (bindir / name).is_file()
    assert "hsdiff_capture/__init__.py" in files and "hsdiff_capture/prompts/fizzbuzz.txt" in files
    # The wheel's command runs this interpreter (the installer rewrote its `#!python`).
    shebang = Path((bindir / "hsdiff-capture").read_text().splitlines()[0].removeprefix("#!"))
    assert shebang.parent == Path(sys.executable).parent and shebang.name.startswith("python"), shebang
    r = subprocess.run([str(bindir / "hsdiff-capture"), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "--ab" in r.stdout, r.stderr
    assert metadata.metadata("hsdiff").get_all("Provides-Extra") == ["ray", "sglang", "vllm"]


def test_the_root_wheel_and_the_capture_package_declare_the_same_requirements():
    root = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    package = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())["project"]
    for field in ("dependencies", "optional-dependencies", "requires-python"):
        assert root[field] == package[field], field
    assert any(d.startswith("transformers>=") for d in package["dependencies"])


def test_the_capture_package_alone_still_builds_from_python(tmp_path):
    # `pip install ./python` on a box that only captures: a wheel of the package with its command
    # and data, no binary, the same version. Built from a copy (setuptools writes build/ beside it).
    src = tmp_path / "python"
    shutil.copytree(REPO / "python", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                        "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name == f"hsdiff_capture-{hsdiff_capture.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "hsdiff_capture/cli.py" in names and "hsdiff_capture/prompts/fizzbuzz.txt" in names
    assert "hsdiff_capture/py.typed" in names
    assert not any(n.endswith("/hsdiff") or "scripts/" in n for n in names), names
    entry_points = zipfile.ZipFile(wheel).read(
        f"hsdiff_capture-{hsdiff_capture.__version__}.dist-info/entry_points.txt").decode()
    assert "hsdiff-capture = hsdiff_capture.cli:main" in entry_points
