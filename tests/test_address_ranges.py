"""A kernel never computes a wrapped address (issue 14): the interval analysis of compiler/emulator/ranges.py
over the emitted PTX finds no 32-bit instruction on an address path whose result can leave the u32 range,
for every kernel of the examples and of the property-test generator, with the launch-time sizes at the
corners of each kernel's stated `limits` (each size its smallest or largest accepted value).

Before the 64-bit address arithmetic, these kernels computed e.g. `(m0 + row) * row_bytes` with
`mul.lo.u32`, `N * 4` (a C/D row stride) with `shl.b32`, and the metadata word index `(m0/16) * (K/k) * 32`
with `mul.lo.u32`: at an 8 GiB operand the byte offset passed 2^32 and wrapped silently.
"""
from __future__ import annotations

import os

import pytest

import compiler
from compiler.emulator.ranges import address_wraps, problem_corners
from compiler.runtime import abi as rabi

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")


def wraps_at_corners(result, tile: str) -> list[tuple[tuple[int, int, int], list]]:
    """(problem size, wraps) for every corner of the tile kernel's limits where the analysis finds any."""
    abi = result.to_json()["tiles"][tile]["kernel"]
    out = []
    for m, n, k in problem_corners(abi):
        # a batched kernel at its largest batch: CUDA's gridDim.y limit (the sparse wgmma kernel's grid y), or
        # the largest its limits accept at this size (the persistent tcgen05 kernel counts batch x tiles)
        batch = largest_batch(abi, m, n, k) if "batch" in abi else 1
        grid = rabi.grid_blocks(abi, m, n, k, multiprocessors=132, batch=batch)
        found = address_wraps(result.ptx, {"M": m, "N": n, "K": k, "m_total": m, "n_total": n, "batch": batch,
                                           **launch_strides(abi, m, n, k)}, grid, entry=tile, cluster=rabi.cluster(abi))
        if found:
            out.append(((m, n, k), found))
    return out


def largest_batch(abi: dict, m: int, n: int, k: int) -> int:
    """The largest batch <= 65535 (CUDA's gridDim.y) the kernel's limits accept for M x N x K (1 at least)."""
    lo, hi = 1, 65536
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rabi.unmet(abi, m, n, k, mid):
            hi = mid
        else:
            lo = mid
    return lo


def launch_strides(abi: dict, m: int, n: int, k: int) -> dict:
    """The u32 parameters beyond M, N, K: row strides (ldb, ldc, ldd, u32 elements: anything from the row's
    length up to the u32 limit) and the sizes the ABI derives (`sizes`: the pipelined kernel's Kp)."""
    return {"ldb": (k, (1 << 32) - 1), "ldc": (n, (1 << 32) - 1), "ldd": (n, (1 << 32) - 1),
            **rabi.derived_sizes(abi, m, n, k)}


def _report(bad) -> str:
    return "\n".join(f"{where} {size}: " + "; ".join(map(str, found[:4])) for where, size, found in bad[:6])


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(EX) if f.endswith(".tile")))
def test_example_kernels_never_wrap_an_address(name):
    result = compiler.compile_file(os.path.join(EX, name))
    bad = [(tile, size, found) for tile in result.tiles for size, found in wraps_at_corners(result, tile)]
    assert not bad, _report(bad)


def test_generated_kernels_never_wrap_an_address():
    """Every kernel the property test's generator produces (tests/test_property_tiles.py, default slice:
    tcgen05 forms, one-instruction mma.sp, the pipelined cp.async and the wgmma kernels)."""
    from tests.test_property_tiles import accepted_tiles

    tiles, _ = accepted_tiles(200, seed=14)
    bad = [(src, size, found) for src, _, result in tiles for size, found in wraps_at_corners(result, "t")]
    assert not bad, _report(bad)


@pytest.mark.parametrize("form, config", [
    (("m16n8k32", "f16", "f16", "f32", "f32"), dict(cta_m=16, cta_n=8, cta_k=32, warps_m=1, warps_n=1, stages=2,
                                                   raster_group=1024)),
    (("m16n8k16", "tf32", "tf32", "f32", "f32"), dict(cta_m=64, cta_n=64, cta_k=32, warps_m=2, warps_n=2, stages=3,
                                                     raster_group=4, stage_d=False)),
    (("m16n8k32", "bf16", "bf16", "f32", "f32"), dict(cta_m=64, cta_n=128, cta_k=128, warps_m=2, warps_n=2,
                                                     stages=4, accumulate_c=False, d_type="bf16")),
    (("m16n8k64", "s8", "s8", "s32", "s32"), dict(cta_m=128, cta_n=256, cta_k=64, warps_m=2, warps_n=4, stages=3)),
])
def test_api_configured_pipelined_kernels_never_wrap_an_address(form, config):
    """Pipelined sparse GEMMs configured through the API (tf32 rows of K*4 bytes, metadata rows of K*8, a
    raster group of 1024 whose tiles per group the ABI's limits bound, D direct or staged, f16/bf16 D).
    Not covered, because an interval analysis cannot relate the values involved: persistent CTAs
    (`persistent=True`, not reachable from the DSL) step their shared ring bases by adding a negative slot
    distance modulo 2^32; and a raster group that does not divide the tile rows leaves a partial last
    group whose column index is below N / cta_n only through `tile < tiles`."""
    from compiler.isa.mma_sp.forms import find_form
    from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

    k = emit_sparse_gemm(SparseGemmConfig(name="g", form=find_form(*form), target="sm_90a", **config))
    bad = []
    for m, n, kk in problem_corners(k.abi):
        found = address_wraps(k.text, {"M": m, "N": n, "K": kk, **launch_strides(k.abi, m, n, kk)},
                              rabi.grid_blocks(k.abi, m, n, kk, batch=65535))
        if found:
            bad.append(("g", (m, n, kk), found))
    assert not bad, _report(bad)


def test_corners_reach_the_limits():
    """The corners are the stated limits: an 8 GiB A (tcgen05, K = 4096 f16: 8192 bytes a row) at its
    largest m_total, whose byte offsets pass 2^32."""
    src = """target sm_100a;
tile big {
  engine tcgen05;
  shape M=128 N=256 K=16;
  loop K=4096;
  A: f16 smem; B: f16 smem; D: f32 tmem;
}
"""
    result = compiler.compile_source(src, "big.tile")
    abi = result.to_json()["tiles"]["big"]["kernel"]
    corners = problem_corners(abi)
    # m_total: grid y = m_total / 128 <= 65535; n_total: below 2^31, a multiple of 256
    assert max(m for m, _, _ in corners) == 65535 * 128
    assert max(n for _, n, _ in corners) == (1 << 31) - 256
    assert 65535 * 128 * 4096 * 2 > 1 << 32          # the last row of A starts 2^33 bytes in
    assert wraps_at_corners(result, "big") == []


def test_the_analysis_finds_the_old_32_bit_row_stride():
    """The analysis is not blind: the one-instruction mma.sp kernel's C/D addressing as it was (row stride
    N * 4 bytes in a u32 register, then the 64-bit product) wraps once N * 4 >= 2^32."""
    result = compiler.compile_file(os.path.join(EX, "sparse_f16.tile"))
    new = "mul.wide.u32 %adr, %x, %N;          // row * N elements in 64 bits\n    shl.b64 %adr, %adr, 2;"
    assert new in result.ptx
    old_ptx = result.ptx.replace(new, "shl.b32 %y, %N, 2;\n    mul.wide.u32 %adr, %x, %y;")
    grid = lambda n: (n // 8, 1, 1)                                    # noqa: E731  (N / tile_n, M / 16)
    found = address_wraps(old_ptx, {"M": 16, "N": 1 << 30, "K": 32}, grid(1 << 30))
    assert found and {w.text.split(";")[0] for w in found} == {"shl.b32 %y, %N, 2"}
    assert found[0].low == found[0].high == 1 << 32
    # below 2^30 the old form fitted, and the analysis says so
    assert address_wraps(old_ptx, {"M": 16, "N": (1 << 30) - 8, "K": 32}, grid((1 << 30) - 8)) == []


KERNEL = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(
    .param .u64 k_p,
    .param .u32 k_N
)
.maxntid 128, 1, 1
{
    .reg .pred %p<2>;
    .reg .u32 %n, %i, %x, %t, %u;
    .reg .u64 %g, %o;
    ld.param.u64 %g, [k_p];
    ld.param.u32 %n, [k_N];
    mov.u32 %t, %tid.x;
    mov.u32 %i, 0;
LOOP:
    mad.lo.u32 %x, %i, 128, %t;
    mul.wide.u32 %o, %x, 4;
    add.u64 %o, %o, %g;
    st.global.b32 [%o], %x;
    add.u32 %i, %i, 1;
    setp.lt.u32 %p0, %i, %n;
    @%p0 bra.uni LOOP;
    shl.b32 %x, %n, 4;
    mul.wide.u32 %o, %x, 1;
    add.u64 %o, %o, %g;
    st.global.b32 [%o], %n;
    shl.b32 %u, %n, 8;
    ret;
}
"""


def test_loop_counters_are_bounded_by_their_exit_test():
    """A counter compared with its limit stays below it (widening, then narrowing with the branch): the
    word index i * 128 + tid, i < N, tid < 128, fits 32 bits up to N = 2^25; `shl.b32 %x, %n, 4` (an
    address) up to N < 2^28; the last `shl` feeds no address and is never reported."""
    assert address_wraps(KERNEL, {"N": 1 << 25}, (1, 1, 1)) == []
    found = address_wraps(KERNEL, {"N": (1 << 25) + 1}, (1, 1, 1))
    assert [w.text for w in found] == ["mad.lo.u32 %x, %i, 128, %t;"]
    assert (found[0].low, found[0].high) == (0, (1 << 32) + 127)          # 2^25 * 128 + 127
    found = address_wraps(KERNEL, {"N": 1 << 28}, (1, 1, 1))
    assert [w.text for w in found] == ["mad.lo.u32 %x, %i, 128, %t;", "shl.b32 %x, %n, 4;"]
    assert (found[1].low, found[1].high) == (1 << 32, 1 << 32)
