"""Host half of the batched warp-specialised tcgen05 launches (issue 18): every kind of ws kernel, a batch of
problems with partial tiles, the operands laid out batch-first with gaps between the problems (strided
batches, the gaps poisoned), and the check of D (its gaps untouched, every problem's values against the
reference). Used by the CPU test that launches through Kernel.__call__ on the emulator
(tests/test_runtime_emulated.py) and by the B200 test (tests/gpu/test_tcgen05_ws_gpu.py), so both place and
check the same bytes.

The problems are compiler/emulator/tcgen05.py ws_host's (few significant bits: exact f32 sums; a fused
epilogue within its bound); the META / SFA / SFB images are left to the caller's Kernel.host_image of the
batch's natural layouts (`naturals`), cut to M / N rows (the image pads the rest with legal values).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PAIR = """target sm_100a;
tile pair {
  engine tcgen05 cta_group=2;
  shape M=256 N=128 K=16;
  A: bf16 smem;
  B: bf16 smem;
  D: f32 tmem;
  schedule cta=256x128x64 stages=2 cluster=2;
}
"""
# sparse and block-scaled A on a CTA pair: META, SFA and SFB images together, each CTA's own META / SFA rows and
# the pair's SFB (tcgen05.mma.sp .kind::mxf8f6f4.block_scale, cta_group::2)
SPARSE_SCALED_PAIR = """target sm_100a;
tile psx {
  engine tcgen05 kind=mxf8f6f4 cta_group=2;
  shape M=256 N=128 K=64;
  A: e4m3 smem;
  B: e5m2 smem;
  D: f32 tmem;
  SFA: ue8m0 tmem;
  SFB: ue8m0 tmem;
  block_scale vec=32;
  sparsity 2:4 metadata=runtime;
  schedule cta=256x128x256 stages=3 cluster=2;
}
"""
# every kind of ws kernel: dense, sparse (META), block-scaled (SFA / SFB, fp8 and fp4), sparse and block-scaled
# (META + SFA + SFB: NVFP4 4:8, and fp8 2:4 on a CTA pair), A in TMEM, cluster launch control, a CTA pair, a
# fused epilogue reading C
KINDS = {"dense": "examples/tcgen05_gemm_f16.tile", "sparse": "examples/tcgen05_gemm_sparse_f16.tile",
         "mxf8f6f4": "examples/tcgen05_gemm_mxf8f6f4.tile", "mxf4nvf4": "examples/tcgen05_gemm_mxf4nvf4.tile",
         "sparse mxf4nvf4": "examples/tcgen05_gemm_sparse_mxf4nvf4.tile", "sparse mxf8f6f4 pair": SPARSE_SCALED_PAIR,
         "a_tmem": "examples/tcgen05_gemm_a_tmem_f16.tile", "clc": "examples/tcgen05_gemm_f16_clc.tile",
         "pair": PAIR, "epilogue C": "tests/lit/tcgen05_ws/epilogue_tma_store.tile"}
GAP = 16            # bytes between one problem's end and the next one's start (a strided batch)
POISON = {"D": 0x5A}
IMAGES = (("metadata", "META"), ("scale_a", "SFA"), ("scale_b", "SFB"))


def is_pair(key: str) -> bool:
    """Whether KINDS[key] is a CTA pair (256-row tiles: its problems get more rows)."""
    return "cta_group=2" in (KINDS[key] if KINDS[key].startswith("target ") else "")


def compile_kind(key: str):
    """(CompileResult, tile name) of KINDS[key]."""
    import compiler

    src = KINDS[key]
    result = (compiler.compile_source(src) if src.startswith("target ")
              else compiler.compile_file(os.path.join(ROOT, src)))
    return result, next(iter(result.tiles))


@dataclass
class BatchProblem:
    """`raw`: A, B (its N x K rows), D (poison) and C as bytes [batch][rows][row bytes] with their ABI
    element; `naturals`: META / SFA / SFB natural layouts [batch][rows][...]; `kwargs`: bias and the f32
    scalars (host values); the reference D [batch][M][N] and the epilogue's tolerance (None: exact)."""
    raw: dict
    naturals: dict
    kwargs: dict
    ref: np.ndarray
    atol: np.ndarray | None
    batch: int
    m: int


def batch_problem(result, tile: str, m: int, n: int, k: int, batch: int, seed: int = 5) -> BatchProblem:
    from compiler.emulator.tcgen05 import ws_host
    from compiler.runtime import abi as rabi

    abi = result.to_json()["tiles"][tile]["kernel"]
    host = ws_host(result, tile, abi, m, n, k, seed=seed, batch=batch)
    want = rabi.buffers(abi, m, n, k)
    raw = {}
    for name, rows in (("A", m), ("B", n), ("D", m), ("C", m)):
        if name in want:
            raw[name] = (np.ascontiguousarray(host.args[name]).view(np.uint8).reshape(batch, rows, -1),
                         want[name].element)
    naturals = {name: np.stack([np.asarray(p.args[name])[:n if name == "SFB" else m] for p in host.problems])
                for _, name in IMAGES if name in want}
    kwargs = {x: host.args[x] for x in ("alpha", "beta") if x in host.args}
    if "bias" in want:
        kwargs["bias"] = np.asarray(host.args["bias"], np.float32)
    ref = host.ref if batch > 1 else host.ref[None]
    atol = None if host.atol is None else (host.atol if batch > 1 else host.atol[None])
    return BatchProblem(raw, naturals, kwargs, ref, atol, batch, m)


def strided_base(raw: np.ndarray, poison: int = 0x7F) -> np.ndarray:
    """The bytes [batch][rows][row bytes] in a buffer of [batch][rows * row bytes + GAP] bytes, the gaps
    `poison`: each problem GAP bytes after the previous one's end."""
    batch = raw.shape[0]
    per = raw[0].size
    base = np.full((batch, per + GAP), poison, np.uint8)
    base[:, :per] = raw.reshape(batch, per)
    return base


def typed_strides(raw: np.ndarray, itemsize: int) -> tuple[tuple, tuple]:
    """(shape, strides in elements) of the typed batch-first view of `strided_base(raw)` with elements of
    `itemsize` bytes (the bytes of 4-bit types: itemsize 1)."""
    batch, rows, row_bytes = raw.shape
    per = rows * row_bytes + GAP
    return (batch, rows, row_bytes // itemsize), (per // itemsize, row_bytes // itemsize, 1)


def d_mismatches(p: BatchProblem, d_base: np.ndarray) -> list[str]:
    """What is wrong with D's buffer after the launch (empty: nothing): its gaps written, or a problem's
    values off the reference (exact, or beyond the epilogue's bound)."""
    per = p.raw["D"][0][0].size
    bad = []
    if (d_base[:, per:] != POISON["D"]).any():
        bad.append("D's gaps between problems were written")
    got = np.ascontiguousarray(d_base[:, :per]).view(p.ref.dtype).reshape(p.ref.shape)
    for z in range(p.batch):
        if p.atol is None:
            off = int((got[z] != p.ref[z]).sum())
        else:
            off = int((np.abs(got[z].astype(np.float64) - p.ref[z].astype(np.float64)) > p.atol[z]).sum())
        if off:
            bad.append(f"problem {z}: {off} of {got[z].size} elements of D differ")
    return bad
