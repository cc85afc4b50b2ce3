"""Host half of the fragment GEMM (issue 16): a CUDA C++ kernel that computes D = A*B + C (A 2:4 sparse f16, B
f16, C/D f32) one 16 x 8 tile per warp by calling tilec's mma.sp fragment once per 64 of K, accumulating
through C, either out of line (`extern "C"`, linked from the `--emit func` PTX) or inlined (the
`--emit header` inline-asm variant).

The fragment is the issue's: examples/sparse_f16.tile (m16n8k32 f16, f32 C/D, 2:4, `loop K=64`) for sm_90a.
The operands reach the kernel already in per-lane register order (pack): each lane loads its A, B, C
registers and metadata words as whole `uint4`-able runs, placed by the fragment's own per-lane table
(Fragment.lanes, generated from compiler/isa/mma_sp/fragments.py), so the kernel holds no layout
arithmetic of its own. Packed arrays (uint32 / float32, C order):

    a [M/16][K/32][32 lanes][A regs]   compressed A words (compiler.sparse.compress values, 2 f16 a word)
    b [N/8][K/32][32 lanes][B regs]    B words (compiler.sparse.pack_b: B^T, K contiguous)
    e [M/16][K/32][32 lanes]           metadata words (compiler.sparse.compress: already per lane)
    c, d [M/16][N/8][32 lanes][4]      C / D elements

Everything here runs without a GPU (tests/test_fragment_gemm_host.py); tests/gpu/test_fragment_gpu.py and
benchmarks/fragment_call.py launch the kernels (cupy.RawModule on the linked cubin).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
TILE = ROOT / "examples" / "sparse_f16.tile"
TARGET = "sm_90a"
WARPS_PER_BLOCK = 4


def fragment():
    """The issue's fragment: examples/sparse_f16.tile compiled for sm_90a with `--emit func`."""
    from compiler import emit_fragment, parse_source

    spec = parse_source(TILE.read_text(), str(TILE))
    return emit_fragment(spec.tiles[0], TARGET)


def kernel_source(f, header: str = "frag.h") -> str:
    """Two kernels over the same loop, `gemm_call` (out of line) and `gemm_inline`:
    (const unsigned *a, const unsigned *b, const unsigned *e, const float *c, float *d,
     int tiles_m, int tiles_n, int calls) with `calls` = K / (the fragment's K per call)."""
    n = f.name
    steps = f.constants["k_steps"]
    return f"""#include "{header}"

template <bool INLINE>
__device__ __forceinline__ void gemm(const unsigned *a, const unsigned *b, const unsigned *e, const float *c,
                                     float *d, int tiles_m, int tiles_n, int calls) {{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= tiles_m * tiles_n) return;                 // whole warps only: the fragment is .sync.aligned
    const int tm = warp / tiles_n, tn = warp % tiles_n, ksteps = calls * {n}_k_steps;
    {n}_c acc;
    for (int r = 0; r < {n}_c_regs; ++r) acc.r[r] = c[((tm * tiles_n + tn) * 32 + lane) * {n}_c_regs + r];
    for (int call = 0; call < calls; ++call) {{
        {n}_k_step k[{steps}];
        #pragma unroll
        for (int s = 0; s < {n}_k_steps; ++s) {{
            const int ks = call * {n}_k_steps + s;
            #pragma unroll
            for (int j = 0; j < {n}_a_regs; ++j) k[s].a.r[j] = a[((tm * ksteps + ks) * 32 + lane) * {n}_a_regs + j];
            #pragma unroll
            for (int j = 0; j < {n}_b_regs; ++j) k[s].b.r[j] = b[((tn * ksteps + ks) * 32 + lane) * {n}_b_regs + j];
            k[s].e = e[(tm * ksteps + ks) * 32 + lane];
        }}
        acc = INLINE ? {n}_call_inline(acc, k) : {n}_call(acc, k);
    }}
    for (int r = 0; r < {n}_c_regs; ++r) d[((tm * tiles_n + tn) * 32 + lane) * {n}_c_regs + r] = acc.r[r];
}}

extern "C" __global__ void gemm_call(const unsigned *a, const unsigned *b, const unsigned *e, const float *c,
                                     float *d, int tiles_m, int tiles_n, int calls) {{
    gemm<false>(a, b, e, c, d, tiles_m, tiles_n, calls);
}}

extern "C" __global__ void gemm_inline(const unsigned *a, const unsigned *b, const unsigned *e, const float *c,
                                       float *d, int tiles_m, int tiles_n, int calls) {{
    gemm<true>(a, b, e, c, d, tiles_m, tiles_n, calls);
}}
"""


def build(nvcc: str, workdir: Path, f=None) -> tuple[Path, str]:
    """The README recipe: frag.h (`--emit header`), frag.ptx (`--emit func`) -> frag.o, gemm.cu -> gemm.o
    (-rdc), device link to gemm.cubin. Returns (cubin path, the kernels' PTX, for inspection)."""
    from compiler import link_fragments
    from compiler.ptx.fragment_header import fragment_header

    from .nvcc_link import compile_caller, compile_fragments, gencode, link_cubin, run_nvcc

    f = f or fragment()
    (workdir / "frag.h").write_text(fragment_header([f]))
    cu = kernel_source(f)
    caller = compile_caller(nvcc, cu, TARGET, workdir, stem="gemm")
    run_nvcc(nvcc, [*gencode(TARGET), "-rdc=true", "-ptx", "gemm.cu", "-o", "gemm.ptx"], workdir)
    frag = compile_fragments(nvcc, link_fragments([f]), TARGET, workdir, stem="frag")
    return link_cubin(nvcc, [caller, frag], TARGET, workdir, name="gemm.cubin"), (workdir / "gemm.ptx").read_text()


@dataclass
class Problem:
    a: np.ndarray        # dense M x K f16, 2:4 sparse
    b: np.ndarray        # K x N f16
    c: np.ndarray        # M x N f32

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.a.shape[0], self.b.shape[1], self.a.shape[1]


def problem(m: int, n: int, k: int, seed: int, exact: bool) -> Problem:
    """`exact`: values with few significant bits (compiler.sparse.random_values), so every partial sum is
    exact in f32 and D must equal numpy's bit for bit; otherwise normal random values."""
    from compiler import sparse

    rng = np.random.default_rng(seed)
    a = sparse.random_sparse(rng, m, k, "f16", "m16n8k32")
    if exact:
        b = sparse.random_values(rng, (k, n), "f16")
        c = sparse.random_values(rng, (m, n), "f16").astype(np.float32)
    else:
        a = np.where(a != 0, rng.standard_normal(a.shape), 0).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        c = rng.standard_normal((m, n)).astype(np.float32)
    return Problem(a, b, c)


def _tile_words(words: np.ndarray, rows: int, k_steps: int) -> np.ndarray:
    """[R][W] words -> [R/rows][K steps][rows][W/K steps]."""
    r, w = words.shape
    return words.reshape(r // rows, rows, k_steps, w // k_steps).transpose(0, 2, 1, 3)


def pack(f, p: Problem) -> dict[str, np.ndarray]:
    """The kernel's inputs, placed by the fragment's per-lane table (module docstring)."""
    from compiler import sparse

    m, n, k = p.shape
    lanes = f.lanes
    ks = k // 32                                           # m16n8k32: one K step = 32 of K
    values, meta = sparse.compress(p.a, "f16", "m16n8k32")
    aw = _tile_words(np.ascontiguousarray(values).view(np.uint32), 16, ks)        # [M/16][ks][16][words]
    bw = _tile_words(np.ascontiguousarray(sparse.pack_b(p.b, "f16", "m16n8k32")).view(np.uint32), 8, ks)
    a_row, a_word = np.array(lanes["a"]).transpose(2, 0, 1)                       # [32][A regs] each
    b_col, b_word = np.array(lanes["b"]).transpose(2, 0, 1)
    c_at = np.array(lanes["c"])[:, :, 0, :]                                       # [32][4][(row, col)]
    ct = p.c.reshape(m // 16, 16, n // 8, 8).transpose(0, 2, 1, 3)                # [M/16][N/8][16][8]
    return {
        "a": np.ascontiguousarray(aw[:, :, a_row, a_word]),                     # [M/16][ks][32][A regs]
        "b": np.ascontiguousarray(bw[:, :, b_col, b_word]),
        "e": np.ascontiguousarray(meta.astype(np.uint32)),                      # [M/16][ks][32]
        "c": np.ascontiguousarray(ct[:, :, c_at[..., 0], c_at[..., 1]]),        # [M/16][N/8][32][4]
    }


def unpack_d(f, d: np.ndarray, m: int, n: int) -> np.ndarray:
    """[M/16][N/8][32][4] -> M x N, by the same table."""
    c_at = np.array(f.lanes["c"])[:, :, 0, :]
    out = np.empty((m // 16, n // 8, 16, 8), np.float32)
    out[:, :, c_at[..., 0], c_at[..., 1]] = d.reshape(m // 16, n // 8, 32, -1)
    return out.transpose(0, 2, 1, 3).reshape(m, n)


def reference(p: Problem) -> np.ndarray:
    return p.a.astype(np.float64) @ p.b.astype(np.float64) + p.c.astype(np.float64)


def error_bound(p: Problem) -> np.ndarray:
    """Element-wise bound for f32 accumulation: |D - ref| <= (K/32 + 1) * 2^-22 * (|A||B| + |C|), one
    rounding of relative size <= 2^-22 per mma.sp K step (and one for C). The exact problems need no
    bound (they must match bit for bit)."""
    k = p.shape[2]
    scale = np.abs(p.a.astype(np.float64)) @ np.abs(p.b.astype(np.float64)) + np.abs(p.c.astype(np.float64))
    return (k / 32 + 1) * 2.0 ** -22 * scale


def launch_dims(p: Problem, f) -> tuple[tuple[int], tuple[int], tuple[int, int, int]]:
    """(grid, block, (tiles_m, tiles_n, calls)) for either kernel."""
    m, n, k = p.shape
    tiles = (m // 16) * (n // 8)
    per_call = 32 * f.constants["k_steps"]
    assert k % per_call == 0, f"K = {k} is not a multiple of the fragment's {per_call}"
    return ((tiles + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK,), (32 * WARPS_PER_BLOCK,), (m // 16, n // 8, k // per_call)


def form_of(f):
    """The mma.sp Form of the fragment's tile (verify's choice), for the CPU emulation."""
    from compiler import parse_source, run_passes
    from compiler.passes.derive import mma_form

    spec = parse_source(TILE.read_text(), str(TILE))
    return mma_form(run_passes(spec.tiles[0], ["verify"], target=TARGET).ops("tilec.tile")[0])


def emulate(f, packed: dict[str, np.ndarray], shape: tuple[int, int, int]) -> np.ndarray:
    """What either kernel computes, on the CPU: the same loop over warps and calls, each K step one
    mma.sp of compiler.emulator (whose own register maps come from compiler/isa/mma_sp/fragments.py).
    Returns D packed like `c`."""
    from compiler.emulator.mma_sp import mma_sp_warp

    form = form_of(f)
    m, n, k = shape
    ks = k // 32
    d = np.empty_like(packed["c"])
    for tm in range(m // 16):
        for tn in range(n // 8):
            acc = [packed["c"][tm, tn, :, r].view(np.uint32).astype(np.uint64) for r in range(4)]
            for s in range(ks):
                a = [packed["a"][tm, s, :, j].astype(np.uint64) for j in range(packed["a"].shape[-1])]
                b = [packed["b"][tn, s, :, j].astype(np.uint64) for j in range(packed["b"].shape[-1])]
                acc = mma_sp_warp(form, a, b, acc, packed["e"][tm, s].astype(np.uint64), f.constants["selector"])
            d[tm, tn] = np.stack([r.astype(np.uint32).view(np.float32) for r in acc], axis=-1)
    return d
