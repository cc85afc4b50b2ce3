"""The compact metadata layout (compiler/sparse.py "Compact metadata"; the sparse wgmma kernel's for 16- and
32-bit A): the fact it rests on, derived from fragments.metadata_slot, checked against compress's bytes for
every A type; the host conversions; the kernel's ABI, shared-memory region and per-lane load; and the runtime
path end to end on the emulator (tests/emulated_device.py: Kernel.pack_a packs by the ABI, Kernel.__call__
checks the buffer, builds the tensor maps and launches, the warp machine computes D, `tilec run --check`
compares with numpy), with a 32-lane buffer refused and a kernel reading the wrong word caught."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from compiler import sparse
from compiler.diagnostics import SpecError
from compiler.isa.mma_sp.forms import all_forms, find_form, layout_for
from compiler.isa.mma_sp.fragments import (COMPACT_METADATA_LANES, compact_metadata_exact, compact_metadata_word,
                                           metadata_slots)
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma, tma_boxes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
A_TYPES = sorted({(f.a_type, f.shape) for f in all_forms()})


@pytest.mark.parametrize("a_type,shape", A_TYPES, ids=[f"{a}-{s}" for a, s in A_TYPES])
def test_the_fact_holds_in_compress_output_exactly_where_derived(a_type, shape):
    """compact_metadata_exact (derived from metadata_slot) against compress's words of random sparse A: where
    it holds, every lane's word equals lane ^ 2's in every tile and k-step; where it does not, some differ
    (random patterns: the two lanes describe different chunks)."""
    pytest.importorskip("ml_dtypes")
    layout = layout_for(a_type, shape)
    a = sparse.random_sparse(np.random.default_rng(5), 64, 4 * layout.k, a_type, shape)
    meta = sparse.compress(a, a_type, shape)[1]
    twins = meta[..., [lane ^ 2 for lane in range(32)]]
    assert compact_metadata_exact(layout) == np.array_equal(meta, twins)


def test_which_forms_are_compact():
    """The wgmma forms' layouts (f16/bf16 m16n8k32, tf32 m16n8k16: one or two suppliers a quad) are exact;
    8-bit A at k64 (four suppliers: t >> 1 picks the chunk block) is not."""
    exact = {(a, s) for a, s in A_TYPES if compact_metadata_exact(layout_for(a, s))}
    assert {("f16", "m16n8k32"), ("bf16", "m16n8k32"), ("tf32", "m16n8k16")} <= exact
    assert not exact & {("e4m3", "m16n8k64"), ("s8", "m16n8k64"), ("e2m1", "m16n8k128")}
    lay = layout_for("e4m3", "m16n8k64")
    assert metadata_slots(lay, 0) != metadata_slots(lay, 2)          # row g, chunks 0-7 vs 8-15


def test_compact_word_map():
    """Word j is lane 4*(j//2) + j%2's; lane l reads word 2*(l//4) + l%2, its own where it is kept."""
    assert COMPACT_METADATA_LANES[:6] == (0, 1, 4, 5, 8, 9) and len(COMPACT_METADATA_LANES) == 16
    for j, lane in enumerate(COMPACT_METADATA_LANES):
        assert compact_metadata_word(lane) == j == compact_metadata_word(lane ^ 2)


@pytest.mark.parametrize("a_type,shape", [("f16", "m16n8k32"), ("bf16", "m16n8k32"), ("tf32", "m16n8k16")])
def test_round_trip(a_type, shape):
    pytest.importorskip("ml_dtypes")
    layout = layout_for(a_type, shape)
    a = sparse.random_sparse(np.random.default_rng(1), 48, 3 * layout.k, a_type, shape)
    values, full = sparse.compress(a, a_type, shape)
    values_c, compact = sparse.compress(a, a_type, shape, compact=True)
    assert np.array_equal(values, values_c) and compact.shape == full.shape[:-1] + (16,)
    assert np.array_equal(compact, sparse.compact_metadata(full, a_type, shape))
    assert np.array_equal(sparse.expand_metadata(compact, a_type, shape), full)
    assert np.array_equal(sparse.decompress(values, compact, a_type, shape).view(np.uint8),
                          sparse.decompress(values, full, a_type, shape).view(np.uint8))
    assert np.array_equal(sparse.decompress(values, compact, a_type, shape).astype(np.float64),
                          a.astype(np.float64))


def test_compaction_refuses_what_it_would_lose():
    a = sparse.random_sparse(np.random.default_rng(2), 16, 64, "f16", "m16n8k32")
    full = sparse.compress(a, "f16", "m16n8k32")[1]
    bad = full.copy()
    bad[0, 0, 2] ^= 0x1                            # lane 2 no longer a copy of lane 0
    with pytest.raises(SpecError, match="lanes l and l \\^ 2 differ"):
        sparse.compact_metadata(bad, "f16", "m16n8k32")
    with pytest.raises(SpecError, match="has no compact layout"):
        sparse.compact_metadata(np.zeros((1, 1, 32), np.uint32), "e4m3", "m16n8k64")
    with pytest.raises(SpecError, match="ends in 32 words"):
        sparse.compact_metadata(full[..., :16], "f16", "m16n8k32")


F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")


@pytest.mark.parametrize("form,words", [(F16, 16), (BF16, 16), (TF32, 16), (E4M3, 32)], ids=lambda x: str(x)[:8])
def test_kernel_layout_follows_the_fact(form, words):
    """Words per (16-row tile, k-step): in the ABI's shape (and `lanes` where compact), the slot region E
    (4 bytes a word), the metadata TMA box's width per K block."""
    cfg = SparseWgmmaConfig("w", form, cta_m=128, cta_n=64, cta_k=2 * form.k, stages=2)
    abi = emit_sparse_wgmma(cfg).abi
    meta = abi["buffers"]["a_metadata"]
    assert meta["shape"][-1] == words and ("lanes" in meta) == (words == 16)
    assert meta.get("lanes", list(COMPACT_METADATA_LANES)) == list(COMPACT_METADATA_LANES)
    assert cfg.regions["E"].row_bytes == 4 * words * cfg.ksteps
    box = next(b for b in tma_boxes(cfg) if b.tensor == 2)
    assert (box.inner, box.x_per_block) == (words * cfg.ksteps,) * 2


def test_reading_word_lane_of_the_compact_step_is_caught():
    """Seeded bug: each thread loads word `lane` (the 32-lane layout's address) from the 16-word steps. Lanes
    4..15 then read other quads' words and lanes 16..31 the next k-step's (or past the tile): the emulator's
    D must differ from numpy's (or the run be refused)."""
    from compiler.emulator import EmulationError
    from compiler.emulator.sparse_host import run_sparse_wgmma

    cfg = SparseWgmmaConfig("w", F16, cta_m=64, cta_n=64, cta_k=64, consumers=1, stages=2)
    kern = emit_sparse_wgmma(cfg)
    compact_load = ("shr.u32 %x, %lane, 2;\n    mad.lo.u32 %eb, %x, 8, %eb;          // 2 words per quad\n"
                    "    and.b32 %x, %lane, 1;\n    mad.lo.u32 %eb, %x, 4, %eb;          // thread 0 or 1 of the pair")
    assert compact_load in kern.text
    bad = kern.text.replace(compact_load, "shl.b32 %x, %lane, 2;\n    add.u32 %eb, %eb, %x;")

    def run(text):
        return run_sparse_wgmma(kern, cfg.name, cfg.form, 1, cfg.threads, cfg.smem_bytes, 64, 64, 128, cfg.out_type,
                                cfg.accumulate_c, seed=4, text=text)

    d, ref, _ = run(kern.text)
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8))
    try:
        d, ref, _ = run(bad)
        assert not np.array_equal(d.view(np.uint8), ref.view(np.uint8)), "a wrong metadata word went unnoticed"
    except (EmulationError, SpecError):
        pass                   # refused (a word past the tile's run: the invalid nibble 0b0000): caught too


# --------------------------------------------------------------------------------------------------
# the runtime, end to end on the emulator
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def h200(monkeypatch):
    from compiler.runtime import driver
    from compiler.runtime.driver import DeviceInfo
    from emulated_device import EmulatedDevice, fake_cupy

    dev = EmulatedDevice(DeviceInfo(0, "NVIDIA H200 (emulated, 4 SMs)", (9, 0), 4))
    previous = driver.use(dev)
    cupy = fake_cupy(dev)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr("compiler.run._array_library", lambda: ("cupy", cupy))
    yield dev
    driver.use(previous)


def run_check(example: str, tile: str, shape: str, capsys) -> str:
    from compiler import cli

    rc = cli.main(["run", "--check", "--shape", shape, "--tile", tile, os.path.join(EX, example)])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    return out


def test_tilec_run_check_through_the_runtime(h200, capsys):
    """`tilec run --check` of the f16 decode tile as on an H200, the driver and the array library the emulator's:
    Kernel.pack_a packs A in the ABI's metadata layout (16 words a k-step), Kernel.__call__ checks it and builds
    the tensor maps, the warp machine runs the kernel on exactly that, and D matches numpy."""
    out = run_check("sparse_wgmma_decode.tile", "sparse_wgmma_f16_decode_n64", "96,24,192", capsys)
    assert "D matches numpy" in out and "2304 of 2304 elements bit-identical" in out, out
    maps, _ = h200.maps[max(h200.maps)]                 # the launch's tensor maps (tensor_map_args)
    meta = next(t for t in maps if t["operand"] == "a_metadata")
    # K = 192 in two K blocks of 128 = 8 k-steps of 16 words; a box of one block's 4 k-steps; 128-row tiles
    # of a CTA pair: 8 16-row tiles
    assert (meta["dims"], meta["box"]) == ((8 * 16, 8, 1), (4 * 16, 4, 1))


RUNTIME_CASES = [
    ("sparse_wgmma_decode.tile", "sparse_wgmma_bf16_decode_n64", (80, 40, 128), 16),
    pytest.param("sparse_wgmma_f16_decode_split_k.tile", "sparse_wgmma_f16_decode_split_k_n16", (144, 16, 256), 16,
                 marks=pytest.mark.slow),
    pytest.param("sparse_wgmma_decode.tile", "sparse_wgmma_e4m3_decode_n64", (64, 16, 256), 32, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("example,tile,shape,words", RUNTIME_CASES)
def test_kernel_call_through_the_runtime(h200, example, tile, shape, words):
    """Kernel.pack_a -> Kernel.__call__ on the emulated H200 (bf16 D: the arrays handed over as bf16 device
    arrays, which the cupy stand-in has no dtype for): the packed metadata has the ABI's words per k-step (16
    for bf16 and f16, 32 for e4m3: unchanged), and D matches numpy (compiler.run's tolerance check)."""
    from compiler.driver import compile_file
    from compiler.run import mismatches, sparse_host
    from compiler.runtime import SparseA, load

    m, n, k = shape
    result = compile_file(os.path.join(EX, example))
    kernel = load(result, tile)
    h = sparse_host(kernel.abi, result, tile, m, n, k, seed=9)
    a = kernel.pack_a(h.p.a, library="cupy")
    assert a.metadata.shape[-1] == words
    if a.element == "bf16":       # the cupy stand-in holds bf16 values as u16: hand them over as bf16
        a = SparseA(h200.array(np.asarray(a.values.host).view(np.uint16), "<V2"), a.metadata, a.element, m, k)
    bits = {1: np.uint8, 2: np.uint16}
    typestr = {"bf16": "<V2", "f16": "<f2", "e4m3": "|u1"}
    bt = np.ascontiguousarray(h.p.bt)
    b_type = result.tiles[tile].facts["form"].b_type
    b = h200.array(bt.view(bits[bt.itemsize]), typestr[b_type]).T
    d = np.full((m, n), 0xFFFF, np.uint16)                            # poison (NaN)
    kernel(a, b, out=h200.array(d, typestr[h.d_type]))
    got = d.view(np.dtype(h.ref.dtype)) if h.ref.dtype.itemsize == 2 else d
    outside, _ = mismatches(got, h.ref, h.scale, h.d_type)
    assert outside == 0


def test_a_32_lane_buffer_is_refused_by_a_compact_kernel():
    """A SparseA whose metadata is compress's 32-lane buffer, passed to the f16 decode kernel (compact):
    ArgumentError naming A.metadata, the shape it needs and the layout, before anything is launched."""
    from compiler.runtime import SparseA, load
    from compiler.runtime.errors import ArgumentError
    from emulated_device import DeviceArray

    kernel = load(os.path.join(EX, "sparse_wgmma_decode.tile"), "sparse_wgmma_f16_decode_n64")
    a = sparse.random_sparse(np.random.default_rng(3), 128, 128, "f16", "m16n8k32")
    values, full = sparse.compress(a, "f16", "m16n8k32")
    bt = np.zeros((64, 128), np.float16)
    d = np.zeros((128, 64), np.float16)
    packed = SparseA(DeviceArray(values), DeviceArray(full), "f16", 128, 128)
    with pytest.raises(ArgumentError, match=r"A\.metadata: wrong shape: expected \(8, 4, 16\), got \(8, 4, 32\) "
                                            r"\(.* takes 16 metadata words per 16-row tile and k-step \(the compact"):
        kernel(packed, DeviceArray(bt).T, out=DeviceArray(d))
