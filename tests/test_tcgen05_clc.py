"""`schedule ... persistent=clc`: the warp-specialised tcgen05 kernel scheduled by cluster launch control
(compiler/ptx/tcgen05_ws_kernel.py `scheduler_role` / `clc_tile_loop`; PTX 9.7.13.17-18).

Proven without a Blackwell GPU: the plan and the ABI (a CTA per tile, a seventh warp, the response ring and
its barriers), ptxas on every target the instruction forms allow, and the CPU emulator
(compiler/emulator/warp.py `_run_resident`, `_try_cancel`): the grid has one CTA (pair) per tile but only
half of them run at once; a running CTA's try_cancel cancels a waiting one (or, none being left, fails),
its answer completing late under the adversarial policy, and D must equal numpy. Seeded bugs (a consumer
role that does not wait for the answer, a flipped phase bit on the answer's barrier, a request after a
failure, a ctaid decoded from a failed answer, a release dropped) each fail the emulator.
"""
from __future__ import annotations

import re

import pytest

import compiler
from compiler.diagnostics import CompileError
from compiler.emulator.parse import EmulationError
from compiler.ptxas import assemble
from test_tcgen05_ws_kernel import first_failure as ws_first_failure, role_span

TILE = """target {target};
tile clc {{
  engine tcgen05{group};
  shape M={m} N={n} K=16;
  A: {t} smem;
  B: {t} smem;
  D: f32 tmem;
  schedule cta={m}x{n}x{k} stages=2{cluster} persistent=clc;
}}
"""


def clc_tile(target="sm_100a", pair=False, n=64, t="f16", k=32):
    return TILE.format(target=target, group=" cta_group=2" if pair else "", m=256 if pair else 128, n=n, t=t,
                       k=k, cluster=" cluster=2" if pair else "")


@pytest.fixture(scope="module")
def single():
    return compiler.compile_source(clc_tile())


@pytest.fixture(scope="module")
def pair():
    return compiler.compile_source(clc_tile(pair=True, n=128, t="bf16", k=64))


# ---- plan, ABI, resource plan --------------------------------------------------------------------------

def test_plan_and_abi(single):
    """A CTA per tile (grid `tiles`, within CUDA's grid limit), 224 threads (warp 6 schedules), two 16-byte
    answers with their barriers: clc_full counts the scheduler's arrive.expect_tx, clc_empty one arrival
    per reading warp (TMA, MMA, 4 epilogue)."""
    abi = single.to_json()["tiles"]["clc"]["kernel"]
    assert abi["persistent"] == "clc" and abi["grid"] == ["tiles", 1, 1] and abi["block"] == [224, 1, 1]
    assert "tiles <= 2147483647" in abi["limits"]
    plan = abi["plan"]
    assert plan["roles"] == {"epilogue": [0, 1, 2, 3], "mma": 4, "tma": 5, "scheduler": 6}
    assert plan["barriers"]["clc_full"] == {"count": 1, "number": 2}
    assert plan["barriers"]["clc_empty"] == {"count": 6, "number": 2}
    assert plan["scheduler"]["request"] == "clusterlaunchcontrol.try_cancel"
    ws = single.tiles["clc"].op("tilec.ws_plan").attrs
    assert ws["scheduler"] == "clc" and ws["clc_response"] % 16 == 0
    assert ws["clc_full"] == ws["clc_response"] + 2 * 16 and ws["clc_empty"] == ws["clc_full"] + 2 * 8
    res = single.to_json()["tiles"]["clc"]["resources"]
    assert res["scheduler"] == "clc" and [r["name"] for r in res["roles"]][-1] == "scheduler"
    ptx = single.ptx
    assert ptx.count("clusterlaunchcontrol.try_cancel.async") == 1 and ".multicast" not in ptx
    # three consumer roles decode each answer (epilogue, MMA, TMA) and the scheduler checks it
    assert ptx.count("query_cancel.is_canceled") == 4 and ptx.count("get_first_ctaid::x") == 3


def test_emit_plan_names_the_scheduler(capsys):
    from compiler.cli import main

    assert main(["compile", "examples/tcgen05_gemm_f16_clc.tile", "--emit", "plan"]) == 0
    out = capsys.readouterr().out
    assert "224 threads" in out and "scheduler 1 warps" in out and "16 mbarriers" in out
    assert "persistent (cluster launch control: a CTA per tile" in out


def test_pair_plan(pair):
    """A pair: two CTAs per tile, the leader asks with the multicast form (the answer lands in both CTAs),
    arms both CTAs' clc_full, and clc_empty (the leader's) counts both CTAs' readers: (1 + 4) x 2 + the
    leader's MMA warp."""
    abi = pair.to_json()["tiles"]["clc"]["kernel"]
    assert abi["grid"] == ["2 * tiles", 1, 1] and abi["cluster"] == [2, 1, 1]
    assert abi["plan"]["barriers"]["clc_empty"]["count"] == 11
    ptx = pair.ptx
    assert "try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cluster.b64" in ptx


def test_ptxas(single, pair, ptxas):
    """Every form the scheduler emits, on the architecture target (the other targets: the slow test)."""
    for result in (single, pair):
        res = assemble(result.ptx, "sm_100a", ptxas)
        assert res.ok, res.output


@pytest.mark.slow
def test_ptxas_every_target(ptxas):
    """The base forms on every tcgen05 target; the pair's multicast form on the targets documented for it."""
    from compiler.isa.clc import MULTICAST_TARGETS

    for target in ("sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"):
        res = assemble(compiler.compile_source(clc_tile(target)).ptx, target, ptxas)
        assert res.ok, f"{target}: {res.output}"
    for target in sorted(MULTICAST_TARGETS):
        res = assemble(compiler.compile_source(clc_tile(target, pair=True, n=128, t="bf16", k=64)).ptx, target,
                       ptxas)
        assert res.ok, f"{target}: {res.output}"


def test_pair_off_the_multicast_targets_is_located():
    """A pair's answer must reach both CTAs: the multicast form, documented for sm_100a / sm_110a only."""
    text = clc_tile("sm_103a", pair=True, n=128, t="bf16")
    with pytest.raises(CompileError) as e:
        compiler.compile_source(text)
    d = e.value.diagnostics[0]
    assert "multicast::cluster::all" in d.message and "sm_103a" in d.message
    assert text.splitlines()[d.loc.line - 1][d.loc.col - 1:].startswith("clc")


def test_runtime_launch_grid_is_the_tiles():
    """The runtime's launch: a CTA per tile (M = 1024, N = 640: 8 x 10 tiles of 128 x 64), 224 threads."""
    from compiler.runtime import abi as rabi

    abi = compiler.compile_source(clc_tile()).to_json()["tiles"]["clc"]["kernel"]
    assert rabi.launch_dims(abi, 1024, 640, 128, multiprocessors=148) == ((80, 1, 1), (1, 1, 1), (224, 1, 1),
                                                                         abi["dynamic_smem_bytes"])


# ---- the emulator: fewer CTAs running than the grid has -------------------------------------------------

def test_emulated_two_resident(single):
    """256 x 128 x 32: 4 tiles of one K block, a grid of 4 CTAs of which 2 run at once; the two others are
    canceled by the running ones (2 successful answers), each CTA's last request fails (4 requests)."""
    em = compiler.emulate(single, shape=(256, 128, 32), mode="adversarial", seed=1)
    assert em.ok, f"{em.mismatches} elements differ"
    assert (em.stats["launched"], em.stats["clc_canceled"], em.stats["clc_requests"]) == (2, 2, 4)


@pytest.mark.slow
@pytest.mark.parametrize("mode, seed", [("eager", 0), ("adversarial", 2), ("adversarial", 3), ("random", 4),
                                        ("random", 5)])
def test_emulated_more_seeds(single, mode, seed):
    """256 x 384 x 128: 12 tiles, 6 CTAs at once, 4 K blocks per tile through the 2-slot ring."""
    em = compiler.emulate(single, shape=(256, 384, 128), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"
    assert em.stats["launched"] + em.stats["clc_canceled"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("mode, seed", [("adversarial", 1), ("random", 2)])
def test_pair_emulated(pair, mode, seed):
    """1024 x 128 x 64: 4 pair tiles (8 CTAs), 2 pairs at once: the multicast answers reach both CTAs."""
    em = compiler.emulate(pair, shape=(1024, 128, 64), mode=mode, seed=seed)
    assert em.ok, f"{em.mismatches} elements differ"
    assert (em.stats["launched"], em.stats["clc_canceled"]) == (2, 2)


# ---- the emulator's model of cluster launch control, on a hand-written kernel ---------------------------

# One warp per CTA, lane 0 works: it counts its tile (out[tile] += 1), asks for the next one and waits for the
# answer; the loop ends at the first failed answer. Every tile of the grid must be counted exactly once,
# whichever CTAs ran and which waiting ones were canceled. MULTICAST: the multicast form (one CTA clusters).
_CLC = """.version 8.6
.target sm_100a
.address_size 64
.visible .entry k(
    .param .u64 k_out
)
.reqntid 32, 1, 1
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .b128 %q<2>;
    .shared .align 16 .b8 k_answer[16];
    .shared .align 8 .b64 k_bar;
    ld.param.u64 %rd0, [k_out];
    mov.u32 %r0, k_answer;
    mov.u32 %r1, k_bar;
    mov.u32 %r2, %tid.x;
    setp.eq.u32 %p0, %r2, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, 0;
TILE:
    mul.wide.u32 %rd1, %r3, 4;
    add.u64 %rd2, %rd0, %rd1;
    @%p0 atom.global.add.u32 %r5, [%rd2], 1;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 16;
    @%p0 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytesMULTICAST.b128 [%r0], [%r1];
WAIT:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p1, [%r1], %r4;
    @!%p1 bra.uni WAIT;
    xor.b32 %r4, %r4, 1;
    ld.shared.b128 %q0, [%r0];
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p2, %q0;
    @%p2 clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r3, %q0;
    fence.proxy.async.shared::cta;
    @%p2 bra.uni TILE;
    ret;
}
"""


def run_clc_model(text: str, grid: int, resident: int | None, policy: str | None = None, seed: int = 0):
    import numpy as np

    from compiler.emulator.memory import FlatMemory
    from compiler.emulator.parse import parse_kernel
    from compiler.emulator.warp import WarpMachine

    mem = FlatMemory()
    out = mem.add("out", np.zeros(grid, np.uint32), writable=True)
    m = WarpMachine(parse_kernel(text), mem, {"k_out": out}, (grid, 1), 32, rng=seed, policy=policy,
                    resident=resident)
    m.run()
    return mem.array("out").view(np.uint32), m.stats


@pytest.mark.parametrize("multicast", ["", ".multicast::cluster::all"])
@pytest.mark.parametrize("resident, policy, seed", [(3, None, 0), (3, "adversarial", 1), (2, "random", 2),
                                                    (None, "adversarial", 3)])
def test_model_counts_every_tile_once(multicast, resident, policy, seed):
    """8 CTAs, `resident` at once (None: one after another): each tile is taken once, by its own CTA or by
    the CTA that canceled it; every CTA that ran ends on one failed answer."""
    counts, stats = run_clc_model(_CLC.replace("MULTICAST", multicast), 8, resident, policy, seed)
    assert counts.tolist() == [1] * 8
    # one request per tile taken; each CTA that ran got one failure (one after another: no `launched` count)
    launched = stats.get("launched", 8 - stats["clc_canceled"])
    assert launched + stats["clc_canceled"] == 8 and stats["clc_requests"] == 8
    assert stats["clc_requests"] - stats["clc_canceled"] == launched and launched >= (resident or 1)


@pytest.mark.parametrize("mutate, message", [
    # the answer read without waiting for its mbarrier: its bytes are still being written
    (lambda t: t.replace("    @!%p1 bra.uni WAIT;\n", ""), "has not finished writing"),
    # the ctaid decoded from the failed answer
    (lambda t: t.replace("@%p2 clusterlaunchcontrol.query_cancel.get_first", "clusterlaunchcontrol.query_cancel.get_first"),
     "of a failed answer"),
    # a request after a failure was observed
    (lambda t: t.replace("@%p2 bra.uni TILE;", "bra.uni TILE;"), "already observed a failed answer"),
    # the wrong parity: the first wait passes at once and reads bytes no try_cancel wrote
    (lambda t: t.replace("mov.u32 %r4, 0;", "mov.u32 %r4, 1;"), "has not finished writing"),
])
def test_model_protocol_checks(mutate, message):
    text = mutate(_CLC.replace("MULTICAST", ""))
    assert text != _CLC.replace("MULTICAST", "")
    with pytest.raises(EmulationError, match=message):
        run_clc_model(text, 4, 2, "adversarial", 1)


# ---- seeded bugs ---------------------------------------------------------------------------------------

_CLC_WAIT = (r"\tmbarrier\.try_wait\.parity\.acquire\.cluster\.shared::cta\.b64 (%p\d+), \[(%r\d+)\], (%r\d+);\n"
             r"\t@!%p\d+ bra\.uni [^\n]*\n")


def drop_answer_wait(ptx: str, marker: str) -> str:
    """The role reads the answer without waiting on clc_full."""
    lo, hi = role_span(ptx, marker)
    m = re.search(_CLC_WAIT, ptx[lo:hi])
    return ptx[:lo + m.start()] + ptx[lo + m.end():]


def flip_answer_phase(ptx: str, marker: str) -> str:
    """The role waits for the other parity of clc_full (inside the spin loop: flipped and restored)."""
    lo, hi = role_span(ptx, marker)
    m = re.search(_CLC_WAIT, ptx[lo:hi])
    parity = m.group(3)
    flip = f"\txor.b32 {parity}, {parity}, 1;\n"
    text = m.group(0).replace("\t@!", flip + "\t@!", 1)
    return ptx[:lo + m.start()] + flip + text + ptx[lo + m.end():]


def substitute(ptx: str, marker: str, pattern: str, repl: str) -> str:
    lo, hi = role_span(ptx, marker)
    part = re.sub(pattern, repl, ptx[lo:hi], count=1)
    assert part != ptx[lo:hi], pattern
    return ptx[:lo] + part + ptx[hi:]


BUGS = {
    "epilogue does not wait for the answer": (lambda p: drop_answer_wait(p, "---- epilogue"), "has not finished writing"),
    "producer does not wait for the answer": (lambda p: drop_answer_wait(p, "---- TMA producer"),
                                              "has not finished writing"),
    "epilogue flips the answer's phase": (lambda p: flip_answer_phase(p, "---- epilogue"), None),
    "scheduler flips the answer's phase": (lambda p: flip_answer_phase(p, "---- tile scheduler"), None),
    "scheduler asks again after a failure": (
        lambda p: substitute(p, "---- tile scheduler", r"@%p\d+ (bra\.uni \$L_sched_request)", r"\1"),
        "already observed a failed answer"),
    "ctaid of a failed answer": (
        lambda p: substitute(p, "---- epilogue", r"@%p\d+ (clusterlaunchcontrol\.query_cancel\.get_first_ctaid)",
                             r"\1"), "of a failed answer"),
    "MMA warp drops its release": (
        lambda p: substitute(p, "---- MMA issuer", r"\t@%p\d+ mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];\n"
                                                   r"(?=\tadd\.u32 %r\d+, %r\d+, 1;\n\tsetp\.eq\.u32 %p\d+, %r\d+, 2;)",
                             ""), "deadlock"),
}


def first_failure(result, broken: str) -> str | None:
    """How the emulator rejects the broken clc PTX (test_tcgen05_ws_kernel's policies) at 4 tiles, or None."""
    return ws_first_failure(result, broken, shape=(256, 128, 32))


def test_producer_skipping_the_answer_wait_fails(single):
    """The default run's seeded bug: the TMA warp decodes an answer whose try_cancel is still in flight."""
    broken, message = BUGS["producer does not wait for the answer"]
    failed = first_failure(single, broken(single.ptx))
    assert failed is not None and message in failed, failed


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_fails_the_emulator(single, bug):
    mutate, message = BUGS[bug]
    broken = mutate(single.ptx)
    assert broken != single.ptx
    failed = first_failure(single, broken)
    assert failed is not None, f"seeded bug '{bug}' went unnoticed"
    if message is not None:
        assert message in failed, failed


@pytest.mark.slow
@pytest.mark.parametrize("example", ["tcgen05_gemm_ws_f16", "tcgen05_gemm_a_tmem_f16", "tcgen05_gemm_sparse_f16",
                                     "tcgen05_gemm_mxf8f6f4"])
def test_clc_composes_with_every_ws_variant(example, ptxas):
    """The scheduled examples (.ws M = 64, A in TMEM, sparse with META, block-scaled with SFA / SFB) with
    `persistent=clc` added: they assemble, and 2 x 2 tiles on 2 resident CTAs match numpy."""
    text = open(f"examples/{example}.tile").read()
    text = re.sub(r"^(\s*schedule [^;]*);", r"\1 persistent=clc;", text, flags=re.M)
    result = compiler.compile_source(text)
    assert assemble(result.ptx, "sm_100a", ptxas).ok
    abi = next(iter(result.to_json()["tiles"].values()))["kernel"]
    assert abi["persistent"] == "clc"
    em = compiler.emulate(result, shape=(2 * abi["tile_m"], 2 * abi["tile_n"], abi["tile_k"]), mode="adversarial",
                          seed=1)
    assert em.ok, f"{em.mismatches} elements differ"
    assert (em.stats["launched"], em.stats["clc_canceled"]) == (2, 2)
