"""Every row of compiler/isa/verify_rules.py VERIFY_RULES (the rules the README's support matrix lists
under "Rules verify enforces") is checked against verify itself: a tile that breaks the row's rule must
fail to compile with the row's diagnostic (issue 15 item 8)."""
from __future__ import annotations

import pytest

from compiler.diagnostics import CompileError
from compiler.driver import compile_source
from compiler.isa.verify_rules import VERIFY_RULES


def tc(engine="", a="A: bf16 smem;", b="B: bf16 smem;", d="D: f32 tmem;", shape="M=128 N=64 K=16", extra="", target="sm_100a", kind=""):
    return (f"target {target};\ntile t {{\n  engine tcgen05{(' ' + engine) if engine else ''};\n  shape {shape};\n"
            f"  {a}\n  {b}\n  {d}\n{extra}}}\n")

def sp(extra="", shape="M=16 N=8 K=32", cd="C: f32 global; D: f32 global;", target="sm_80", ab="A: f16 global; B: f16 global;", sparsity="sparsity 2:4 metadata=runtime;"):
    return (f"target {target};\ntile t {{\n  engine mma.sp;\n  shape {shape};\n  {ab} {cd}\n  {sparsity}\n{extra}}}\n")

# One tile per rule, breaking that rule and no other (the tile is otherwise the valid bf16 / f16 example).
PROBES = {
    "ashift_ws": tc("ws ashift", a="A: bf16 tmem;"),
    "ashift_a_tmem": tc("ashift"),
    "ashift_collector": tc("ashift collector=a::use", a="A: bf16 tmem;"),
    "ashift_m": tc("ashift", a="A: bf16 tmem;", shape="M=64 N=64 K=16"),
    "collector_a_ws": tc("ws collector=a::fill", shape="M=64 N=64 K=16"),
    "collector_b_non_ws": tc("collector=b0::fill"),
    "dol_ws": tc("ws", shape="M=64 N=64 K=16", extra="  disable_output_lane [0, 0, 0, 0];\n"),
    "dol_count": tc(extra="  disable_output_lane [0, 0];\n"),
    "sid_kind": tc("kind=i8", a="A: s8 smem;", b="B: s8 smem;", d="D: s32 tmem;", shape="M=128 N=64 K=32", extra="  scale_input_d 1;\n"),
    "sid_ws": tc("ws", shape="M=64 N=64 K=16", extra="  scale_input_d 1;\n"),
    "sid_range": tc(extra="  scale_input_d 16;\n"),
    "zcm_ws": tc(extra="  zero_columns cols=[0..3];\n"),
    "a_tmem_mn": tc(a="A: bf16 tmem major=MN;"),
    "a_tmem_swizzle": tc(a="A: bf16 tmem swizzle=128B;"),
    "block_scale_vector": tc("kind=mxf8f6f4", a="A: e4m3 smem;", b="B: e4m3 smem;", shape="M=128 N=64 K=32"),
    "base32b": tc(a="A: bf16 smem major=MN swizzle=128B_base32B;"),
    "subbyte_k_major": tc("kind=f8f6f4", a="A: e2m1 smem major=MN;", b="B: e2m1 smem;", shape="M=128 N=64 K=32"),
    "table50_n": tc("kind=f8f6f4", a="A: e4m3 smem;", b="B: e4m3 smem major=MN swizzle=128B;", shape="M=128 N=8 K=32"),
    "loop_k_multiple": tc(extra="  loop K=24;\n"),
    "schedule_tcgen05": tc(extra="  schedule cta=128x128x16 stages=2;\n"),
    "schedule_stages": sp("  schedule cta=64x64x64 warps=2x2 stages=17;\n"),
    "schedule_cluster": sp("  schedule cta=64x64x64 warps=2x2 stages=3 cluster=2;\n"),
    "wgmma_sm90a": sp("  schedule cta=64x64x64 warps=4x1 stages=3 mma=wgmma;\n"),
    "register_budget": sp("  schedule cta=256x256x64 warps=1x1 stages=1;\n"),
}
# block-scaled and K = 96 probes
PROBES.update({
    "ashift_block_scale": tc("kind=mxf8f6f4 ashift", a="A: e4m3 tmem;", b="B: e4m3 smem;", shape="M=128 N=64 K=32", extra="  SFA: ue8m0 tmem;\n  SFB: ue8m0 tmem;\n  block_scale vec=32;\n"),
    "dol_block_scale": tc("kind=mxf8f6f4", a="A: e4m3 smem;", b="B: e4m3 smem;", shape="M=128 N=64 K=32", extra="  SFA: ue8m0 tmem;\n  SFB: ue8m0 tmem;\n  block_scale vec=32;\n  disable_output_lane [0, 0, 0, 0];\n"),
    "block_scale_sf_same": tc("kind=mxf4nvf4", a="A: e2m1 smem;", b="B: e2m1 smem;", shape="M=128 N=64 K=64", extra="  SFA: ue4m3 tmem;\n  SFB: ue8m0 tmem;\n  block_scale vec=16;\n"),
    "k96_block": tc("kind=mxf4nvf4 cta_group=2", a="A: e2m1 smem;", b="B: e2m1 smem;", shape="M=256 N=64 K=96", target="sm_103a", extra="  loop K=768;\n  SFA: ue4m3 tmem;\n  SFB: ue4m3 tmem;\n  block_scale vec=4X;\n"),
    "pipelined_cta_k": sp("  schedule cta=64x64x96 warps=2x2 stages=3;\n"),
})

# loop K = 400 = 25 x 16 does not halve into instruction-K multiples: one stage of 400 x (128 + 256) rows x
# 2 B (bf16) = 307200 B > 96 x 1024 = 98304 B
PROBES["schedule_ws_collector"] = tc(engine="ws collector=b0::fill", shape="M=64 N=128 K=16",
                                     extra="  schedule cta=64x128x64 stages=2;\n")
PROBES["schedule_ws_zero_shift"] = tc(engine="ws", shape="M=64 N=128 K=16",
                                      extra="  zero_columns cols=[0..7] shift=2;\n  schedule cta=64x128x64 stages=2;\n")
PROBES["schedule_a_tmem_rows"] = tc(engine="ws", shape="M=64 N=128 K=16", a="A: f16 tmem;", b="B: f16 smem;",
                                    extra="  schedule cta=64x128x64 stages=2;\n")
PROBES["schedule_a_tmem_bytes"] = tc(engine="kind=f8f6f4", shape="M=128 N=128 K=32", a="A: e2m1 tmem;",
                                     b="B: e2m1 smem;", extra="  schedule cta=128x128x128 stages=2;\n")
PROBES["k_stage_smem"] = tc(shape="M=128 N=256 K=16", extra="  loop K=400;\n")
PROBES["mma_budget"] = sp("  schedule cta=1048576x256x64 warps=2x4 stages=3;\n", cd="C: f16 global; D: f16 global;")
PROBES["schedule_cta_multiple"] = sp("  schedule cta=48x64x64 warps=2x2 stages=1;\n")


def test_every_rule_has_a_probe():
    assert sorted(PROBES) == sorted(r.id for r in VERIFY_RULES)
    assert len({r.id for r in VERIFY_RULES}) == len(VERIFY_RULES)


@pytest.mark.parametrize("rule", VERIFY_RULES, ids=lambda r: r.id)
def test_verify_enforces_the_rule(rule):
    with pytest.raises(CompileError) as e:
        compile_source(PROBES[rule.id], "t.tile")
    d = e.value.diagnostics[0]
    assert d.message.startswith(rule.message), d.message
    assert d.loc is not None           # located on the offending statement


def test_support_matrix_lists_every_rule():
    from compiler.support_matrix import render

    out = render()
    for r in VERIFY_RULES:
        assert f"| {r.engine} | {r.rule} | {r.source} |" in out
