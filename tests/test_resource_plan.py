"""The resource plan (`resource-planning`, compiler/ptx/resource_planning.py) against what the kernels emit,
the one shared-memory check (compiler/passes/resources.py), and the analytic bound (compiler/perf_model.py):
CuTe DSL's persistent Blackwell GEMM is tensor-bound, tilec's single-stage tcgen05 kernel is not."""
from __future__ import annotations

import json
import os
import re

import pytest

from compiler import CompileError, compile_source
from compiler.cli import main
from compiler.diagnostics import SpecError
from compiler.passes.resources import check_shared_memory, ctas_per_sm
from compiler.perf_model import B200, H100_SXM, estimate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
EXAMPLES = sorted(f for f in os.listdir(EX) if f.endswith(".tile"))

_SHARED = re.compile(r"^\s*\.shared \.align \d+ \.b(\d+) \w+(?:\[(\d+)\])?;", re.M)


def _compile(name: str):
    with open(os.path.join(EX, name)) as f:
        return compile_source(f.read(), name)


@pytest.mark.parametrize("name", EXAMPLES)
def test_plan_matches_the_emitted_kernel(name):
    """Per example tile: the plan's threads are the ABI's block, its shared memory the ABI's dynamic
    bytes or, for a static kernel, the sum of the PTX's `.shared` declarations; the register budget of a
    kernel that declares `.maxnreg` is that number; CTAs per SM the ABI's where the ABI states it."""
    result = _compile(name)
    doc = result.to_json()["tiles"]
    for tile, t in doc.items():
        plan, abi = t["resources"], t["kernel"]
        assert plan["threads"] == abi["block"][0]
        assert plan["smem_bytes"] <= plan["smem_limit"]
        if plan["smem_space"] == "dynamic":
            assert plan["smem_bytes"] == abi["dynamic_smem_bytes"]
        elif plan["smem_space"] == "static":
            static = sum(int(bits) // 8 * int(n or 1) for bits, n in _SHARED.findall(result.ptx))
            assert plan["smem_bytes"] == static
            assert plan["mbarriers"] == result.ptx.count(".b64 " + tile + "_mbar;")
        else:
            assert plan["smem_bytes"] == 0 and not _SHARED.findall(result.ptx)
        # this tile's entry only (a file of several tiles is one module of several entries)
        entry = re.search(rf"^\.visible \.entry {tile}\((?:.(?!^\.visible \.entry ))*", result.ptx, re.M | re.S)
        maxnreg = re.search(r"^\.maxnreg (\d+)", entry.group(0) if entry else result.ptx, re.M)
        moved = dict(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 (\d+);", entry.group(0) if entry else ""))
        if moved:          # setmaxnreg: the producer's count .dec, the consumers' .inc, the launch's their pool
            roles = {r["name"]: r["registers"] for r in plan["roles"]}
            assert (roles["producer"], roles["consumer"]) == (int(moved["dec"]), int(moved["inc"]))
            assert plan["setmaxnreg"].startswith("1 producer warpgroup setmaxnreg.dec")
            assert sum(r["registers"] * r["warps"] * 32 for r in plan["roles"]) <= int(maxnreg.group(1)) * plan["threads"]
        elif maxnreg:
            assert {r["registers"] for r in plan["roles"]} == {int(maxnreg.group(1))}
        if "max_ctas_per_sm" in abi:
            assert plan["ctas_per_sm"] == abi["max_ctas_per_sm"]
        assert plan["tmem_columns"] == (0 if t["engine"] != "tcgen05" else
                                        int(re.search(r"tcgen05\.alloc\S* \[[%\w]+\], (\d+);", result.ptx).group(1)))
        assert sum(r["warps"] for r in plan["roles"]) * 32 == plan["threads"]


def test_ctas_per_sm_takes_the_tightest_resource():
    # sm_90a: 65536 registers / (256 threads x 128) = 2; 2048 / 256 = 8 threads; (232448 + 1024) / (100000 + 1024)
    # = 2 by shared memory; so 2. With 255 registers (allocated as 256): 65536 / (256 x 256) = 1.
    assert ctas_per_sm("sm_90a", 256, 128, 100000) == 2
    assert ctas_per_sm("sm_90a", 256, 255, 1000) == 1
    # TMEM: 512 columns / 256 per CTA = 2, tighter than 128 threads x 64 registers (8 CTAs)
    assert ctas_per_sm("sm_100a", 128, 64, 1000, tmem_columns=256) == 2
    assert ctas_per_sm("sm_90a", 128, 64, 300000) == 0


def test_one_shared_memory_check_with_the_stages_that_fit():
    # 232448 B on sm_90a; (232448 - 1024) / (86016 + 16) = 2 stages of 86016 B (+ 16 B of barriers) fit
    check_shared_memory("sm_90a", 2, 86016, 1024 + 2 * 86032, per_stage=16, fixed=1024)
    with pytest.raises(SpecError) as e:
        check_shared_memory("sm_90a", 4, 86016, 1024 + 4 * 86032, per_stage=16, fixed=1024)
    assert e.value.field == "schedule.stages" and "345152 B of shared memory exceed the 232448 B" in e.value.message
    assert e.value.hint == "at most 2 stages of this CTA tile fit"


def test_wgmma_configuration_check_is_the_same_check():
    """The wgmma kernel's own configuration check (reached by the runtime and benchmarks without the pass)
    says what the pass says, for its own target."""
    from compiler.isa.mma_sp.forms import find_form
    from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma

    cfg = SparseWgmmaConfig("k", find_form("m16n8k32", "f16", "f16", "f32", "f32"), cta_k=128, stages=4)
    # a slot of A 16384 + B 65536 + compact metadata 2048 = 83968 B (tests/lit/diagnostics/smem_over_limit.tile)
    with pytest.raises(SpecError, match=r"4 stages x 83968 B \(\+ alignment and barriers\) = 336960 B of shared "
                                        r"memory exceed the 232448 B a block may use on sm_90a"):
        emit_sparse_wgmma(cfg)


def test_pass_check_is_located_on_the_stages():
    src = ("target sm_90a;\ntile t {\n  engine mma.sp; shape M=16 N=8 K=32;\n"
           "  A: f16 global; B: f16 global; C: f32 global; D: f32 global;\n"
           "  sparsity 2:4 metadata=runtime selector=0;\n"
           "  schedule cta=128x256x128 warps=8x1 stages=4 mma=wgmma;\n}\n")
    with pytest.raises(CompileError) as e:
        compile_source(src, "t.tile", passes=["verify", "layout-selection", "sparse-metadata-packing",
                                               "descriptor-materialization", "epilogue-lowering",
                                               "warp-specialization", "kernel-selection", "resource-planning"])
    (d,) = e.value.diagnostics
    assert (d.loc.line, d.loc.col) == (6, 45) and "exceed the 232448 B" in d.message


# --------------------------------------------------------------------------------------------------
# The analytic bound

# CuTe DSL's persistent dense GEMM (../shared/reference/blackwell-gemm-anchor.md): MMA tile 256x256x64 of
# tcgen05.mma.cta_group::2.kind::f16, a CTA pair, each CTA owning 128 x 256 of D; 6 stages of 32 KiB per CTA
# (its halves: A 128 x 64 x 2 = 16 KiB, B 128 x 64 x 2 = 16 KiB); about 224 KiB of smem, so one CTA per SM;
# 192 threads; TMEM 512 columns (2 accumulators x 256); f16 C; persistent, TMA overlapped with the MMAs.
CUTE_PERSISTENT = {"kernel": "cute_dense_gemm_persistent", "threads": 192, "cluster": 2, "stages": 6,
                   "stage_bytes": 32768, "smem_bytes": 224 * 1024, "smem_limit": 232448, "smem_space": "dynamic",
                   "tmem_columns": 512, "mbarriers": 17, "ctas_per_sm": 1,
                   "roles": [{"name": "epilogue", "warps": 4, "registers": 255, "live": 32},
                             {"name": "mma", "warps": 1, "registers": 255, "live": 0},
                             {"name": "tma", "warps": 1, "registers": 255, "live": 0}],
                   "mma": "f16", "mma_k": 16, "sparse": False, "a_bits": 16, "b_bits": 16, "cta_m": 128, "cta_n": 256,
                   "k_block": 64, "tx_bytes": 32768, "d_bytes": 128 * 256 * 2, "copy": "tma", "overlap": True,
                   "persistent": True}


def test_cute_persistent_gemm_is_tensor_bound():
    """Per 64-deep K block a CTA does 2 x 128 x 256 x 64 = 4194304 FLOPs at B200's 8192 f16 FLOPs per clock
    per SM: 512 clocks; its TMA delivers 32768 B at 128 B per clock: 256 clocks. 8192^3: 64 x 32 = 2048 CTA
    tiles on 148 SMs: 14 waves (2048 / 2072 = 98.8 % of the slots); the memory term (A, B, D once: 384 MiB at
    8 TB/s = 50 us) is far below."""
    est = estimate(CUTE_PERSISTENT, "sm_100a", (8192, 8192, 8192))
    assert est.bound == "tensor"
    assert est.per_k_block == {"tensor": 512.0, "smem": 256.0}
    assert (est.tiles, est.waves) == (2048, 14)
    assert est.terms["tensor"] == pytest.approx(14 * 128 * 512 / B200.clock_hz)
    assert est.terms["memory"] == pytest.approx(3 * 8192 * 8192 * 2 / 8e12)
    # within wave quantization of the datasheet's 2.25 PFLOPS
    assert est.tflops == pytest.approx(2250 * 2048 / 2072, rel=1e-3)


def test_cute_configuration_stays_tensor_bound_at_every_size_it_fills():
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 4096), (8192, 8192, 28672)):
        assert estimate(CUTE_PERSISTENT, "sm_100a", (m, n, k)).bound == "tensor", (m, n, k)


def test_tilec_single_stage_tcgen05_is_not_tensor_bound():
    """The single-stage tcgen05 kernel (gemm_bf16.tile: 128 x 256, K block 64): its 128 threads copy 49152 B
    per K block (global loads, then st.shared: 2 x 49152 / 128 = 768 clocks), then one thread issues the
    MMAs (512 clocks), one after the other. Two CTAs share an SM (registers): per K block of each, the SM's
    data path carries 2 x 768 = 1536 clocks of copies against 2 x 512 of tensor work, and each CTA's own
    chain is 768 + 512 = 1280: at a long K it is bound by its copies, never by the tensor cores."""
    plan = _compile("gemm_bf16.tile").to_json()["tiles"]["gemm_bf16"]["resources"]
    plan = {k: v for k, v in plan.items() if k != "bound"}
    est = estimate(plan, "sm_100a", (8192, 8192, 8192))
    assert est.per_k_block == {"tensor": 512.0, "smem": 768.0}
    assert est.bound == "smem" and est.terms["smem"] == pytest.approx(1.5 * est.terms["tensor"])
    assert est.terms["latency"] > 1.25 * est.terms["tensor"]
    # its own problem (K = the loop K = 64) writes 8192^2 f32 of D for 64-deep products: DRAM-bound
    assert plan["kernel"] == "tcgen05" and _compile("gemm_bf16.tile").resources()["gemm_bf16"]["bound"]["bound"] \
        == "memory"


def test_wgmma_h100_configuration():
    """sparse_wgmma's benchmarked schedule (128x256x64, 4 stages, CTA pairs, f16 D) on the H100 SXM: sparse f16
    runs at 2 x 4096 FLOPs per clock per SM, so a 64-deep K block of 128 x 256 takes 4194304 / 8192 = 512
    clocks; the TMA fills 41984 B (A 8192 + B 32768 + compact metadata 1024) in 328. One tile per CTA, one CTA
    per SM: the D store (65536 B at the SM's share of 3.35 TB/s) follows the main loop, so the chain bounds it, a
    little above the tensor term."""
    src = ("target sm_90a;\ntile w {\n  engine mma.sp; shape M=16 N=8 K=32;\n  A: f16 global; B: f16 global; "
           "D: f16 global;\n  sparsity 2:4 metadata=runtime selector=0;\n"
           "  schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma cluster=2;\n  epilogue;\n}\n")
    plan = compile_source(src, "w.tile").resources()["w"]
    est = estimate({k: v for k, v in plan.items() if k != "bound"}, "sm_90a", (8192, 8192, 8192))
    assert est.per_k_block == {"tensor": 512.0, "smem": 328.0}
    assert (est.tiles, est.waves) == (2048, 16)
    assert est.bound == "latency"
    epilogue_s = 65536 / (3.35e12 / 132)
    assert est.terms["latency"] == pytest.approx(16 * (128 * 512 / H100_SXM.clock_hz + epilogue_s))
    assert est.terms["tensor"] < est.terms["latency"] < 1.1 * est.terms["tensor"]


def test_no_figures_no_bound():
    plan = _compile("sparse_f16.tile").resources()
    assert all(p["bound"] is None for p in plan.values())          # an sm_80 tile: no GPU figures


def test_emit_json_and_plan(capsys, tmp_path):
    path = os.path.join(EX, "sparse_wgmma_f16.tile")
    assert main(["compile", path, "--emit", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    r = doc["tiles"]["sparse_wgmma_f16"]["resources"]
    assert r["kernel"] == "sparse_wgmma" and r["bound"]["gpu"] == "H100 SXM" and r["bound"]["bound"] in \
        ("tensor", "smem", "latency", "memory")
    assert main(["compile", path, "--emit", "plan"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tile sparse_wgmma_f16: sparse_wgmma kernel, 384 threads, clusters of 2\n")
    # 1024 + 4 slots of 41984 B (A 8192 + B 32768 + compact metadata 1024) + 8 mbarriers x 8 B
    assert "shared memory 169024 B dynamic of 232448 B" in out and "bound on H100 SXM" in out


def test_ws_kernel_records_why_it_does_not_use_setmaxnreg():
    """setmaxnreg moves registers between whole warpgroups only (PTX 9.7.19: all warps of a warpgroup execute
    the same setmaxnreg). The warp-specialised tcgen05 kernel's 6 warps leave warpgroup 1 with 2 warps (MMA
    and TMA): the plan says so, and why it would not pay."""
    r = _compile("tcgen05_gemm_f16.tile")
    plan = r.to_json()["tiles"]["tcgen05_gemm_f16"]["resources"]
    why = plan["setmaxnreg"]
    assert why.startswith("not used: warpgroup 1 (warps 4-7) has 2 of its 4 warps; warpgroup 1 (warps 4-7) holds "
                          "the MMA and TMA roles.")
    assert "accumulators live in TMEM" in why
    assert all(role["registers"] == 255 for role in plan["roles"])
    assert "  setmaxnreg: not used: " in r.plan_text()


def test_warpgroup_problems():
    from compiler.isa.setmaxnreg import warpgroup_problems

    # the wgmma kernel's layout: a producer warpgroup and two consumer warpgroups, whole and single-role
    layout = {w: "producer" if w < 4 else "consumer" for w in range(12)}
    assert warpgroup_problems(12, layout) == []
    assert warpgroup_problems(6, {0: "e", 1: "e", 2: "e", 3: "e", 4: "m", 5: "t"}) == [
        "warpgroup 1 (warps 4-7) has 2 of its 4 warps", "warpgroup 1 (warps 4-7) holds the m and t roles"]
