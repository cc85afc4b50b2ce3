"""`tilec tune` on the GPU (issue 17): a small real search of both whole-GEMM kernels (every candidate run
must compute D within the reference's tolerance, since the kernels are correct), the chosen schedule
compiled back through `compile --tuning` and `--write`, and the device runner's check catching a wrong D
(a reference perturbed by one element)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lark", reason="tilec's parser compiles the examples")
pytest.importorskip("cuda.core", reason="the runtime runs on cuda-core")

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def _tilec(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "compiler", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)


@pytest.mark.parametrize("name, kernel", [("sparse_wgmma_f16", "sparse_wgmma"), ("sparse_gemm_f16", "sparse_gemm")])
def test_small_search_chooses_a_correct_timed_schedule(sm90, tmp_path, name, kernel):
    src = tmp_path / f"{name}.tile"
    shutil.copy(EX / f"{name}.tile", src)
    out = tmp_path / "tuning.json"
    proc = _tilec("tune", str(src), "--shape", "1024,1024,512", "--top", "4", "--out", str(out), "--write")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(out.read_text())
    rec = doc["tiles"][name]
    assert rec["kernel"] == kernel and len(rec["candidates"]) == 4
    assert [c["status"] for c in rec["candidates"]] == ["ok"] * 4, rec["candidates"]
    best = min(rec["candidates"], key=lambda c: c["median_ms"])
    assert rec["chosen"] == best["schedule"] and best["median_ms"] > 0
    assert best["tflops"] == pytest.approx(2 * 1024 * 1024 * 512 / (best["median_ms"] * 1e-3) / 1e12, rel=1e-3)
    assert doc["device"] and doc["sms"] > 0 and doc["shape"] == [1024, 1024, 512]
    # the rewritten tile runs and checks, and compile --tuning on the example gives its PTX
    proc = _tilec("run", "--check", "--shape", "1024,1024,512", str(src))
    assert proc.returncode == 0, proc.stderr
    a, b = tmp_path / "a.ptx", tmp_path / "b.ptx"
    assert _tilec("compile", str(EX / f"{name}.tile"), "--tuning", str(out), "-o", str(a)).returncode == 0
    assert _tilec("compile", str(src), "-o", str(b)).returncode == 0
    assert a.read_bytes() == b.read_bytes()


def test_device_runner_reports_a_wrong_d(sm90):
    import numpy as np

    from compiler.driver import compile_file
    from compiler.run import sparse_host
    from compiler.runtime import load
    from compiler.tune import GpuRunner

    result = compile_file(EX / "sparse_wgmma_f16.tile")
    tile, shape = "sparse_wgmma_f16", (512, 512, 256)
    runner = GpuRunner()
    good = runner.measure(result, tile, shape, 0)
    assert good.error is None and good.outside == 0 and len(good.times_ms) > 0
    host = sparse_host(load(result, tile).abi, result, tile, *shape, 0)
    host.ref = np.array(host.ref, copy=True)
    host.ref[3, 5] += 1000.0
    runner._hosts[(tile, shape, 0)] = host
    bad = runner.measure(result, tile, shape, 0)
    assert bad.outside == 1 and bad.times_ms == []
