#!/usr/bin/env bash
# Fill .whl/ (gitignored) with the pure-Python wheels a GPU machine lacks, so that
# tests/gpu/run_on_device.sh can install them there without a package registry.
#
#   tests/gpu/make_wheelhouse.sh            # on a machine that reaches PyPI, from the repository root
#   -> .whl/lark-*.whl, filecheck-*.whl, lit-*.whl, hypothesis-*.whl, pytest_xdist-*.whl (run_on_device.sh
#   --jobs) and their pure-Python dependencies
#
# The GPU images this project uses have python3 (3.12), numpy, ml_dtypes, networkx, pytest, torch, cupy,
# nvcc and ptxas, but not tilec's parser (lark) nor its test tools (filecheck, lit; hypothesis only maybe).
# Carry the folder with the run: the device tool's `carry: [".whl"]`, or copy it beside the checkout.
# Versions: the ranges of pyproject.toml (project dependencies and the `test` extra).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${WHEELHOUSE:-.whl}
py=${PYTHON:-python3}
target_py=${TARGET_PYTHON_VERSION:-3.12}
mkdir -p "$dest"
# Wheels only, resolved for the device's Python and processor (x86-64, CPython): most are py3-none-any,
# hypothesis may come as a CPython wheel.
"$py" -m pip download -q -d "$dest" --only-binary=:all: --python-version "$target_py" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "lark>=1.1.9" "filecheck>=1.0.6" "lit>=17" "hypothesis>=6" "pytest-xdist>=3" 2> >(grep -v "is ignored: it is neither" >&2)
echo "wheelhouse $dest:"
ls -1 "$dest"
du -sh "$dest"
