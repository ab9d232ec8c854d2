"""The installed `hsdiff-capture` command and `python -m hsdiff_capture`: same dumps as
before (bit for bit the golden transformers capture), in-process forcing against stand-in kernel
packages, errors with exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import assert_bit_identical, read_dump, rel_l2, run_cli

# The stand-ins scale their outputs by 1.25: far outside any rounding difference (f32: ~1e-6).
STANDIN_MIN_REL_L2 = 1e-2


def test_help_of_the_console_script_and_the_module():
    runs = [run_cli(["--help"]), run_cli(["--help"], python=Path(sys.executable))]
    for r in runs:
        assert r.returncode == 0, r.stderr
        for opt in ("--linear-attention", "--conv", "--core", "--norm", "--ab", "--out"):
            assert opt in r.stdout


def test_default_capture_is_the_golden_transformers_capture(absent_dump, golden_here):
    # golden/make.py's f32 hidden states of the same model and prompt (recorded on this machine):
    # same keys, same bits.
    ours, meta = read_dump(absent_dump)
    assert_bit_identical(ours, golden_here)
    assert meta["implementation"] == "transformers/torch-fallback"


def test_the_module_writes_the_same_dump(tmp_path, fizzbuzz_args, absent_dump):
    out = tmp_path / "module.safetensors"
    r = run_cli([*fizzbuzz_args, "--out", str(out)], python=Path(sys.executable))
    assert r.returncode == 0, r.stderr
    assert "hsdiff-capture: wrote 12 tensors" in r.stderr
    assert_bit_identical(read_dump(out)[0], read_dump(absent_dump)[0])


def test_forced_torch_is_bit_identical_to_an_environment_without_the_packages(
        tmp_path, standin, fizzbuzz_args, absent_dump):
    auto, forced = tmp_path / "auto.safetensors", tmp_path / "torch.safetensors"
    r = run_cli([*fizzbuzz_args, "--out", str(auto)], standin=standin)
    assert r.returncode == 0, r.stderr
    r = run_cli([*fizzbuzz_args, "--linear-attention", "torch", "--out", str(forced)], standin=standin)
    assert r.returncode == 0, r.stderr
    absent, _ = read_dump(absent_dump)

    # With the stand-ins importable transformers picked them: the hidden states move measurably …
    t_auto, m_auto = read_dump(auto)
    assert rel_l2(t_auto["layers.0"], absent["layers.0"]) > STANDIN_MIN_REL_L2
    for func, kind in (("causal_conv1d_fn", "causal_conv1d"), ("chunk_gated_delta_rule", "fla")):
        e = m_auto["linear_attention_impl"][func]
        assert (e["requested"], e["environment"], e["actual"], e["fast"]) == ("auto", kind, kind, True)
        assert e["calls"] == 6 and e["reason"].startswith("environment's choice")
    assert m_auto["kernel_packages"]["fla"]["importable"] is True
    assert m_auto["fla"] == "0.0.0+hsdiff-standin"

    # … and forcing torch in-process gives the package-free result bit for bit.
    t_forced, m_forced = read_dump(forced)
    assert_bit_identical(t_forced, absent)
    assert m_forced["implementation"] == "transformers/torch-fallback"
    assert m_forced["linear_attention_request"] == {"conv": "torch", "core": "torch", "norm": "torch"}
    for func, kind in (("causal_conv1d_fn", "causal_conv1d"), ("chunk_gated_delta_rule", "fla")):
        e = m_forced["linear_attention_impl"][func]
        assert (e["requested"], e["environment"], e["actual"], e["fast"]) == ("torch", kind, "torch", False)
        assert e["reason"].startswith("forced to torch in-process") and e["calls"] == 6
        assert e["implementation"].endswith("(transformers torch fallback)")


def test_per_function_forcing(tmp_path, standin, fizzbuzz_args, absent_dump):
    out = tmp_path / "core.safetensors"
    r = run_cli([*fizzbuzz_args, "--conv", "torch", "--core", "fla", "--norm", "fla", "--out", str(out)],
                standin=standin)
    assert r.returncode == 0, r.stderr
    t, m = read_dump(out)
    impl = m["linear_attention_impl"]
    assert impl["causal_conv1d_fn"]["actual"] == "torch"
    assert impl["chunk_gated_delta_rule"]["actual"] == "fla"
    # transformers 5.24 never picks fla's norm itself: this one is forced onto the stand-in.
    norm = impl["gated_norm"]
    assert (norm["environment"], norm["actual"], norm["calls"]) == ("torch", "fla", 6)
    assert norm["implementation"] == "fla.modules.FusedRMSNormGated"
    assert norm["resolved_by"] == "transformers' own class (5.15+)"
    assert "5.15+ always builds its own gated norm" in norm["reason"]
    assert m["implementation"] == (
        "transformers/mixed(fast: chunk_gated_delta_rule,fused_recurrent_gated_delta_rule,gated_norm)")
    assert rel_l2(t["layers.0"], read_dump(absent_dump)[0]["layers.0"]) > STANDIN_MIN_REL_L2


def test_a_package_that_does_not_import_is_an_error_not_a_fallback(tmp_path, fizzbuzz_args):
    for flags, pkg in ((["--core", "fla"], "fla.ops.gated_delta_rule"),
                       (["--linear-attention", "fla"], "causal_conv1d"),
                       (["--norm", "fla"], "fla.modules")):
        out = tmp_path / "never.safetensors"
        r = run_cli(fizzbuzz_args + flags + ["--out", str(out)])
        assert r.returncode == 2, r.stderr
        lines = [line for line in r.stderr.splitlines() if "error" in line]
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("hsdiff-capture: error: ") and f"`{pkg}` does not import" in lines[0]
        assert "No module named" in lines[0]
        assert not out.exists()


def test_bad_options_exit_2(tmp_path, fizzbuzz_args):
    out = str(tmp_path / "x.safetensors")
    for flags, why in ((["--ab", "auto,auto"], "--ab auto,auto: expected two different settings"),
                       (["--ab", "torch,cuda"], "--ab torch,cuda: expected two different settings"),
                       (["--ab", "--core", "torch"], "--ab takes its two settings itself"),
                       (["--dtype", "f8"], "unknown dtype 'f8'")):
        r = run_cli(fizzbuzz_args + flags + ["--out", out])
        assert r.returncode == 2, (flags, r.stderr)
        assert r.stderr.strip().startswith(f"hsdiff-capture: error: {why}"), (flags, r.stderr)


def test_a_missing_model_folder_is_named_not_taken_for_a_hub_id(tmp_path):
    out = tmp_path / "x.safetensors"
    for model, words in ((str(tmp_path / "nonexistent"), "no such model folder"),
                         ("./no/such/folder", "no such model folder"),
                         (str(out.parent / "file.txt"), "is not a folder")):
        if words == "is not a folder":
            (tmp_path / "file.txt").write_text("not a model")
        r = run_cli(["--model", model, "--out", str(out)])
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == f"hsdiff-capture: error: --model {model}: {words}", r.stderr
        assert not out.exists()


def test_help_describes_the_command_in_whole_sentences():
    r = run_cli(["--help"])
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "Load a transformers model, run one prompt" in text and "then `hsdiff compare` on them)." in text
    assert "no cache unless" not in text
