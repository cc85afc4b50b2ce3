"""The shared smem ring (compiler/ptx/pipeline.py) and its plan in the IR (`pipeline-planning`,
compiler/ptx/pipeline_planning.py): offsets, the checks of a plan, the protocol text, the plan printed,
parsed and read back by the wgmma kernel, and a plan that disagrees with the kernel refused."""
import pytest

from compiler import CompileError
from compiler.diagnostics import SpecError
from compiler.driver import compile_ir, compile_source
from compiler.isa.mma_sp.forms import find_form
from compiler.passes.manager import default_order
from compiler.ptx.builder import HAND_SCHEDULED, PtxBuilder
from compiler.ptx.pipeline import MAX_ARRIVALS, PipelineState, RingCode, RingPlan
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma

F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")


def test_barrier_offsets():
    # 3 slots of 1024 B, barriers after them: full[s] at 3072 + 8 s, empty[s] at 3072 + 8 (3 + s)
    p = RingPlan(stages=3, stage_bytes=1024, tx_bytes=1000, full_arrivals=1, empty_arrivals=8, barrier_offset=3072)
    assert [p.full(s) for s in range(3)] == [3072, 3080, 3088]
    assert [p.empty(s) for s in range(3)] == [3096, 3104, 3112]
    assert p.bytes == 3072 + 2 * 3 * 8
    assert RingPlan.from_attrs({**p.attrs(), "k_block": 64}) == p
    p.check()


@pytest.mark.parametrize("kw,needle", [
    (dict(tx_bytes=2048), "overflow its slot"),
    (dict(empty_arrivals=0), "an mbarrier counts 1.."),
    (dict(full_arrivals=MAX_ARRIVALS + 1), "an mbarrier counts 1.."),
    (dict(barrier_offset=2048), "must follow the 3 slots"),
    (dict(stages=0, barrier_offset=0), "at least one stage"),
])
def test_plan_checks(kw, needle):
    base = dict(stages=3, stage_bytes=1024, tx_bytes=1000, full_arrivals=1, empty_arrivals=8, barrier_offset=3072)
    with pytest.raises(SpecError) as e:
        RingPlan(**{**base, **kw}).check()
    assert needle in e.value.message


def _code(plan, ctas=1):
    b = PtxBuilder("k", **HAND_SCHEDULED)
    ring, st = RingCode(b, plan, "%sb"), PipelineState("%st", "%ph")
    ring.start(st)
    ring.locate(st, "%slot", "%full", "%x")
    ring.acquire(st, "%full", "%e", "%par", "%p2")
    ring.arm("%full", "%p6")
    ring.wait(st, "%full", "%p2")
    ring.release("%st", "%p5", "%x", "%y", ctas)
    ring.advance(st, "%p1")
    return "\n".join(ln.strip() for ln in b.lines)


def test_protocol_text():
    plan = RingPlan(stages=4, stage_bytes=2048, tx_bytes=2048, full_arrivals=1, empty_arrivals=4, barrier_offset=8192)
    text = _code(plan)
    # slot = base + stage * 2048; full = base + 8192 + 8 stage; empty = full + 8 * 4 stages = full + 32
    assert "mad.lo.u32 %slot, %st, 2048, %sb;" in text
    assert "add.u32 %full, %sb, 8192;" in text
    assert "add.u32 %e, %full, 32;" in text
    # the producer waits for parity phase ^ 1 of empty, the consumer for parity phase of full
    assert "xor.b32 %par, %ph, 1;" in text
    assert "mbarrier.try_wait.parity.shared::cta.b64 %p2, [%e], %par;" in text
    assert "mbarrier.try_wait.parity.shared::cta.b64 %p2, [%full], %ph;" in text
    assert "@%p6 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%full], 2048;" in text
    # release: empty[st] = base + 8 st + 8192 + 32
    assert "@%p5 mbarrier.arrive.shared::cta.b64 _, [%x+8224];" in text
    # advance: wrap at 4 stages and flip the phase
    assert "setp.eq.u32 %p1, %st, 4;" in text and "@%p1 xor.b32 %ph, %ph, 1;" in text
    pair = _code(plan, ctas=2)
    assert pair.count("mbarrier.arrive.shared::cluster.b64") == 2
    assert "mapa.shared::cluster.u32 %y, %x, 1;" in pair


def test_wgmma_ring_plan():
    cfg = SparseWgmmaConfig("k", F16, cta_m=128, cta_n=256, cta_k=64, stages=4, cluster_m=2)
    r = cfg.ring
    # slot: A 128 rows x 64 B = 8192, B 256 rows x 128 B = 32768 at 8192, metadata 8 tiles x 2 k-steps x 64 B
    # (f16: the compact layout, 16 words a k-step) = 1024 at 40960: 41984 B, already 1024-aligned (41 x 1024),
    # and all of it delivered by TMA per stage
    assert (r.stage_bytes, r.tx_bytes) == (41984, 41984)
    assert r.barrier_offset == 4 * 41984
    # empty: one arrival per consumer warp (2 warpgroups x 4) of both CTAs of the pair
    assert (r.full_arrivals, r.empty_arrivals) == (1, 16)
    assert cfg.smem_bytes == 1024 + 4 * 41984 + 2 * 4 * 8


WGMMA_TILE = """target sm_90a;
tile t {
  engine mma.sp;
  shape M=16 N=8 K=32;
  A: f16 global;
  B: f16 global;
  C: f32 global;
  D: f32 global;
  sparsity 2:4 metadata=runtime selector=0;
  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma;
}
"""


def test_plan_in_the_ir_is_what_the_kernel_reads():
    ir = compile_source(WGMMA_TILE, "t.tile", passes=list(default_order()[:-1])).ir()    # up to the plan
    line = next(ln for ln in ir.splitlines() if "tilec.pipeline" in ln)
    assert "stage_bytes = 41984" in line and "empty_arrivals = 8" in line and "tx_bytes = 41984" in line    # as above
    # the IR text compiles to the same PTX
    assert compile_ir(ir, "t.ir").ptx == compile_source(WGMMA_TILE, "t.tile").ptx
    # a plan edited to disagree with the kernel's slots is refused, located on the schedule
    bad = ir.replace("empty_arrivals = 8", "empty_arrivals = 4")
    with pytest.raises(CompileError) as e:
        compile_ir(bad, "t.ir")
    out = e.value.render()
    assert "the ring plan disagrees with the kernel's slots: empty_arrivals 4 (the kernel's slots need 8)" in out
    assert "t.tile:10:" in out


def test_emit_with_a_foreign_plan_is_refused():
    cfg = SparseWgmmaConfig("k", F16, cta_m=128, cta_n=128, cta_k=64, stages=3)
    other = RingPlan(**{**cfg.ring.attrs(), "tx_bytes": cfg.ring.tx_bytes - 16})
    with pytest.raises(SpecError):
        emit_sparse_wgmma(cfg, other)
    assert emit_sparse_wgmma(cfg, cfg.ring).text == emit_sparse_wgmma(cfg).text
