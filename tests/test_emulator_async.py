"""The emulator's asynchronous model (compiler/emulator/warp.py POLICIES, tcgen05.py `_issue_mma`) and its
protocol checks, on the generated kernels that use asynchronous machinery:

* the TMA + mbarrier ring + wgmma.sp kernel (examples/sparse_wgmma_f16.tile; a CTA pair, 4-stage ring);
* the pipelined cp.async + ldmatrix + mma.sp kernel (examples/sparse_gemm_f16.tile);
* the tcgen05 kernel (examples/gemm_f16.tile: tcgen05.mma, tcgen05.commit to an mbarrier, tcgen05.ld).

Under the "adversarial" policy every asynchronous operation (TMA copies and their mbarrier tx bytes,
cp.async groups, wgmma groups, tcgen05.mma and commit) completes as late as the kernel lets it (only when
no warp can move), and warps interleave 1-8 instructions at a time in a seeded order; "random" completes
operations at random points. Correct kernels still give the numpy result under several seeds; a kernel
with one protocol bug seeded into its PTX (a wait dropped, an arrive dropped, a phase bit flipped, a
wait_group moved, a TMEM allocation too large, shared memory over the target's limit) fails with the
error that names it. Problems are small: each run takes well under a second or two on this machine.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import compiler
from compiler import compile_file
from compiler.emulator import EmulationError
from compiler.emulator.warp import Deadlock

ROOT = Path(__file__).resolve().parent.parent
_RESULTS: dict = {}

# (example, shape): the wgmma ring wraps (K = 384 is 6 blocks of 64 through 4 stages) on a CTA pair; the
# cp.async pipeline runs 5 blocks through 3 stages; the tcgen05 kernel is one tile
CASES = {"sparse_wgmma_f16": (256, 256, 384), "sparse_gemm_f16": (128, 256, 320), "gemm_f16": (128, 128, 128)}


def _result(name: str):
    if name not in _RESULTS:
        _RESULTS[name] = compile_file(ROOT / "examples" / f"{name}.tile")
    return _RESULTS[name]


def _emulate(name: str, mode: str = "adversarial", seed: int = 0, ptx: str | None = None):
    return compiler.emulate(_result(name), shape=CASES[name], seed=seed, mode=mode, ptx=ptx)


# --------------------------------------------------------------------------------------------------
# correct kernels under adversarial schedules

@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("mode,seed", [("adversarial", 1), ("adversarial", 2), ("adversarial", 3), ("random", 4)])
def test_generated_kernels_are_right_under_adversarial_schedules(name, mode, seed):
    e = _emulate(name, mode, seed)
    assert e.ok, f"{e.mismatches} elements differ"
    assert e.stats["async"] > 0                 # operations really completed after their issue


# every tcgen05 example (one tile each; tcgen05_k96's 256 x 256 x 1536 problem is the slow one): MMAs and
# commits complete late, in issue order (2-CTA with a multicast commit, A in TMEM, block scales, sparse, .ws)
TCGEN05 = ["tcgen05_2cta", "tcgen05_a_tmem", "tcgen05_block_scaled", "tcgen05_sparse", "tcgen05_ws", "gemm_bf16"]


@pytest.mark.parametrize("name", TCGEN05 + [pytest.param("tcgen05_k96", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mode,seed", [("adversarial", 1), ("random", 2)])
def test_every_tcgen05_example_under_the_policies(name, mode, seed):
    e = compiler.emulate(_result(name), seed=seed, mode=mode)
    assert e.engine == "tcgen05" and e.ok, f"{e.mismatches} elements differ"
    assert e.stats["async"] > 0


def test_a_policy_is_deterministic_per_seed():
    a, b = _emulate("sparse_wgmma_f16", seed=7), _emulate("sparse_wgmma_f16", seed=7)
    assert a.stats == b.stats and (a.d == b.d).all()


# --------------------------------------------------------------------------------------------------
# seeded bugs in the TMA + mbarrier + wgmma ring

def _mutate(name: str, fn) -> str:
    text = _result(name).ptx
    out = fn(text)
    assert out != text, "the mutation did not apply"
    return out


def _drop_wait(label_prefix: str, which: int):
    """Delete the `which`-th try_wait spin loop whose label starts with `label_prefix` (the label stays)."""
    def fn(t: str) -> str:
        loops = list(re.finditer(rf"({label_prefix}_\d+):\n\s*mbarrier\.try_wait[^\n]*\n\s*@!%p\d+ bra(?:\.uni)? \1;\n", t))
        m = loops[which]
        return t[:m.start()] + m.group(1) + ":\n" + t[m.end():]
    return fn


def _first_error(name: str, ptx: str, seeds=range(4), mode: str = "adversarial") -> EmulationError:
    """The error the emulator raises for the mutated kernel under the first seed that shows it."""
    for seed in seeds:
        try:
            _emulate(name, mode, seed, ptx=ptx)
        except EmulationError as e:
            return e
    pytest.fail(f"no seed of {list(seeds)} caught the bug")


def test_dropped_full_barrier_wait_reads_a_stage_before_its_copy_landed():
    # the consumer's wait on the full[st] barrier (CONSUME loop) dropped: it reads the slot the TMA fills
    ptx = _mutate("sparse_wgmma_f16", _drop_wait("WAIT", 1))
    e = _first_error("sparse_wgmma_f16", ptx)
    assert re.search(r"at line \d+ \(CTA \d warp \d+\) reads shared memory .* that cp\.async\.bulk\.tensor\S* at "
                     r"line \d+ \(CTA \d warp \d+\) has not finished writing", str(e)), e


def test_flipped_consumer_phase_reads_a_stage_before_its_copy_landed():
    # the consumer waits on the other parity of full[st]: a fresh barrier counts phase -1 (parity 1) as
    # complete (PTX ISA 9.7.13.15.16), so the first wait passes at once
    def flip(t):
        return re.sub(r"(\n)(WAIT_\d+:\n\s*mbarrier\.try_wait\.parity\.shared::cta\.b64 %p2, \[%bar\], )%ph;",
                      r"\1    xor.b32 %x, %ph, 1;\n\2%x;", t, count=1)
    e = _first_error("sparse_wgmma_f16", _mutate("sparse_wgmma_f16", flip))
    assert "has not finished writing" in str(e) and "cp.async.bulk.tensor" in str(e), e


def test_flipped_producer_phase_overruns_the_ring():
    # the producer waits on parity 1 of empty[st] always: every wait passes, so it laps the ring and arrives
    # (expect_tx) on full[0] again while that barrier's phase still waits for the first copy's bytes (41984 = the
    # stage's expect_tx in the PTX: A 8192 + B 32768 + metadata 8 tiles x 2 k-steps x 64 B compact = 1024), in
    # either CTA of the pair (which one laps first is the schedule's choice)
    ptx = _mutate("sparse_wgmma_f16", lambda t: t.replace("xor.b32 %x, %ph, 1;", "mov.u32 %x, 1;", 1))
    e = _first_error("sparse_wgmma_f16", ptx)
    assert re.search(r"line \d+: more arrivals than expected on mbarrier 0x[0-9a-f]+ \(CTA (\d)\): its phase 0 already "
                     r"has all 1 arrivals and waits for 41984 tx bytes \(@%p6 mbarrier\.arrive\.expect_tx.*; CTA \1 warp \d+\)",
                     str(e)), e


def test_dropped_arrive_is_a_deadlock_naming_the_barrier():
    # one consumer arrive on empty[] (the release to CTA rank 0) dropped: that phase never completes
    ptx = _mutate("sparse_wgmma_f16", lambda t: re.sub(
        r"mapa\.shared::cluster\.u32 %y, %x, 0;\n\s*@%p5 mbarrier\.arrive\.shared::cluster\.b64 _, \[%y\];",
        "mapa.shared::cluster.u32 %y, %x, 0;", t, count=1))
    e = _first_error("sparse_wgmma_f16", ptx)
    assert isinstance(e, Deadlock), e
    assert re.search(r"CTA 0 warp \d+ at line \d+: mbarrier\.try_wait\S* waits for parity \d of the mbarrier at "
                     r"0x[0-9a-f]+ \(CTA 0\), whose phase \d+ \(parity \d\) still misses \d+ of 16 arrivals", str(e)), e


def test_release_moved_before_wait_group_refills_a_stage_still_read():
    # wgmma.wait_group 1 moved after the release of the previous slot: the producer may refill that slot
    # while the previous block's wgmma group still reads it
    def move(t):
        t = t.replace("wgmma.wait_group.sync.aligned 1;", "", 1)
        return t.replace("    mov.u32 %pn, %st;", "    wgmma.wait_group.sync.aligned 1;\n    mov.u32 %pn, %st;", 1)
    e = _first_error("sparse_wgmma_f16", _mutate("sparse_wgmma_f16", move), seeds=range(8))
    assert re.search(r"cp\.async\.bulk\.tensor\S* at line \d+ \(CTA \d warp \d+\) overwrites shared memory .* that "
                     r"wgmma\.mma_async\S* at line \d+ .* still reads: a stage refilled before its consumer released "
                     r"it", str(e)), e


def test_accumulators_read_before_the_covering_wait_group():
    # the final wgmma.wait_group 0 moved past the epilogue's first use of the accumulators
    def move(t):
        t = t.replace("    wgmma.wait_group.sync.aligned 0;\n", "", 1)
        i = t.index("bar.sync 1, 256;")
        j = t.index("%acc0", i)
        j = t.index("\n", j) + 1
        return t[:j] + "    wgmma.wait_group.sync.aligned 0;\n" + t[j:]
    e = _first_error("sparse_wgmma_f16", _mutate("sparse_wgmma_f16", move))
    assert re.search(r"line \d+: %acc\d+ accessed while its wgmma is in flight \(issued by wgmma\.mma_async\S* at line "
                     r"\d+ \(CTA \d warp \d+\); no wgmma\.wait_group retired it yet\)", str(e)), e


# --------------------------------------------------------------------------------------------------
# seeded bugs in the cp.async pipeline

def test_wait_group_one_short_reads_a_stage_before_its_cp_async_landed():
    ptx = _mutate("sparse_gemm_f16", lambda t: t.replace("cp.async.wait_group 1;", "cp.async.wait_group 2;"))
    e = _first_error("sparse_gemm_f16", ptx)
    assert re.search(r"ldmatrix\S* at line \d+ \(CTA 0 warp \d\) reads shared memory .* that cp\.async\.cg\S* at line "
                     r"\d+ \(CTA 0 warp \d\) has not finished writing", str(e)), e


# --------------------------------------------------------------------------------------------------
# seeded bugs in the tcgen05 kernel

def test_dropped_commit_wait_reads_tmem_before_the_mma_completed():
    ptx = _mutate("gemm_f16", _drop_wait(r"\$L_wait", 0))
    e = _first_error("gemm_f16", ptx)
    assert re.search(r"tcgen05\.ld reads TMEM columns \d+\.\.\d+ that tcgen05\.mma\S* at line \d+ \(CTA 0 warp 0\) has "
                     r"not finished writing", str(e)), e


def test_flipped_commit_phase_reads_tmem_before_the_mma_completed():
    # wait on parity 1 of a fresh mbarrier: phase -1 counts as complete, the wait passes at once
    def flip(t):
        m = re.search(r"mbarrier\.try_wait\.parity\.shared::cta\.b64 %p\d+, \[\w+\], (%r\d+);", t)
        reg = m.group(1)
        return re.sub(rf"mov\.u32 {re.escape(reg)}, 0;", f"mov.u32 {reg}, 1;", t, count=1)
    e = _first_error("gemm_f16", _mutate("gemm_f16", flip))
    assert "tcgen05.ld reads TMEM columns" in str(e) and "has not finished writing" in str(e), e


# sm_100f keeps the 48 KB static shared budget, so layout selection halves this tile's K stage to 64
# (A + B at K = 128: 2 x 128 x 128 x 2 B = 64 KB > 48 KB; at K = 64: 32 KB): two stages share one buffer
TWO_STAGES = """target sm_100f;

tile two_stages {
  engine tcgen05;
  shape M=128 N=128 K=16;
  loop K=128;
  A: f16 smem major=K swizzle=128B;
  B: f16 smem major=K swizzle=128B;
  D: f32 tmem;
}
"""


def test_dropped_commit_wait_overwrites_a_stage_the_mma_still_reads():
    from compiler import compile_source

    _RESULTS.setdefault("two_stages", compile_source(TWO_STAGES))
    CASES.setdefault("two_stages", (128, 128, 128))
    assert _result("two_stages").tiles["two_stages"].facts["k_block"] == 64
    assert _emulate("two_stages", "random", 1).ok
    # without the wait the second stage's copy overwrites shared memory the first stage's MMAs read; under
    # "random" an MMA completes after that copy (under "adversarial" the tcgen05.ld check fires first)
    e = _first_error("two_stages", _mutate("two_stages", _drop_wait(r"\$L_wait", 0)), mode="random")
    assert re.search(r"tcgen05\.mma\S* at line \d+ \(CTA 0 warp 0\): shared memory it reads \(CTA 0\) changed between "
                     r"its issue and its completion: a stage overwritten before the wait on its tcgen05\.commit",
                     str(e)), e


def test_dropped_commit_wait_on_a_cta_pair():
    # tcgen05_2cta: cta_group::2, the commit multicasts its arrive to both CTAs' mbarriers
    _RESULTS.setdefault("tcgen05_2cta", compile_file(ROOT / "examples" / "tcgen05_2cta.tile"))
    CASES.setdefault("tcgen05_2cta", (256, 128, 128))
    e = _first_error("tcgen05_2cta", _mutate("tcgen05_2cta", _drop_wait(r"\$L_wait", 0)))
    assert re.search(r"tcgen05\.ld reads TMEM columns \d+\.\.\d+ that tcgen05\.mma\S* at line \d+ \(CTA 0 warp 0\) has "
                     r"not finished writing", str(e)), e


def test_dropped_commit_is_a_deadlock():
    ptx = _mutate("gemm_f16", lambda t: re.sub(r"\n\s*tcgen05\.commit[^\n]*", "", t, count=1))
    e = _first_error("gemm_f16", ptx)
    assert isinstance(e, Deadlock) and "still misses 1 of 1 arrivals" in str(e), e


def test_tmem_over_allocation():
    # 128 columns allocated twice more: 384 of 512 fit, a further 256 would not
    def over(t):
        m = re.search(r"(\ttcgen05\.alloc[^\n]*?), 128;", t)
        return t[:m.end()] + "\n" + m.group(1) + ", 256;\n" + m.group(1) + ", 256;" + t[m.end():]
    e = _first_error("gemm_f16", _mutate("gemm_f16", over), mode="eager")
    assert re.search(r"TMEM over-allocation: 256 columns on top of 384 allocated exceed the 512 columns", str(e)), e


def test_shared_memory_over_the_target_limit():
    # sm_100a: 0x38c00 = 232448 B per CTA (compiler/isa/targets.STATIC_SMEM_ARCH_SPECIFIC); one more byte fails
    def grow(t):
        return t.replace("\t.shared", "\t.shared .align 16 .b8 gemm_f16_pad[232448];\n\t.shared", 1)
    e = _first_error("gemm_f16", _mutate("gemm_f16", grow), mode="eager")
    assert re.search(r"\d+ B of static shared memory: over sm_100a's limit of 232448 B", str(e)), e


# --------------------------------------------------------------------------------------------------
# the scheduler on a hand-written kernel: warps 1.. spin on an mbarrier that warp 0's 32 threads complete

_WAIT = """.version 8.5
.target sm_90a
.address_size 64
.visible .entry w(
    .param .u64 w_d
)
{
    .reg .pred %p<2>;
    .reg .u32 %r<4>;
    .reg .u64 %rd<2>;
    .shared .align 8 .b64 w_bar;
    mov.u32 %r0, %tid.x;
    setp.eq.u32 %p0, %r0, 0;
    mov.u32 %r1, w_bar;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], ARRIVALS;
    bar.sync 0;
    setp.ge.u32 %p1, %r0, 32;
    @%p1 bra.uni WAIT;
    mbarrier.arrive.shared::cta.b64 %rd1, [%r1];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 0;
    @!%p1 bra.uni WAIT;
    ld.param.u64 %rd0, [w_d];
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd0, %rd0, %rd1;
    st.global.b32 [%rd0], %r0;
    ret;
}
"""


def _run_wait(arrivals: int, policy: str, seed: int, threads: int = 128, **kw):
    import numpy as np
    from compiler.emulator import FlatMemory, WarpMachine, parse_kernel

    mem = FlatMemory()
    d = mem.add("d", np.zeros(threads, np.uint32), writable=True)
    m = WarpMachine(parse_kernel(_WAIT.replace("ARRIVALS", str(arrivals))), mem, {"w_d": d}, (1, 1), threads,
                    policy=policy, rng=seed, **kw)
    m.run()
    return mem.array("d").view(np.uint32)


@pytest.mark.parametrize("policy,seed", [("adversarial", s) for s in range(6)] + [("random", s) for s in range(3)])
def test_spinning_warps_wait_for_the_phase_under_every_interleaving(policy, seed):
    """Warps interleave a few executed instructions at a time; branches are free, so a warp spinning on
    try_wait never counts as progress, and the waiters go on once warp 0's arrivals complete the phase."""
    import numpy as np

    np.testing.assert_array_equal(_run_wait(32, policy, seed), np.arange(128))


def test_a_phase_short_of_arrivals_is_a_deadlock_under_the_policies():
    with pytest.raises(Deadlock) as info:
        _run_wait(33, "adversarial", 0)
    # 33 arrivals expected, warp 0's 32 threads arrive once each (PTX ISA 9.7.13.15: the phase needs all);
    # line 21 of _WAIT is the try_wait
    assert re.search(r"CTA 0 warp [0-3] at line 21: mbarrier\.try_wait\.parity\.shared::cta\.b64 waits for parity 0 "
                     r"of the mbarrier at 0x0 \(CTA 0\), whose phase 0 \(parity 0\) still misses 1 of 33 arrivals",
                     str(info.value)), info.value


def test_dynamic_shared_memory_over_the_target_limit():
    # sm_90a: 0x38c00 = 232448 B per CTA (compiler/isa/targets.STATIC_SMEM_ARCH_SPECIFIC); w_bar takes 8 B, so a
    # dynamic window of 232440 B fits and one more byte does not
    import numpy as np

    np.testing.assert_array_equal(_run_wait(32, None, 0, dynamic_smem=232440), np.arange(128))
    with pytest.raises(EmulationError, match=r"232449 B of shared memory \(static \+ 232441 B dynamic\) per CTA: over "
                                             r"the limit of 232448 B on sm_90a"):
        _run_wait(32, None, 0, dynamic_smem=232441)
