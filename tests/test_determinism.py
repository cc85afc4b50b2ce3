"""Same input, same bytes: PTX, IR and JSON do not depend on the run, the process or the hash seed.

Inputs: every example and every tcgen05 lit test that compiles (they span all dense kinds, majors,
swizzles, .ws, optional operands and multi-tile files) plus the mma.sp lit tests that compile.
In-process: two compilations of each input agree. Across processes: the same inputs compiled under
PYTHONHASHSEED=0, 1 and random give identical digests (set/dict iteration order must not leak into
the output).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import CompileError, compile_file

ROOT = Path(__file__).resolve().parent.parent


def _inputs() -> list[Path]:
    candidates = sorted((ROOT / "examples").glob("*.tile"))
    for sub in ("tcgen05", "mma_sp", "passes"):
        candidates += sorted((ROOT / "tests" / "lit" / sub).glob("*.tile"))
    out = []
    for p in candidates:
        try:
            compile_file(p)
        except CompileError:
            continue                       # negative tests: nothing to compare
        out.append(p)
    return out


INPUTS = _inputs()

# Run in a fresh interpreter: prints {path: sha256 of ptx | ir | json} for every input.
_DIGEST_SCRIPT = """
import hashlib, json, sys
from compiler import compile_file
out = {}
for path in sys.argv[1:]:
    r = compile_file(path)
    text = r.ptx + "\\0" + r.ir() + "\\0" + json.dumps(r.to_json(), sort_keys=True)
    out[path] = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps(out))
"""


def _digest(path: Path) -> str:
    r = compile_file(path)
    text = r.ptx + "\0" + r.ir() + "\0" + json.dumps(r.to_json(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def test_inputs_cover_the_dense_and_sparse_paths():
    names = {p.name for p in INPUTS}
    assert {"gemm_bf16.tile", "multi_tile.tile", "ws_zero_columns.tile", "tf32_mn_base32b.tile"} <= names
    assert len(INPUTS) >= 20


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_same_process_twice_is_byte_identical(path):
    first, second = compile_file(path), compile_file(path)
    assert first.ptx == second.ptx
    assert first.ir() == second.ir()
    assert first.to_json() == second.to_json()


def test_hash_seeds_do_not_change_the_output():
    digests = {}
    for seed in ("0", "1", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT, *map(str, INPUTS)], env=env,
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        digests[seed] = json.loads(proc.stdout)
    assert digests["0"] == digests["1"] == digests["random"]
    # ... and equal to this process's own compilation.
    assert digests["0"] == {str(p): _digest(p) for p in INPUTS}


def test_cli_output_files_are_identical(tmp_path):
    """The CLI path (argument parsing, atomic write) adds nothing run-dependent either."""
    src = ROOT / "examples" / "gemm_bf16.tile"
    outs = []
    for i, seed in enumerate(("0", "random")):
        out = tmp_path / f"k{i}.ptx"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-m", "compiler", "compile", str(src), "-o", str(out)],
                              env=env, capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] == compile_file(src).ptx.encode()
