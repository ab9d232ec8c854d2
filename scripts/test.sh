#!/usr/bin/env bash
# The project's test command (README "The tests"; .ci/run calls it): the Rust tests, the CUDA
# kernels on the CPU emulator, then the tests of the hsdiff-capture Python package (python/tests)
# against the installed package.
#
# The Python side runs in a virtual environment made from the complete pinned closure in
# python/tests/requirements.txt (installed without resolution; torch's Linux wheel on PyPI is the
# CUDA build, about 5 GB — see docs/golden.md). It is kept in $HSDIFF_TEST_VENV (default
# target/pytest-venv) and rebuilt only when the pins change.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --locked

# The CUDA kernels (src/backends/fused/cuda/gdn.cu) on the CPU emulator: the only check of their
# indexing and tile edges that needs no CUDA toolkit and no GPU (g++ only; a few minutes).
if ! command -v g++ >/dev/null; then
    echo "scripts/test.sh: error: g++ (C++20) is needed for scripts/cuda-emu-test.sh" >&2
    exit 2
fi
scripts/cuda-emu-test.sh

venv="$(realpath -m "${HSDIFF_TEST_VENV:-target/pytest-venv}")"
# The pins alone (not comments, nor the `-r` line that names where the golden pins live), so that
# editing a comment or moving a file does not reinstall 5 GB.
pins="$(cat python/tests/requirements*.txt golden/requirements.txt | grep -v -e '^#' -e '^-r ' -e '^$' \
    | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --no-cache-dir --no-deps -r python/tests/requirements.txt
    # transformers ≤ 5.14 for the era-A tests: an overlay venv inside it that sees its packages.
    python3 -m venv "$venv/era-a"
    purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    "$venv/bin/python" -c "$purelib" > "$("$venv/era-a/bin/python" -c "$purelib")/zz-hsdiff-test-base.pth"
    "$venv/era-a/bin/pip" install --quiet --no-cache-dir --no-deps -r python/tests/requirements-era-a.txt
    echo "$pins" > "$venv/.pins"
fi
# The package as a PyTorch user gets it: the root wheel with the hsdiff binary and hsdiff_capture
# (pyproject.toml). maturin's dev profile is `cargo test`'s, so the binary above is reused, not
# rebuilt (about 10 s: zipping it). python/tests/test_package.py builds `pip install ./python` too.
rm -rf target/wheels
"$venv/bin/maturin" build --quiet --locked --profile dev --out target/wheels
"$venv/bin/pip" install --quiet --no-deps --force-reinstall target/wheels/hsdiff-*.whl

# The package and its tests clean under ruff, the package under mypy (both configured in
# python/pyproject.toml; pinned above).
"$venv/bin/ruff" check python
(cd python && "$venv/bin/mypy")

# pytest exits 5 when it collects no test: that is a failure here, never a pass. It runs with no
# hsdiff on PATH and no $HSDIFF_BIN: the tests run the wheel's binary, as the package finds it.
rc=0
no_hsdiff_path="$(tr ':' '\n' <<<"$PATH" | while read -r dir; do
    if [ -n "$dir" ] && [ ! -e "$dir/hsdiff" ]; then printf '%s:' "$dir"; fi
done)"
env -u HSDIFF_BIN PATH="${no_hsdiff_path%:}" HSDIFF_ERA_A_PYTHON="$venv/era-a/bin/python" \
    "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "scripts/test.sh: error: pytest collected no tests in python/tests" >&2
fi
exit "$rc"
