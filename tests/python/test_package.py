"""Packaging: the built-in prompts shipped with the package are hsdiff's bytes."""

from importlib import resources

from conftest import REPO


def test_shipped_prompts_are_hsdiffs():
    shipped = {p.name: p.read_bytes() for p in resources.files("hsdiff_capture").joinpath("prompts").iterdir()
               if p.name.endswith(".txt")}
    ours = {p.name: p.read_bytes() for p in (REPO / "prompts").glob("*.txt")}
    assert shipped == ours and len(ours) == 4


def test_one_version_and_the_typing_marker_ship():
    from importlib import metadata

    import hsdiff_capture

    # pyproject.toml reads the version from the package: the metadata and the fingerprint's
    # `tool` field cannot drift apart.
    assert metadata.version("hsdiff-capture") == hsdiff_capture.__version__
    assert 'dynamic = ["version"]' in (REPO / "python/pyproject.toml").read_text()
    assert resources.files("hsdiff_capture").joinpath("py.typed").is_file()
