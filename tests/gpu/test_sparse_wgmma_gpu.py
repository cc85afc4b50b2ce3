"""The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py) on a Hopper GPU (sm_90a) against numpy:
f16 (f16 D and f32 D + C), bf16, tf32, s8, u8 x s8 and e4m3; both consumer tilings (64 and 128 rows per
warpgroup), 1, 2 and 4 k-steps per K block, the ring wrapping several times, direct and staged D, CTA
pairs sharing B through TMA multicast, the DSL example. Inputs have 3 significant bits (compiler.sparse.random_values), so every sum is exact in
f32 / s32 and the comparison is exact (f16 / bf16 D: rounded once, as numpy rounds). D is poisoned first.
The tensor maps are encoded by the driver (encode_tensor_maps, ctypes). Skipped without cupy and an
sm_90 GPU (tests/gpu/conftest.py); timing lives in benchmarks/sparse_wgmma.py."""
from __future__ import annotations

import os
import zlib
import tempfile

import numpy as np
import pytest

from compiler import sparse
from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma, encode_tensor_maps

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
]


def _np_out(dtype: str):
    if dtype == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "s32": np.int32, "f16": np.float16}[dtype]


def _sm90(cupy_device):
    cp, sm = cupy_device
    if sm != 90:
        pytest.skip("wgmma.mma_async.sp runs on sm_90a (Hopper) only")
    return cp


def run_kernel(cp, kern, m, n, k, values, meta, bt, c, out_np):
    """Launch `kern` on the problem; return D (host)."""
    raw = lambda x: cp.asarray(np.ascontiguousarray(x).view(np.uint8).reshape(-1))   # noqa: E731
    dev = {"a_values": raw(values), "a_metadata": raw(meta), "b": raw(bt)}
    maps = encode_tensor_maps(kern.abi, m, n, k, {name: int(x.data.ptr) for name, x in dev.items()})
    tmaps = cp.asarray(np.frombuffer(maps, np.uint8))
    assert int(tmaps.data.ptr) % 64 == 0
    d_dev = cp.full(m * n * np.dtype(out_np).itemsize, 0xFF, dtype=cp.uint8)     # poison (NaN / -1)
    args = [np.uint64(tmaps.data.ptr)]
    if c is not None:
        args.append(cp.asarray(c))
    args += [d_dev, np.uint32(m), np.uint32(n), np.uint32(k)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{kern.name}.ptx")
        with open(path, "w") as fh:
            fh.write(kern.text)
        fn = cp.RawModule(path=path).get_function(kern.name)
        fn.max_dynamic_shared_size_bytes = kern.smem_bytes
        fn(kern.grid(m, n, k), kern.block, tuple(args), shared_mem=kern.smem_bytes)
        cp.cuda.runtime.deviceSynchronize()
    return cp.asnumpy(d_dev).view(out_np).reshape(m, n)


@pytest.mark.parametrize("a_t,b_t,cd,shape,kw,out,mnk", CASES,
                         ids=[f"{c[0]}x{c[1]}-{c[4]['cta_m']}x{c[4]['cta_n']}x{c[4]['cta_k']}"
                              f"{'-c2' if c[4].get('cluster_m') else ''}-{c[5] or c[2] + '+C'}" for c in CASES])
def test_sparse_wgmma_on_gpu(cupy_device, a_t, b_t, cd, shape, kw, out, mnk):
    cp = _sm90(cupy_device)
    if "bf16" in (a_t, out) or a_t == "e4m3":
        pytest.importorskip("ml_dtypes")
    form = find_form(shape, a_t, b_t, cd, cd)
    with_c = out is None
    kern = emit_sparse_wgmma(SparseWgmmaConfig("swg", form, accumulate_c=with_c, d_type=out, **kw))
    m, n, k = mnk
    rng = np.random.default_rng(zlib.crc32(f"{a_t}{b_t}{m}{n}{k}".encode()))
    a = sparse.random_sparse(rng, m, k, a_t, shape)
    b = sparse.random_values(rng, (k, n), b_t)
    values, meta = sparse.compress(a, a_t, shape)
    # the host layouts are compiler.sparse's: decompress gives A back (no separate wgmma packer)
    assert np.array_equal(sparse.decompress(values, meta, a_t, shape).astype(np.float64), a.astype(np.float64))
    bt = sparse.pack_b(b, b_t, shape)
    c = None
    if with_c:
        c = (sparse.random_values(rng, (m, n), "f16").astype(np.float32) if cd == "f32"
             else rng.integers(-1000, 1000, (m, n)).astype(np.int32))
    out_np = _np_out(out or cd)
    d = run_kernel(cp, kern, m, n, k, values, meta, bt, c, out_np)
    if cd == "s32":
        ref = a.astype(np.int64) @ b.astype(np.int64) + (c if c is not None else 0)
        ref = ref.astype(np.int32)
    else:
        ref = a.astype(np.float64) @ b.astype(np.float64) + (c if c is not None else 0)
        ref = ref.astype(np.float32).astype(out_np)
    bad = np.argwhere(d.view(np.uint8).reshape(m, -1) != ref.view(np.uint8).reshape(m, -1))
    if len(bad) and os.environ.get("OUT"):          # the device tool brings $OUT back: analyse offline
        tag = f"{a_t}{b_t}_{kw['cta_m']}x{kw['cta_n']}x{kw['cta_k']}_c{kw.get('cluster_m', 1)}_{m}x{n}x{k}"
        np.savez_compressed(os.path.join(os.environ["OUT"], f"fail_{tag}.npz"), a=a, b=b, values=values, meta=meta,
                            d=d, ref=ref, **({"c": c} if c is not None else {}))
    assert len(bad) == 0, f"{len(bad)} bytes differ, first at {bad[0]}: {d.ravel()[:4]} vs {ref.ravel()[:4]}"


def test_dsl_example_on_gpu(cupy_device):
    """examples/sparse_wgmma_f16.tile's kernel (built through the DSL's config) computes D = A*B + C."""
    cp = _sm90(cupy_device)
    from types import SimpleNamespace

    from compiler.ptx.sparse_wgmma_kernel import config_from_schedule
    form = find_form("m16n8k32", "f16", "f16", "f32", "f32")
    sched = SimpleNamespace(cta_m=128, cta_n=256, cta_k=64, warps_m=8, warps_n=1, stages=4)
    kern = emit_sparse_wgmma(config_from_schedule("sparse_wgmma_f16", form, "sm_90a", None, sched, 0, None))
    m, n, k = 256, 256, 512
    rng = np.random.default_rng(11)
    a = sparse.random_sparse(rng, m, k, "f16", "m16n8k32")
    b = sparse.random_values(rng, (k, n), "f16")
    c = sparse.random_values(rng, (m, n), "f16").astype(np.float32)
    values, meta = sparse.compress(a, "f16", "m16n8k32")
    d = run_kernel(cp, kern, m, n, k, values, meta, sparse.pack_b(b, "f16", "m16n8k32"), c, np.float32)
    ref = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
    assert np.array_equal(d, ref)
