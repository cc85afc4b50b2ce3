"""`tilec run` without a GPU: usage errors (exit 2), a tile this machine cannot run is a clear error that
names --emulate (exit 1, no traceback), and `--emulate` checks every example on the CPU emulator."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiler.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
EXAMPLES = sorted(f for f in os.listdir(EX) if f.endswith(".tile"))


def _has_gpu() -> bool:
    try:
        from cuda.core import Device

        Device()
        return True
    except Exception:
        return False


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["run", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "tcgen05_k96.tile" else n
                                  for n in EXAMPLES])
def test_emulate_passes_on_every_example(capsys, name):
    rc, out, err = run(capsys, "--emulate", os.path.join(EX, name))
    assert rc == 0, out + err
    # a fused epilogue's .approx activations are checked within their error bound (compiler/emulator/
    # sparse_host.py epilogue_atol); every other kernel bit for bit
    with open(os.path.join(EX, name)) as f:
        fused = any(line.strip().startswith("epilogue ") for line in f)
    want = "D matches the numpy reference " + ("within the epilogue's tolerance" if fused else "bit for bit")
    assert out.count(want) == len(out.splitlines()) >= 1


def test_emulate_takes_a_shape_whose_k_is_not_the_loop_k(capsys):
    # sparse_gemm_f16's tile loops K = 32; its pipelined kernel takes any multiple of its K step, 64
    rc, out, _ = run(capsys, "--emulate", "--shape", "128,256,192", os.path.join(EX, "sparse_gemm_f16.tile"))
    assert rc == 0 and "128 x 256 x 192" in out


@pytest.mark.parametrize("argv, message", [
    (["--shape", "1,2"], "--shape must be M,N,K"),
    (["--shape", "100,256,64"], "M % 128 == 0"),
    (["--emulate", "--bench"], "--bench times the GPU"),
    (["--tile", "nope"], "--tile nope: no such tile"),
    (["--iters", "0", "--bench"], "--iters must be positive"),
])
def test_usage_errors(capsys, argv, message):
    rc, _, err = run(capsys, *argv, os.path.join(EX, "sparse_gemm_f16.tile"))
    assert rc == 2 and message in err


def test_tcgen05_k_is_fixed(capsys):
    rc, _, err = run(capsys, "--emulate", "--shape", "128,256,128", os.path.join(EX, "gemm_bf16.tile"))
    assert rc == 2 and "K == 64" in err


def test_no_gpu_is_a_clear_error_naming_emulate():
    if _has_gpu():
        pytest.skip("a GPU is present")
    proc = subprocess.run([sys.executable, "-m", "compiler.cli", "run", os.path.join(EX, "sparse_f16.tile")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    assert "--emulate" in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""


def test_help_says_where_shape_may_differ_from_loop_k(capsys):
    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "K may differ from the tile's `loop K` for the mma.sp kernels" in text
    assert "a tcgen05 kernel takes only its loop K" in text
