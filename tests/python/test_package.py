"""Packaging: the built-in prompts shipped with the package are hsdiff's bytes."""

from importlib import resources

from conftest import REPO


def test_shipped_prompts_are_hsdiffs():
    shipped = {p.name: p.read_bytes() for p in resources.files("hsdiff_capture").joinpath("prompts").iterdir()
               if p.name.endswith(".txt")}
    ours = {p.name: p.read_bytes() for p in (REPO / "prompts").glob("*.txt")}
    assert shipped == ours and len(ours) == 4
