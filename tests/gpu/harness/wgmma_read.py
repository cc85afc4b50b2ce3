"""Prove the READ side of tilec's shared-memory descriptors on a Hopper GPU, through `wgmma`.

No Blackwell GPU is available, and the smem-dump check (tests/gpu/harness/smem_dump.py) proves only the
write side: that tilec's copy code puts bytes where `compiler/layout.py` says. Whether a tensor core
*reads* those images correctly through tilec's descriptors (LBO/SBO roles, swizzle, the start-address
advance of a K step inside a swizzle atom, the base offset) needs silicon. Hopper's
`wgmma.mma_async` (sm_90a) reads shared memory through a 64-bit matrix descriptor with the same
canonical layouts (PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout", Table 38 swizzle atoms; the
tcgen05 layouts of 9.7.16.3 are derived from it), so a tcgen05 descriptor that tilec builds can be
converted field for field and run (PTX 9.7.15.5.1.2.2 "Matrix Descriptor Format" vs 9.7.16.4.1 Table 40):

    field              tcgen05 (Table 40)              wgmma (9.7.15.5.1.2.2)
    start address      bits 0-13   (x & 0x3FFFF) >> 4  bits 0-13, same encoding
    LBO                bits 16-29                      bits 16-29
    SBO                bits 32-45                      bits 32-45
    fixed 0b001        bits 46-48  (bit 46 = 1)        -- (not present: cleared)
    base offset        bits 49-51                      bits 49-51
    LBO mode           bit 52 (sm_103a)                -- (relative only)
    swizzle            bits 61-63: 0/6/4/2 = none/32B/64B/128B, 1 = 128B with 32-byte atoms
                                                       bits 62-63: 0/3/2/1 = none/32B/64B/128B

i.e. each tcgen05 swizzle code is the wgmma code shifted left one bit (bit 61, tcgen05's "32-byte
atomicity" flag, is 0 for the shared modes). 128B-with-32B-atoms (tcgen05 code 1), the absolute-LBO
mode and the padded sub-byte storage have no wgmma equivalent and are out of scope.

Flow (same shape as smem_dump.py):

  prepare  (host; tilec + ml_dtypes + ptxas) for each case of the sweep: random A (64 x K) and B (N x K)
           codes, placed into one shared-memory image at tilec's `canonical_layout(...).offset`
           (A at image offset a_base, B at b_base; a misaligned tile's swizzle pattern starts at its
           base, as compiler/layout.py defines it; probes move the pattern start), tilec's per-K-step
           descriptors `smem_descriptors(..., base_address=...)` converted to wgmma, a hand-written
           sm_90a kernel with those descriptors as constants, assembled by ptxas; everything into one
           folder (`.wgmma/`).
  device   (GPU; numpy + cupy only) launches each kernel (one CTA, one warpgroup) and saves D.
  check    (host) D against numpy (integers exactly, floats within a per-type bound), plus the
           independent model (compiler.sim) reading each image back through the tcgen05 descriptors.
           A mismatch is analysed by re-running the model with mutated descriptors (explain_mismatch).

The kernel: 128 threads copy the image from global to shared (16 B per thread-iteration, straight copy:
the image is already in canonical layout), `fence.proxy.async.shared::cta` (the tensor core reads
through the async proxy), `bar.sync`, `wgmma.fence`, one `wgmma.mma_async` per K step with the
runtime shared base added to each descriptor's start-address field (the window base is rounded up to
1024 B, so the swizzle phase of every region is that of its image offset), `wgmma.commit_group`,
`wgmma.wait_group 0`, then each thread stores its accumulator fragment (PTX 9.7.15.5.1.1.1, Figure 149).

The GPU test is tests/gpu/test_wgmma_read.py (quick sweep; the full sweep under `-m "gpu and slow"`).
By hand, from the repository root:
  python3 -m tests.gpu.harness.wgmma_read prepare --data .wgmma [--quick]
  python3 -m tests.gpu.harness.wgmma_read device  --data .wgmma --out OUTDIR      # on the GPU
  python3 -m tests.gpu.harness.wgmma_read check   --data .wgmma --results OUTDIR [--json report.json]
  python3 -m tests.gpu.harness.wgmma_read all     --data DIR [--quick]             # one GPU machine

Only numpy and the standard library are imported at module level; tilec and compiler.sim are
imported lazily by the host paths, so `device` runs where ml_dtypes is absent.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]      # tests/gpu/harness/ -> the repository root
MODULE = "tests.gpu.harness.wgmma_read"         # what device workers run (`python -m MODULE device-worker`)

MANIFEST = "manifest.json"
IMAGES = "images.npz"
RESULTS = "results.npz"
STATUS = "device.json"
THREADS = 128                 # one warpgroup: 4 consecutive warps (PTX 9.7.15.1)
COPY_BYTES = 16 * THREADS     # bytes the whole block copies per iteration (one 16-byte vector each)
M = 64                        # wgmma's only M (PTX 9.7.15.5 "Matrix Shape": .m64nNk*)
SMEM_ALIGN = 1024             # the kernel rounds its shared window up to the 128B-swizzle repeat
D_SENTINEL = 0xFFFFFFFF       # D is pre-filled with this (a NaN / -1): every element must be written
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8    # CUDA driver API enum CUfunction_attribute
WORKER_TIMEOUT_S = 90       # a worker that runs longer is stuck on a hung kernel
WORKER_CUDA_ERROR = 3         # exit status of a device worker whose CUDA context is unusable
PTX_VERSION = "8.0"           # wgmma and fence.proxy.async: PTX ISA 8.0, sm_90a (9.7.15.5.2 target notes)


# ==================================================================================================
# The wgmma matrix descriptor (PTX ISA 9.7.15.5.1.2.2) and the conversion from tilec's tcgen05 one
# ==================================================================================================

@dataclass(frozen=True)
class Field:
    """Bits lo .. lo+width-1 of a packed 64-bit descriptor."""
    name: str
    lo: int
    width: int

    def extract(self, value: int) -> int:
        return (value >> self.lo) & ((1 << self.width) - 1)

    def insert(self, raw: int) -> int:
        if not 0 <= raw < 1 << self.width:
            raise ValueError(f"{self.name} = {raw} does not fit {self.width} bits")
        return raw << self.lo


# PTX 9.7.15.5.1.2.2 "Matrix Descriptor Format" (every other bit is unused / zero).
WGMMA_FIELDS = (
    Field("start_address", 0, 14),     # bits 13-0: matrix-descriptor-encode(start address)
    Field("leading_byte_offset", 16, 14),  # bits 29-16: matrix-descriptor-encode(LBO)
    Field("stride_byte_offset", 32, 14),   # bits 45-32: matrix-descriptor-encode(SBO)
    Field("base_offset", 49, 3),       # bits 51-49: matrix base offset
    Field("swizzle", 62, 2),           # bits 63-62: swizzling mode
)
WGMMA_FIELD = {f.name: f for f in WGMMA_FIELDS}
# bits 63-62 (PTX 9.7.15.5.1.2.2): 0 no swizzle, 1 128-Byte, 2 64-Byte, 3 32-Byte.
WGMMA_SWIZZLE_CODES: dict[str, int] = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
WGMMA_SWIZZLE_NAMES: dict[int, str] = {c: n for n, c in WGMMA_SWIZZLE_CODES.items()}
# Fields copied bit for bit: tilec's tcgen05 field names (compiler/descriptors/smem.py) -> wgmma's.
_COPIED_FIELDS = (("start_address", "start_address"), ("leading_byte_offset", "leading_byte_offset"),
                  ("stride_byte_offset", "stride_byte_offset"), ("base_offset", "base_offset"))


def wgmma_descriptor(tcgen05_desc: int) -> int:
    """The wgmma matrix descriptor that reads what the tcgen05 shared-memory descriptor describes.

    Start address, LBO, SBO and base offset keep their bits (same positions, same 16-byte encoding);
    the fixed bit 46 is dropped and the swizzle name is re-encoded at bits 62-63. SpecError for the
    tcgen05-only features (module docstring).
    """
    from compiler.descriptors.smem import SmemDesc
    from compiler.diagnostics import SpecError
    from compiler.isa import descriptors as tc          # the tcgen05 field table (PTX 9.7.16.4.1)

    desc = SmemDesc.decode(tcgen05_desc)          # rejects reserved bits, missing bit 46, bad codes
    if desc.swizzle not in WGMMA_SWIZZLE_CODES:
        raise SpecError(f"swizzle {desc.swizzle} (tcgen05 code {tc.SWIZZLE_CODES[desc.swizzle]}) has no wgmma "
                        "equivalent: wgmma's 2-bit field knows none/128B/64B/32B (PTX 9.7.15.5.1.2.2)",
                        field="swizzle", hint="128-byte swizzle with 32-byte atoms exists on tcgen05 only")
    if desc.lbo_mode != "relative":
        raise SpecError("the absolute-address LBO mode (tcgen05 bit 52, sm_103a) has no wgmma equivalent",
                        field="lbo_mode")
    tc_fields = {f.name: f for f in tc.FIELDS}
    value = 0
    for tc_name, wg_name in _COPIED_FIELDS:
        value |= WGMMA_FIELD[wg_name].insert(tc_fields[tc_name].extract(tcgen05_desc))
    return value | WGMMA_FIELD["swizzle"].insert(WGMMA_SWIZZLE_CODES[desc.swizzle])


def tcgen05_descriptor(wgmma_desc: int) -> int:
    """Inverse of wgmma_descriptor: the tcgen05 descriptor (Table 40) reading the same layout."""
    from compiler.descriptors.smem import SmemDesc

    f = decode_wgmma_descriptor(wgmma_desc)
    return SmemDesc(f["start_address"], f["lbo"], f["sbo"], f["swizzle"], f["base_offset"]).encode()


def decode_wgmma_descriptor(value: int) -> dict:
    """Fields of a wgmma descriptor, byte quantities multiplied back by 16; rejects set unused bits."""
    from compiler.diagnostics import SpecError

    if not 0 <= value < 1 << 64:
        raise SpecError(f"wgmma descriptor {value!r} is not a 64-bit value")
    used = sum(((1 << f.width) - 1) << f.lo for f in WGMMA_FIELDS)
    if value & ~used:
        raise SpecError(f"wgmma descriptor {value:#018x} sets unused bits {value & ~used:#018x} "
                        "(PTX 9.7.15.5.1.2.2 defines only bits 0-13, 16-29, 32-45, 49-51, 62-63)")
    raw = {f.name: f.extract(value) for f in WGMMA_FIELDS}
    return {"start_address": raw["start_address"] << 4, "lbo": raw["leading_byte_offset"] << 4,
            "sbo": raw["stride_byte_offset"] << 4, "base_offset": raw["base_offset"],
            "swizzle": WGMMA_SWIZZLE_NAMES[raw["swizzle"]]}


# ==================================================================================================
# wgmma forms used by the sweep (PTX 9.7.15.5.2 "wgmma.mma_async", 9.7.15.5 "Matrix Shape")
# ==================================================================================================

@dataclass(frozen=True)
class WgmmaForm:
    """One `wgmma.mma_async` type combination with A and B both from shared-memory descriptors."""
    label: str
    a_type: str                  # tilec TYPES names (= PTX spellings)
    b_type: str
    d_type: str
    k: int                       # MMA K: 256 bits of K per step (Matrix Shape table: k16 / k8 / k32)
    tail: str                    # operands after scale-d (syntax of 9.7.15.5.2, one line per type class)
    transposable: bool           # imm-trans-a/b exist only for .f16/.bf16 (else K-major only)
    n_values: tuple[int, ...]    # legal N (Matrix Shape table)

    @property
    def suffix(self) -> str:
        return f".{self.d_type}.{self.a_type}.{self.b_type}"


_N_STEP8 = tuple(range(8, 257, 8))                       # .f16/.bf16/.tf32/.e4m3/.e5m2: N = 8..256 step 8
_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))         # .s8/.u8: 8, 16, 24, then 32..256 step 16
# Operands after `d, a-desc, b-desc, scale-d` (PTX 9.7.15.5.2 syntax):
#   .f16/.bf16 : imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
#   .tf32, fp8 : imm-scale-a, imm-scale-b                (no transpose: K-major only)
#   integer    : none
_TAIL_TRANS = ", 1, 1, {trans_a}, {trans_b}"
_TAIL_SCALE = ", 1, 1"
FORMS: dict[str, WgmmaForm] = {f.label: f for f in (
    WgmmaForm("f16", "f16", "f16", "f32", 16, _TAIL_TRANS, True, _N_STEP8),
    WgmmaForm("bf16", "bf16", "bf16", "f32", 16, _TAIL_TRANS, True, _N_STEP8),
    WgmmaForm("tf32", "tf32", "tf32", "f32", 8, _TAIL_SCALE, False, _N_STEP8),
    WgmmaForm("e4m3", "e4m3", "e4m3", "f32", 32, _TAIL_SCALE, False, _N_STEP8),
    WgmmaForm("e5m2", "e5m2", "e5m2", "f32", 32, _TAIL_SCALE, False, _N_STEP8),
    WgmmaForm("e4m3xe5m2", "e4m3", "e5m2", "f32", 32, _TAIL_SCALE, False, _N_STEP8),
    WgmmaForm("s8", "s8", "s8", "s32", 32, "", False, _N_INT),
)}
_TRANS = {"K": 0, "MN": 1}         # 9.7.15.5.1.2: imm-trans 0 = K-major, 1 = M-/N-major
SWIZZLES = ("none", "32B", "64B", "128B")
K_LINE_BYTES = 256                 # K extent per tile: two 128-byte swizzle rows, so every K-major mode
#                                    steps inside an atom AND into the next K atom (32-byte steps)
# Float results must lie within REL_TOL * (steps + 1) * sum|a||b| of the exact product. 16/32-bit inputs:
# 2^-20 (a few fp32 ulps per step). fp8: 2^-12, allowing the coarser fp8 accumulation Hopper is known
# for; a misread element moves D by ~2^-8 of sum|a||b| (one of 256 products), far above either bound.
# Measured on the H100 (docs/verification.md, "H100 wgmma read-side check"): wgmma XORs each 16-byte
# chunk's address bits 4.. with ((address >> 7) - base_offset) mod 2^B, B = 3/2/1 for 128B/64B/32B, on the
# absolute shared address: the base offset names the 128-byte row (mod 8) where the pattern starts.
SILICON_PHASE_RULE = "phase = ((address >> 7) - base_offset) mod 2^B"
_SWIZZLE_ROWS = {"32B": 2, "64B": 4, "128B": 8}     # 2^B rows of 128 bytes before the XOR pattern repeats
REL_TOL = {"f16": 2.0 ** -20, "bf16": 2.0 ** -20, "tf32": 2.0 ** -20, "e4m3": 2.0 ** -12, "e5m2": 2.0 ** -12}


# ==================================================================================================
# The sweep
# ==================================================================================================

@dataclass(frozen=True)
class ReadCase:
    """One kernel: D(64 x N) = A(64 x K) . B(N x K)^T, A and B read through tilec's descriptors."""
    name: str
    group: str                    # sweep | mixed | odd_n | base_offset | probe
    form: str                     # FORMS key
    n: int
    k: int
    a_major: str
    a_swizzle: str
    b_major: str
    b_swizzle: str
    a_misalign: int = 0           # region base = aligned + 128 * misalign bytes (base offset != 0)
    b_misalign: int = 0
    # Probes of the hardware's swizzle phase (group "probe"); None = tilec's definition:
    pattern_row: int | None = None       # 128-byte row (mod 8) where the image's swizzle pattern starts
    #                                      (None: at each tile's base, as compiler.layout defines it;
    #                                      0: on the 1024-byte boundaries = absolute, as TMA writes)
    base_offset_field: int | None = None  # descriptor bits 49-51 (None: tilec's (base >> 7) & 7)

    def pattern_rows(self, a_base: int, b_base: int) -> tuple[int, int]:
        """The row where each operand's swizzle pattern starts."""
        if self.pattern_row is not None:
            return self.pattern_row, self.pattern_row
        return (a_base >> 7) & 7, (b_base >> 7) & 7

    def matches_silicon_rule(self, a_base: int, b_base: int, a_descs: list[int], b_descs: list[int]) -> bool:
        """Whether D should equal numpy under the rule measured on the H100 (SILICON_PHASE_RULE): each
        operand's base-offset field equals its pattern row modulo the swizzle repeat in rows."""
        ok = True
        for swizzle, row, descs in ((self.a_swizzle, self.pattern_rows(a_base, b_base)[0], a_descs),
                                    (self.b_swizzle, self.pattern_rows(a_base, b_base)[1], b_descs)):
            if swizzle == "none":
                continue
            repeat = _SWIZZLE_ROWS[swizzle]
            ok &= all((WGMMA_FIELD["base_offset"].extract(d) - row) % repeat == 0 for d in descs)
        return ok

    @property
    def wform(self) -> WgmmaForm:
        return FORMS[self.form]

    @property
    def steps(self) -> int:
        return self.k // self.wform.k

    @property
    def entry(self) -> str:
        return "wgmma_" + self.name

    @property
    def seed(self) -> int:
        import zlib
        return zlib.crc32(self.name.encode())


def _k_for(form: WgmmaForm) -> int:
    from compiler.isa.types import TYPES
    return K_LINE_BYTES * 8 // TYPES[form.a_type].bits


def _major_pairs(form: WgmmaForm) -> list[tuple[str, str]]:
    majors = ("K", "MN") if form.transposable else ("K",)
    return [(a, b) for a in majors for b in majors]


def _case(group: str, form: str, n: int, a: tuple[str, str], b: tuple[str, str], **kw) -> ReadCase:
    f = FORMS[form]
    parts = [group, form, f"n{n}", f"A{a[0]}_{a[1]}", f"B{b[0]}_{b[1]}"]
    if kw.get("a_misalign"):
        parts.append(f"abase{128 * kw['a_misalign']}")
    if kw.get("b_misalign"):
        parts.append(f"bbase{128 * kw['b_misalign']}")
    if kw.get("pattern_row") is not None:
        parts.append(f"pattern{kw['pattern_row']}")
    if kw.get("base_offset_field") is not None:
        parts.append(f"bo{kw['base_offset_field']}")
    return ReadCase("_".join(parts), group, form, n, _k_for(f), a[0], a[1], b[0], b[1], **kw)


def sweep(quick: bool = False) -> list[ReadCase]:
    """The cases. Full: every form x legal (A major, B major) x swizzle x N in (64, 128, 256), then mixed
    swizzles, odd N, misaligned bases (tilec's base offset) and base-offset probes. Quick (GPU test):
    every form x major pair x swizzle once, N cycling, plus one case of each extra group."""
    cases: list[ReadCase] = []
    ns = (64, 128, 256)
    for label in ("f16", "bf16", "tf32", "e4m3", "e5m2", "s8"):
        form = FORMS[label]
        for i, (am, bm) in enumerate(_major_pairs(form)):
            for j, sw in enumerate(SWIZZLES):
                for n in ((ns[(i + j) % 3],) if quick else ns):
                    cases.append(_case("sweep", label, n, (am, sw), (bm, sw)))
    # A and B with different swizzles (descriptors must not agree by accident), majors rotating.
    pairs = [(sa, sb) for sa in SWIZZLES for sb in SWIZZLES if sa != sb]
    for label in ("f16", "e4m3"):
        majors = _major_pairs(FORMS[label])
        for i, (sa, sb) in enumerate(pairs[:3] if quick else pairs):
            am, bm = majors[i % len(majors)]
            cases.append(_case("mixed", label, 128, (am, sa), (bm, sb)))
    # N = 8 (one 8-row group of B) and N = 200 (25 groups: not a power of two), K-major B.
    for label in ("f16", "tf32", "e4m3"):
        for sw in (("128B",) if quick else SWIZZLES):
            for n in ((200,) if quick else (8, 200)):
                cases.append(_case("odd_n", label, n, ("K", sw), ("K", sw)))
    cases.append(_case("mixed", "e4m3xe5m2", 128, ("K", "128B"), ("K", "64B")))
    if not quick:
        for sw in SWIZZLES:
            cases.append(_case("sweep", "e4m3xe5m2", 64, ("K", sw), ("K", sw)))
    # Regions that do not start on their swizzle repeat. tilec defines such a tile's swizzle pattern to
    # start at the tile base (compiler/layout.py: offset() is relative to the base) and sets the base
    # offset to (base >> 7) & 7 (PTX 9.7.16.4.1 / 9.7.15.5.1.2.2). A and B get different rows, so a
    # wrong phase cannot permute K the same way in both (which D could not see).
    misaligned = [("128B", 3, 5), ("64B", 1, 2), ("32B", 1, 0)]
    for label in ("f16", "e4m3"):
        for am, bm in (_major_pairs(FORMS[label])[::3]):          # K/K and MN/MN (f16), K/K (e4m3)
            for sw, ja, jb in (misaligned[:1] if quick else misaligned):
                tile = dict(a_misalign=ja, b_misalign=jb)
                cases.append(_case("base_offset", label, 64, (am, sw), (bm, sw), **tile))
                # Probes of the phase rule (reported against SILICON_PHASE_RULE, not a verdict on tilec):
                # the image swizzled on absolute addresses (TMA) read with base offset 0 and with tilec's
                # field; a pattern starting at a row unrelated to the base, read with that row and with
                # the row before (a phase error of 1 permutes chunks differently per row, so D sees it; an
                # error of 4 in 128B would XOR every row alike, a K order shared by A and B: invisible).
                probes = [dict(pattern_row=0, base_offset_field=0), dict(pattern_row=0)]
                if sw != "32B":
                    probes += [dict(pattern_row=6, base_offset_field=6), dict(pattern_row=6, base_offset_field=5)]
                for probe in (probes[:2] if quick else probes):
                    cases.append(_case("probe", label, 64, (am, sw), (bm, sw), **tile, **probe))
    return cases


def validate_case(case: ReadCase) -> None:
    """SpecError where the case breaks a wgmma rule (PTX 9.7.15.5)."""
    from compiler.diagnostics import SpecError

    form = case.wform
    if case.n not in form.n_values:
        raise SpecError(f"N = {case.n} is not a valid .m64nNk{form.k} N for {form.suffix} "
                        f"(PTX 9.7.15.5 Matrix Shape)", field="shape.N")
    for op, major in (("A", case.a_major), ("B", case.b_major)):
        if major not in _TRANS:
            raise SpecError(f"{op} major must be K or MN, not {major!r}", field=f"{op}.major")
        if major == "MN" and not form.transposable:
            raise SpecError(f"{op} is MN-major but wgmma {form.suffix} has no imm-trans operand: only "
                            ".f16/.bf16 may be transposed (PTX 9.7.15.5.2)", field=f"{op}.major",
                            hint="store tf32 / 8-bit operands K-major")
    if case.k % form.k:
        raise SpecError(f"K = {case.k} is not a whole number of k{form.k} steps", field="shape.K")


# ==================================================================================================
# Host data: operands, tilec layouts and descriptors, the shared-memory image
# ==================================================================================================

def case_layouts(case: ReadCase):
    """tilec's canonical layouts of A (64 x K) and B (N x K)."""
    from compiler.layout import canonical_layout
    form = case.wform
    return (canonical_layout(form.a_type, case.a_major, case.a_swizzle, M, case.k),
            canonical_layout(form.b_type, case.b_major, case.b_swizzle, case.n, case.k))


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def region_bases(case: ReadCase, a_layout, b_layout) -> tuple[int, int, int]:
    """(A base, B base, image bytes), image offsets from the kernel's 1024-aligned shared base."""
    a_base = 128 * case.a_misalign
    b_base = _align_up(a_base + a_layout.size_bytes, SMEM_ALIGN) + 128 * case.b_misalign
    return a_base, b_base, _align_up(b_base + b_layout.size_bytes, COPY_BYTES)


def case_descriptors(case: ReadCase, a_base: int, b_base: int) -> dict[str, list[int]]:
    """tilec's tcgen05 descriptors per K step (relative to the shared base) and their wgmma forms."""
    from compiler.descriptors.smem import BASE_OFFSET
    from compiler.layout import smem_descriptors

    form = case.wform
    out: dict[str, list[int]] = {}
    for op, dtype, major, swizzle, mn, base in (("a", form.a_type, case.a_major, case.a_swizzle, M, a_base),
                                                ("b", form.b_type, case.b_major, case.b_swizzle, case.n, b_base)):
        tc = smem_descriptors(dtype, major, swizzle, mn, case.k, form.k, base_address=base)
        wg = [wgmma_descriptor(d) for d in tc]
        if case.base_offset_field is not None:        # probe: override bits 49-51
            field = WGMMA_FIELD["base_offset"]
            wg = [(d & ~(((1 << BASE_OFFSET.width) - 1) << field.lo)) | field.insert(case.base_offset_field)
                  for d in wg]
        out[f"{op}_tcgen05"], out[f"{op}_wgmma"] = tc, wg
    return out


def make_operands(case: ReadCase) -> tuple[np.ndarray, np.ndarray]:
    """Random element codes (uint64) of A (64 x K) and B (N x K), from the case's seed."""
    from compiler.sim import numerics

    rng = np.random.default_rng(case.seed)
    form = case.wform
    codes = []
    for dtype, rows in ((form.a_type, M), (form.b_type, case.n)):
        limit = 4.0 if dtype in ("e4m3", "e5m2") else None
        values = numerics.representable(dtype, rng, (rows, case.k), limit=limit)
        codes.append(numerics.encode(values, dtype))
    return codes[0], codes[1]


@functools.lru_cache(maxsize=64)
def element_offsets(layout) -> np.ndarray:
    """`layout.offset(row, k)` of every element (cached: many cases share a layout; read-only)."""
    offsets = np.array([[layout.offset(r, c) for c in range(layout.k)] for r in range(layout.mn)], dtype=np.int64)
    offsets.flags.writeable = False
    return offsets


def place(image: np.ndarray, layout, base: int, codes: np.ndarray, pattern_row: int | None = None) -> None:
    """Store element codes at tilec's `layout.offset` from `base` (full-byte types).

    With `pattern_row` None the swizzle pattern starts at the tile base: byte base + layout.offset(r, k),
    compiler/layout.py's definition. Otherwise the pattern starts at 128-byte rows = pattern_row (mod 8):
    each 16-byte chunk at unswizzled address A = base + u is XORed with ((A >> 7) - pattern_row) mod
    2^B in bits 4.. (Swizzle<B,4,3> of PTX 9.7.16.3.3 with the phase counted from the pattern start);
    pattern_row 0 is swizzling on absolute addresses, what TMA writes.
    """
    from compiler.isa.swizzle import SWIZZLE_MODES as SWIZZLES
    from compiler.layout import swizzle_bytes

    nbytes = layout.elem_bits // 8
    offsets = element_offsets(layout)
    if offsets.shape != codes.shape:
        raise ValueError(f"codes {codes.shape} do not fit the {layout.mn} x {layout.k} layout")
    if pattern_row is None or layout.swizzle == "none":
        addresses = base + offsets
    else:
        if base % 128:
            raise ValueError("a swizzled tile base must be 128-byte aligned")
        mode = SWIZZLES[layout.swizzle]
        chunk, within = offsets & ~15, offsets & 15
        unswizzled = np.vectorize(lambda x: swizzle_bytes(int(x), layout.swizzle))(chunk)   # an involution
        absolute = base + unswizzled
        phase = ((absolute >> 7) - pattern_row) & ((1 << mode.xor_bits) - 1)
        addresses = (absolute ^ (phase << mode.xor_base)) + within
    for byte in range(nbytes):
        image[addresses + byte] = ((codes >> np.uint64(8 * byte)) & np.uint64(0xFF)).astype(np.uint8)


def build_image(case: ReadCase) -> tuple[np.ndarray, dict]:
    """(shared-memory image, record fields: bases, descriptors) for one case."""
    a_layout, b_layout = case_layouts(case)
    a_base, b_base, size = region_bases(case, a_layout, b_layout)
    a_codes, b_codes = make_operands(case)
    image = np.zeros(size, dtype=np.uint8)
    place(image, a_layout, a_base, a_codes, case.pattern_row)
    place(image, b_layout, b_base, b_codes, case.pattern_row)
    descs = case_descriptors(case, a_base, b_base)
    return image, {"a_base": a_base, "b_base": b_base, "image_bytes": size, **descs,
                   "a_lbo": a_layout.lbo, "a_sbo": a_layout.sbo, "b_lbo": b_layout.lbo, "b_sbo": b_layout.sbo}


# ==================================================================================================
# The kernel (hand-written sm_90a PTX)
# ==================================================================================================

def fragment_map(n: int) -> list[tuple[int, int, int]]:
    """(register index, row offset, column) of the f32/s32 accumulator of .m64nN (PTX 9.7.15.5.1.1.1,
    Figure 149): thread lane l of warp w holds d_i at row 16*w + l//4 + 8*((i >> 1) & 1), column
    8*(i >> 2) + 2*(l % 4) + (i & 1). Returned relative to (16*w + l//4, 2*(l % 4))."""
    return [(i, 8 * ((i >> 1) & 1), 8 * (i >> 2) + (i & 1)) for i in range(n // 2)]


def fragment_coords(n: int) -> np.ndarray:
    """rows, cols [128 threads, N/2 registers] of every accumulator element (host mirror of the store)."""
    coords = np.zeros((2, THREADS, n // 2), dtype=np.int64)
    for tid in range(THREADS):
        warp, lane = divmod(tid, 32)
        for i, dr, dc in fragment_map(n):
            coords[:, tid, i] = (16 * warp + lane // 4 + dr, 2 * (lane % 4) + dc)
    return coords


def generate_ptx(case: ReadCase, descs: dict[str, list[int]], image_bytes: int, validate: bool = True) -> str:
    """The kernel for one case: copy image -> smem, chain of wgmma over the K steps, store D.
    (`validate=False` only for tests that show ptxas rejecting what validate_case rejects.)"""
    if validate:
        validate_case(case)
    form = case.wform
    if image_bytes % COPY_BYTES:
        raise ValueError("image size must be a multiple of the block's copy width")
    nregs = case.n // 2
    dreg = "f32" if form.d_type == "f32" else "s32"
    zero = "0f00000000" if dreg == "f32" else "0"
    regs = ", ".join(f"%d{i}" for i in range(nregs))
    tail = form.tail.format(trans_a=_TRANS[case.a_major], trans_b=_TRANS[case.b_major])
    steps = case.steps
    lines = [
        f"// {case.name}: D(64x{case.n}) = A(64x{case.k}, {case.a_major}-major, {case.a_swizzle}) . "
        f"B({case.n}x{case.k}, {case.b_major}-major, {case.b_swizzle})^T; {steps} x wgmma k{form.k}",
        f".version {PTX_VERSION}",
        ".target sm_90a",
        ".address_size 64",
        "",
        ".extern .shared .align 16 .b8 wg_smem[];",
        "",
        f".visible .entry {case.entry}(.param .u64 p_image, .param .u64 p_d, .param .u64 p_info)",
        f".reqntid {THREADS}, 1, 1",
        "{",
        "    .reg .pred %p<4>;",
        "    .reg .b32 %r<24>;",
        f"    .reg .b64 %rd<{16 + 4 * steps}>;",
        f"    .reg .{dreg} %d<{nregs}>;",
        "",
        "    mov.u32 %r0, %tid.x;",
        "    mov.u32 %r1, wg_smem;                 // shared-window address of the dynamic buffer",
        f"    add.u32 %r2, %r1, {SMEM_ALIGN - 1};",
        f"    and.b32 %r2, %r2, {-SMEM_ALIGN};      // base: 1024-aligned (128B swizzle repeat)",
        "    ld.param.u64 %rd0, [p_image];",
        "    cvta.to.global.u64 %rd0, %rd0;",
        "    mul.wide.u32 %rd1, %r0, 16;",
        "    add.s64 %rd2, %rd0, %rd1;             // this thread's first 16 bytes in global",
        "    shl.b32 %r3, %r0, 4;",
        "    add.u32 %r4, %r2, %r3;                // ... and in shared",
        "    mov.u32 %r5, 0;",
        "COPY:",
        "    ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd2];",
        "    st.shared.v4.u32 [%r4], {%r6, %r7, %r8, %r9};",
        f"    add.s64 %rd2, %rd2, {COPY_BYTES};",
        f"    add.u32 %r4, %r4, {COPY_BYTES};",
        "    add.u32 %r5, %r5, 1;",
        f"    setp.lt.u32 %p0, %r5, {image_bytes // COPY_BYTES};",
        "    @%p0 bra COPY;",
        "    fence.proxy.async.shared::cta;        // generic-proxy stores -> async-proxy (tensor core) reads",
        "    bar.sync 0;",
        "    shr.u32 %r10, %r2, 4;",
        "    cvt.u64.u32 %rd3, %r10;               // matrix-descriptor-encode(base): added to bits 0-13",
        "    setp.ne.u32 %p1, %r0, %r0;            // scale-d = false: first step writes D = A.B",
        "    setp.eq.u32 %p2, %r0, %r0;            // scale-d = true: later steps accumulate",
    ]
    lines += [f"    mov.{dreg} %d{i}, {zero};" for i in range(nregs)]
    lines.append("    wgmma.fence.sync.aligned;")
    for s in range(steps):
        ra, rb = 16 + 4 * s, 18 + 4 * s
        for reg, desc in ((ra, descs["a_wgmma"][s]), (rb, descs["b_wgmma"][s])):
            lines.append(f"    mov.b64 %rd{reg + 1}, {desc:#018x};")
            lines.append(f"    add.s64 %rd{reg}, %rd{reg + 1}, %rd3;")
        lines.append(f"    wgmma.mma_async.sync.aligned.m64n{case.n}k{form.k}{form.suffix} {{{regs}}}, "
                     f"%rd{ra}, %rd{rb}, {'%p1' if s == 0 else '%p2'}{tail};")
    lines += [
        "    wgmma.commit_group.sync.aligned;",
        "    wgmma.wait_group.sync.aligned 0;",
        "    // D fragment (PTX 9.7.15.5.1.1.1): row 16*warp + lane/4 (+8), column 2*(lane%4) (+1, +8*j)",
        "    shr.u32 %r11, %r0, 5;",
        "    and.b32 %r12, %r0, 31;",
        "    shr.u32 %r13, %r12, 2;",
        "    and.b32 %r14, %r12, 3;",
        "    shl.b32 %r15, %r11, 4;",
        "    add.u32 %r15, %r15, %r13;             // row",
        f"    mul.lo.u32 %r16, %r15, {case.n};",
        "    shl.b32 %r17, %r14, 1;",
        "    add.u32 %r16, %r16, %r17;             // row * N + column",
        "    ld.param.u64 %rd4, [p_d];",
        "    cvta.to.global.u64 %rd4, %rd4;",
        "    mul.wide.u32 %rd5, %r16, 4;",
        "    add.s64 %rd4, %rd4, %rd5;",
    ]
    for i, dr, dc in fragment_map(case.n):
        if i % 2 == 0:          # registers i, i+1 are adjacent columns: one 8-byte store
            lines.append(f"    st.global.v2.{dreg} [%rd4+{4 * (dr * case.n + dc)}], {{%d{i}, %d{i + 1}}};")
    lines += [
        "    setp.ne.u32 %p3, %r0, 0;",
        "    @%p3 bra DONE;",
        "    ld.param.u64 %rd6, [p_info];",
        "    cvta.to.global.u64 %rd6, %rd6;",
        "    st.global.v2.u32 [%rd6], {%r1, %r2};  // raw and aligned shared base, for the report",
        "DONE:",
        "    ret;",
        "}",
        "",
    ]
    return "\n".join(lines)


# ==================================================================================================
# prepare (host)
# ==================================================================================================

def prepare(data: Path, quick: bool = False, assemble: bool = True, log=print) -> dict:
    """Write PTX, cubins, images and the manifest for the sweep into `data`."""
    from compiler.ptxas import find_ptxas

    data.mkdir(parents=True, exist_ok=True)
    exe = find_ptxas() if assemble else None
    if assemble and exe is None:
        raise FileNotFoundError("ptxas not found (needed to assemble the sm_90a kernels)")
    images, records, failures = {}, [], []
    t0 = time.perf_counter()
    for case in sweep(quick):
        image, rec = build_image(case)
        ptx = generate_ptx(case, rec, rec["image_bytes"])
        ptx_name = f"{case.entry}.ptx"
        (data / ptx_name).write_text(ptx)
        rec = {**asdict(case), "entry": case.entry, "steps": case.steps, "mma_k": case.wform.k,
               "d_type": case.wform.d_type, "ptx": ptx_name,
               "smem_bytes": rec["image_bytes"] + SMEM_ALIGN,
               **{k: (v if not isinstance(v, list) else [f"{x:#018x}" for x in v]) for k, v in rec.items()}}
        if exe:
            cubin = f"{case.entry}.cubin"
            proc = subprocess.run([exe, "-arch=sm_90a", "-o", str(data / cubin), str(data / ptx_name)],
                                  capture_output=True, text=True)
            if proc.returncode:
                failures.append(f"{case.name}: ptxas: {(proc.stdout + proc.stderr).strip()[:500]}")
                continue
            rec["cubin"] = cubin
        images[case.entry] = image
        records.append(rec)
    np.savez_compressed(data / IMAGES, **images)
    manifest = {"cases": records, "ptxas_failures": failures, "quick": quick, "m": M,
                "prepare_seconds": round(time.perf_counter() - t0, 2)}
    (data / MANIFEST).write_text(json.dumps(manifest, indent=1))
    log(f"prepare: {len(records)} kernels ({sum(r['steps'] for r in records)} wgmma K steps) in "
        f"{manifest['prepare_seconds']} s -> {data}" + (f"; {len(failures)} ptxas failures" if failures else ""))
    for f in failures:
        log("  " + f)
    return manifest


# ==================================================================================================
# device (numpy + cupy only)
# ==================================================================================================

def _load_kernel(cp, data: Path, rec: dict):
    """The entry from the ptxas cubin, else from the PTX (driver JIT)."""
    errors = []
    for key in ("cubin", "ptx"):
        if key in rec:
            try:
                return cp.RawModule(path=str(data / rec[key])).get_function(rec["entry"]), key
            except Exception as e:        # noqa: BLE001 - report, then try the other form
                errors.append(f"{key}: {type(e).__name__}: {e}")
    raise RuntimeError("; ".join(errors) or "no PTX or cubin recorded")


def run_case(cp, data: Path, rec: dict, image: np.ndarray) -> tuple[np.ndarray, dict]:
    """Launch one kernel: (D as raw uint32 [64, N], status)."""
    fn, loaded = _load_kernel(cp, data, rec)
    if rec["smem_bytes"] > 48 * 1024:        # dynamic shared memory above 48 KB needs the opt-in
        try:
            fn.max_dynamic_shared_size_bytes = rec["smem_bytes"]
        except AttributeError:               # older cupy: the driver call itself
            cp.cuda.driver.funcSetAttribute(fn.ptr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            rec["smem_bytes"])
    d = cp.full(M * rec["n"], D_SENTINEL, dtype=cp.uint32)
    info = cp.zeros(2, dtype=cp.uint32)
    start = time.perf_counter()
    fn((1,), (THREADS,), (cp.asarray(image), d, info), shared_mem=rec["smem_bytes"])
    cp.cuda.Device().synchronize()
    elapsed = time.perf_counter() - start
    raw = cp.asnumpy(d).reshape(M, rec["n"])
    smem_raw, smem_base = (int(x) for x in cp.asnumpy(info))
    return raw, {"status": "ok", "loaded": loaded, "launch_ms": round(elapsed * 1e3, 3),
                 "smem_window": smem_raw, "smem_base": smem_base,
                 "unwritten": int((raw == D_SENTINEL).sum())}


def _cuda_fatal(exc: Exception) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("ILLEGAL", "LAUNCH_FAILED", "MISALIGNED", "UNKNOWN", "HARDWARE",
                                   "cudaErrorIllegal", "cudaErrorLaunch", "cudaErrorMisaligned", "ASSERT"))


def device_worker(data: Path, tmp: Path, start: int, cp=None) -> int:
    """Run cases start.. here; each D goes to tmp/<entry>.npy and a line into tmp/status.jsonl.
    Returns WORKER_CUDA_ERROR after a fatal CUDA error (the parent restarts past that case)."""
    cp = cp if cp is not None else importlib.import_module("cupy")
    manifest = json.loads((data / MANIFEST).read_text())
    images = np.load(data / IMAGES)
    with open(tmp / "status.jsonl", "a") as log:
        for index in range(start, len(manifest["cases"])):
            rec = manifest["cases"][index]
            try:
                raw, status = run_case(cp, data, rec, images[rec["entry"]])
                np.save(tmp / f"{rec['entry']}.npy", raw)
            except Exception as e:        # noqa: BLE001 - every failure is a result
                status = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000]}
                if _cuda_fatal(e):
                    log.write(json.dumps({"index": index, "entry": rec["entry"], **status}) + "\n")
                    return WORKER_CUDA_ERROR
            log.write(json.dumps({"index": index, "entry": rec["entry"], **status}) + "\n")
            log.flush()
    return 0


def worker_environment() -> dict:
    """subprocess.run arguments under which `python -m MODULE` imports this very file: run from the
    repository root with the root first on PYTHONPATH (the package `tests` is not installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {"cwd": str(REPO), "env": env}


def run_device(data: Path, out: Path, isolate: bool = True, cp=None, log=print) -> dict:
    """Every case on the GPU; writes out/results.npz and out/device.json. With `isolate`, cases run in
    worker processes, restarted past a case whose fault killed the CUDA context."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((data / MANIFEST).read_text())
    count = len(manifest["cases"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "status.jsonl").touch()
        start = 0
        while start < count:
            if isolate:
                try:
                    rc = subprocess.run([sys.executable, "-m", MODULE, "device-worker", "--data", str(data),
                                         "--tmp", str(tmp), "--start", str(start)],
                                        timeout=WORKER_TIMEOUT_S, **worker_environment()).returncode
                except subprocess.TimeoutExpired:
                    rc = -1                   # a hung kernel: recorded below as the case it was on
            else:
                rc = device_worker(data, tmp, start, cp=cp)
            lines = [json.loads(x) for x in (tmp / "status.jsonl").read_text().splitlines() if x.strip()]
            done = max((x["index"] for x in lines), default=-1) + 1
            if rc not in (0, WORKER_CUDA_ERROR) and done < count:
                with open(tmp / "status.jsonl", "a") as f:     # died or hung without a word: record, move on
                    f.write(json.dumps({"index": done, "entry": manifest["cases"][done]["entry"],
                                        "status": "error", "error": f"worker exited with {rc}"}) + "\n")
                done += 1
            start = max(done, start + 1) if rc else done
        lines = [json.loads(s) for s in (tmp / "status.jsonl").read_text().splitlines() if s.strip()]
        statuses = {x["entry"]: x for x in lines}
        arrays = {rec["entry"]: np.load(tmp / f"{rec['entry']}.npy") for rec in manifest["cases"]
                  if (tmp / f"{rec['entry']}.npy").exists()}
        np.savez_compressed(out / RESULTS, **arrays)
    device = {}
    try:
        cp = cp if cp is not None else importlib.import_module("cupy")
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = props["name"]
        device = {"name": name.decode() if isinstance(name, bytes) else str(name),
                  "cc": str(cp.cuda.Device().compute_capability), "cupy": getattr(cp, "__version__", "?"),
                  "driver": cp.cuda.runtime.driverGetVersion()}
    except Exception as e:                # noqa: BLE001
        device = {"error": str(e)}
    report = {"device": device, "seconds": round(time.perf_counter() - t0, 2), "cases": statuses}
    (out / STATUS).write_text(json.dumps(report, indent=1))
    ok = sum(s["status"] == "ok" for s in statuses.values())
    log(f"device: {device.get('name', '?')} sm_{device.get('cc', '?')}: {ok}/{count} kernels ran in "
        f"{report['seconds']} s")
    for s in statuses.values():
        if s["status"] != "ok":
            log(f"  {s['entry']}: {s['error']}")
    return report


# ==================================================================================================
# check (host)
# ==================================================================================================

def reference(case: ReadCase) -> tuple[np.ndarray, np.ndarray]:
    """(exact D in float64 / int64, sum |a||b| per element) from the case's codes."""
    from compiler.sim import numerics

    a_codes, b_codes = make_operands(case)
    a = numerics.decode(a_codes, case.wform.a_type)
    b = numerics.decode(b_codes, case.wform.b_type)
    if case.wform.d_type == "s32":
        return a.astype(np.int64) @ b.astype(np.int64).T, np.zeros((M, case.n))
    return a @ b.T, np.abs(a) @ np.abs(b).T


def decode_d(raw: np.ndarray, d_type: str) -> np.ndarray:
    raw = np.asarray(raw, dtype=np.uint32)
    return raw.view(np.int32).astype(np.int64) if d_type == "s32" else raw.view(np.float32).astype(np.float64)


def compare(case: ReadCase, raw: np.ndarray) -> dict:
    """D from the device against numpy: counts, max error, bound ratio."""
    got = decode_d(raw, case.wform.d_type)
    want, mag = reference(case)
    if case.wform.d_type == "s32":
        bad = got != want
        return {"ok": not bad.any(), "elements": got.size, "bad": int(bad.sum()),
                "max_abs_err": int(np.abs(got - want).max()), "bound_ratio": None}
    err = np.abs(got - want)
    err = np.where(np.isnan(got), np.inf, err)
    bound = REL_TOL[case.wform.a_type] * (case.steps + 1) * mag + 1e-30
    unit = 2.0 ** -23 * mag + 1e-30                       # one fp32 ulp of sum|a||b|
    bad = err > bound
    return {"ok": not bad.any(), "elements": got.size, "bad": int(bad.sum()),
            "max_abs_err": float(err.max()), "max_err_fp32_ulps": float((err / unit).max()),
            "bound_ratio": float((err / bound).max())}


def model_readback(case: ReadCase, image: np.ndarray, rec: dict, silicon_rule: bool = True) -> int:
    """Elements that compiler.sim reads back through tilec's tcgen05 descriptors, which must equal the
    placed codes (the independent check of the image preparation). With `silicon_rule` the swizzle
    phase is SILICON_PHASE_RULE's (silicon_as_model), else compiler.sim's own. Returns the number of
    elements compared; AssertionError on a mismatch."""
    from compiler.descriptors.smem import SmemDesc
    from compiler.sim.smem import read_operand_bits

    a_codes, b_codes = make_operands(case)
    form = case.wform
    kind = "i8" if form.d_type == "s32" else "f16"          # only sub-byte storage depends on the kind
    compared = 0
    for op, codes, dtype, major, rows in (("a", a_codes, form.a_type, case.a_major, M),
                                          ("b", b_codes, form.b_type, case.b_major, case.n)):
        for s, text in enumerate(rec[f"{op}_tcgen05"]):
            desc = int(text, 16)
            if silicon_rule:
                desc = silicon_as_model(SmemDesc.decode(desc)).encode()
            got = read_operand_bits(image, desc, dtype, major, rows, form.k, kind=kind)
            want = codes[:, s * form.k:(s + 1) * form.k]
            if not np.array_equal(got, want):
                raise AssertionError(f"{case.name}: compiler.sim ({'silicon rule' if silicon_rule else 'own rule'}) "
                                     f"reads {op.upper()} K step {s} differently from the placed codes "
                                     f"({int((got != want).sum())} of {got.size} elements)")
            compared += got.size
    return compared


# Descriptor mutations tried on a mismatch: which reading of the descriptors explains the device's D?
# Each takes and returns a tcgen05 descriptor (compiler.descriptors.smem.SmemDesc).
def _mutations():
    from dataclasses import replace as dc_replace

    return {
        "lbo<->sbo": lambda d: dc_replace(d, lbo=d.sbo, sbo=d.lbo),
        "base_offset=0": lambda d: dc_replace(d, base_offset=0),
        "swizzle=none": lambda d: dc_replace(d, swizzle="none"),
        "lbo=16": lambda d: dc_replace(d, lbo=16),
    }


def silicon_as_model(desc):
    """The tcgen05 SmemDesc whose compiler.sim reading equals SILICON_PHASE_RULE's reading of `desc`:
    `desc` itself, since compiler.sim adopted the rule this check measured (compiler/sim/smem.py
    `_swizzle`; tests/test_wgmma_read_host.py pins it). Before, the model counted the phase from the
    start row plus the field, and this function translated the field."""
    return desc


def _permutation_note(got: np.ndarray, want: np.ndarray) -> str:
    """D holds the right values in the wrong places: whole rows (A rows read from each other's places),
    whole columns (B rows), both, or neither (the fragment store)."""
    def is_permuted(x, y):          # every line of x equals some line of y, each used once
        keys = {tuple(np.round(line, 6)) for line in y}
        return len(keys) == len(y) and all(tuple(np.round(line, 6)) in keys for line in x)
    if is_permuted(got.T, want.T):
        return "D's columns are permuted: B's rows (N) were read from each other's places"
    if is_permuted(got, want):
        return "D's rows are permuted: A's rows (M) were read from each other's places"
    if is_permuted(np.sort(got, axis=1), np.sort(want, axis=1)) and \
            is_permuted(np.sort(got, axis=0).T, np.sort(want, axis=0).T):
        return "D's rows and columns are permuted: A's and B's MN rows were read from other places"
    return "D holds the expected values in other places: the fragment store, not the read"


def explain_mismatch(case: ReadCase, raw: np.ndarray, rec: dict, image: np.ndarray) -> list[str]:
    """Readings of the image under mutated descriptors (A, B or both) that reproduce the device's D, and
    whether D is merely a permutation of the expected values (a fragment-store problem)."""
    from compiler.descriptors.smem import SmemDesc
    from compiler.sim import numerics
    from compiler.sim.smem import read_operand_bits

    form = case.wform
    kind = "i8" if form.d_type == "s32" else "f16"
    got = decode_d(raw, form.d_type)
    want, _ = reference(case)
    notes = []

    def product(a_descs, b_descs):
        total = 0
        for s in range(case.steps):
            a = numerics.decode(read_operand_bits(image, a_descs[s], form.a_type, case.a_major, M, form.k,
                                                  kind=kind), form.a_type)
            b = numerics.decode(read_operand_bits(image, b_descs[s], form.b_type, case.b_major, case.n, form.k,
                                                  kind=kind), form.b_type)
            total = total + a @ b.T
        return total

    # the descriptors the kernel ran (probes override the base offset), in compiler.sim's form
    tc = {op: [tcgen05_descriptor(int(x, 16)) for x in rec[f"{op}_wgmma"]] for op in ("a", "b")}
    for name, mutate in _mutations().items():
        for which in ("a", "b", "ab"):
            try:
                descs = {op: [mutate(SmemDesc.decode(d)).encode() if op in which else d for d in tc[op]]
                         for op in ("a", "b")}
                alt = product(descs["a"], descs["b"])
            except Exception:             # noqa: BLE001 - a mutation may leave the image
                continue
            if np.allclose(got, alt, rtol=1e-4, atol=1e-3 * (np.abs(alt).max() + 1)):
                notes.append(f"D equals the model's product with {name} applied to {which.upper()}")
    if not notes and np.allclose(np.sort(got.ravel()), np.sort(want.ravel()), rtol=1e-5, atol=1e-6):
        notes.append(_permutation_note(got, want))
    return notes or ["no tried descriptor mutation reproduces D"]


@dataclass
class Tally:
    kernels: int = 0
    steps: int = 0
    d_elements: int = 0
    operand_elements: int = 0
    failed: int = 0
    max_ulps: float = 0.0
    max_bound_ratio: float = 0.0


@dataclass
class Report:
    cases: int = 0                # pass/fail cases (every group but "probe")
    ok: int = 0
    device_errors: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    probes: dict = field(default_factory=dict)     # name -> {"matches", "predicted" (silicon rule), "explain"}
    model_disagreements: list = field(default_factory=list)   # images compiler.sim reads differently
    model_elements: int = 0
    cells: dict = field(default_factory=dict)      # (form, A major/swizzle, B major/swizzle, group) -> Tally
    by_case: dict = field(default_factory=dict)

    def tally(self, key) -> Tally:
        return self.cells.setdefault(key, Tally())


def check(data: Path, results: Path, log=print, explain: bool = True) -> Report:
    """Compare every kernel's D with numpy and re-read every image through the model."""
    manifest = json.loads((data / MANIFEST).read_text())
    status = json.loads((results / STATUS).read_text())
    images = np.load(data / IMAGES)
    ds = np.load(results / RESULTS)
    report = Report()
    fields = {f.name for f in ReadCase.__dataclass_fields__.values()}
    for rec in manifest["cases"]:
        case = ReadCase(**{k: rec[k] for k in fields})
        probe = case.group == "probe"
        report.cases += not probe
        st = status["cases"].get(case.entry, {"status": "missing"})
        if st["status"] != "ok" or case.entry not in ds.files:
            error = f"{case.name}: {st.get('error', st['status'])}"
            if probe:
                report.probes[case.name] = {"matches": False, "predicted": None, "explain": [error]}
            else:
                report.device_errors.append(error)
            continue
        image = images[case.entry]
        raw = ds[case.entry]
        result = compare(case, raw)
        result["unwritten"] = st.get("unwritten", 0)
        result["ok"] = result["ok"] and result["unwritten"] == 0
        report.by_case[case.name] = result
        if probe:             # an observation of the hardware, not a verdict on tilec's descriptors
            predicted = case.matches_silicon_rule(rec["a_base"], rec["b_base"],
                                                  [int(x, 16) for x in rec["a_wgmma"]],
                                                  [int(x, 16) for x in rec["b_wgmma"]])
            notes = [] if result["ok"] or not explain else explain_mismatch(case, raw, rec, image)
            report.probes[case.name] = {"matches": result["ok"], "predicted": predicted, "explain": notes}
            continue
        try:
            report.model_elements += model_readback(case, image, rec)
        except AssertionError as e:       # the image is not what tilec's layout + descriptors describe
            report.failures.append(str(e))
            result["ok"] = False
        if case.a_misalign or case.b_misalign:
            try:                          # compiler.sim's own phase rule (docs: absolute addresses)
                model_readback(case, image, rec, silicon_rule=False)
            except AssertionError as e:
                report.model_disagreements.append(str(e))
        key = (case.form, f"{case.a_major}:{case.a_swizzle}", f"{case.b_major}:{case.b_swizzle}", case.group)
        t = report.tally(key)
        t.kernels += 1
        t.steps += case.steps
        t.d_elements += result["elements"]
        t.operand_elements += (M + case.n) * case.k
        t.max_ulps = max(t.max_ulps, result.get("max_err_fp32_ulps") or 0.0)
        t.max_bound_ratio = max(t.max_bound_ratio, result.get("bound_ratio") or 0.0)
        if result["ok"]:
            report.ok += 1
            continue
        t.failed += 1
        notes = explain_mismatch(case, raw, rec, image) if explain else []
        result["explain"] = notes
        report.failures.append(f"{case.name}: {result['bad']}/{result['elements']} elements off "
                               f"(max |err| {result['max_abs_err']:.4g}); " + "; ".join(notes))
    return report


def print_report(report: Report, manifest: dict, status: dict, log=print) -> None:
    dev = status.get("device", {})
    log(f"device: {dev.get('name', '?')} (sm_{dev.get('cc', '?')}, cupy {dev.get('cupy', '?')}, "
        f"driver {dev.get('driver', '?')}); {status.get('seconds', '?')} s on the device")
    log(f"kernels: {report.ok}/{report.cases} match; device errors {len(report.device_errors)}; "
        f"model read-back of the images: {report.model_elements} elements equal the placed codes")
    log(f"{'group':<12}{'form':<11}{'A':<10}{'B':<10}{'kern':>5}{'steps':>7}{'D elems':>10}"
        f"{'operand el.':>12}{'fail':>5}{'max ulps':>10}")
    for (form, a, b, group), t in sorted(report.cells.items(), key=lambda kv: (kv[0][3], kv[0][0], kv[0][1], kv[0][2])):
        log(f"{group:<12}{form:<11}{a:<10}{b:<10}{t.kernels:>5}{t.steps:>7}{t.d_elements:>10}"
            f"{t.operand_elements:>12}{t.failed:>5}{t.max_ulps:>10.3g}")
    for line in report.device_errors + report.failures:
        log("  " + line)
    if report.model_disagreements:
        log(f"compiler.sim reads {len(report.model_disagreements)} misaligned images differently from tilec's layout:")
        for line in report.model_disagreements:
            log("  " + line)
    if report.probes:
        agree = sum(p["matches"] == p["predicted"] for p in report.probes.values())
        log(f"probes (image pattern row / base-offset field overridden): {agree}/{len(report.probes)} as "
            f"{SILICON_PHASE_RULE} predicts")
        for name, p in report.probes.items():
            log(f"  {name}: {'D matches numpy' if p['matches'] else 'D differs'}"
                f"{'' if p['matches'] == p['predicted'] else ' (NOT as predicted)'}"
                + (f" ({'; '.join(p['explain'])})" if p["explain"] else ""))


def report_json(report: Report) -> dict:
    return {"cases": report.cases, "ok": report.ok, "device_errors": report.device_errors,
            "failures": report.failures, "probes": report.probes, "model_elements": report.model_elements,
            "model_disagreements": report.model_disagreements,
            "cells": [{"form": k[0], "a": k[1], "b": k[2], "group": k[3], **asdict(t)} for k, t in report.cells.items()],
            "by_case": report.by_case}


# ==================================================================================================
# CLI
# ==================================================================================================

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", type=Path, default=REPO / ".wgmma")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-assemble", action="store_true", help="leave PTX to the driver's JIT")
    d = sub.add_parser("device")
    d.add_argument("--data", type=Path, default=REPO / ".wgmma")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--no-isolate", action="store_true")
    w = sub.add_parser("device-worker")
    w.add_argument("--data", type=Path, required=True)
    w.add_argument("--tmp", type=Path, required=True)
    w.add_argument("--start", type=int, required=True)
    c = sub.add_parser("check")
    c.add_argument("--data", type=Path, default=REPO / ".wgmma")
    c.add_argument("--results", type=Path, required=True)
    c.add_argument("--json", type=Path)
    a = sub.add_parser("all")
    a.add_argument("--data", type=Path, required=True)
    a.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd == "prepare":
        manifest = prepare(args.data, quick=args.quick, assemble=not args.no_assemble)
        return 1 if manifest["ptxas_failures"] else 0
    if args.cmd == "device-worker":
        return device_worker(args.data, args.tmp, args.start)
    if args.cmd == "device":
        rep = run_device(args.data, args.out, isolate=not args.no_isolate)
        return 0 if all(s["status"] == "ok" for s in rep["cases"].values()) else 1
    if args.cmd == "all":
        prepare(args.data, quick=args.quick)
        run_device(args.data, args.data / "out")
        args.results, args.json = args.data / "out", None
    report = check(args.data, args.results)
    print_report(report, json.loads((args.data / MANIFEST).read_text()),
                 json.loads((args.results / STATUS).read_text()))
    if args.json:
        args.json.write_text(json.dumps(report_json(report), indent=1))
    return 0 if report.ok == report.cases else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
