"""Host half of the H100 wgmma read-side check (tests/gpu/harness/wgmma_read.py).

* the tcgen05 -> wgmma descriptor conversion, against hand-derived values from PTX ISA 9.7.16.4.1
  (Table 40) and 9.7.15.5.1.2.2 ("Matrix Descriptor Format");
* the wgmma rules the generator enforces (PTX 9.7.15.5 "Matrix Shape", 9.7.15.5.2 syntax), each
  confirmed by ptxas rejecting the PTX that breaks it;
* the generated kernels assemble with ptxas for sm_90a (a sample here, the whole sweep under -m slow);
* the shared-memory images read back through tilec's descriptors by the independent model (compiler.sim);
* the whole prepare -> device -> check flow against a CPU stand-in for cupy that executes the
  generated PTX's copy, wgmma chain and fragment stores (descriptor constants and store offsets parsed
  from the PTX text, the D fragment layout restated from PTX 9.7.15.5.1.1.1), and the same flow with a
  deliberately wrong descriptor reading, which the check must catch and explain.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.descriptors.smem import SmemDesc
from compiler.diagnostics import SpecError
from compiler.layout import smem_descriptors
from compiler.sim import numerics
from compiler.sim.smem import read_operand_bits
from compiler.isa.types import TYPES

from tests.gpu.harness import wgmma_read as W


# ------------------------------------------------------------------------------------------------
# Descriptor conversion
# ------------------------------------------------------------------------------------------------

# (swizzle, tcgen05 code at bits 61-63 (Table 40), wgmma code at bits 62-63 (9.7.15.5.1.2.2))
_CODES = [("none", 0, 0), ("32B", 6, 3), ("64B", 4, 2), ("128B", 2, 1)]


@pytest.mark.parametrize("swizzle, tc_code, wg_code", _CODES)
def test_swizzle_code_is_the_tcgen05_code_shifted_one_bit(swizzle, tc_code, wg_code):
    # Table 40 codes 0/6/4/2 vs 9.7.15.5.1.2.2 codes 0/3/2/1: c << 61 == (c >> 1) << 62 when bit 61 is 0.
    assert tc_code << 61 == wg_code << 62
    assert W.WGMMA_SWIZZLE_CODES[swizzle] == wg_code
    desc = SmemDesc(0, 16, 1024, swizzle).encode()
    assert W.wgmma_descriptor(desc) >> 62 == wg_code


def test_k_major_128b_f16_descriptor_by_hand():
    # A 64 x 64 f16 K-major tile, 128B swizzle, at shared offset 0 (compiler/layout.py):
    #   LBO "not used, assumed 1" -> 16 B -> enc 1 (PTX 9.7.16.3.1), bits 16-29
    #   SBO = 8 rows x 128 B = 1024 B -> enc 64, bits 32-45
    #   K step 1 (k0 = 16 f16 = 32 B): start 32 -> enc 2, bits 0-13
    # tcgen05 (Table 40): + fixed bit 46, swizzle code 2 at 61-63.
    tc = smem_descriptors("f16", "K", "128B", 64, 64, 16)
    assert tc[1] == 2 | 1 << 16 | 64 << 32 | 1 << 46 | 2 << 61
    # wgmma (9.7.15.5.1.2.2): same start/LBO/SBO bits, no bit 46, 128B = 1 at bits 62-63.
    assert W.wgmma_descriptor(tc[1]) == 2 | 1 << 16 | 64 << 32 | 1 << 62
    assert W.decode_wgmma_descriptor(W.wgmma_descriptor(tc[1])) == {
        "start_address": 32, "lbo": 16, "sbo": 1024, "base_offset": 0, "swizzle": "128B"}


def test_mn_major_32b_descriptor_by_hand():
    # B = 128 x 32 bf16 MN-major, 32B swizzle (atoms 8 K-rows x 32 B = 16 elements of N):
    #   LBO = stride between MN atoms = one atom = 8 x 32 = 256 B -> enc 16     (9.7.16.3.1, swizzled MN)
    #   SBO = stride between 8-K-row groups = (128 / 16) atoms x 256 B = 2048 B -> enc 128
    #   K step 1 (16 K rows = two row groups): start 2 x 2048 = 4096 -> enc 256
    tc = smem_descriptors("bf16", "MN", "32B", 128, 32, 16)
    assert tc[1] == 256 | 16 << 16 | 128 << 32 | 1 << 46 | 6 << 61
    assert W.wgmma_descriptor(tc[1]) == 256 | 16 << 16 | 128 << 32 | 3 << 62


def test_base_offset_is_carried():
    # A 128B-swizzled tile at 384 B: base offset = (384 >> 7) & 7 = 3 (PTX 9.7.16.4.1 / 9.7.15.5.1.2.2),
    # bits 49-51 in both descriptors; start = 384 -> enc 24.
    tc = smem_descriptors("f16", "K", "128B", 64, 64, 16, base_address=384)[0]
    wg = W.wgmma_descriptor(tc)
    assert wg == 24 | 1 << 16 | 64 << 32 | 3 << 49 | 1 << 62
    assert W.decode_wgmma_descriptor(wg)["base_offset"] == 3


def test_conversion_round_trips_every_sweep_descriptor():
    # Every field of every descriptor in the sweep survives: decode(wgmma) == decode(tcgen05).
    seen = set()
    for case in W.sweep(quick=True):
        a_layout, b_layout = W.case_layouts(case)
        a_base, b_base, _ = W.region_bases(case, a_layout, b_layout)
        descs = W.case_descriptors(case, a_base, b_base)
        for op in ("a", "b"):
            for tc, wg in zip(descs[f"{op}_tcgen05"], descs[f"{op}_wgmma"]):
                ref = SmemDesc.decode(tc)
                got = W.decode_wgmma_descriptor(wg)
                want_bo = ref.base_offset if case.base_offset_field is None else case.base_offset_field
                assert (got["start_address"], got["lbo"], got["sbo"], got["base_offset"], got["swizzle"]) == \
                    (ref.start_address, ref.lbo, ref.sbo, want_bo, ref.swizzle), case.name
                if case.base_offset_field is None:
                    assert W.tcgen05_descriptor(wg) == tc == _to_tcgen05(wg)       # the inverse
                seen.add(ref.swizzle)
    assert seen == {"none", "32B", "64B", "128B"}


@pytest.mark.parametrize("desc, message", [
    (SmemDesc(0, 16, 1024, "128B_base32B").encode(), "no wgmma equivalent"),
    (SmemDesc(0, 2048, 1024, "128B", lbo_mode="absolute").encode(), "absolute-address LBO"),
    (1 << 16 | 64 << 32 | 1 << 62, "bits 46-48"),            # already a wgmma descriptor: no bit 46
])
def test_conversion_rejects_tcgen05_only_features(desc, message):
    with pytest.raises(SpecError, match=message):
        W.wgmma_descriptor(desc)


def test_decode_rejects_unused_bits():
    with pytest.raises(SpecError, match="unused bits"):
        W.decode_wgmma_descriptor(1 << 46)


# ------------------------------------------------------------------------------------------------
# wgmma rules and PTX generation
# ------------------------------------------------------------------------------------------------

def _case(form="f16", n=64, a=("K", "128B"), b=("K", "128B"), **kw):
    return W._case("t", form, n, a, b, **kw)


def _assemble(ptxas, ptx: str, tmp_path: Path):
    import subprocess
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    return subprocess.run([ptxas, "-arch=sm_90a", "-o", str(tmp_path / "k.cubin"), str(src)],
                          capture_output=True, text=True)


def _ptx(case):
    image, rec = W.build_image(case)
    return W.generate_ptx(case, rec, rec["image_bytes"])


@pytest.mark.parametrize("form, n, a, b, field", [
    ("tf32", 64, ("MN", "128B"), ("K", "128B"), "A.major"),    # 9.7.15.5.2: no imm-trans for .tf32
    ("e4m3", 64, ("K", "128B"), ("MN", "64B"), "B.major"),     # ... nor for fp8
    ("s8", 40, ("K", "128B"), ("K", "128B"), "shape.N"),       # Matrix Shape: s8 N = 8,16,24,32,48,..
    ("f16", 264, ("K", "none"), ("K", "none"), "shape.N"),     # f16 N = 8..256
])
def test_generator_enforces_wgmma_rules_and_ptxas_agrees(ptxas, tmp_path, form, n, a, b, field):
    case = W.ReadCase("bad", "t", form, n, W._k_for(W.FORMS[form]), a[0], a[1], b[0], b[1])
    with pytest.raises(SpecError) as err:
        W.validate_case(case)
    assert err.value.field == field
    # The same rule as ptxas sees it: the kernel generated without the check must not assemble.
    image, rec = W.build_image(case)
    ptx = W.generate_ptx(case, rec, rec["image_bytes"], validate=False)
    if field.endswith("major"):        # the form has no imm-trans operands: append the ones MN needs
        ptx = re.sub(r"(wgmma\.mma_async[^;]*), 1, 1;", r"\1, 1, 1, 1, 1;", ptx)
    proc = _assemble(ptxas, ptx, tmp_path)
    assert proc.returncode != 0, "ptxas accepted PTX that breaks the rule"
    assert "wgmma" in proc.stderr or "m64n" in proc.stderr, proc.stderr
    legal = W.ReadCase("ok", "t", form, 64, case.k, "K", a[1], "K", b[1])
    assert _assemble(ptxas, _ptx(legal), tmp_path).returncode == 0


def test_fragment_map_matches_ptx_figure_149():
    # PTX 9.7.15.5.1.1.1 (D of .m64nN, Figure 149): warp w, lane l holds d_i at
    # row 16w + l/4 (+8 for i % 4 in {2, 3}), column 2*(l % 4) + (i & 1) + 8*(i // 4).
    rows, cols = W.fragment_coords(16)
    assert (rows[0, :4].tolist(), cols[0, :4].tolist()) == ([0, 0, 8, 8], [0, 1, 0, 1])
    assert (rows[0, 4], cols[0, 4]) == (0, 8)                    # d4: next 8-column block
    assert (rows[37, 0], cols[37, 0]) == (16 + 1, 2)              # thread 37 = warp 1, lane 5: g 1, t 1
    assert (rows[127, 7], cols[127, 7]) == (48 + 7 + 8, 6 + 1 + 8)
    for n in (8, 200, 256):
        rows, cols = W.fragment_coords(n)
        flat = rows.ravel() * n + cols.ravel()
        assert sorted(flat.tolist()) == list(range(W.M * n)), n    # every element exactly once


def test_sample_kernels_assemble(ptxas, tmp_path):
    # One kernel per form x (A major, B major) x swizzle of the quick sweep, plus every extra group.
    seen, sample = set(), []
    for case in W.sweep(quick=True):
        key = (case.form, case.a_major, case.b_major, case.a_swizzle, case.group)
        if key not in seen:
            seen.add(key)
            sample.append(case)
    for case in sample[::3]:
        proc = _assemble(ptxas, _ptx(case), tmp_path)
        assert proc.returncode == 0, f"{case.name}: {proc.stderr}"


def test_kernel_text_carries_tilec_descriptors():
    case = _case("bf16", 128, ("MN", "64B"), ("K", "32B"))
    image, rec = W.build_image(case)
    ptx = W.generate_ptx(case, rec, rec["image_bytes"])
    consts = [int(x, 16) for x in re.findall(r"mov\.b64 %rd\d+, (0x[0-9a-f]+);", ptx)]
    assert consts[0::2] == rec["a_wgmma"] and consts[1::2] == rec["b_wgmma"]
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == case.steps == 8       # K = 128 bf16, k16
    assert ", 1, 1, 1, 0;" in ptx                                          # imm-trans-a 1 (MN), -b 0 (K)
    assert "fence.proxy.async.shared::cta" in ptx


def test_sweep_covers_every_form_major_and_swizzle():
    full = W.sweep()
    for label in ("f16", "bf16", "tf32", "e4m3", "e5m2", "s8"):
        for am, bm in W._major_pairs(W.FORMS[label]):
            for sw in W.SWIZZLES:
                ns = {c.n for c in full if (c.form, c.a_major, c.b_major, c.a_swizzle, c.b_swizzle, c.group)
                      == (label, am, bm, sw, sw, "sweep")}
                assert ns == {64, 128, 256}, (label, am, bm, sw)
    for case in full:
        W.validate_case(case)
        # K spans two 128-byte rows: a K-major step advances inside an atom and into the next K atom
        assert case.k * TYPES[case.wform.a_type].bits // 8 == 256
    assert len({c.name for c in full}) == len(full)


# ------------------------------------------------------------------------------------------------
# Image preparation vs the independent model
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form, a, b, misalign", [
    ("f16", ("K", "128B"), ("MN", "64B"), (0, 0)),
    ("bf16", ("MN", "32B"), ("MN", "none"), (0, 0)),
    ("tf32", ("K", "64B"), ("K", "none"), (0, 0)),
    ("e5m2", ("K", "32B"), ("K", "128B"), (0, 0)),
    ("s8", ("K", "none"), ("K", "64B"), (0, 0)),
    ("f16", ("MN", "128B"), ("MN", "128B"), (3, 5)),     # base offsets 3 and 5
    ("e4m3", ("K", "64B"), ("K", "32B"), (1, 1)),
])
def test_image_reads_back_through_tilec_descriptors(form, a, b, misalign):
    # compiler.sim gathers every K step of A and B through tilec's tcgen05 descriptors (swizzle phase
    # by the rule measured on the H100) and must get exactly the placed codes.
    case = _case(form, 64, a, b, a_misalign=misalign[0], b_misalign=misalign[1])
    image, rec = W.build_image(case)
    strs = {k: [f"{x:#018x}" for x in v] for k, v in rec.items() if isinstance(v, list)}
    assert W.model_readback(case, image, {**rec, **strs}) == (64 + 64) * case.k


def test_misaligned_tile_pattern_starts_at_its_base():
    # Element (0, 0) of a K-major 128B tile based at 384 B: tilec's layout starts the swizzle pattern at
    # the tile base, so its row is pattern row 0 and its chunk is not moved: bytes 384, 385.
    # With the pattern on absolute addresses (TMA; pattern_row=0) it sits in row (384 >> 7) & 7 = 3,
    # XORing chunk 0 with 3 -> byte 384 + 3*16 (Swizzle<3,4,3>, PTX 9.7.16.3.3).
    for pattern_row, where in ((None, 384), (0, 384 + 48)):
        case = _case("f16", 64, ("K", "128B"), ("K", "128B"), a_misalign=3, pattern_row=pattern_row)
        image, _ = W.build_image(case)
        a_codes, _ = W.make_operands(case)
        assert int(image[where]) | int(image[where + 1]) << 8 == int(a_codes[0, 0]), pattern_row


def test_silicon_rule_prediction():
    # SILICON_PHASE_RULE: phase = (address row - field) mod 2^B. tilec's misaligned tile: the pattern starts
    # at the base row and the field is that row -> predicted to match; the TMA image (pattern row 0)
    # read with tilec's field 3 is predicted to differ, with field 0 to match; 32B (2 rows) compares mod 2.
    def predicted(**kw):
        case = _case("f16", 64, ("K", kw.pop("sw", "128B")), ("K", "128B"), a_misalign=3, **kw)
        a_layout, b_layout = W.case_layouts(case)
        a_base, b_base, _ = W.region_bases(case, a_layout, b_layout)
        d = W.case_descriptors(case, a_base, b_base)
        return case.matches_silicon_rule(a_base, b_base, d["a_wgmma"], d["b_wgmma"])
    assert predicted()
    assert not predicted(pattern_row=0)
    assert predicted(pattern_row=0, base_offset_field=0)
    assert predicted(pattern_row=6, base_offset_field=6) and not predicted(pattern_row=6, base_offset_field=5)
    assert predicted(sw="32B", pattern_row=1, base_offset_field=1)      # 32B tile at 384: row 3 = 1 mod 2


def test_model_uses_the_silicon_phase_rule():
    # compiler.sim's phase = (address row - base offset) mod 2^B, the rule measured on the H100
    # (SILICON_PHASE_RULE). A 128B K-major 8 x 64 f16 tile at 384 with field 3: element (0, 0) sits in
    # address row 3, phase (3 - 3) = 0, so it is read from byte 384 unmoved; silicon_as_model is the identity.
    from compiler.sim.smem import chunk_addresses
    desc = SmemDesc(384, 16, 1024, "128B", base_offset=3).encode()
    assert int(chunk_addresses(desc, "K", 8, 8)[0, 0]) == 384
    assert W.silicon_as_model(SmemDesc.decode(desc)).encode() == desc
    # The same tile read with field 0 (a TMA image swizzled on absolute addresses): phase 3, byte 384 + 48.
    assert int(chunk_addresses(SmemDesc(384, 16, 1024, "128B").encode(), "K", 8, 8)[0, 0]) == 384 + 48


# ------------------------------------------------------------------------------------------------
# The flow against a CPU stand-in for cupy that executes the generated PTX
# ------------------------------------------------------------------------------------------------

_WGMMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.(\w+)\.(\w+)\.(\w+) \{[^}]*\}, "
                    r"%rd(\d+), %rd(\d+), %p(\d)([^;]*);")
_STORE = re.compile(r"st\.global\.v2\.\w+ \[%rd4\+(\d+)\], \{%d(\d+), %d(\d+)\};")


def _to_tcgen05(wg: int) -> int:
    """Test-side inverse of the conversion: bit 46 set, wgmma code c -> tcgen05 code 2c at 61-63."""
    return (wg & ((1 << 62) - 1)) | 1 << 46 | ((wg >> 62) << 1) << 61


class _FakeFunction:
    """Executes one generated kernel on the CPU: copy, wgmma chain (through compiler.sim), stores."""

    def __init__(self, ptx: str, mutate=None):
        self.ptx, self.mutate = ptx, mutate
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0):
        image, d, info = (np.asarray(a) for a in args)
        assert grid == (1,) and block == (128,)
        assert shared_mem <= 48 * 1024 or self.max_dynamic_shared_size_bytes >= shared_mem
        iters = int(re.search(r"setp\.lt\.u32 %p0, %r5, (\d+);", self.ptx).group(1))
        smem = np.zeros(shared_mem, dtype=np.uint8)
        smem[:iters * 2048] = image[:iters * 2048]         # the window base is 1024-aligned: offset 0
        consts = {int(r): int(v, 16) for r, v in re.findall(r"mov\.b64 %rd(\d+), (0x[0-9a-f]+);", self.ptx)}
        acc = None
        for m in _WGMMA.finditer(self.ptx):
            n, k, dt, at, bt = int(m[1]), int(m[2]), m[3], m[4], m[5]
            tail = [int(x) for x in m[9].split(",")[1:]]
            trans = tail[2:4] if len(tail) == 4 else [0, 0]
            # the H100's phase rule (SILICON_PHASE_RULE), expressed for compiler.sim's reader
            a_desc, b_desc = (W.silicon_as_model(SmemDesc.decode(_to_tcgen05(consts[int(r) + 1]))).encode()
                              for r in (m[6], m[7]))
            if self.mutate:
                a_desc, b_desc = self.mutate(a_desc), self.mutate(b_desc)
            kind = "i8" if dt == "s32" else "f16"
            a = numerics.decode(read_operand_bits(smem, a_desc, at, "MN" if trans[0] else "K", 64, k, kind=kind), at)
            b = numerics.decode(read_operand_bits(smem, b_desc, bt, "MN" if trans[1] else "K", n, k, kind=kind), bt)
            step = a @ b.T
            acc = step if m[8] == "1" else acc + step         # %p1 = scale-d false
        out = acc.astype(np.int32).view(np.uint32) if dt == "s32" else acc.astype(np.float32).view(np.uint32)
        stores = [(int(o) // 4, int(i), int(j)) for o, i, j in _STORE.findall(self.ptx)]
        for tid in range(128):
            warp, lane = divmod(tid, 32)
            g, t = lane // 4, lane % 4

            def reg(i):                    # PTX 9.7.15.5.1.1.1, Figure 149 (restated independently)
                return out[16 * warp + g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * t + i % 2]
            base = (16 * warp + g) * n + 2 * t
            for off, i, j in stores:
                d[base + off], d[base + off + 1] = reg(i), reg(j)
        info[:] = (0, 0)


class _FakeCupy:
    """Just the cupy surface run_device uses."""
    uint32 = np.uint32
    __version__ = "fake"

    def __init__(self, mutate=None):
        fake = self

        class RawModule:
            def __init__(self, path):
                self.ptx = Path(path).read_text() if path.endswith(".ptx") else None
                if self.ptx is None:
                    raise RuntimeError("the fake runs PTX only")

            def get_function(self, name):
                assert f".entry {name}(" in self.ptx
                return _FakeFunction(self.ptx, fake.mutate)

        class _Device:
            id = 0
            compute_capability = "90"

            def synchronize(self):
                pass

        class _Runtime:
            @staticmethod
            def getDeviceProperties(i):
                return {"name": b"CPU stand-in"}

            @staticmethod
            def driverGetVersion():
                return 0

        class cuda:
            Device = _Device
            runtime = _Runtime

        self.mutate, self.RawModule, self.cuda = mutate, RawModule, cuda

    full = staticmethod(lambda n, v, dtype: np.full(n, v, dtype=dtype))
    zeros = staticmethod(lambda n, dtype: np.zeros(n, dtype=dtype))
    asarray = staticmethod(np.array)
    asnumpy = staticmethod(np.array)


def _small_sweep(monkeypatch, cases):
    monkeypatch.setattr(W, "sweep", lambda quick=False: cases)


_FLOW_CASES = [
    ("f16", 64, ("K", "128B"), ("MN", "64B"), {}),
    ("bf16", 64, ("MN", "none"), ("K", "32B"), {}),
    ("tf32", 8, ("K", "32B"), ("K", "none"), {}),
    ("e4m3", 200, ("K", "64B"), ("K", "128B"), {}),
    ("s8", 48, ("K", "none"), ("K", "128B"), {}),
    ("f16", 64, ("MN", "128B"), ("MN", "128B"), {"a_misalign": 3, "b_misalign": 5}),
]


_PROBES = [dict(pattern_row=0, base_offset_field=0), dict(pattern_row=0),
           dict(pattern_row=6, base_offset_field=6), dict(pattern_row=6, base_offset_field=5)]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    probes = [W._case("probe", "f16", 64, ("K", "128B"), ("MN", "128B"), a_misalign=3, b_misalign=5, **kw)
              for kw in _PROBES]
    _small_sweep(mp, [_case(*c[:4], **c[4]) for c in _FLOW_CASES] + probes)
    data = tmp_path_factory.mktemp("wgmma")
    manifest = W.prepare(data, assemble=False, log=lambda *a: None)
    yield mp, data, manifest
    mp.undo()


def test_flow_with_cpu_stand_in_passes(flow):
    _, data, manifest = flow
    assert len(manifest["cases"]) == len(_FLOW_CASES) + len(_PROBES) and not manifest["ptxas_failures"]
    out = data / "out"
    status = W.run_device(data, out, isolate=False, cp=_FakeCupy(), log=lambda *a: None)
    assert all(s["status"] == "ok" and s["unwritten"] == 0 for s in status["cases"].values())
    report = W.check(data, out, log=lambda *a: None)
    assert report.failures == [] and report.device_errors == []
    assert report.ok == report.cases == len(_FLOW_CASES)
    # every A and B element of every K step was read back by the model through the tcgen05 descriptors
    assert report.model_elements == sum((64 + c[1]) * W._k_for(W.FORMS[c[0]]) for c in _FLOW_CASES)
    floats = [r for name, r in report.by_case.items() if r["bound_ratio"] is not None and "probe" not in name]
    assert floats and all(r["bound_ratio"] < 1 for r in floats)
    # Probes are observations reported against the silicon rule's prediction, not failures; the stand-in
    # follows the rule, so each comes out as predicted, and a mismatch is explained by the rule.
    assert len(report.probes) == len(_PROBES)
    assert [p["matches"] for p in report.probes.values()] == [True, False, True, False]
    assert all(p["matches"] == p["predicted"] for p in report.probes.values())
    # compiler.sim follows the measured phase rule, so it reads every tile as the device does
    assert report.model_disagreements == []


def _swap_lbo_sbo(desc: int) -> int:
    d = SmemDesc.decode(desc)
    return SmemDesc(d.start_address, d.sbo, d.lbo, d.swizzle, d.base_offset).encode()


def test_flow_catches_and_explains_a_wrong_descriptor_reading(flow):
    # A device that swaps LBO and SBO: every case where the two differ in effect must fail, and the
    # analysis must name the mutation.
    _, data, _ = flow
    out = data / "out_swapped"
    W.run_device(data, out, isolate=False, cp=_FakeCupy(mutate=_swap_lbo_sbo), log=lambda *a: None)
    report = W.check(data, out, log=lambda *a: None)
    assert report.ok < report.cases
    assert any("lbo<->sbo applied to AB" in f for f in report.failures), report.failures


def test_flow_catches_a_wrong_fragment_store(flow, monkeypatch):
    # The D layout moved by one column in the stand-in: the analysis says "fragment store".
    _, data, _ = flow
    original = _STORE

    class _Shifted:
        @staticmethod
        def findall(text):
            return [(str(int(o) + 4), i, j) for o, i, j in original.findall(text)]
    monkeypatch.setattr(sys.modules[__name__], "_STORE", _Shifted)
    out = data / "out_shifted"
    try:
        W.run_device(data, out, isolate=False, cp=_FakeCupy(), log=lambda *a: None)
    finally:
        monkeypatch.undo()
    status = json.loads((out / W.STATUS).read_text())
    # shifted stores leave column 0 of every 8 unwritten (sentinel) or go out of bounds
    assert any(s["status"] != "ok" or s.get("unwritten") for s in status["cases"].values())
    report = W.check(data, out, log=lambda *a: None, explain=False)
    assert report.ok < report.cases


# ------------------------------------------------------------------------------------------------
# The full sweep (slow)
# ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_full_sweep_prepares_and_assembles(ptxas, tmp_path):
    manifest = W.prepare(tmp_path, log=lambda *a: None)
    assert not manifest["ptxas_failures"]
    assert len(manifest["cases"]) == len(W.sweep())
    images = np.load(tmp_path / W.IMAGES)
    for rec in [r for r in manifest["cases"] if r["group"] != "probe"][::7]:   # probes move the pattern
        case = W.ReadCase(**{k: rec[k] for k in W.ReadCase.__dataclass_fields__})
        W.model_readback(case, images[case.entry], rec)
