"""Block-scaled warp-level mma.sp (PTX ISA 9.7.14.3 "Block Scaling for mma.sync", 9.7.14.6.3):
the facts of compiler/isa/mma_sp/block_scale.py against ptxas and against closed forms, the kernel's
SFA/SFB operands through the emulator against a numpy reference with random non-unit scales, and the DSL's
diagnostics.
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import CompileError, SpecError
from compiler.isa.mma_sp.block_scale import (BYTE_ID, SCALE_VECTOR, THREAD_ID_A, THREAD_ID_B, block_elements,
                                             check_selectors, decode_scale, scale_a_lane, scale_b_lane)
from compiler.isa.mma_sp.forms import BLOCK_SCALES, find_form
from compiler.isa.targets import MAX_PTX

_FORMS = {  # kind -> (shape, A/B type)
    "mxf8f6f4": ("m16n8k64", "e4m3"), "mxf4": ("m16n8k128", "e2m1"), "mxf4nvf4": ("m16n8k128", "e2m1")}
EXPRESSIBLE = [s for s in BLOCK_SCALES if s.min_ptx <= MAX_PTX]


def _tile(kind: str, vec: str, stype: str, target: str = "sm_120a", loop: int = 2, extra: str = "") -> str:
    shape, ab = _FORMS[kind]
    k = int(shape.split("k")[1])
    return (f"target {target};\ntile mx {{\n  engine mma.sp kind={kind};\n  shape M=16 N=8 K={k};\n"
            f"  loop K={loop * k};\n  A: {ab} global;\n  B: {ab} global;\n  C: f32 global;\n  D: f32 global;\n"
            f"  SFA: {stype} global;\n  SFB: {stype} global;\n  block_scale vec={vec};\n"
            f"  sparsity {'2:4' if kind == 'mxf8f6f4' else '4:8'};\n{extra}}}\n")


# -- facts ----------------------------------------------------------------------------------------------

def test_block_sizes_follow_table_35():
    # Table 35: scale_A is M x 1 / M x 2 / M x 4 for 1X / 2X / 4X, so a block is K / vector elements of a row
    assert block_elements(64, "1X") == 64           # m16n8k64 mxf8f6f4: one scale for the whole K = 64
    assert block_elements(128, "2X") == 64          # m16n8k128 mxf4 / mxf4nvf4 2X: 128 / 2
    assert block_elements(128, "4X") == 32          # m16n8k128 mxf4nvf4 4X: 128 / 4
    assert SCALE_VECTOR == {"1X": 1, "2X": 2, "4X": 4}


def test_scale_lanes_match_the_cutlass_sm120_layouts():
    """thread-id 0: CUTLASS SFALayout ((2,2,8):(8,0,1)) maps lane t0 + 2 t1 + 4 t2 to row 8 t0 + t2 (t1 a
    broadcast), SFBLayout ((4,8):(0,1)) lane t0 + 4 t1 to column t1; thread-id picks the lane pair / lane."""
    for row in range(16):
        lane = scale_a_lane(row, 0)
        assert lane % 4 in (0, 1) and 8 * (lane % 2) + lane // 4 == row
        assert scale_a_lane(row, 1) == lane + 2
    assert sorted(scale_a_lane(r, t) for r in range(16) for t in THREAD_ID_A) == list(range(32))
    for col in range(8):
        assert [scale_b_lane(col, t) for t in THREAD_ID_B] == [4 * col + t for t in range(4)]


def test_scale_decoding():
    # ue8m0: 2^(e - 127); ue4m3: unsigned e4m3, bias 7 (0x38 = 2^0 * 1.0, 0x3C = 1.5, 0x01 = 2^-6 / 8)
    assert decode_scale(0x7F, "ue8m0") == 1.0 and decode_scale(0x80, "ue8m0") == 2.0
    assert decode_scale(0x00, "ue8m0") == 2.0 ** -127 and np.isnan(decode_scale(0xFF, "ue8m0"))
    assert decode_scale(0x38, "ue4m3") == 1.0 and decode_scale(0x3C, "ue4m3") == 1.5
    assert decode_scale(0x01, "ue4m3") == 2.0 ** -9 and decode_scale(0x7E, "ue4m3") == 448.0
    assert np.isnan(decode_scale(0x7F, "ue4m3"))


def _selector_ptx(bs, sels) -> str:
    shape, ab = _FORMS[bs.kind]
    lines = [".version 8.7", ".target sm_120a", ".address_size 64"]
    for i, (ba, ta, bb, tb) in enumerate(sels):
        lines += [f".visible .entry k{i}()", "{", ".reg .b32 %r<11>;", ".reg .f32 %f<8>;",
                  f"mma.sp::ordered_metadata.sync.aligned.{shape}.row.col.kind::{bs.kind}.block_scale."
                  f"scale_vec::{bs.scale_vec}.f32.{ab}.{ab}.f32.{bs.scale_type} {{%f0, %f1, %f2, %f3}}, "
                  "{%r0, %r1, %r2, %r3}, {%r4, %r5, %r6, %r7}, {%f4, %f5, %f6, %f7}, %r8, 0, "
                  f"%r9, {{{ba}, {ta}}}, %r10, {{{bb}, {tb}}};", "ret;", "}"]
    return "\n".join(lines) + "\n"


def _assembles(ptxas: str, text: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(text)
        r = subprocess.run([ptxas, "-arch=sm_120a", str(src), "-o", str(Path(d) / "k.o")],
                           capture_output=True, text=True)
        return r.returncode == 0, r.stderr


@pytest.mark.parametrize("bs", EXPRESSIBLE, ids=lambda s: f"{s.kind}-{s.scale_vec}-{s.scale_type}")
def test_selector_ranges_agree_with_ptxas(ptxas, bs):
    """Every selector tuple the table allows assembles in one module; each single value outside it is
    rejected by check_selectors and by ptxas."""
    legal = [(ba, ta, bb, tb) for ba in BYTE_ID[bs.scale_vec] for ta in THREAD_ID_A
             for bb in BYTE_ID[bs.scale_vec] for tb in THREAD_ID_B]
    ok, out = _assembles(ptxas, _selector_ptx(bs, legal))
    assert ok, out
    for pos, legal_values in enumerate((BYTE_ID[bs.scale_vec], THREAD_ID_A, BYTE_ID[bs.scale_vec], THREAD_ID_B)):
        for bad in range(5):
            if bad in legal_values:
                continue
            sel = [0, 0, 0, 0]
            sel[pos] = bad
            with pytest.raises(SpecError):
                check_selectors(bs.scale_vec, *sel)
            ok, out = _assembles(ptxas, _selector_ptx(bs, [tuple(sel)]))
            assert not ok, (bs, sel)


# -- kernels: assembled on every allowed target, emulated against numpy ------------------------------------

@pytest.mark.parametrize("bs", EXPRESSIBLE, ids=lambda s: f"{s.kind}-{s.scale_vec}-{s.scale_type}")
def test_kernel_assembles_on_every_allowed_target(ptxas, bs):
    from compiler.driver import compile_source

    shape, ab = _FORMS[bs.kind]
    form = find_form(shape, ab, ab, "f32", "f32", bs.kind, scale_vec=bs.scale_vec, scale_type=bs.scale_type)
    targets = form.row.target_rule.targets()
    assert set(targets) >= {"sm_120a", "sm_121a"} and (bs.kind != "mxf8f6f4" or "sm_120f" in targets)
    for target in targets:
        ptx = compile_source(_tile(bs.kind, bs.scale_vec, bs.scale_type, target), "mx.tile").ptx
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "k.ptx"
            src.write_text(ptx)
            r = subprocess.run([ptxas, f"-arch={target}", str(src), "-o", str(Path(d) / "k.o")],
                               capture_output=True, text=True)
        assert r.returncode == 0, f"{target}: {r.stderr}"


@pytest.mark.parametrize("bs", EXPRESSIBLE, ids=lambda s: f"{s.kind}-{s.scale_vec}-{s.scale_type}")
def test_emulated_kernel_applies_random_scales(bs):
    """The emitted kernel on the warp machine equals D = sum_k (a * sfa[row, k / blk]) (b * sfb[col, k / blk])
    + C, written here with numpy from the logical operands, for random non-unit scales; and the scales
    matter (the unscaled product differs)."""
    from compiler.driver import compile_source
    from compiler.emulator import sparse_host
    from compiler.emulator.api import emulate

    r = compile_source(_tile(bs.kind, bs.scale_vec, bs.scale_type), "mx.tile")
    shape, ab = _FORMS[bs.kind]
    k_step = int(shape.split("k")[1])
    captured = {}
    real = sparse_host.sparse_problem

    def spy(*args, **kw):
        captured["p"] = p = real(*args, **kw)
        return p

    sparse_host.sparse_problem = spy
    try:
        em = emulate(r, "mx", shape=(32, 16, 3 * k_step), seed=7)
    finally:
        sparse_host.sparse_problem = real
    p = captured["p"]
    blk = k_step // SCALE_VECTOR[bs.scale_vec]
    assert p.sfa.shape == (32, 3 * k_step // blk) and p.sfb.shape == (16, 3 * k_step // blk)
    assert len(np.unique(p.sfa)) > 1                 # non-unit, varying scales
    table = np.array([decode_scale(x, bs.scale_type) for x in range(256)])
    sa, sb = table[p.sfa], table[p.sfb]
    ref = np.zeros((32, 16))
    for kk in range(3 * k_step):
        ref += np.outer(p.a[:, kk].astype(np.float64) * sa[:, kk // blk],
                        p.b[kk, :].astype(np.float64) * sb[:, kk // blk])
    ref = (ref + p.c.astype(np.float64)).astype(np.float32)
    assert em.d.dtype == np.float32 and np.array_equal(em.d, ref)
    unscaled = (p.a.astype(np.float64) @ p.b.astype(np.float64) + p.c).astype(np.float32)
    assert not np.array_equal(unscaled, ref)


# -- DSL ------------------------------------------------------------------------------------------------

def _error(text: str) -> str:
    from compiler.driver import compile_source

    with pytest.raises(CompileError) as e:
        compile_source(text, "mx.tile")
    return str(e.value)


def test_dsl_requires_both_scale_operands_and_a_spelled_4x():
    text = _tile("mxf4nvf4", "4X", "ue4m3").replace("  SFB: ue4m3 global;\n", "")
    assert "needs operand SFB" in _error(text) and "32 K" in _error(text)          # 128 / 4X
    text = _tile("mxf4nvf4", "4X", "ue4m3").replace("  block_scale vec=4X;\n", "")
    assert "scale vector size spelled" in _error(text)
    # mxf8f6f4 and mxf4 may leave the vector size out (PTX: `.block_scale{.scale_vec_size}`): 1X / 2X
    from compiler.driver import compile_source

    for kind, vec in (("mxf8f6f4", "1X"), ("mxf4", "2X")):
        ptx = compile_source(_tile(kind, vec, "ue8m0").replace(f"  block_scale vec={vec};\n", ""), "mx.tile").ptx
        assert f".block_scale.scale_vec::{vec}." in ptx
