"""The fused epilogue D = act(alpha*(A*B) + beta*C + bias) of the sparse wgmma kernel on a Hopper GPU, through
the whole DSL pipeline and the runtime (compiler.runtime's Kernel passes bias, alpha and beta as its ABI
says), checked the way `tilec run --check` checks (compiler/run.py run_tile: the numpy reference of
compiler/emulator/sparse_host.py epilogue_reference, within epilogue_atol: D's rounding and the .approx
activations' error). The pairwise covering set of tests/test_epilogue.py in the default slice, the full
product of its factors under `slow`; then the runtime's argument checks. Skipped without an sm_90 GPU and
torch or cupy (tests/gpu/conftest.py)."""
from __future__ import annotations

import pytest

from tests.test_epilogue import FULL, PAIRWISE, case_id, tile_text

SHAPE = (512, 512, 384)           # 4 x 2 CTA tiles of 128 x 256, 6 K blocks of 64


def check_on_gpu(case: dict, seed: int = 0) -> None:
    pytest.importorskip("lark", reason="tilec's parser compiles the tile")
    if "bf16" in (case["out"], case.get("bias_type")) or case["out"] == "e4m3":
        pytest.importorskip("ml_dtypes", reason="bf16 / e4m3 host data needs ml_dtypes")
    from compiler import compile_source
    from compiler.run import RunError, run_tile

    result = compile_source(tile_text(case))
    try:
        ok, lines = run_tile(result, "t", SHAPE, check=True, bench=False, iters=0, warmup=0, seed=seed)
    except RunError as e:
        pytest.skip(str(e))
    assert ok, "\n".join(lines)


@pytest.mark.parametrize("case", PAIRWISE, ids=case_id)
def test_pairwise_epilogues_on_gpu(sm90, case):
    check_on_gpu(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", FULL, ids=case_id)
def test_every_epilogue_on_gpu(sm90, case):
    check_on_gpu(case, seed=1)


def test_runtime_checks_epilogue_arguments(sm90):
    pytest.importorskip("lark", reason="tilec's parser compiles the tile")
    import numpy as np

    from compiler import compile_source
    from compiler.runtime import load
    from compiler.runtime.errors import ArgumentError

    case = dict(act="relu", out="f32", c="none", bias="col", alpha="param")
    kernel = load(compile_source(tile_text(case)), "t")
    m, n, k = SHAPE
    a = kernel.pack_a(np.zeros((m, k), np.float16), library="cupy")
    b = sm90.zeros((n, k), sm90.float16).T           # B as the kernel reads it: B^T rows, K contiguous
    bias = sm90.zeros((n,), sm90.float32)
    with pytest.raises(ArgumentError, match="bias"):
        kernel(a, b, alpha=1.0)                       # the bias is missing
    with pytest.raises(ArgumentError, match="alpha"):
        kernel(a, b, bias=bias)                       # alpha=param takes a value at launch
    with pytest.raises(ArgumentError, match="beta"):
        kernel(a, b, bias=bias, alpha=1.0, beta=2.0)  # no beta parameter (no C)
    d = kernel(a, b, bias=bias, alpha=1.0)
    sm90.cuda.runtime.deviceSynchronize()
    assert float(abs(d).max()) == 0.0                 # relu(0 + 0) everywhere
