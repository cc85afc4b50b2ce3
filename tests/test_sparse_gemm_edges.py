"""The pipelined mma.sp kernel (compiler/ptx/sparse_gemm_kernel.py) at any problem size (issue 17):
M, N, K its CTA tile does not divide, problems smaller than one tile, K tails shorter than a k-step, B, C
and D rows further apart than their length, batches, persistent CTAs; on the emulator's warp machine
(compiler/emulator/sparse_host.run_sparse_gemm_edges) under its scheduling policies, against numpy bit for
bit. The runner poisons every byte around the operands (B's row padding, the gaps between batches: 0x7F,
a NaN / a wrong sum when read), keeps a guard band around D (the rest of each row and the gaps between
batches must come back untouched) and its memory refuses any access outside the buffers; a few seeded
bugs (a dropped predicate, a wrong src-size, no edge branch) must be caught. The H100 half:
tests/gpu/test_sparse_gemm_edges_gpu.py."""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import SpecError
from compiler.emulator.parse import EmulationError
from compiler.emulator.sparse_host import run_sparse_gemm_edges
from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm

F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")
U8S8 = find_form("m16n8k64", "u8", "s8", "s32", "s32")

# small CTA tiles, so that a few tiles run quickly: a 2x2 warp grid, one warp, a 2x1 grid with 5 stages
SMALL = dict(cta_m=64, cta_n=64, cta_k=32, warps_m=2, warps_n=2, stages=3)
ONE_WARP = dict(cta_m=16, cta_n=8, cta_k=64, warps_m=1, warps_n=1, stages=2)
TALL = dict(cta_m=64, cta_n=32, cta_k=64, warps_m=2, warps_n=1, stages=5)
# FP8 on sm_90a (emulated warp-level FP8 mma.sp): 16x16 warp tiles, 8 warps
FP8_FITS = dict(cta_m=64, cta_n=32, cta_k=128, warps_m=4, warps_n=2, stages=3)


def config(form, **kw) -> SparseGemmConfig:
    """sm_90a, or the `target` in kw (FP8: sm_120a, where warp-level FP8 mma.sp is native)."""
    return SparseGemmConfig("eg", form, kw.pop("target", "sm_90a"), **kw)


def kernel(form, **kw):
    return emit_sparse_gemm(config(form, **kw))


def run(form, kw, m, n, k, mode="eager", seed=0, batch=1, ctas=None, pad=None, text=None):
    kern = kernel(form, **kw)
    cfg = config(form, **kw)
    return run_sparse_gemm_edges(kern, form, m, n, k, cfg.out_type, cfg.accumulate_c, mode=mode, seed=seed,
                                 batch=batch, ctas=ctas, pad=pad, text=text)


def same_bytes(d, ref) -> bool:
    d = np.ascontiguousarray(d)
    return np.array_equal(d.view(np.uint8), np.ascontiguousarray(np.asarray(ref).astype(d.dtype)).view(np.uint8))


# (form, kernel config, M, N, K, policy, batch, CTAs): every form the pipelined kernel takes without block
# scaling; smaller than one tile (1 x 1 x 1), partial tiles in M and N, K tails shorter than a k-step and
# than a chunk (K = 45 f16: 90-byte rows), staged and direct D (f32 / s32 / f16 / bf16), with and without C,
# persistent CTAs walking several partial tiles, batches whose operands lie apart by more than their size
CASES = [
    (F16, SMALL, 50, 37, 45, "eager", 1, None),
    (F16, dict(SMALL, accumulate_c=False, d_type="f16"), 70, 37, 45, "adversarial", 1, None),
    (F16, dict(SMALL, stage_d=False), 70, 37, 45, "random", 1, None),
    (F16, dict(TALL, persistent=True), 100, 37, 77, "adversarial", 1, 2),
    (F16, SMALL, 33, 20, 45, "adversarial", 2, None),
    (F16, ONE_WARP, 1, 1, 1, "eager", 1, None),
    (BF16, dict(SMALL, cta_k=128, accumulate_c=False, d_type="bf16"), 45, 70, 200, "random", 1, None),
    (BF16, dict(SMALL, accumulate_c=False, d_type="bf16", stage_d=False), 45, 70, 20, "adversarial", 1, None),
    (TF32, dict(ONE_WARP, raster_group=2, persistent=True), 37, 13, 57, "adversarial", 1, 2),
    (TF32, dict(SMALL, cta_k=16), 65, 65, 17, "eager", 1, None),
    (S8, TALL, 77, 33, 131, "random", 1, None),
    (S8, ONE_WARP, 1, 1, 1, "adversarial", 1, None),
    (U8S8, dict(SMALL, cta_k=128, stage_d=False), 20, 90, 300, "eager", 1, None),
    (E4M3, dict(SMALL, cta_k=128, accumulate_c=False, d_type="f16", target="sm_120a"), 66, 66, 129, "eager", 3,
     None),
    (E4M3, dict(SMALL, cta_k=64, persistent=True, target="sm_120a"), 130, 50, 70, "adversarial", 2, 3),
    (E4M3, FP8_FITS, 70, 33, 130, "random", 1, None),                                   # sm_90a: 16x16 warp tiles
]


@pytest.mark.parametrize("form,kw,m,n,k,mode,batch,ctas", CASES,
                         ids=[f"{c[0].a_type}-{c[2]}x{c[3]}x{c[4]}-{c[5]}-b{c[6]}" for c in CASES])
def test_any_size_on_the_emulator(form, kw, m, n, k, mode, batch, ctas):
    d, ref, stats = run(form, kw, m, n, k, mode=mode, seed=m + n + k, batch=batch, ctas=ctas)
    assert stats["mma"] > 0 and stats["cp.async"] > 0
    assert np.shape(d) == ((batch, m, n) if batch > 1 else (m, n))
    assert same_bytes(d, ref)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("mode", ["adversarial", "random"])
def test_seeds_and_policies(mode, seed):
    """The same partial problem under both scheduling policies and several seeds (inputs and interleavings)."""
    d, ref, _ = run(F16, dict(SMALL, accumulate_c=False, d_type="f16"), 65, 71, 97, mode=mode, seed=seed)
    assert same_bytes(d, ref)


@pytest.mark.parametrize("pad", [dict(b=0, c=0, d=0), dict(b=3, c=1, d=5)])
def test_row_strides(pad):
    """B, C and D rows 0 or a few 16-byte units longer than needed (ldb, ldc, ldd), the padding poisoned."""
    d, ref, _ = run(F16, SMALL, 96, 72, 80, pad=pad, seed=4)
    assert same_bytes(d, ref)


def test_whole_tiles_take_the_interior_path_only():
    """A tile inside D runs the code a kernel without edges runs: on a problem of whole tiles no edge
    instruction executes (the edge code is the only place with a b16 element store or a predicated element
    load of C), and the result is exact."""
    kw = dict(SMALL, accumulate_c=True)
    text = kernel(F16, **kw).text
    edge = text.index("EDGE_")
    assert "ld.global.f32" in text[edge:]
    broken = text.replace("@%pq ld.global.f32", "trap; // ld.global.f32")
    d, ref, _ = run(F16, kw, 128, 128, 64, text=broken)             # whole tiles: the trap never runs
    assert same_bytes(d, ref)
    with pytest.raises(EmulationError):
        run(F16, kw, 127, 128, 64, text=broken)


# Seeded bugs: each must be caught (an access outside the buffers, a guard-band write, or wrong bytes).
MUTATIONS = {
    # every edge D store unguarded: elements past N and M are written (guard band / outside D)
    "store predicate dropped": (lambda s: s.replace("@%pq st.global", "st.global"), dict(SMALL, stage_d=False)),
    "staged store predicate dropped": (lambda s: s.replace("@%pq st.global", "st.global"), SMALL),
    # the whole chunk stored where only part of it lies inside D
    "chunk test dropped": (lambda s: s.replace("and.pred %pw, %pr, %pq;", "mov.pred %pw, %pr;"), SMALL),
    # B copies always 16 bytes: past K into the poisoned row padding, past N out of B
    "src-size always 16": (lambda s: s.replace("selp.b32 %sz, %szb, 0, %pz;", "mov.b32 %sz, 16;"), SMALL),
    # rows past N copy their chunk (reads past B)
    "row check dropped": (lambda s: s.replace("selp.b32 %sz, %szb, 0, %pz;", "mov.b32 %sz, %szb;"), SMALL),
    # the K tail's last chunk one element too long: a poisoned byte pair enters the sum
    "src-size one element long": (lambda s: s.replace("max.s32 %szb, %szb, 0;", "add.s32 %szb, %szb, 1;\n"
                                                      "    max.s32 %szb, %szb, 0;"), SMALL),
    # edge tiles take the interior path
    "edge branch dropped": (lambda s: re.sub(r"@!%pi bra\.uni EDGE_\d+;", "// dropped", s), SMALL),
    # the C row stride is N, not ldc
    "ldc ignored": (lambda s: s.replace("ld.param.u32 %ldc, [eg_ldc];", "ld.param.u32 %ldc, [eg_N];"), SMALL),
    # every batch reads batch 0's B
    "batch stride of B ignored": (lambda s: s.replace("ld.param.u64 %bo, [eg_batch_stride_b];", "mov.u64 %bo, 0;"),
                                  SMALL),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_seeded_bugs_are_caught(name):
    transform, kw = MUTATIONS[name]
    text = kernel(F16, **kw).text
    broken = transform(text)
    assert broken != text
    try:
        d, ref, _ = run(F16, kw, 50, 37, 45, batch=2, pad=dict(b=1, c=1, d=1), text=broken, seed=5)
    except EmulationError as e:
        assert re.search(r"outside|guard band|src-size|unset", str(e)), e
        return
    assert not same_bytes(d, ref)


def test_abi_states_the_contract():
    kern = kernel(F16, **SMALL)
    abi = kern.abi
    assert abi["requires"] == [] and "batch" in abi and abi["grid"] == ["tiles", "batch", 1]
    assert abi["buffers"]["a_values"]["shape"] == ["(M + 63) // 64 * 64", "(K + 31) // 32 * 32 // 2"]
    assert abi["buffers"]["b"]["pitch"] == "ldb" and abi["buffers"]["d"]["pitch"] == "ldd"
    assert abi["sizes"] == {"Kp": "(K + 31) // 32 * 32"}
    names = [p["name"] for p in abi["params"]]
    assert names == ["a_values", "a_metadata", "b", "c", "d", "M", "N", "K", "Kp", "ldb", "ldc", "ldd",
                     "batch_stride_a_values", "batch_stride_a_metadata", "batch_stride_b", "batch_stride_c",
                     "batch_stride_d"]
    # block-scaled forms: whole tiles, no batch (a located refusal at launch: the runtime names `requires`)
    nvf4 = find_form("m16n8k128", "e2m1", "e2m1", "f32", "f32", kind="mxf4nvf4", scale_vec="4X")
    bs = emit_sparse_gemm(SparseGemmConfig("bs", nvf4, "sm_120a", cta_m=64, cta_n=64, cta_k=256, warps_m=2,
                                           warps_n=2, stages=2))
    assert bs.abi["requires"] == ["M % 64 == 0", "N % 64 == 0", "K % 256 == 0"] and "batch" not in bs.abi
    with pytest.raises(SpecError, match="M = 65 is not a multiple of 64"):
        bs.grid(65, 64, 256)
    with pytest.raises(SpecError, match="takes no batch"):
        bs.grid(64, 64, 256, batch=2)


# ptxas: the edge code of every D path and form (f32 / s32 / f16 / bf16 D, staged and direct, persistent)
ASSEMBLE = [(F16, dict(SMALL, stage_d=False, accumulate_c=False, d_type="f16")),
            (BF16, dict(SMALL, accumulate_c=False, d_type="bf16")),
            (BF16, dict(SMALL, stage_d=False, accumulate_c=False, d_type="bf16")),
            (S8, dict(TALL, stage_d=False)), (S8, dict(TALL, persistent=True)),
            (TF32, dict(SMALL, cta_k=32)), (E4M3, dict(FP8_FITS, persistent=True, stage_d=False)),
            (U8S8, dict(ONE_WARP))]


@pytest.mark.parametrize("form,kw", ASSEMBLE, ids=lambda x: getattr(x, "name", None) or str(x))
def test_edge_forms_assemble(ptxas, form, kw):
    text = kernel(form, **kw).text
    assert "EDGE_" in text and ", 16, %sz;" in text and text.isascii()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(text)
        res = subprocess.run([ptxas, "-arch=sm_90a", "-o", str(Path(tmp) / "k.cubin"), str(src)],
                             capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def _ptxas_v(ptxas, text: str, arch: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(text)
        res = subprocess.run([ptxas, "-v", f"-arch={arch}", "-o", str(Path(tmp) / "k.cubin"), str(src)],
                             capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout + res.stderr


def test_emulated_fp8_warp_tiles_are_bounded(ptxas):
    """Warp-level FP8 mma.sp is emulated on sm_90a (compiler/isa/mma_sp/forms.py FP8_WARP_MMA_EMULATED_SMS): a
    16x16 warp tile (2 mma tiles) fits 255 registers without spilling there, a larger one is refused where it
    is configured; on sm_120a (native) a 32x32 warp tile takes ~90 registers."""
    fits = _ptxas_v(ptxas, kernel(E4M3, **FP8_FITS).text, "sm_90a")
    assert re.search(r"\b0 bytes spill stores", fits), fits
    with pytest.raises(SpecError, match="each warp computes 4 m16n8k64 tiles of FP8") as e:
        kernel(E4M3, **dict(SMALL, cta_k=128, warps_m=2, warps_n=4))             # 32x16 warp tiles
    assert e.value.field == "schedule.warps" and "mma=wgmma" in e.value.hint
    with pytest.raises(SpecError, match="360 registers a thread, 255 fit"):
        kernel(E4M3, **dict(SMALL, cta_k=128, warps_m=2, warps_n=4))
    with pytest.raises(SpecError, match="180 registers a thread, 128 fit .512 threads"):
        kernel(E4M3, **dict(SMALL, cta_k=128, warps_m=4, warps_n=4))             # 16x16, 16 warps
    native = _ptxas_v(ptxas, kernel(E4M3, **dict(SMALL, cta_k=128, target="sm_120a")).text, "sm_120a")
    assert re.search(r"\b0 bytes spill stores", native) and int(re.search(r"Used (\d+) registers", native)[1]) < 128


@pytest.mark.parametrize("size,shape,mode,batch", [("staged", (70, 45, 50), "adversarial", 2),
                                                   ("direct", (130, 37, 33), "random", 1),
                                                   ("staged", (1, 1, 1), "eager", 1)])
@pytest.mark.parametrize("epi", [dict(act="silu", out="bf16", c="beta", bias="col", alpha="0.5"),
                                 dict(act="relu", out="f32", c="C", bias="row", alpha="param"),
                                 dict(act="gelu_tanh", out="f16", c="none", bias="none", alpha="none")],
                         ids=lambda e: "-".join(e.values()))
def test_fused_epilogue_at_any_size(epi, size, shape, mode, batch):
    """The DSL's fused epilogue (compiler/passes/epilogue_lowering.py) on edge tiles: C and the bias read
    only inside D (staged: epilogue.edge_chunk; direct: per element), D within the epilogue's tolerance
    (Emulation.ok), through compiler.emulate (the pipelined kernel's runner: guard band, batches)."""
    import compiler
    from compiler.driver import compile_source
    from tests.test_epilogue import tile_text

    result = compile_source(tile_text(dict(epi, kernel="sync"), size), "e.tile")
    assert result.to_json()["tiles"]["t"]["kernel"]["requires"] == []
    e = compiler.emulate(result, shape=shape, seed=sum(shape), mode=mode, batch=batch)
    assert e.ok and e.d.shape == ((batch,) if batch > 1 else ()) + shape[:2]


# 1-byte D (s8, e4m3: compiler/isa/epilogue_outputs.py) on edge tiles: the staged copy-out's packed chunks
# (epilogue.byte_chunk with its edge guards) and the direct path's packed pairs (%hq, byte stores under the
# element guards); 16-bit biases (epilogue.load_bias) and s32 accumulators (the f32 steps on %ev copies)
ONE_BYTE_D = [
    ("staged", (70, 45, 100), "eager", 1,
     dict(a="s8", act="none", out="s8", c="C", bias="row", alpha="none", scale="param", bias_type="bf16")),
    ("direct", (130, 37, 33), "random", 1,
     dict(act="relu", out="s8", c="C", bias="col", alpha="0.5", scale="lit", bias_type="f16")),
    pytest.param("staged", (70, 45, 50), "adversarial", 2,
                 dict(act="relu", out="s8", c="C", bias="col", alpha="0.5", scale="lit", bias_type="f16"),
                 marks=pytest.mark.slow),
    pytest.param("direct", (130, 37, 100), "eager", 1,
                 dict(a="s8", act="none", out="s8", c="C", bias="row", alpha="none", scale="param",
                      bias_type="bf16"), marks=pytest.mark.slow),
    pytest.param("staged", (70, 45, 50), "random", 1,
                 dict(act="gelu_tanh", out="e4m3", c="none", bias="col", alpha="none", scale="param",
                      bias_type="bf16"), marks=pytest.mark.slow),
    pytest.param("direct", (130, 37, 33), "eager", 2,
                 dict(act="gelu_tanh", out="e4m3", c="beta", bias="row", alpha="none", scale="lit",
                      bias_type="f16"), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("size,shape,mode,batch,epi", ONE_BYTE_D,
                         ids=lambda v: "-".join(map(str, v.values())) if isinstance(v, dict) else None)
def test_one_byte_d_at_any_size(size, shape, mode, batch, epi):
    import compiler
    from compiler.driver import compile_source
    from tests.test_epilogue import tile_text

    pytest.importorskip("ml_dtypes")
    result = compile_source(tile_text(dict(epi, kernel="sync"), size), "e.tile")
    assert "st.global.b8" in result.ptx                 # the edge's byte stores
    e = compiler.emulate(result, shape=shape, seed=sum(shape), mode=mode, batch=batch)
    assert e.ok and e.d.shape == ((batch,) if batch > 1 else ()) + shape[:2]
    assert len(np.unique(e.d)) > 8                      # D is not a constant (saturated or zero) tile


@pytest.mark.parametrize("size", ["staged", "direct"])
def test_one_byte_d_edge_stores_stay_inside_d(size):
    # the byte stores' element guards dropped: the guard band right of D's rows is written
    import compiler
    from compiler.driver import compile_source
    from tests.test_epilogue import tile_text

    result = compile_source(tile_text(dict(ONE_BYTE_D[1][4], kernel="sync"), size), "e.tile")
    broken = re.sub(r"@%p\w+ st\.global\.b8", "st.global.b8", result.ptx)
    assert broken != result.ptx
    assert compiler.emulate(result, shape=(64, 37, 33), seed=1).ok
    with pytest.raises(EmulationError, match="global write of 1 B at .* outside every writable buffer"):
        compiler.emulate(result, shape=(64, 37, 33), seed=1, ptx=broken)
