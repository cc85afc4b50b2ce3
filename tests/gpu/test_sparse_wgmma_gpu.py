"""The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py) on a Hopper GPU (sm_90a) against numpy:
f16 (f16 D and f32 D + C), bf16, tf32, s8, u8 x s8 and e4m3; both consumer tilings (64 and 128 rows per
warpgroup), 3 consumer warpgroups and the consumers' registers from the producer (setmaxnreg), 1, 2 and 4 k-steps per K block, the ring wrapping several times, direct and staged D, CTA
pairs sharing B through TMA multicast; then every schedule benchmarks/sparse_wgmma.py times. (The DSL
example is compiled from its file in tests/gpu/test_dsl_examples_gpu.py.) Inputs have 3 significant bits
(compiler.sparse.random_values), so every sum is exact in f32 / s32 and the comparison is exact (f16 /
bf16 D: rounded once, as numpy rounds). D is poisoned first; a mismatching case is saved under $OUT.
Kernels are launched from their ABI, the tensor maps encoded by the driver (encode_tensor_maps, ctypes)
(tests/gpu/harness/sparse_kernels.py). Skipped without cupy and an sm_90 GPU (tests/gpu/conftest.py);
timing lives in benchmarks/sparse_wgmma.py."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from compiler import sparse
from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma

from tests.gpu.harness import sparse_kernels as sk

CASES = [
    # (A, B, C/D type, mma.sp shape, config, D type override (None: D = A*B + C in the accumulator type), M x N x K)
    # one warpgroup, one K block of one k-step: a single wgmma.mma_async.sp per warp
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=2), None, (64, 64, 32)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=128, cta_n=256, cta_k=64, stages=4), "f16", (256, 512, 640)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=256, cta_n=128, cta_k=64, stages=5), "f16", (512, 256, 576)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=128, cta_n=256, cta_k=64, stages=4), None, (128, 512, 384)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=64, cta_n=96, cta_k=32, consumers=1, stages=3, selector=1,
                                           raster_group=3, stage_d=False), None, (192, 192, 160)),
    ("bf16", "bf16", "f32", "m16n8k32", dict(cta_m=256, cta_n=64, cta_k=128, stages=3), "bf16", (256, 128, 512)),
    ("tf32", "tf32", "f32", "m16n8k16", dict(cta_m=128, cta_n=128, cta_k=32, stages=4), None, (256, 256, 192)),
    ("s8", "s8", "s32", "m16n8k64", dict(cta_m=128, cta_n=256, cta_k=128, stages=3), None, (256, 256, 512)),
    ("u8", "s8", "s32", "m16n8k64", dict(cta_m=128, cta_n=48, cta_k=64, stages=4), None, (128, 96, 320)),
    ("e4m3", "e4m3", "f32", "m16n8k64", dict(cta_m=128, cta_n=128, cta_k=128, stages=4), "f16", (256, 256, 512)),
    # CTA pairs sharing B through TMA multicast (cluster_m = 2)
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=128, cta_n=256, cta_k=64, stages=5, cluster_m=2), "f16",
     (512, 512, 704)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=256, cta_n=128, cta_k=64, stages=6, cluster_m=2, raster_group=3),
     None, (1536, 256, 384)),
    ("bf16", "bf16", "f32", "m16n8k32", dict(cta_m=128, cta_n=64, cta_k=128, stages=2, cluster_m=2), "bf16",
     (512, 128, 384)),
    ("s8", "s8", "s32", "m16n8k64", dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2), None,
     (384, 64, 320)),
    # setmaxnreg (PTX 9.7.19): 2 consumers of 128 x 192 (producer .dec 24, consumers .inc 240), each large-shape
    # input type, pairs and not, an edge in N; 3 consumers of 64 rows (512 threads: 32 / 160), f32 D + C
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=256, cta_n=192, cta_k=64, stages=4, cluster_m=2), "f16",
     (1024, 576, 704)),
    ("bf16", "bf16", "f32", "m16n8k32", dict(cta_m=256, cta_n=192, cta_k=64, stages=4), "bf16", (512, 400, 384)),
    ("e4m3", "e4m3", "f32", "m16n8k64", dict(cta_m=256, cta_n=192, cta_k=128, stages=4, cluster_m=2), "bf16",
     (512, 384, 640)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=192, cta_n=192, cta_k=64, consumers=3, stages=4, cluster_m=2),
     None, (768, 384, 448)),
    ("f16", "f16", "f32", "m16n8k32", dict(cta_m=192, cta_n=200, cta_k=64, consumers=3, stages=4), "f16",
     (384, 400, 320)),
]


# Every schedule benchmarks/sparse_wgmma.py times, as it builds it (f16 in, D = A*B in f16), on 2 x 3 x 4
# CTA tiles (CTA pairs along M count as one tile)
BENCH_KEYS = list(sk.SPARSE_WGMMA_SCHEDULES)


def run_case(cp, a_t, b_t, cd, shape, kw, out, mnk, tag):
    if "bf16" in (a_t, out) or a_t == "e4m3":
        pytest.importorskip("ml_dtypes", reason=f"{a_t} / {out} host data needs ml_dtypes")
    form = find_form(shape, a_t, b_t, cd, cd)
    with_c = out is None
    kern = emit_sparse_wgmma(SparseWgmmaConfig("swg", form, accumulate_c=with_c, d_type=out, **kw))
    m, n, k = mnk
    p = sk.make_problem(np.random.default_rng(zlib.crc32(f"{a_t}{b_t}{m}{n}{k}".encode())),
                        a_t, b_t, cd, shape, m, n, k, with_c)
    # the host layouts are compiler.sparse's: decompress gives A back (no separate wgmma packer)
    assert np.array_equal(sparse.decompress(p.values, p.meta, a_t, shape).astype(np.float64), p.a.astype(np.float64))
    d = sk.launch_from_abi(cp, kern.text, kern.abi, p)
    ref = sk.reference(p, cd, out or cd)
    bad = sk.differing_bytes(d, ref)
    if len(bad):
        sk.save_failure(tag, p, d, ref)
    assert len(bad) == 0, f"{len(bad)} bytes differ, first at {bad[0]}: {d.ravel()[:4]} vs {ref.ravel()[:4]}"


@pytest.mark.parametrize("a_t,b_t,cd,shape,kw,out,mnk", CASES,
                         ids=[f"{c[0]}x{c[1]}-{c[4]['cta_m']}x{c[4]['cta_n']}x{c[4]['cta_k']}"
                              f"{'-c2' if c[4].get('cluster_m') else ''}-{c[5] or c[2] + '+C'}" for c in CASES])
def test_sparse_wgmma_on_gpu(sm90, a_t, b_t, cd, shape, kw, out, mnk):
    m, n, k = mnk
    tag = f"{a_t}{b_t}_{kw['cta_m']}x{kw['cta_n']}x{kw['cta_k']}_c{kw.get('cluster_m', 1)}_{m}x{n}x{k}"
    run_case(sm90, a_t, b_t, cd, shape, kw, out, mnk, tag)


@pytest.mark.parametrize("key", BENCH_KEYS)
def test_benchmark_schedule_on_gpu(sm90, key):
    kw = sk.SPARSE_WGMMA_SCHEDULES[key]
    mnk = (2 * kw["cta_m"] * kw.get("cluster_m", 1), 3 * kw["cta_n"], 4 * kw["cta_k"])
    run_case(sm90, "f16", "f16", "f32", "m16n8k32", kw, "f16", mnk, f"bench_wgmma_{key}")
