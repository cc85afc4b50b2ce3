"""benchmarks/ptx_mix.py counts what a Blackwell GEMM kernel issues per K block and per tile: on tilec's
tcgen05 kernels (their structure is known from the emitters) and on a small hand-written kernel shaped like a
persistent warp-specialised GEMM (a tile loop around a K loop unrolled twice, inline-assembly spin waits
that reuse their label names, an epilogue walking sub-tiles)."""
from __future__ import annotations

import runpy
from pathlib import Path

from compiler import compile_source

ROOT = Path(__file__).resolve().parent.parent
analyse = runpy.run_path(str(ROOT / "benchmarks" / "ptx_mix.py"))["analyse"]


def _ptx(name: str) -> str:
    return compile_source((ROOT / "examples" / name).read_text(), name).ptx


def test_single_stage_tcgen05_kernel():
    """gemm_bf16.tile: M 128, N 256, loop K 64 in one K stage: K 64 / 16 = 4 tcgen05.mma per K block, one
    commit to the kernel's one mbarrier (count 1) and one spin wait on it; the 128 threads copy A and B
    with ld.global / st.shared (one site each per operand: strided copy loops) and meet at bar.sync; the
    epilogue reads D with tcgen05.ld in a loop over column chunks, no tile loop (one tile per CTA)."""
    a = analyse(_ptx("gemm_bf16.tile"))
    assert a["init_counts"] == [1]
    k = a["roles"]["mma"]["k_loop"]
    assert k["k_blocks_per_iteration"] == 1
    per = k["per_k_block"]
    assert (per["tcgen05.mma"], per["tcgen05.commit"], per["mbarrier.wait"]) == (4, 1, 1)
    assert (per["ld.global"], per["st.shared"], per["bar.sync"]) == (2, 2, 1)
    assert "tma" not in a["roles"] and "tma_load" not in a["whole"]
    assert "tile_loop" not in a["roles"]["epilogue"] and a["roles"]["epilogue"]["sub_loop"]["per_sub_tile"][
        "tcgen05.ld"] == 1


def test_k_loop_is_per_stage():
    """A loop K of 256 staged in two K blocks of 128 (layout-selection's 96 KiB stage budget): the same loop
    runs twice, 128 / 16 = 8 MMAs per K block."""
    src = ("target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n  loop K=256;\n"
           "  A: f16 smem;\n  B: f16 smem;\n  D: f32 tmem;\n}\n")
    a = analyse(compile_source(src, "t.tile").ptx)
    assert a["roles"]["mma"]["k_loop"]["per_k_block"]["tcgen05.mma"] == 8


# A kernel shaped like a persistent warp-specialised GEMM (written for this test): the producer's tile loop
# holds its K loop (one expect_tx and two TMA loads per K block, after a spin wait on the stage's empty
# barrier); the MMA warp's tile loop holds a K loop unrolled twice (2 x (wait, 2 MMAs, commit)), then
# commits the accumulator; the epilogue's tile loop waits for it, then walks 2 sub-tiles.
SHAPED = """
.version 8.6
.target sm_100a
.address_size 64
.visible .entry shaped(.param .u64 p)
{
  .reg .pred %p<9>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<9>;
  mov.b32 %r1, 1;
  mbarrier.init.shared.b64 [%r2], %r1;
  mbarrier.init.shared.b64 [%r2+8], %r1;
  mov.b32 %r3, 4;
  mbarrier.init.shared.b64 [%r2+16], %r3;
$TMA_TILE:
$TMA_K:
  {
  .reg .pred P1;
  LAB_WAIT:
  mbarrier.try_wait.parity.shared.b64 P1, [%r2+8], %r4, 10000000;
  @P1 bra.uni DONE;
  bra.uni LAB_WAIT;
  DONE:
  }
  mbarrier.arrive.expect_tx.shared.b64 %rd1, [%r2], 32768;
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r5], [%rd2, {%r6, %r7}], [%r2];
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r8], [%rd3, {%r6, %r7}], [%r2];
  @%p1 bra $TMA_K;
  @%p2 bra $TMA_TILE;
$MMA_TILE:
$MMA_K:
  {
  .reg .pred P1;
  LAB_WAIT:
  mbarrier.try_wait.parity.shared.b64 P1, [%r2], %r4, 10000000;
  @P1 bra.uni DONE;
  bra.uni LAB_WAIT;
  DONE:
  }
  tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd4, %rd5, %r10, %p3;
  tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd4, %rd5, %r10, %p3;
  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r2+8];
  {
  .reg .pred P1;
  LAB_WAIT:
  mbarrier.try_wait.parity.shared.b64 P1, [%r2], %r4, 10000000;
  @P1 bra.uni DONE;
  bra.uni LAB_WAIT;
  DONE:
  }
  tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd4, %rd5, %r10, %p3;
  tcgen05.mma.cta_group::1.kind::f16 [%r9], %rd4, %rd5, %r10, %p3;
  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r2+8];
  @%p4 bra $MMA_K;
  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r2+16];
  @%p5 bra $MMA_TILE;
$EPI_TILE:
$EPI_WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r2+16], %r4;
  @!%p6 bra $EPI_WAIT;
$EPI_SUB:
  tcgen05.ld.sync.aligned.32x32b.x8.b32 {%r11, %r12, %r13, %r14, %r15, %r16, %r17, %r18}, [%r19];
  tcgen05.wait::ld.sync.aligned;
  st.global.v4.b32 [%rd6], {%r11, %r12, %r13, %r14};
  @%p7 bra $EPI_SUB;
  mbarrier.arrive.shared.b64 %rd7, [%r2+16];
  @%p8 bra $EPI_TILE;
  ret;
}
"""


def test_roles_of_a_warp_specialised_kernel():
    a = analyse(SHAPED)
    # the init counts come from the registers' mov.b32 immediates
    assert a["init_counts"] == [1, 1, 4]
    tma = a["roles"]["tma"]
    assert tma["k_loop"]["k_blocks_per_iteration"] == 1
    assert {k: v for k, v in tma["k_loop"]["per_k_block"].items() if k != "instructions"} == \
        {"tma_load": 2, "mbarrier.expect_tx": 1, "mbarrier.wait": 1}
    mma = a["roles"]["mma"]
    # unrolled twice: two commits in the K loop's body, so each count is halved per K block
    assert mma["k_loop"]["k_blocks_per_iteration"] == 2
    assert {k: v for k, v in mma["k_loop"]["per_k_block"].items() if k != "instructions"} == \
        {"tcgen05.mma": 2, "tcgen05.commit": 1, "mbarrier.wait": 1}
    assert mma["tile_loop"]["per_tile"] == {"tcgen05.commit": 1, "instructions": 2}
    epi = a["roles"]["epilogue"]
    assert epi["sub_loop"]["per_sub_tile"]["tcgen05.ld"] == 1
    per_tile = epi["tile_loop"]["per_tile"]
    assert (per_tile["mbarrier.wait"], per_tile["mbarrier.arrive"]) == (1, 1)
    # 3 inline spins + the epilogue's spin loop; no probe
    assert a["whole"]["mbarrier.wait"] == 4 and "mbarrier.try_wait" not in a["whole"]
