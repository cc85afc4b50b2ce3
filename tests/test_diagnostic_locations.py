"""Diagnostics point at the statement to change, not at the tile's name (issue 15 item 7).

A SpecError names the spec field to blame; a field that is not a key of the tile's source locations falls
back to the tile name. At 422d16c the one-tile mma.sp kernel blamed 'tile.warps_m' (no such key) for a warp
grid of more than 1024 threads, so the error pointed at `tile big {`.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compiler import CompileError, compile_source

ROOT = Path(__file__).resolve().parent.parent

TOO_MANY_THREADS = """target sm_80;
tile big {
  engine mma.sp;
  shape M=16 N=8 K=32;
  A: f16 global; B: f16 global; C: f32 global; D: f32 global;
  sparsity 2:4 metadata=runtime;
  schedule cta=1024x16x32 warps=64x2 stages=1;
}
"""


def test_too_many_threads_points_at_the_warp_grid():
    with pytest.raises(CompileError) as e:
        compile_source(TOO_MANY_THREADS, "big.tile")
    d = e.value.diagnostics[0]
    # 64 x 2 warps x 32 threads = 4096 > 1024 threads per CTA (CUDA's block limit)
    assert "4096 threads per CTA exceed 1024" in d.message
    assert (d.loc.line, d.loc.col) == (7, 33), d.loc         # the value of `warps=64x2`
    assert "schedule cta=1024x16x32 warps=64x2" in e.value.render().split("\n")[1]


def _statement_fields() -> set[str]:
    """Statement keys a tile's locs can hold: the statements of the grammar and the operand names."""
    return {"tile", "engine", "shape", "loop", "sparsity", "schedule", "block_scale", "zero_columns", "negate",
            "saturate", "max_shift", "scale_input_d", "disable_output_lane", "epilogue", "A", "B", "C", "D", "SFA",
            "SFB"}


def test_emitters_blame_fields_that_have_locations():
    """Every literal field= given to SpecError in the kernel emitters starts with a statement key, so the
    fallback to the tile name is only for errors about the tile itself."""
    bad = []
    for path in sorted((ROOT / "compiler" / "ptx").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SpecError":
                fields = [k.value for k in node.keywords if k.arg == "field"] + node.args[1:2]
                for f in fields:
                    if isinstance(f, ast.Constant) and isinstance(f.value, str) and \
                            f.value.split(".")[0] not in _statement_fields() | {"name", "ptx", "target"}:
                        bad.append(f"{path.name}:{node.lineno}: {f.value}")
    assert not bad, bad
