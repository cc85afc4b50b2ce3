"""Host half of the H100 shared-memory dump check (tests/gpu/harness/smem_dump.py), runnable without a GPU.

* the sweep covers every swizzle x major x element width (PTX 9.7.16.3.3 modes, 9.7.16.10.1 majors);
* global inputs are packed as the kernel ABI says (PTX 5.5.1.1.1: sub-byte values packed, little-endian);
* the CPU emulation of compiler/layout.py's copy map, read back through compiler.sim with the tiles' real
  descriptors, gives back exactly the global inputs, and the model's MMA equals numpy;
* the device path runs against a fake cupy whose "kernel" is that emulation (argument order from the ABI,
  sentinels, output files);
* swapped chunks, dirty padding and a wrong descriptor field are each caught, by the check they should be.
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.harness import smem_dump as sdc


# ------------------------------------------------------------------------------------------------
# The sweep itself
# ------------------------------------------------------------------------------------------------

def test_sweep_covers_every_swizzle_major_and_width():
    groups = sdc.candidate_tiles()
    intents = [alts[0] for alts in groups]
    assert all(alts for alts in groups)
    sweep = [t for t in intents if t.group == "sweep"]
    for label, width in sdc.WIDTHS.items():
        tiles = [t for t in sweep if (t.kind, t.a_type, t.b_type) == (width.kind, width.a_type, width.b_type)]
        a_seen = Counter((t.a_major, t.a_swizzle) for t in tiles)
        b_seen = Counter((t.b_major, t.b_swizzle) for t in tiles)
        # every (major, swizzle) an operand of this width may take (PTX 9.7.16.3.3 modes; 128B_base32B only
        # for MN-major tf32 and MN-major tf32 only with it, 9.7.16.10.1) occurs at least twice per operand
        options = sdc.operand_options(width.a_type, width.transposable)
        assert set(a_seen) == set(options) and min(a_seen.values()) >= 2, (label, a_seen)
        assert set(b_seen) == set(options) and min(b_seen.values()) >= 2, (label, b_seen)
        combos = {(t.a_major, t.b_major) for t in tiles}
        # sub-byte types are K-major only (9.7.16.10.1); the others are seen in all four major pairs
        assert combos == ({("K", "K"), ("K", "MN"), ("MN", "K"), ("MN", "MN")} if width.transposable
                          else {("K", "K")}), label
        # every sweep tile stages 256 bytes of K (two 128-byte rows): K elements = 256 * 8 / container bits
        assert {t.loop_k for t in tiles} == {256 * 8 // width.container_bits}, label
        stages = [t for t in intents if t.group == "stages" and (t.kind, t.a_type) == (width.kind, width.a_type)]
        # loop K = 2 stages of 256 bytes each (K halves until A + B fit the 96 KiB stage budget)
        assert any(t.loop_k == 2 * 256 * 8 // width.container_bits for t in stages), label
    counts = Counter(t.group for t in intents)
    assert counts["cta2"] >= 4 and counts["sparse"] >= 1 and counts["mixed"] >= 2
    assert any(t.grid != (2, 2) for t in intents)
    assert len({t.name for t in intents}) == len(intents)          # names are unique .entry names


def test_quick_sweep_still_has_every_width_and_major():
    intents = [alts[0] for alts in sdc.candidate_tiles(quick=True)]
    for width in sdc.WIDTHS.values():
        tiles = [t for t in intents if (t.kind, t.a_type) == (width.kind, width.a_type)]
        assert {t.a_major for t in tiles} == ({"K", "MN"} if width.transposable else {"K"}), width.label
        assert any(t.group == "stages" for t in tiles), width.label


def test_alternatives_respect_mn_major_atom_width():
    # PTX 9.7.16.3.3: the contiguous extent of an MN-major tile is whole swizzle rows; an 8-bit MN-major A with
    # 128B swizzle therefore needs M * 1 B to be a multiple of 128 -> M = 128, never 64
    e4m3 = sdc.WIDTHS["e4m3"]
    sizes = sdc._sizes(e4m3, ("MN", "128B"), ("K", "none"), index=1)
    assert sizes and {m for m, _ in sizes} == {128}
    # f16 MN-major B with 64B swizzle: N * 2 B multiple of 64 -> N in {32, 64, ...}, never 16 or 48
    sizes = sdc._sizes(sdc.WIDTHS["f16"], ("K", "none"), ("MN", "64B"), index=0)
    assert all(n * 2 % 64 == 0 for _, n in sizes) and sizes


# ------------------------------------------------------------------------------------------------
# Global input packing (PTX 5.5.1.1.1)
# ------------------------------------------------------------------------------------------------

def test_pack_rows_bit_order():
    # fp4: two values per byte, element 0 in the low nibble: [1, 2, 3, 4] -> 0x21, 0x43
    assert sdc.pack_rows(np.array([[1, 2, 3, 4]]), 4).tolist() == [[0x21, 0x43]]
    # fp6: element j at bits 6j..6j+5 of the row's little-endian bit stream (4 values per 3 bytes):
    # element 1 = 0x3F occupies bits 6..11 -> byte 0 bits 6,7 (0xC0) and byte 1 bits 0..3 (0x0F)
    assert sdc.pack_rows(np.array([[0, 0x3F, 0, 0]]), 6).tolist() == [[0xC0, 0x0F, 0x00]]
    # element 3 = 0b100001 occupies bits 18..23 -> byte 2 = 0b1000_0100 = 0x84
    assert sdc.pack_rows(np.array([[0, 0, 0, 0b100001]]), 6).tolist() == [[0, 0, 0x84]]
    # 16-bit: little-endian bytes
    assert sdc.pack_rows(np.array([[0x1234, 0xABCD]]), 16).tolist() == [[0x34, 0x12, 0xCD, 0xAB]]


@pytest.mark.parametrize("bits", [4, 6, 8, 16, 32])
def test_pack_unpack_round_trip(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, size=(5, 64), dtype=np.uint64)
    packed = sdc.pack_rows(codes, bits)
    assert packed.shape == (5, 64 * bits // 8)
    np.testing.assert_array_equal(sdc.unpack_rows(packed, 64, bits), codes)


def test_global_bytes_follow_the_abi_majors():
    # ABI: K-major [MN][K] row-major, MN-major [K][MN] row-major; element (mn=1, k=2) of a 2x3 8-bit tile
    codes = np.array([[0, 1, 2], [10, 11, 12]], dtype=np.uint64)
    assert sdc.global_bytes(codes, "K", 8).tolist() == [0, 1, 2, 10, 11, 12]
    assert sdc.global_bytes(codes, "MN", 8).tolist() == [0, 10, 1, 11, 2, 12]


# ------------------------------------------------------------------------------------------------
# Launch geometry (kernel ABI, compiler/ptx/tcgen05_kernel.py)
# ------------------------------------------------------------------------------------------------

def test_eval_dim():
    # ABI grid for cta_group::2 is "2 * n_total / N": n_total = 2 * 128, N = 128 -> 4 CTAs along x
    assert sdc._eval_dim("2 * n_total / 128", 512, 256) == 4
    assert sdc._eval_dim("m_total / 64", 128, 0) == 2
    assert sdc._eval_dim("1", 0, 0) == 1


def _rec(cta_group, m, n, grid):
    return {"tile": {"cta_group": cta_group, "m": m, "n": n}, "grid": list(grid)}


def test_cta_views_single_cta_tiles():
    # ABI: grid (n_total/N, m_total/M); CTA (bx, by) holds A rows by*M.. and B rows bx*N..; S block
    # index by*gridDim.x + bx
    views = sdc.cta_views(_rec(1, 128, 64, (2, 2, 1)))
    assert [(v.index, v.a_row0, v.b_row0) for v in views] == [(0, 0, 0), (1, 0, 64), (2, 128, 0), (3, 128, 64)]


def test_cta_views_pairs():
    # cta_group::2, M=256 N=128, grid (4, 2): CTA bx=3, by=1 is rank 1 of the pair for N tile 1; it holds
    # A rows by*M + M/2 = 384.. and B rows 1*N + N/2 = 192..; the pair's D block starts at (256, 128)
    views = {v.index: v for v in sdc.cta_views(_rec(2, 256, 128, (4, 2, 1)))}
    v = views[1 * 4 + 3]
    assert (v.rank, v.a_row0, v.b_row0, v.d_row0, v.d_col0) == (1, 384, 192, 256, 128)
    assert (views[2].rank, views[2].a_row0, views[2].b_row0) == (0, 0, 128)


# ------------------------------------------------------------------------------------------------
# prepare -> emulate -> check on a subset (one intent per width and per extra group)
# ------------------------------------------------------------------------------------------------

def _subset() -> set[str]:
    chosen, seen = set(), set()
    for alts in sdc.candidate_tiles():
        t = alts[0]
        key = (t.group, t.kind, t.a_type) if t.group in ("sweep", "stages") else (t.group,)
        if t.group == "stages" and t.kind not in ("f16", "mxf4"):
            continue                  # two stage tiles suffice here; the slow test runs them all
        if key not in seen:
            seen.add(key)
            chosen.add(t.name)
    return chosen


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    data = tmp_path_factory.mktemp("smemdump")
    manifest = sdc.prepare(data, assemble=False, names=_subset(), log=lambda *a: None)
    return data, manifest


@pytest.fixture(scope="module")
def emulated(prepared):
    data, manifest = prepared
    out = data / "emulated"
    sdc.emulate(data, out, log=lambda *a: None)
    return out


def test_prepare_records_what_the_device_needs(prepared):
    data, manifest = prepared
    assert not manifest["rejected"] and len(manifest["tiles"]) == len(_subset())
    inputs = np.load(data / sdc.INPUTS)
    for rec in manifest["tiles"]:
        ptx = (data / rec["ptx"]).read_text()
        assert ".target sm_90a" in ptx and "tcgen05" not in ptx, rec["entry"]
        assert [p for p, _ in rec["params"]][-3:] == ["S", "m_total", "n_total"]
        assert rec["block"] == [128, 1, 1]
        # descriptors: one per MMA K step of a stage
        assert len(rec["A_desc"]) == len(rec["B_desc"]) == len(rec["idesc"]) >= 1
        t = rec["tile"]
        bits_a, bits_b = sdc._type_bits(t["a_type"]), sdc._type_bits(t["b_type"])
        k_a = t["loop_k"] // 2 if t["sparsity"] else t["loop_k"]
        assert inputs[f"{rec['entry']}.A"].size == rec["m_total"] * k_a * bits_a // 8
        assert inputs[f"{rec['entry']}.B"].size == rec["n_total"] * t["loop_k"] * bits_b // 8
    assert any(r["n_stages"] > 1 for r in manifest["tiles"])
    assert any(r["tile"]["cta_group"] == 2 for r in manifest["tiles"])


def test_emulated_copy_map_reads_back_through_the_model(prepared, emulated):
    data, manifest = prepared
    report = sdc.check(data, emulated, log=lambda *a: None)
    assert report.failures == [] and report.device_errors == [], report.failures[:5]
    assert report.ok and report.tiles_checked == len(manifest["tiles"])
    assert report.byte_mismatches == 0 and report.bytes_compared > 0
    assert sum(t.elements for t in report.operands.values()) > 0
    assert all(m["ok"] and m["d_elements"] > 0 for m in report.mma)
    widths = {w for (_, w, _, _) in report.operands}
    assert {"tf32", "f16", "bf16", "e4m3", "s8", "e3m2-padded", "e2m1-padded", "e2m1-packed"} <= widths


@pytest.mark.parametrize("ptx_tiles", [2])
def test_prepared_ptx_assembles_for_sm_90a(prepared, ptxas, ptx_tiles):
    from compiler.ptxas import assemble

    data, manifest = prepared
    for rec in manifest["tiles"][:ptx_tiles] + [r for r in manifest["tiles"] if r["n_stages"] > 1][:1]:
        result = assemble((data / rec["ptx"]).read_text(), "sm_90a", ptxas)
        assert result.ok, result.output


def test_dump_kernels_copy_exactly_like_the_sm100a_kernels(prepared):
    # the smem-dump variant only leaves tcgen05 out: its prologue, stage loop header and copy code must be
    # the real kernel's instruction for instruction, so that the dumps prove the real kernel's copies
    data, manifest = prepared
    for rec in manifest["tiles"]:
        assert sdc.copy_code_is_the_kernels({**rec, "_data": str(data)}), rec["entry"]


def test_copy_path_comparison_sees_real_differences(prepared):
    data, manifest = prepared
    rec = _pick(manifest, lambda r: r["regions"]["A"]["swizzle"] == "128B" and r["tile"]["cta_group"] == 1)
    ptx = (data / rec["ptx"]).read_text()
    path = sdc.copy_path(ptx)
    assert path and any(x.startswith("// copy A") for x in path) and any("%ctaid.y" in x for x in path)
    # renumbering registers does not matter ...
    renumbered = re.sub(r"%r(\d+)\b", lambda m: f"%r{int(m.group(1)) + 100}", ptx)
    assert renumbered != ptx and sdc.copy_path(renumbered) == path
    # ... but swapping the tile coordinates (m0 from ctaid.x) or changing the swizzle mask does
    swapped = ptx.replace("%ctaid.x", "%TMP").replace("%ctaid.y", "%ctaid.x").replace("%TMP", "%ctaid.y")
    assert sdc.copy_path(swapped) != path
    # Swizzle<3,4,3> masks bits 4-6: 0x70 = 112 (PTX 9.7.16.3.3)
    assert ", 112;" in ptx
    assert sdc.copy_path(ptx.replace(", 112;", ", 48;")) != path


# ------------------------------------------------------------------------------------------------
# The device path against a fake cupy whose kernels are the emulation
# ------------------------------------------------------------------------------------------------

class _FakeCupy:
    """Just what run_device uses; a "kernel" writes the copy-map emulation of its inputs into S."""
    uint8 = np.uint8
    __version__ = "fake"

    def __init__(self, data: Path, manifest: dict, corrupt: str | None = None):
        self.by_path = {str(data / r["ptx"]): r for r in manifest["tiles"]}
        self.corrupt = corrupt
        fake = self

        class _Device:
            id = 0
            compute_capability = "90"

            def synchronize(self):
                pass

        class _Runtime:
            @staticmethod
            def getDeviceProperties(_):
                return {"name": b"fake"}

            @staticmethod
            def driverGetVersion():
                return 0

        class _Cuda:
            Device = _Device
            runtime = _Runtime

        self.cuda = _Cuda

        class _Module:
            def __init__(self, path):
                self.rec = fake.by_path[path]

            def get_function(self, entry):
                assert entry == self.rec["entry"]
                return lambda grid, block, args: fake.launch(self.rec, grid, block, args)

        self.RawModule = lambda path: _Module(path)

    asarray = staticmethod(np.array)
    full = staticmethod(np.full)
    asnumpy = staticmethod(np.asarray)

    def launch(self, rec, grid, block, args):
        assert list(grid) == rec["grid"] and list(block) == rec["block"]
        named = dict(zip([p for p, _ in rec["params"]], args))
        assert named["m_total"] == rec["m_total"] and named["n_total"] == rec["n_total"]
        images = sdc.emulate_images(rec, {f"{rec['entry']}.A": named["A"], f"{rec['entry']}.B": named["B"]})
        if self.corrupt == rec["entry"]:
            images[-1, -1, 0] ^= 0xFF                  # last CTA, last stage, first byte of the buffer
        named["S"][:] = images.ravel()


def _sub_data(prepared, tmp_path, count):
    """A data folder holding the first `count` tiles of the prepared manifest (keeps the checks fast)."""
    data, manifest = prepared
    sub = tmp_path / "data"
    sub.mkdir()
    manifest = {**manifest, "tiles": manifest["tiles"][:count]}
    (sub / sdc.MANIFEST).write_text(json.dumps(manifest))
    (sub / sdc.INPUTS).symlink_to(data / sdc.INPUTS)
    for rec in manifest["tiles"]:
        (sub / rec["ptx"]).symlink_to(data / rec["ptx"])
    return sub, manifest


def test_device_path_with_fake_cupy(prepared, monkeypatch, tmp_path):
    data, manifest = _sub_data(prepared, tmp_path, 3)
    tmp_path = tmp_path / "out"
    victim = manifest["tiles"][0]["entry"]
    monkeypatch.setitem(sys.modules, "cupy", _FakeCupy(data, manifest, corrupt=victim))
    # the fake has no cubins: RawModule gets the .ptx path, as the driver-JIT fallback would
    status = sdc.run_device(data, tmp_path, isolate=False, log=lambda *a: None)
    assert all(s["status"] == "ok" and s["unwritten_chunks"] == 0 and s["d_untouched"]
               for s in status["tiles"].values())
    assert (tmp_path / sdc.STATUS).exists() and status["files"]
    report = sdc.check(data, tmp_path, log=lambda *a: None)
    # only the corrupted tile fails, and the byte comparison names its operand region and CTA
    assert report.failures and all(f.startswith(victim) for f in report.failures)
    assert any(f"CTA {sdc._n_ctas(manifest['tiles'][0]) - 1}" in f for f in report.failures)
    assert report.byte_mismatches == 1


def test_device_errors_fail_the_check(prepared, emulated, tmp_path):
    data, manifest = _sub_data(prepared, tmp_path, 2)
    status = json.loads((emulated / sdc.STATUS).read_text())
    name = manifest["tiles"][0]["entry"]
    status["tiles"][name] = {"tile": name, "status": "error", "error": "CUDARuntimeError: too many resources"}
    (tmp_path / sdc.STATUS).write_text(json.dumps(status))
    for f in emulated.glob("dumps_*.npz"):
        (tmp_path / f.name).symlink_to(f)
    report = sdc.check(data, tmp_path, log=lambda *a: None)
    assert not report.ok and report.device_errors and name in report.device_errors[0]
    assert report.tiles_checked == 1 and not report.failures         # the other tile still checks clean


# ------------------------------------------------------------------------------------------------
# Mutations: each kind of error is caught by the check meant for it
# ------------------------------------------------------------------------------------------------

def _pick(manifest, pred):
    return next(r for r in manifest["tiles"] if pred(r))


def _images(data, rec):
    return sdc.emulate_images(rec, np.load(data / sdc.INPUTS))


def test_swapped_chunks_are_found_by_model_and_bytes(prepared):
    data, manifest = prepared
    rec = _pick(manifest, lambda r: r["regions"]["A"]["swizzle"] == "128B" and r["tile"]["cta_group"] == 1)
    images = _images(data, rec)
    a = rec["regions"]["A"]
    # swap the first two 16-byte chunks of A in CTA 1's image: what a copy with a wrong swizzle XOR does
    img = images[1, 0]
    first, second = img[a["offset"]:a["offset"] + 16].copy(), img[a["offset"] + 16:a["offset"] + 32].copy()
    img[a["offset"]:a["offset"] + 16], img[a["offset"] + 16:a["offset"] + 32] = second, first
    report = sdc.Report()
    sdc.check_tile(rec, images, np.load(data / sdc.INPUTS), report)
    assert report.byte_mismatches > 0                                  # (c) copy map vs image
    assert any("model read" in f and "CTA 1" in f for f in report.failures)    # (a) through descriptors
    assert sum(t.mismatches for t in report.operands.values()) > 0


def test_padding_is_checked_only_by_the_byte_comparison(prepared):
    data, manifest = prepared
    # e2m1 under f8f6f4 is stored .b4x16_p64: 8 data bytes then 8 zero bytes per chunk (9.7.16.10.4.4)
    rec = _pick(manifest, lambda r: r["tile"]["a_type"] == "e2m1" and r["tile"]["kind"] == "f8f6f4")
    images = _images(data, rec)
    a = rec["regions"]["A"]
    images[0, 0, a["offset"] + 15] = 0x77           # byte 15 of a chunk: padding, never read by the MMA
    report = sdc.Report()
    sdc.check_tile(rec, images, np.load(data / sdc.INPUTS), report)
    assert report.byte_mismatches == 1
    assert sum(t.mismatches for t in report.operands.values()) == 0   # the model reads no padding
    assert all(m["ok"] for m in report.mma)


def test_wrong_descriptor_field_is_found_by_the_model(prepared):
    data, manifest = prepared
    rec = _pick(manifest, lambda r: r["tile"]["cta_group"] == 1 and r["regions"]["B"]["major"] == "K"
                and r["tile"]["m"] >= 64 and r["tile"]["n"] >= 16)
    layouts = sdc.tile_layouts(rec)
    bad = dict(rec)
    # SBO (Table 40 bits 32-45, bytes >> 4): +1 moves every 8-row group of B by 16 bytes
    bad["B_desc"] = [hex(int(d, 16) + (1 << 32)) for d in rec["B_desc"]]
    report = sdc.Report()
    sdc.check_tile(bad, _images(data, rec), np.load(data / sdc.INPUTS), report, layouts=layouts)
    assert report.byte_mismatches == 0                                 # the copy itself is right
    assert any(" B CTA " in f and ("model read" in f or "cannot read" in f) for f in report.failures)
    # and the guard that refuses a manifest whose descriptors no longer match tilec's
    with pytest.raises(AssertionError, match="changed since prepare"):
        sdc.tile_layouts(bad)


# ------------------------------------------------------------------------------------------------
# Everything (slow): the whole sweep through prepare -> emulate -> check
# ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_full_sweep_emulated(tmp_path):
    manifest = sdc.prepare(tmp_path, assemble=False, log=lambda *a: None)
    assert not manifest["rejected"], manifest["rejected"]
    sdc.emulate(tmp_path, tmp_path / "out", log=lambda *a: None)
    report = sdc.check(tmp_path, tmp_path / "out", log=lambda *a: None)
    assert report.ok, report.failures[:5]
