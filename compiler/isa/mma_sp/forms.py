"""The warp-level sparse MMA forms (`mma.sp` / `mma.sp::ordered_metadata`) as a data table.

Sources (section numbers of PTX ISA 9.0/9.1):
- 9.7.14.6.1 "Sparse matrix storage" (seed ../shared/seeds/ptx-mma-sp-sparse-storage.txt): granularity per
  type, meaningful metadata values, sparsity-selector values per shape.
- 9.7.14.6.3 "mma.sp" syntax and target/PTX notes (register counts, minimum
  PTX versions, targets; every row below was assembled with ptxas 13.0 for the targets it names and
  rejected for the others, see tests/test_mma_sp_kernel.py).

One `FormRow` per family of forms (a shape with its type sets); `find_form` binds a row to concrete
types and options and returns a `Form`. A `SparseLayout` is the part of a form that fixes the data
layouts (shape, A/B element storage width, granularity): compressed A, B, metadata and C/D fragments
depend only on it, never on the C/D type or on the `.kind`.

Nothing here imports numpy; building the table is the only work done at import time.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter

from ...diagnostics import SpecError
from ..sparsity import GRANULARITIES, Granularity
from ..targets import MAX_PTX, TARGETS, Target, Version, format_version
from ..types import TYPES

# `.sp::ordered_metadata` exists from PTX 8.5 (9.7.14.6.3 PTX ISA notes; ptxas: "requires PTX ISA .version
# 8.5"); below that only plain `.sp` (PTX 7.1) can be emitted. tilec emits the ordered form whenever
# the version allows (plain `.sp` draws a ptxas performance advisory on every target).
ORDERED_METADATA_PTX: Version = (8, 5)

SHAPE_M, SHAPE_N = 16, 8      # every warp-level sparse shape is m16n8kK (9.7.14.6.3 syntax)


# --------------------------------------------------------------------------------------------------
# Sparse layout: what fixes the fragments and global-memory layouts
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SparseLayout:
    """Shape + A/B storage width + granularity of a sparse form (the C/D type and kind do not matter).

    `storage_bits` is the width of one A/B element in registers and in memory: 16 (f16/bf16), 32 (tf32),
    8 (8-bit types, and the 6-/4-bit types of `.kind::f8f6f4`/`.kind::mxf8f6f4`, which sit in 8-bit
    containers: PTX 9.7.14.6.3), 4 (s4/u4 and e2m1 of `.kind::mxf4*`, packed 8 per register).
    """
    k: int
    storage_bits: int
    granularity: Granularity
    fragment_section: str      # PTX section whose figures give the A/metadata fragments

    @property
    def shape(self) -> str:
        return f"m{SHAPE_M}n{SHAPE_N}k{self.k}"

    @property
    def m(self) -> int:
        return SHAPE_M

    @property
    def n(self) -> int:
        return SHAPE_N

    @property
    def elems_per_reg(self) -> int:
        return 32 // self.storage_bits

    @property
    def a_regs(self) -> int:
        # compressed A is 16 x k/2 elements spread over 32 lanes of 32-bit registers
        return SHAPE_M * (self.k // 2) * self.storage_bits // (32 * 32)

    @property
    def b_regs(self) -> int:
        # B is k x 8 elements over 32 lanes
        return self.k * SHAPE_N * self.storage_bits // (32 * 32)

    @property
    def chunks_per_row(self) -> int:
        return self.k // self.granularity.chunk

    @property
    def metadata_suppliers(self) -> int:
        """Threads of a group of four that supply metadata: 16 rows x chunks_per_row nibbles of one tile
        spread over groups of 8 nibbles (one 32-bit register) per thread and 8 groups of four threads."""
        return SHAPE_M * self.chunks_per_row // (8 * 8)

    @property
    def selectors(self) -> tuple[int, ...]:
        # 9.7.14.6.1: one supplying thread -> selector in {0,1,2,3}; a thread pair -> {0,1};
        # all four threads -> 0 only.
        return tuple(range(4 // self.metadata_suppliers))

    @property
    def rows_per_metadata_word(self) -> int:
        # PTX 9.7.14.6.2 "key trap": 16/32-bit types put rows g and g+8 in one metadata word,
        # 8/4-bit types put a single row (8 chunks) in one word.
        return 2 if self.storage_bits >= 16 else 1


# --------------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TargetRule:
    """Which targets can run a form: sm >= min_sm, optionally restricted to one family and suffixes."""
    min_sm: int
    family: int | None = None
    suffixes: frozenset[str] | None = None

    def allows(self, target: Target) -> bool:
        if target.sm < self.min_sm:
            return False
        if self.family is not None and target.family != self.family:
            return False
        return self.suffixes is None or target.suffix in self.suffixes

    def targets(self) -> list[str]:
        return [name for name, t in TARGETS.items() if self.allows(t)]


# 9.7.14.6.3 target notes + ptxas 13.0 matrix (tests/test_mma_sp_kernel.py):
SM80_PLUS = TargetRule(min_sm=80)                     # all f16/bf16/tf32/integer forms
SM89_PLUS = TargetRule(min_sm=89)                     # e4m3/e5m2 without .kind
SM120_ARCH_OR_FAMILY = TargetRule(min_sm=120, family=120, suffixes=frozenset("af"))  # f8f6f4, mxf8f6f4
SM120_ARCH = TargetRule(min_sm=120, family=120, suffixes=frozenset("a"))             # sparse mxf4, mxf4nvf4

# Warp-level mma.sp with .e4m3 / .e5m2 operands assembles on every sm_89+ target (SM89_PLUS), but only sm_89
# and sm_120 / sm_121 execute it natively; the datacenter SMs below have FP8 tensor cores only through
# wgmma (sm_90a) and tcgen05 (sm_100+), and ptxas 13.0 expands each warp-level FP8 mma.sp into operand
# conversions around an f16 one. Measured with ptxas -v on the pipelined kernel (tests/test_sparse_gemm_edges.py
# test_emulated_fp8_warp_tiles_are_bounded): ~90 registers per 16x8 mma tile of a warp: one tile takes 68
# registers, a 16x16 warp tile (2 tiles) 180 (so at most 256 threads a CTA: 65536 / 256), 4 tiles spill 200
# bytes, 8 tiles 1.5 KB, a 64x64 warp tile 31 KB (on sm_89 / sm_120a 8 tiles take 90-92 registers, no spill).
FP8_WARP_MMA_EMULATED_SMS = frozenset({90, 100, 103, 110})
EMULATED_FP8_REGISTERS_PER_TILE = 90


def fp8_warp_mma_emulated(form, target: str) -> bool:
    """Is warp-level mma.sp of `form` (e4m3 / e5m2 operands without .kind) emulated on `target`?"""
    t = TARGETS.get(target)
    return (form.kind is None and {form.a_type, form.b_type} <= {"e4m3", "e5m2"} and t is not None
            and t.sm in FP8_WARP_MMA_EMULATED_SMS)


# --------------------------------------------------------------------------------------------------
# Block scaling (9.7.14.6.3 syntax `.block_scale{.scale_vec_size}` ... `.stype`)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockScale:
    kind: str
    scale_vec: str             # "1X" | "2X" | "4X"
    scale_type: str            # "ue8m0" | "ue4m3"
    min_ptx: Version
    vec_optional: bool         # may `.scale_vec::` be omitted (we always emit it)


# One row per legal (kind, vector size, scale type); ptxas 13.0 rejected every other combination
# ("Illegal modifier '.scale_vec::2X' for ... mxf8f6f4", "'.scale_vec::4X' cannot be combined with
# '.kind::mxf4'", "'.scale_vec::4X' ... with type '.ue8m0'", "'.scale_vec::2X' ... with type '.ue4m3'",
# ".scale_vec_size modifier required" for mxf4nvf4). The first row of a kind is its default.
BLOCK_SCALES: tuple[BlockScale, ...] = (
    BlockScale("mxf8f6f4", "1X", "ue8m0", (8, 7), vec_optional=True),
    BlockScale("mxf4", "2X", "ue8m0", (8, 7), vec_optional=True),
    BlockScale("mxf4nvf4", "4X", "ue4m3", (8, 7), vec_optional=False),   # NVFP4: 16-element blocks
    BlockScale("mxf4nvf4", "2X", "ue8m0", (8, 7), vec_optional=False),
    # PTX 9.1 adds 4X with ue8m0 (PTX 9.7.14.6.3); CUDA 13.0's ptxas only knows <= 9.0, so requirements()
    # reports it as needing a newer PTX than MAX_PTX.
    BlockScale("mxf4nvf4", "4X", "ue8m0", (9, 1), vec_optional=False),
)


# --------------------------------------------------------------------------------------------------
# The form table
# --------------------------------------------------------------------------------------------------

F8F6F4 = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")


@dataclass(frozen=True)
class FormRow:
    shape: str
    a_types: tuple[str, ...]
    b_types: tuple[str, ...]
    cd_types: tuple[str, ...]          # C and D have the same type (ptxas 13.0: "Arguments mismatch")
    granularity: str
    storage_bits: int
    kind: str | None
    min_ptx: Version
    target_rule: TargetRule
    same_ab: bool = True               # B must have A's type (f16, bf16, tf32, e2m1 x e2m1)
    satfinite: bool = False            # `.satfinite` allowed (integer forms)
    block_scaled: bool = False
    ordered_only: bool = False         # kinds exist only with `.sp::ordered_metadata`
    fragment_section: str = ""
    cite: str = ""

    @property
    def k(self) -> int:
        return int(self.shape.split("k")[1])

    @cached_property
    def layout(self) -> SparseLayout:
        return SparseLayout(self.k, self.storage_bits, GRANULARITIES[self.granularity],
                            self.fragment_section)

    def describe(self) -> str:
        b = "same as A" if self.same_ab else "|".join(self.b_types)
        kind = f" .kind::{self.kind}" if self.kind else ""
        return (f"{self.shape}{kind}: A {'|'.join(self.a_types)}, B {b} -> C/D {'|'.join(self.cd_types)}")


_SEC_16BIT = "9.7.14.6.2.1/.2 (m16n8k16 / m16n8k32 with .f16/.bf16)"
_SEC_TF32 = "9.7.14.6.2.3/.4 (m16n8k8 / m16n8k16 with .tf32)"
_SEC_8BIT = "9.7.14.6.2.5/.6 (m16n8k32 / m16n8k64 with 8-bit types)"
_SEC_4BIT = "9.7.14.6.2.7/.8 (m16n8k64 / m16n8k128 with 4-bit types)"

FORM_ROWS: tuple[FormRow, ...] = (
    # f16/bf16, 2:4 (9.7.14.6.1 "half-precision and .bf16"); .dtype == .ctype; bf16 accumulates in f32 only
    *(FormRow(shape, ("f16",), ("f16",), ("f16", "f32"), "2:4", 16, None, (7, 1), SM80_PLUS,
              fragment_section=_SEC_16BIT,
              cite="PTX 9.7.14.6.3 mma.sp syntax .f16 (m16n8k16/k32); PTX ISA notes 7.1; Target ISA notes sm_80")
      for shape in ("m16n8k16", "m16n8k32")),
    *(FormRow(shape, ("bf16",), ("bf16",), ("f32",), "2:4", 16, None, (7, 1), SM80_PLUS,
              fragment_section=_SEC_16BIT,
              cite="PTX 9.7.14.6.3 mma.sp syntax .bf16 (m16n8k16/k32); PTX ISA notes 7.1; Target ISA notes sm_80")
      for shape in ("m16n8k16", "m16n8k32")),
    # tf32, 1:2 (9.7.14.6.1 ".tf32 type")
    *(FormRow(shape, ("tf32",), ("tf32",), ("f32",), "1:2", 32, None, (7, 1), SM80_PLUS,
              fragment_section=_SEC_TF32,
              cite="PTX 9.7.14.6.3 mma.sp syntax .tf32 (m16n8k8/k16); PTX ISA notes 7.1; Target ISA notes sm_80")
      for shape in ("m16n8k8", "m16n8k16")),
    # s8/u8, 2:4; A and B signedness chosen independently; .satfinite optional (9.7.14.6.3 syntax)
    *(FormRow(shape, ("s8", "u8"), ("s8", "u8"), ("s32",), "2:4", 8, None, (7, 1), SM80_PLUS,
              same_ab=False, satfinite=True, fragment_section=_SEC_8BIT,
              cite="PTX 9.7.14.6.3 mma.sp syntax .s8/.u8 (m16n8k32/k64); PTX ISA notes 7.1; Target ISA notes sm_80")
      for shape in ("m16n8k32", "m16n8k64")),
    # s4/u4, 4:8 pairwise
    *(FormRow(shape, ("s4", "u4"), ("s4", "u4"), ("s32",), "4:8", 4, None, (7, 1), SM80_PLUS,
              same_ab=False, satfinite=True, fragment_section=_SEC_4BIT,
              cite="PTX 9.7.14.6.3 mma.sp syntax .s4/.u4 (m16n8k64/k128); PTX ISA notes 7.1; Target ISA notes sm_80")
      for shape in ("m16n8k64", "m16n8k128")),
    # e4m3/e5m2 without .kind: f32 accumulate only, sm_89+, PTX 8.4 (ptxas: f16 accumulate rejected)
    FormRow("m16n8k64", ("e4m3", "e5m2"), ("e4m3", "e5m2"), ("f32",), "2:4", 8, None, (8, 4), SM89_PLUS,
            same_ab=False, fragment_section=_SEC_8BIT,
            cite=("PTX 9.7.14.6.3 mma.sp syntax .e4m3/.e5m2 without .kind (m16n8k64); PTX ISA notes 8.4; "
                  "Target ISA notes sm_89")),
    # .kind::f8f6f4: 8-bit containers, f32 or f16 accumulate, ordered metadata only, sm_120a/sm_120f
    FormRow("m16n8k64", F8F6F4, F8F6F4, ("f32", "f16"), "2:4", 8, "f8f6f4", (8, 7), SM120_ARCH_OR_FAMILY,
            same_ab=False, ordered_only=True, fragment_section=_SEC_8BIT,
            cite=("PTX 9.7.14.6.3 mma.sp::ordered_metadata .kind::f8f6f4 (m16n8k64); "
                  "PTX 8.7, sm_120a/sm_120f (Release History, Table 60); ptxas 13.0 rejects plain .sp")),
    # block-scaled kinds (f32 accumulate; scale type after the C type)
    FormRow("m16n8k64", F8F6F4, F8F6F4, ("f32",), "2:4", 8, "mxf8f6f4", (8, 7), SM120_ARCH_OR_FAMILY,
            same_ab=False, block_scaled=True, ordered_only=True, fragment_section=_SEC_8BIT,
            cite=("PTX 9.7.14.6.3 mma.sp::ordered_metadata .kind::mxf8f6f4.block_scale (m16n8k64); "
                  "PTX 8.7, sm_120a/sm_120f")),
    FormRow("m16n8k128", ("e2m1",), ("e2m1",), ("f32",), "4:8", 4, "mxf4", (8, 7), SM120_ARCH,
            block_scaled=True, ordered_only=True, fragment_section=_SEC_4BIT,
            cite=("PTX 9.7.14.6.3 mma.sp::ordered_metadata .kind::mxf4.block_scale (m16n8k128); "
                  "PTX 8.7, sm_120a (Table 60: sm_120a, sm_121a); ptxas 13.0 rejects it on sm_120f")),
    FormRow("m16n8k128", ("e2m1",), ("e2m1",), ("f32",), "4:8", 4, "mxf4nvf4", (8, 7), SM120_ARCH,
            block_scaled=True, ordered_only=True, fragment_section=_SEC_4BIT,
            cite=("PTX 9.7.14.6.3 mma.sp::ordered_metadata .kind::mxf4nvf4.block_scale (m16n8k128); "
                  "PTX 8.7, sm_120a (Table 60: sm_120a, sm_121a)")),
)

KINDS: tuple[str, ...] = tuple(sorted({r.kind for r in FORM_ROWS if r.kind}))
SHAPES: tuple[str, ...] = tuple(sorted({r.shape for r in FORM_ROWS}, key=lambda s: int(s.split("k")[1])))

# 6-/4-bit values in an 8-bit container (kind::f8f6f4 / mxf8f6f4): e2m1 sits in bits 5:2, e3m2/e2m3 in
# bits 5:0 (9.7.14.5.14 "mma" description of .kind::f8f6f4 operands).
CONTAINER_SHIFT: dict[str, int] = {"e2m1": 2, "e3m2": 0, "e2m3": 0}


# --------------------------------------------------------------------------------------------------
# A concrete form
# --------------------------------------------------------------------------------------------------

def _read_through(path: str) -> property:
    """A read-only attribute that is `path` ("row.layout.a_regs") read from the object: a form's shape,
    K, kind and register counts are its row's. (Not annotated in the class, so not a dataclass field.)"""
    return property(attrgetter(path), doc=f"self.{path}")


@dataclass(frozen=True)
class Form:
    row: FormRow
    a_type: str
    b_type: str
    c_type: str
    d_type: str
    satfinite: bool = False
    block_scale: BlockScale | None = None

    # -- what the row and its layout fix -----------------------------------------------------------
    shape = _read_through("row.shape")
    k = _read_through("row.k")
    kind = _read_through("row.kind")
    layout = _read_through("row.layout")
    granularity = _read_through("row.layout.granularity")
    a_regs = _read_through("row.layout.a_regs")
    b_regs = _read_through("row.layout.b_regs")
    selectors = _read_through("row.layout.selectors")

    @property
    def c_regs(self) -> int:
        # f16 accumulators are packed two per 32-bit register (f16x2), f32/s32 one per register
        # (9.7.14.6.2 C/D fragments).
        return SHAPE_M * SHAPE_N * TYPES[self.c_type].bits // (32 * 32)

    @property
    def d_regs(self) -> int:
        return SHAPE_M * SHAPE_N * TYPES[self.d_type].bits // (32 * 32)

    @property
    def min_ptx(self) -> Version:
        v = self.row.min_ptx
        if self.block_scale is not None:
            v = max(v, self.block_scale.min_ptx)
        return v

    @property
    def name(self) -> str:
        return ".".join([self.shape, *self._qualifiers(opcode=False)])

    def _qualifiers(self, opcode: bool) -> list[str]:
        """What follows the shape (in the opcode: `.row.col`): kind, scale vector, satfinite, the D, A, B, C
        types and the scale type (9.7.14.6.3 syntax). The opcode spells `.block_scale` before the scale
        vector; the form's name leaves it out."""
        parts = [f"kind::{self.kind}"] if self.kind else []
        if self.block_scale:
            parts += (["block_scale"] if opcode else []) + [f"scale_vec::{self.block_scale.scale_vec}"]
        if self.satfinite:
            parts.append("satfinite")
        parts += [self.d_type, self.a_type, self.b_type, self.c_type]
        if self.block_scale:
            parts.append(self.block_scale.scale_type)
        return parts

    def __str__(self) -> str:
        return self.name

    # -- rules ------------------------------------------------------------------------------------
    def requirements(self, target: str, ptx_version: Version | None = None
                     ) -> tuple[Version, SpecError | None]:
        """Lowest `.version` that can express this form on `target`, and the reason it cannot be used
        (None when it can). `ptx_version`, when given, is checked against that minimum and MAX_PTX."""
        t = TARGETS.get(target)
        if t is None:
            return self.min_ptx, SpecError(
                f"unknown target '{target}'", field="target",
                hint="known targets: " + ", ".join(TARGETS))
        need = max(self.min_ptx, t.min_ptx)
        if not self.row.target_rule.allows(t):
            able = self.row.target_rule.targets()
            return need, SpecError(
                f"mma.sp form {self.name} is not available on {target}; it runs on {able[0]}"
                + (f" (also: {', '.join(able[1:])})" if len(able) > 1 else ""),
                field="target", hint=f"use target {able[0]}")
        if need > MAX_PTX:
            return need, SpecError(
                f"mma.sp form {self.name} on {target} needs PTX ISA {format_version(need)}, newer than "
                f"the {format_version(MAX_PTX)} the pinned ptxas understands", field="ptx")
        if ptx_version is not None:
            if ptx_version < need:
                return need, SpecError(
                    f"mma.sp form {self.name} on {target} needs PTX ISA {format_version(need)}, "
                    f"but .version {format_version(ptx_version)} was requested", field="ptx",
                    hint=f"use .version {format_version(need)} or newer")
            if ptx_version > MAX_PTX:
                return need, SpecError(
                    f"PTX ISA {format_version(ptx_version)} is newer than the "
                    f"{format_version(MAX_PTX)} the pinned ptxas understands", field="ptx")
        return need, None

    def check_selector(self, selector: int) -> None:
        """Allow only the selector values 9.7.14.6.1 defines (ptxas accepts 2/3 for
        m16n8k32.f32.f16.f16.f32, which PTX calls undefined: checked with ptxas 13.0)."""
        legal = self.selectors
        if isinstance(selector, bool) or not isinstance(selector, int) or selector not in legal:
            who = {1: "one thread of each group of four supplies the metadata",
                   2: "a thread pair (T0,T1 or T2,T3) supplies the metadata",
                   4: "all four threads of each group supply the metadata"}[self.layout.metadata_suppliers]
            values = ", ".join(map(str, legal))
            raise SpecError(
                f"sparsity selector {selector!r} is undefined for mma.sp {self.shape} with "
                f".{self.a_type} ({who}; PTX 9.7.14.6.1 allows {values})",
                field="sparsity.selector",
                hint=f"use {'one of ' if len(legal) > 1 else ''}{values}")

    def uses_ordered_metadata(self, ptx_version: Version) -> bool:
        return ptx_version >= ORDERED_METADATA_PTX

    def instruction(self, ptx_version: Version) -> str:
        """The opcode with all qualifiers, e.g.
        `mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32`."""
        if ptx_version < self.min_ptx:
            raise SpecError(f"mma.sp form {self.name} needs PTX ISA {format_version(self.min_ptx)}, "
                            f"not {format_version(ptx_version)}", field="ptx")
        ordered = self.uses_ordered_metadata(ptx_version)
        if self.row.ordered_only and not ordered:   # unreachable while kinds need PTX >= 8.7
            raise SpecError(f"{self.name} exists only as mma.sp::ordered_metadata", field="ptx")
        return ".".join(["mma.sp::ordered_metadata" if ordered else "mma.sp", "sync", "aligned", self.shape,
                         "row", "col", *self._qualifiers(opcode=True)])


# --------------------------------------------------------------------------------------------------
# Lookup
# --------------------------------------------------------------------------------------------------

def _legal_list(rows) -> str:
    return "; ".join(r.describe() for r in rows)


def find_form(shape: str, a_type: str, b_type: str, c_type: str, d_type: str, kind: str | None = None,
              *, satfinite: bool = False, scale_type: str | None = None,
              scale_vec: str | None = None) -> Form:
    """The form for these operands, or SpecError naming the offending field with the legal choices.

    `kind` is None or "f8f6f4" / "mxf8f6f4" / "mxf4" / "mxf4nvf4" (a leading "kind::" is accepted).
    For block-scaled kinds, `scale_type`/`scale_vec` default to the first BLOCK_SCALES row of the kind.
    """
    if kind is not None and kind.startswith("kind::"):
        kind = kind[len("kind::"):]
    if kind is not None and kind not in KINDS:
        raise SpecError(f"unknown mma.sp kind '{kind}'", field="kind",
                        hint="legal kinds: none, " + ", ".join(KINDS))
    for field, name in (("A.dtype", a_type), ("B.dtype", b_type), ("C.dtype", c_type),
                        ("D.dtype", d_type)):
        if name not in TYPES:
            raise SpecError(f"unknown element type '{name}'", field=field,
                            hint="known types: " + ", ".join(TYPES))

    rows = [r for r in FORM_ROWS if r.kind == kind]
    by_a = [r for r in rows if a_type in r.a_types]
    if not by_a:
        other = sorted({r.kind or "none" for r in FORM_ROWS if a_type in r.a_types})
        hint = (f"A type {a_type} needs kind {' or '.join(other)}" if other
                else "legal combinations: " + _legal_list(rows))
        raise SpecError(f"A type {a_type} is not legal for mma.sp"
                        + (f" with kind::{kind}" if kind else " without .kind"),
                        field="A.dtype", hint=hint)
    by_shape = [r for r in by_a if r.shape == shape]
    if not by_shape:
        shapes = ", ".join(sorted({r.shape for r in by_a}, key=lambda s: int(s.split("k")[1])))
        raise SpecError(f"shape {shape} is not legal for mma.sp with A type {a_type}"
                        + (f" and kind::{kind}" if kind else ""),
                        field="shape", hint=f"legal shapes for {a_type}: {shapes}")
    (row,) = by_shape          # the table has one row per (kind, A type, shape)
    if (row.same_ab and b_type != a_type) or (not row.same_ab and b_type not in row.b_types):
        legal_b = a_type if row.same_ab else ", ".join(row.b_types)
        raise SpecError(f"B type {b_type} cannot be combined with A type {a_type} in mma.sp {shape}",
                        field="B.dtype", hint=f"legal B types: {legal_b}")
    if c_type not in row.cd_types:
        raise SpecError(f"C type {c_type} is not legal for mma.sp {shape} with A type {a_type}",
                        field="C.dtype", hint="legal C/D types: " + ", ".join(row.cd_types))
    if d_type != c_type:
        raise SpecError(f"D type {d_type} differs from C type {c_type}; mma.sp needs .dtype == .ctype",
                        field="D.dtype", hint=f"use D type {c_type}")
    if satfinite and not row.satfinite:
        raise SpecError(f".satfinite is only defined for integer mma.sp forms, not {row.describe()}",
                        field="satfinite")

    block_scale = None
    if row.block_scaled:
        combos = [s for s in BLOCK_SCALES if s.kind == kind]
        chosen = [s for s in combos if (scale_type is None or s.scale_type == scale_type)
                  and (scale_vec is None or s.scale_vec == scale_vec)]
        if not chosen:
            legal = ", ".join(f"scale_vec::{s.scale_vec} with .{s.scale_type}" for s in combos)
            # blame the vector size when the kind never takes it, else the scale type
            vec_known = scale_vec is None or any(s.scale_vec == scale_vec for s in combos)
            raise SpecError(f"kind::{kind} has no block scale scale_vec::{scale_vec} with "
                            f"scale type {scale_type}", field="scale_type" if vec_known else "scale_vec",
                            hint=f"legal: {legal}")
        block_scale = chosen[0]
    elif scale_type is not None or scale_vec is not None:
        given = " ".join(x for x in (scale_vec and f"scale_vec::{scale_vec}", scale_type and f".{scale_type}") if x)
        raise SpecError(f"block scaling ({given}) is only taken by block-scaled kinds (mxf8f6f4, mxf4, mxf4nvf4), "
                        f"not by {row.describe()}", field="scale_type" if scale_type else "scale_vec")
    return Form(row, a_type, b_type, c_type, d_type, satfinite, block_scale)


def layout_for(a_type: str, shape: str) -> SparseLayout:
    """The data layout of A type `a_type` in `shape` (independent of C/D type and kind)."""
    layouts = {r.layout for r in FORM_ROWS if r.shape == shape and a_type in r.a_types}
    if not layouts:
        legal = sorted({r.shape for r in FORM_ROWS if a_type in r.a_types}, key=lambda s: int(s.split("k")[1]))
        if not legal:
            raise SpecError(f"type {a_type} has no sparse mma.sp form", field="A.dtype",
                            hint="sparse A types: " + ", ".join(sorted({t for r in FORM_ROWS for t in r.a_types})))
        raise SpecError(f"shape {shape} is not legal for sparse A of type {a_type}", field="shape",
                        hint="legal shapes: " + ", ".join(legal))
    (layout,) = layouts        # one layout per (A type, shape): e2m1 is 8-bit at k64, packed at k128
    return layout


def all_forms() -> list[Form]:
    """Every concrete form: each row x A/B/C types x satfinite x block-scale combination."""
    out = []
    for row in FORM_ROWS:
        scales = [s for s in BLOCK_SCALES if s.kind == row.kind] if row.block_scaled else [None]
        for a in row.a_types:
            for b in ((a,) if row.same_ab else row.b_types):
                for c in row.cd_types:
                    for sat in ((False, True) if row.satfinite else (False,)):
                        for s in scales:
                            out.append(Form(row, a, b, c, c, sat, s))
    return out
