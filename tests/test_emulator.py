"""The CPU emulator (compiler/emulator/): its one PTX parser, the warp machine's scheduler and protocol
checks, mma.sp for every form, and `compiler.emulate` on every engine.

Each run builds inputs with few significant bits, so a correct kernel matches the numpy reference bit for
bit; the kernel-specific tests (tests/test_sparse_gemm_kernel.py, test_sparse_wgmma_kernel.py,
test_tcgen05_all_forms.py, test_tcgen05_k96.py) check the emulator catches broken kernels.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import compile_file, compile_source
from compiler.emulator import EmulationError, FlatMemory, WarpMachine, parse_kernel, parse_module
from compiler.emulator.warp import Deadlock

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))


# --------------------------------------------------------------------------------------------------
# the parser

@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_parser_reads_every_example_kernel(path):
    """Every statement of every kernel is an instruction, a label or a declaration the parser knows;
    branch targets exist; the parameters are the ABI's, in order."""
    result = compile_file(path)
    module = parse_module(result.ptx)
    abi = result.to_json()["tiles"]
    assert set(module.kernels) == {t["kernel"].get("entry", name) for name, t in abi.items()}
    for name, kernel in module.kernels.items():
        assert kernel.code
        for ins in kernel.code:
            assert re.fullmatch(r"[a-z][\w.:]*", ins.op), ins.text
            if ins.op.startswith("bra"):
                assert ins.args[0] in kernel.labels, ins.text
        params = abi[name]["kernel"]["params"]
        assert [p for p, _ in kernel.params] == [p.get("ptx_param", f"{name}_param_{p['name']}") for p in params]


def test_parser_keeps_operands_whole_and_lines():
    text = """.version 8.5
.target sm_90a
.address_size 64
.extern .shared .align 128 .b8 k_smem[];
.visible .entry k(
    .param .u64 k_d
)
.reqntid 64, 1, 1
{
    .reg .u32 %r<4>;
    mov.u32 %r1, %tid.x;   // a comment, with, commas
L1:
    @!%p0 st.shared.v2.b32 [%r1+8], {%r2, %r3};
    ret;
}
"""
    k = parse_kernel(text)
    assert k.reqntid == (64, 1, 1) and k.shared[0].extern and k.shared[0].name == "k_smem"
    st = k.code[1]
    assert (st.pred, st.negate, st.op, st.args) == ("%p0", True, "st.shared.v2.b32", ("[%r1+8]", "{%r2, %r3}"))
    assert st.line == 13 and k.labels == {"L1": 1}
    with pytest.raises(EmulationError, match="line 12"):
        parse_kernel(text.replace("L1:", ".pragma \"nounroll\""))
    with pytest.raises(EmulationError, match="no .entry nope"):
        parse_module(text).kernel("nope")


# --------------------------------------------------------------------------------------------------
# the warp machine: scheduling and protocol checks

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
    setp.lt.u32 %p1, %r0, 32;
    @%p1 bra.uni WAIT;
    mbarrier.arrive.shared::cta.b64 %rd1, [%r1];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 0;
    @!%p1 bra.uni WAIT;
    ld.param.u64 %rd0, [w_d];
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd1, %r2, 4;
    add.u64 %rd0, %rd0, %rd1;
    st.global.b32 [%rd0], %r2;
    ret;
}
"""


def _run_wait(arrivals: int, order: str = "forward", seed: int = 0) -> np.ndarray:
    mem = FlatMemory()
    d = mem.add("d", np.zeros(64, np.uint32), writable=True)
    m = WarpMachine(parse_kernel(_WAIT.replace("ARRIVALS", str(arrivals))), mem, {"w_d": d}, (1, 1), 64,
                    order=order, rng=seed)
    m.run()
    return mem.array("d").view(np.uint32)


@pytest.mark.parametrize("order,seed", [("forward", 0), ("reverse", 0), ("random", 1), ("random", 2)])
def test_waiters_run_after_the_phase_completes_in_every_order(order, seed):
    """Warp 0 spins on an mbarrier that warp 1's 32 threads complete (9.7.13.15 phase/parity): whatever
    order the scheduler visits the warps in, both finish and store their thread ids."""
    np.testing.assert_array_equal(_run_wait(32, order, seed), np.arange(64))


def test_a_phase_that_never_completes_is_a_deadlock():
    with pytest.raises(Deadlock, match="deadlock"):
        _run_wait(33)


def test_an_uninitialised_mbarrier_fails():
    global _WAIT
    saved = _WAIT
    try:
        _WAIT = _WAIT.replace("    @%p0 mbarrier.init.shared::cta.b64 [%r1], ARRIVALS;\n", "")
        with pytest.raises(EmulationError, match="not initialised"):
            _run_wait(32)
    finally:
        _WAIT = saved


def test_random_order_is_seeded():
    """The random scheduler draws its warp order from the machine's generator: equal seeds, equal runs."""
    result = compile_file(ROOT / "examples" / "sparse_gemm_f16.tile")
    a = compiler.emulate(result, shape=(128, 256, 128), seed=4, order="random", mode="lazy")
    b = compiler.emulate(result, shape=(128, 256, 128), seed=4, order="random", mode="lazy")
    assert a.ok and b.ok and a.stats == b.stats
    np.testing.assert_array_equal(a.d, b.d)


def test_global_memory_permissions():
    mem = FlatMemory()
    a = mem.add("a", np.arange(4, dtype=np.uint32))
    t = mem.add("t", np.zeros(4, np.uint32), loadable=False)
    mem.add("d", np.zeros(4, np.uint32), writable=True)
    assert mem.read_bytes(a + 4, 4).view(np.uint32)[0] == 1
    with pytest.raises(EmulationError, match="outside every loadable"):
        mem.read_bytes(t, 4)                              # only the TMA engine reads it
    assert mem.read_bytes(t, 4, "t").size == 4
    with pytest.raises(EmulationError, match="writable"):
        mem.write_bytes(a, np.zeros(4, np.uint8))
    with pytest.raises(EmulationError):
        mem.read_bytes(a + 16, 4)                         # the gap after a buffer


# --------------------------------------------------------------------------------------------------
# mma.sp: every form through the one-instruction-tile kernel

def _forms():
    from compiler.isa.mma_sp.forms import all_forms
    from compiler.isa.targets import MAX_PTX

    return [f for f in all_forms() if f.min_ptx <= MAX_PTX]


def test_every_mma_sp_form_and_selector_computes_d():
    """compiler/ptx/mma_sp_kernel.py for every form the table allows (f16 / f32 / s32 accumulators, 2:4,
    1:2, 4:8, 8- and 4-bit types, f8f6f4 containers, block-scaled kinds with unit scales) and every legal
    sparsity selector, on a 2 x 2 grid of tiles over two K steps."""
    from compiler.emulator.sparse_host import run_sparse_gemm
    from compiler.ptx.mma_sp_kernel import MmaSpKernelConfig, emit_mma_sp_kernel

    failures, runs = [], 0
    for i, form in enumerate(_forms()):
        target = form.row.target_rule.targets()[0]
        for sel in form.selectors:
            kern = emit_mma_sp_kernel(MmaSpKernelConfig("k", form, target, selector=sel))
            m, n, k = 32, 16, 2 * form.k
            grid = (n // kern.abi["tile_n"], m // kern.abi["tile_m"])
            d, ref, stats = run_sparse_gemm(kern.text, "k", form, grid, kern.abi["block"][0], 0, m, n, k,
                                            form.d_type, True, seed=i)
            runs += 1
            assert stats["mma"] == 4 * 2
            if not np.array_equal(np.ascontiguousarray(d).view(np.uint8), np.ascontiguousarray(ref).view(np.uint8)):
                failures.append(f"{form.name} selector {sel}")
    assert not failures, failures
    assert runs >= 150


def test_static_metadata_tile():
    """Static metadata: A is drawn sparse the way the kernel's embedded .const table says."""
    text = ("target sm_80;\ntile t {\n  engine mma.sp;\n  shape M=16 N=8 K=32;\n  A: f16 global;\n  B: f16 global;\n"
            "  C: f32 global;\n  D: f32 global;\n  sparsity 2:4 metadata=static pattern=rotate;\n}\n")
    e = compiler.emulate(compile_source(text), shape=(64, 16, 128))
    assert e.kernel == "mma_sp" and e.ok


# --------------------------------------------------------------------------------------------------
# compiler.emulate on every example (every engine)

# slow: tcgen05_k96's 256 x 256 x 1536 problem; the cluster-launch-control example (its default run is
# tests/test_tcgen05_clc.py's small one); the sparse NVFP4 example (this same default problem runs by default as
# `tilec run --emulate` in tests/test_run_cli.py, a small adversarial one in tests/test_tcgen05_ws_kernel.py)
SLOW_EXAMPLES = ("tcgen05_k96", "tcgen05_gemm_f16_clc", "tcgen05_gemm_sparse_mxf4nvf4")


@pytest.mark.parametrize("path", [p if p.stem not in SLOW_EXAMPLES else pytest.param(p, marks=pytest.mark.slow)
                                  for p in EXAMPLES], ids=lambda p: p.stem)
def test_emulate_every_example(path):
    result = compile_file(path)
    e = compiler.emulate(result)
    assert e.ok, f"{e.mismatches} elements differ"
    assert e.d.shape == e.shape[:2]
    engine = result.tiles[e.tile].attrs["engine"]
    assert e.engine == engine


def test_emulate_every_tile_of_a_module_of_several():
    # each tile of a multi-tile file declares its own `.extern .shared` window after the previous entry's
    # body; all of them name the one dynamic window of whichever kernel runs (PTX 5.1.5 module scope)
    result = compile_file(ROOT / "examples" / "sparse_wgmma_decode.tile")
    assert len(result.tiles) > 2
    for tile in list(result.tiles)[1:]:
        e = compiler.emulate(result, tile, shape=(72, 40, 200), seed=3)
        assert e.tile == tile and e.ok, (tile, e.mismatches)


@pytest.mark.parametrize("name,shape,order,mode", [
    ("sparse_gemm_f16", (256, 512, 192), "random", "lazy"),
    ("sparse_wgmma_f16", (256, 512, 128), "random", "lazy"),
    ("sparse_wgmma_f16", (256, 256, 192), "reverse", "late_mma"),
    ("sparse_f16", (48, 24, 96), "random", "eager"),
    ("gemm_bf16", (256, 512, 64), "forward", "eager"),
])
def test_emulate_larger_problems_and_schedules(name, shape, order, mode):
    e = compiler.emulate(compile_file(ROOT / "examples" / f"{name}.tile"), shape=shape, seed=2, order=order,
                         mode=mode)
    assert e.shape == shape and e.ok


def test_emulate_rejects_shapes_the_kernel_cannot_take():
    tc = compile_file(ROOT / "examples" / "gemm_f16.tile")
    with pytest.raises(EmulationError, match="multiples of 128 x 128"):
        compiler.emulate(tc, shape=(100, 128, 128))
    with pytest.raises(EmulationError, match="loop K = 128"):
        compiler.emulate(tc, shape=(128, 128, 256))
    sp = compile_file(ROOT / "examples" / "sparse_gemm_f16.tile")        # any M, N, K >= 1 (issue 17)
    with pytest.raises(EmulationError, match="each must be at least 1"):
        compiler.emulate(sp, shape=(128, 0, 96))
    scaled = compile_file(ROOT / "examples" / "sparse_gemm_nvf4.tile")   # block-scaled: whole tiles
    with pytest.raises(EmulationError, match="needs multiples of"):
        compiler.emulate(scaled, shape=(1, 1, 1))
    with pytest.raises(EmulationError, match="no tile 'x'"):
        compiler.emulate(sp, "x")


def test_emulate_is_not_vacuous():
    """A kernel that stores one wrong value is reported: the reference is independent of the kernel."""
    result = compile_file(ROOT / "examples" / "sparse_f16.tile")
    good = compiler.emulate(result)
    broken = result.ptx.replace("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
                                "{%acc0, %acc1, %acc2, %acc3}", "mma.sp::ordered_metadata.sync.aligned.m16n8k32"
                                ".row.col.f32.f16.f16.f32 {%acc1, %acc0, %acc2, %acc3}", 1)
    assert broken != result.ptx
    bad = compiler.emulate(result, ptx=broken)
    assert good.ok and not bad.ok and bad.mismatches > 0
