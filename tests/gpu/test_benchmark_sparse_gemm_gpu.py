"""benchmarks/sparse_gemm.py end to end on a small shape (2048^3, one round, a few cuSPARSELt alg ids): every
type has an example tile that passes the correctness gate and is timed through compiler.runtime, and the
peers (cuSPARSELt, cuBLAS f16 / bf16 / fp8 / int8) are checked and timed beside it; the JSON carries it all.
The timing itself is the benchmark's run (docs/measurements.md); this is its smoke test on the device."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_runs_every_type_at_2048(sm90, torch_cuda, tmp_path):
    pytest.importorskip("lark", reason="the benchmark compiles the examples")
    pytest.importorskip("cuda.core", reason="the benchmark launches through compiler.runtime")
    out = tmp_path / "sparse_gemm.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sparse_gemm.py"), "--shapes", "2048,8192",
                           "--types", "f16,bf16,e4m3,s8", "--rounds", "1", "--cslt-max-algs", "2",
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {(r["M"], r["a"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(2048, "f16"), (2048, "bf16"), (2048, "e4m3"), (8192, "f16"), (8192, "bf16"),
                         (8192, "e4m3"), (8192, "s8")}
    for key, row in rows.items():
        assert "tilec_tile" in row, (key, row.get("unavailable"), row.get("tilec_wrong"))
        # the tile that reached the rounds passed the gate: within the output type's rounding
        assert row["tilec_rel_err"] <= {"f16": 2e-3, "bf16": 1e-2, "s32": 0.0}[row["d"]], key
        assert row["summary"]["tilec"] > 0 and row["summary"]["best_dense"], key
    assert "| M×N×K |" in proc.stdout
