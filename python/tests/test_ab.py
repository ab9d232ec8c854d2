"""`--ab`: one load, two captures, `hsdiff compare` on them with its exit code passed through;
which hsdiff it runs (this environment's first, then $HSDIFF_BIN, then PATH) and the refusal of
one of another version."""

from __future__ import annotations

import hsdiff_capture
from conftest import (
    assert_bit_identical,
    fake_hsdiff,
    hsdiff_binary,
    path_with,
    path_without_hsdiff,
    read_dump,
    run_cli,
)


def test_ab_with_the_environments_hsdiff_flags_the_standin(tmp_path, standin, fizzbuzz_args, absent_dump):
    prefix = tmp_path / "ab"
    # No hsdiff on PATH: the one the wheel put beside this interpreter is the one that runs.
    r = run_cli([*fizzbuzz_args, "--ab", "--out", str(prefix)], standin=standin, path=path_without_hsdiff(tmp_path))
    auto, torch_ = tmp_path / "ab.auto.safetensors", tmp_path / "ab.torch.safetensors"
    # The stand-in's 25 % is a divergence: compare says so with exit code 1.
    assert r.returncode == 1, r.stdout + r.stderr
    assert "running: hsdiff compare" in r.stderr
    assert f"at {hsdiff_binary()} (this environment's)" in r.stderr, r.stderr
    assert_bit_identical(read_dump(torch_)[0], read_dump(absent_dump)[0])
    m_auto, m_torch = read_dump(auto)[1], read_dump(torch_)[1]
    assert m_auto["linear_attention_request"]["core"] == "auto"
    assert m_auto["linear_attention_impl"]["chunk_gated_delta_rule"]["actual"] == "fla"
    assert m_torch["linear_attention_impl"]["chunk_gated_delta_rule"]["actual"] == "torch"
    assert "layers.0" in r.stdout  # compare's table


def test_ab_passes_compare_exit_code_through(tmp_path, fizzbuzz_args, bare_python):
    # An environment without its own hsdiff, and a stand-in on PATH that records its arguments
    # and exits 2: `--ab` must exit 2 too.
    bindir = tmp_path / "bin"
    fake_hsdiff(bindir, hsdiff_capture.__version__)
    r = run_cli([*fizzbuzz_args, "--ab", "auto,torch", "--out", str(tmp_path / "x.safetensors")],
                path=path_with(bindir), python=bare_python)
    assert r.returncode == 2, r.stderr
    assert f"at {bindir / 'hsdiff'} (PATH)" in r.stderr, r.stderr
    assert (bindir / "args").read_text().split() == [
        "compare", str(tmp_path / "x.auto.safetensors"), str(tmp_path / "x.torch.safetensors")]
    # Without the packages auto *is* torch: the two captures are the same bits, and --ab says the
    # comparison tests nothing.
    assert_bit_identical(read_dump(tmp_path / "x.auto.safetensors")[0], read_dump(tmp_path / "x.torch.safetensors")[0])
    assert "both sides ran the same implementations" in r.stderr, r.stderr


def test_ab_refuses_an_hsdiff_of_another_version(tmp_path, fizzbuzz_args, bare_python):
    bindir = tmp_path / "bin"
    fake_hsdiff(bindir, "0.0.1")
    r = run_cli([*fizzbuzz_args, "--ab", "--out", str(tmp_path / "v")], path=path_without_hsdiff(tmp_path),
                python=bare_python, hsdiff_bin=bindir / "hsdiff")
    assert r.returncode == 2, r.stderr
    assert (f"error: hsdiff at {bindir / 'hsdiff'} ($HSDIFF_BIN) is version 0.0.1, but hsdiff-capture is "
            f"{hsdiff_capture.__version__}") in r.stderr, r.stderr
    assert not (bindir / "args").exists()  # never run for the comparison
    # Refused before the model load: nothing captured.
    assert "wrote " not in r.stderr and not list(tmp_path.glob("v.*")), r.stderr


def test_ab_without_any_hsdiff_writes_both_and_says_how_to_compare(tmp_path, fizzbuzz_args, bare_python):
    r = run_cli([*fizzbuzz_args, "--ab", "--out", str(tmp_path / "y")], path=path_without_hsdiff(tmp_path),
                python=bare_python)
    assert r.returncode == 0, r.stderr
    assert "no hsdiff here (not in this environment, $HSDIFF_BIN unset, none on PATH); compare with: hsdiff compare" \
        in r.stderr
    assert (tmp_path / "y.auto.safetensors").is_file() and (tmp_path / "y.torch.safetensors").is_file()
