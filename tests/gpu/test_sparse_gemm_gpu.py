"""The pipelined sparse GEMM (compiler/ptx/sparse_gemm_kernel.py) on a GPU against numpy: f16, bf16, s8,
u8 x s8, tf32 and e4m3 (sm_89+), one tile per CTA and persistent CTAs, D = A*B + C in the accumulator
type and D = A*B rounded to f16 / bf16; then every schedule benchmarks/sparse_gemm_sync.py times, and the
benchmarks' GPU 2:4 packer. Inputs have 3 significant bits (compiler.sparse.random_values), so every sum
is exact in f32 / s32 and the comparison is exact. D is poisoned first (unwritten elements fail); a
mismatching case is saved under $OUT. Kernels are launched from their ABI (parameters, grid; host half:
tests/gpu/harness/sparse_kernels.py). Skipped without cupy and a GPU (tests/gpu/conftest.py); timing
lives in benchmarks/sparse_gemm_sync.py."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

from tests.gpu.harness import sparse_kernels as sk

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
    # (sm_90a emulates warp-level FP8 mma.sp: 16x16 warp tiles of 8 warps, compiler/isa/mma_sp/forms.py)
    ("e4m3", "e4m3", "f32", "m16n8k64", dict(cta_m=64, cta_n=32, cta_k=128, warps_m=4, warps_n=2, stages=3),
     None, (128, 256, 512)),
]

# Every schedule benchmarks/sparse_gemm_sync.py times, as it builds it (target sm_90a; f16 in, f16 D; its other
# forms bf16 -> bf16 D, s8 -> s32 D, tf32 -> f32 D, f16 with D = A*B + C in f32), on 2 x 3 x 4 CTA tiles
# (persistent schedules: half as many CTAs as tiles). (A/B type, C/D type, shape, schedule, D type, with C)
BENCH_CASES = ([("f16", "f32", "m16n8k32", key, "f16", False) for key in sk.SPARSE_GEMM_SCHEDULES]
               + [(t, "s32" if t == "s8" else "f32", shape, key, out, c)
                  for shape, t, out, key, c in sk.SPARSE_GEMM_OTHER_FORMS.values()])


def run_case(cp, sm, a_t, b_t, cd, shape, sched, d_type, with_c, mnk, tag, target=None):
    """Build the kernel (D type `d_type`: None = the accumulator type; `with_c`: D = A*B + C), run it on an
    exact problem of `mnk`, compare D with numpy byte for byte."""
    out = d_type or cd
    if "bf16" in (a_t, out) or a_t == "e4m3":
        pytest.importorskip("ml_dtypes", reason=f"{a_t} / {out} host data needs ml_dtypes")
    target = target or ("sm_89" if a_t == "e4m3" else "sm_80")
    if a_t == "e4m3" and sm < 89:
        pytest.skip("e4m3 mma.sp needs sm_89")
    if target.endswith("a") and sm != int(target[3:-1]):
        pytest.skip(f"{target} code runs on sm_{target[3:-1]} only (an arch-specific `.target`); device is sm_{sm}")
    form = find_form(shape, a_t, b_t, cd, cd)
    cfg = SparseGemmConfig("sg", form, target, accumulate_c=with_c, d_type=d_type, **sched)
    kern = emit_sparse_gemm(cfg)
    m, n, k = mnk
    p = sk.make_problem(np.random.default_rng(zlib.crc32(f"{a_t}{b_t}{m}{n}{k}{tag}".encode())),
                        a_t, b_t, cd, shape, m, n, k, with_c)
    mp = None
    if cfg.is_persistent:      # fewer CTAs than tiles, so that CTAs walk several tiles
        tiles = (m // cfg.cta_m) * (n // cfg.cta_n)
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        mp = max(1, min(sms, tiles // (2 * kern.abi["max_ctas_per_sm"])))
        assert sk.abi_grid(kern.abi, m, n, k, mp)[0] < tiles
    d = sk.launch_from_abi(cp, kern.text, kern.abi, p, multiprocessors=mp)
    ref = sk.reference(p, cd, out)
    bad = sk.differing_bytes(d, ref)
    if len(bad):
        sk.save_failure(f"sparse_gemm_{tag}", p, d, ref)
    assert len(bad) == 0, f"{len(bad)} bytes differ, first at {bad[0]}: {d.ravel()[:4]} vs {ref.ravel()[:4]}"


@pytest.mark.parametrize("a_t,b_t,cd,shape,sched,out,mnk", CASES,
                         ids=[f"{c[0]}x{c[1]}-{'p' if c[4].get('persistent') else '1'}-{c[5] or c[2]}" for c in CASES])
def test_sparse_gemm_on_gpu(cupy_device, a_t, b_t, cd, shape, sched, out, mnk):
    cp, sm = cupy_device
    tag = f"{a_t}{b_t}_{sched['cta_m']}x{sched['cta_n']}x{sched['cta_k']}_{mnk[0]}x{mnk[1]}x{mnk[2]}"
    run_case(cp, sm, a_t, b_t, cd, shape, sched, out, out is None, mnk, tag)


@pytest.mark.parametrize("t,cd,shape,key,out,with_c", BENCH_CASES,
                         ids=[f"{c[0]}-{c[3]}{'-C' if c[5] else ''}" for c in BENCH_CASES])
def test_benchmark_schedule_on_gpu(cupy_device, t, cd, shape, key, out, with_c):
    cp, sm = cupy_device
    sched = {**sk.SPARSE_GEMM_SCHEDULES, **sk.SPARSE_GEMM_OTHER_SCHEDULES}[key]
    mnk = (2 * sched["cta_m"], 3 * sched["cta_n"], 4 * sched["cta_k"])
    run_case(cp, sm, t, t, cd, shape, sched, out, with_c, mnk, f"bench_{t}_{key}", target="sm_90a")


def test_benchmark_packer_is_compress_on_gpu(torch_cuda):
    """The benchmarks build their large operands on the GPU (sparse_kernels.sparse_operands); those bytes
    must be compiler.sparse.compress's: f16 and bf16 (m16n8k32), e4m3 and s8 (m16n8k64)."""
    pytest.importorskip("ml_dtypes", reason="bf16 host data needs ml_dtypes")
    sk.check_packer(torch_cuda, "cuda", ("f16", "bf16", "e4m3", "s8"))
