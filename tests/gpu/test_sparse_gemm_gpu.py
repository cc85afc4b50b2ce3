"""The pipelined sparse GEMM (compiler/ptx/sparse_gemm_kernel.py) on a GPU against numpy: f16, bf16, s8,
u8 x s8, tf32 and e4m3 (sm_89+), one tile per CTA and persistent CTAs, D = A*B + C in the accumulator
type and D = A*B rounded to f16 / bf16. Inputs have 3 significant bits (compiler.sparse.random_values),
so every sum is exact in f32 / s32 and the comparison is exact. D is poisoned first (unwritten
elements fail). Skipped without cupy and a GPU (tests/gpu/conftest.py); timing lives in
benchmarks/sparse_gemm.py."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from compiler import sparse
from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

CASES = [
    # (A, B, C/D type, shape, schedule, D type override, problem M x N x K)
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=3),
     "f16", (256, 512, 640)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=3,
                                           persistent=True), "f16", (384, 768, 320)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=256, cta_n=128, cta_k=64, warps_m=4, warps_n=2, stages=4),
     None, (256, 256, 512)),
    ("bf16", "bf16", "f32", "m16n8k32", dict(cta_m=128, cta_n=128, cta_k=128, warps_m=2, warps_n=2, stages=2,
                                             persistent=True), "bf16", (512, 384, 512)),
    ("s8", "s8", "s32", "m16n8k64", dict(cta_m=128, cta_n=256, cta_k=128, warps_m=2, warps_n=4, stages=3),
     None, (256, 512, 1024)),
    ("u8", "s8", "s32", "m16n8k64", dict(cta_m=64, cta_n=64, cta_k=64, warps_m=2, warps_n=2, stages=4),
     None, (192, 128, 256)),
    ("tf32", "tf32", "f32", "m16n8k16", dict(cta_m=128, cta_n=128, cta_k=32, warps_m=2, warps_n=2, stages=4,
                                             persistent=True), None, (256, 384, 256)),
    ("e4m3", "e4m3", "f32", "m16n8k64", dict(cta_m=64, cta_n=128, cta_k=128, warps_m=2, warps_n=2, stages=3),
     None, (128, 256, 512)),
]


def _np_out(dtype: str):
    if dtype == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "s32": np.int32, "f16": np.float16}[dtype]


@pytest.mark.parametrize("a_t,b_t,cd,shape,sched,out,mnk", CASES,
                         ids=[f"{c[0]}x{c[1]}-{'p' if c[4].get('persistent') else '1'}-{c[5] or c[2]}" for c in CASES])
def test_sparse_gemm_on_gpu(cupy_device, a_t, b_t, cd, shape, sched, out, mnk):
    cp, sm = cupy_device
    if a_t in ("bf16", "e4m3"):
        pytest.importorskip("ml_dtypes")
    target = "sm_89" if a_t == "e4m3" else "sm_80"
    if a_t == "e4m3" and sm < 89:
        pytest.skip("e4m3 mma.sp needs sm_89")
    form = find_form(shape, a_t, b_t, cd, cd)
    with_c = out is None
    cfg = SparseGemmConfig("sg", form, target, accumulate_c=with_c, d_type=out, **sched)
    kern = emit_sparse_gemm(cfg)
    m, n, k = mnk
    rng = np.random.default_rng(hash((a_t, b_t, m, n, k)) & 0xFFFF)
    a = sparse.random_sparse(rng, m, k, a_t, shape)
    b = sparse.random_values(rng, (k, n), b_t)
    values, meta = sparse.compress(a, a_t, shape)
    bt = sparse.pack_b(b, b_t, shape)
    c = (sparse.random_values(rng, (m, n), "f16").astype(np.float32) if cd == "f32"
         else rng.integers(-1000, 1000, (m, n)).astype(np.int32))
    out_np = _np_out(out or cd)
    raw = lambda x: cp.asarray(np.ascontiguousarray(x).view(np.uint8))   # noqa: E731
    d_dev = cp.full(m * n * np.dtype(out_np).itemsize, 0xFF, dtype=cp.uint8)       # poison (NaN / -1)
    args = [raw(values), cp.asarray(meta), raw(bt)]
    if with_c:
        args.append(cp.asarray(c))
    args += [d_dev, np.uint32(m), np.uint32(n), np.uint32(k)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sg.ptx")
        with open(path, "w") as fh:
            fh.write(kern.text)
        fn = cp.RawModule(path=path).get_function("sg")
        fn.max_dynamic_shared_size_bytes = kern.smem_bytes
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        # persistent CTAs: fewer than tiles here, so that CTAs walk several tiles
        ctas = max(1, min(sms, (m // cfg.cta_m) * (n // cfg.cta_n) // 2)) if cfg.is_persistent else None
        fn(kern.grid(m, n, k, ctas), kern.block, tuple(args), shared_mem=kern.smem_bytes)
        cp.cuda.Device().synchronize()
    d = cp.asnumpy(d_dev).view(out_np).reshape(m, n)
    if cd == "s32":
        ref = a.astype(np.int64) @ b.astype(np.int64) + c
        ref = ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
    else:
        ref = (a.astype(np.float64) @ b.astype(np.float64) + (c if with_c else 0)).astype(np.float32).astype(out_np)
    np.testing.assert_array_equal(d, ref)
