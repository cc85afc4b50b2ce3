"""The `tcgen05.mma` kinds: legal types, K, per-kind options and the valid shapes, as data.

Sources (PTX ISA 9.0/9.1 section numbers):
- Table 38/39 "kinds and types" and 9.7.16.2.1 Table 39 "valid shapes";
- 9.7.16.10.1 Table 49 "Transpose and Negate operation for various MMA-Kind" and Table 50
  "N shape with .cta_group for 8bit transpose B";
- Tables 42-44 (instruction descriptor) for saturate (i8 only) and the scale-matrix type;
- 9.7.16.10.9.1 for scale-input-d (".kind::tf32 and .kind::f16" only) and the block-scale vector sizes
  (PTX 9.7.16.10.9.1: block32 = scale_vec::1X for mxf8f6f4, = 2X for mxf4/mxf4nvf4; block16 = 4X, mxf4nvf4 only);
- 9.7.16.10.8 for the sparsity granularity per kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..diagnostics import SpecError

F8F6F4_TYPES = ("e4m3", "e5m2", "e2m3", "e3m2", "e2m1")
SUBBYTE_TYPES = ("e2m3", "e3m2", "e2m1")      # 6- and 4-bit values (PTX "f6"/"f4")
# Bits one 4- or 6-bit element occupies in shared memory and TMEM, per kind: padded to a byte under
# .kind::f8f6f4 / mxf8f6f4 (PTX 9.7.16.10.4.3-4: "contiguously packed along with padding", the .b4x16_p64 /
# .b6x16_p32 formats; in TMEM one element per 8-bit container), packed two per byte under .kind::mxf4 /
# mxf4nvf4 (9.7.16.10.4 packing formats).
SUBBYTE_CONTAINER_BITS: dict[str, int] = {"f8f6f4": 8, "mxf8f6f4": 8, "mxf4": 4, "mxf4nvf4": 4}


@dataclass(frozen=True)
class Kind:
    name: str
    ab_types: tuple[str, ...]          # legal A and B element types
    d_types: tuple[str, ...]           # legal accumulator types
    pairs: tuple[tuple[str, str], ...] | None   # legal (A type, D type); None = any of ab x d
    same_ab: bool                      # A and B must have the same type
    dense_k: int                       # K of one instruction, in elements (Table 39)
    sparse_k: int
    sparsity: str                      # granularity of sparse A (9.7.16.10.8)
    negate: bool                       # Table 49
    transpose: bool                    # Table 49
    saturate: bool                     # Table 42 bit 3: "Saturate for integer types", i8 only
    scale_input_d: bool                # 9.7.16.10.9.1: f16 and tf32 only
    ws: bool                           # .ws / .ws.sp exist (PTX 9.7.16.2.1 Table 39)
    scale_types: tuple[str, ...]       # () = not block scaled; else legal scale-factor types (Tables 43/44)
    vector_sizes: tuple[int, ...]      # elements per scale factor (block16 / block32)

    @property
    def block_scaled(self) -> bool:
        return bool(self.scale_types)

    @property
    def k96(self) -> bool:
        """The kind has the dense K = 96 variant (K96 below; Table 44 bit 31)."""
        return self.name in K96.kinds


KINDS: dict[str, Kind] = {k.name: k for k in (
    #    name        A/B types               D types          (A, D) pairs                          same  Kd  Ks  sparsity neg   trans  sat    sid    ws     scales              vec
    Kind("f16", ("f16", "bf16"), ("f16", "f32"), (("f16", "f16"), ("f16", "f32"), ("bf16", "f32")), True, 16, 32, "2:4", True, True, False, True, True, (), ()),
    Kind("tf32", ("tf32",), ("f32",), None, True, 8, 16, "1:2", True, True, False, True, True, (), ()),
    Kind("f8f6f4", F8F6F4_TYPES, ("f32", "f16"), None, False, 32, 64, "2:4", True, True, False, False, True, (), ()),
    Kind("i8", ("s8", "u8"), ("s32",), None, False, 32, 64, "2:4", False, True, True, False, True, (), ()),
    Kind("mxf8f6f4", F8F6F4_TYPES, ("f32",), None, False, 32, 64, "2:4", True, True, False, False, False, ("ue8m0",), (32,)),
    Kind("mxf4", ("e2m1",), ("f32",), None, True, 64, 128, "4:8", True, False, False, False, False, ("ue8m0",), (32,)),
    Kind("mxf4nvf4", ("e2m1",), ("f32",), None, True, 64, 128, "4:8", True, False, False, False, False, ("ue8m0", "ue4m3"), (16, 32)),
)}

# mxf4nvf4: UE4M3 scales only with 16-element vectors (block16 / scale_vec::4X); PTX 9.7.16.10.9.1.
SCALE_VECTOR_RULES: dict[tuple[str, str], tuple[int, ...]] = {("mxf4nvf4", "ue4m3"): (16,)}


def kind_info(kind: str) -> Kind:
    if kind not in KINDS:
        raise SpecError(f"unknown tcgen05 kind {kind!r}; kinds: {', '.join(KINDS)}", field="engine.kind")
    return KINDS[kind]


def mma_k(kind: str, sparse: bool = False, k96: bool = False) -> int:
    """K (elements of the dense problem) of one tcgen05.mma (Table 39)."""
    info = kind_info(kind)
    if k96:
        if not info.k96 or sparse != K96.sparse:
            raise SpecError(f"K = {K96.k} exists only for dense kind::mxf4 / mxf4nvf4, not "
                            f"{'sparse ' if sparse else ''}kind::{kind}", field="shape.K")
        return K96.k
    return info.sparse_k if sparse else info.dense_k


def check_types(kind: str, a_type: str, b_type: str, d_type: str) -> None:
    """A/B/D type legality per kind (PTX 9.7.16.2.1 Table 39). Raises SpecError."""
    info = kind_info(kind)
    for operand, t in (("A", a_type), ("B", b_type)):
        if t not in info.ab_types:
            raise SpecError(f"{operand} type {t} is not allowed for kind::{kind}; allowed: {', '.join(info.ab_types)}",
                            field=f"{operand}.dtype", hint=_kind_hint(a_type, b_type, d_type))
    if info.same_ab and a_type != b_type:
        raise SpecError(f"kind::{kind} needs A and B of the same type, got {a_type} and {b_type}", field="B.dtype")
    if d_type not in info.d_types:
        raise SpecError(f"D type {d_type} is not allowed for kind::{kind}; allowed: {', '.join(info.d_types)}",
                        field="D.dtype")
    if info.pairs is not None and (a_type, d_type) not in info.pairs:
        legal = ", ".join(f"{a}->{d}" for a, d in info.pairs)
        raise SpecError(f"kind::{kind} has no {a_type} -> {d_type} form; legal: {legal}", field="D.dtype",
                        hint="bf16 accumulates only into f32" if a_type == "bf16" else None)


def _kind_hint(a_type: str, b_type: str, d_type: str) -> str | None:
    matches = [k.name for k in KINDS.values() if a_type in k.ab_types and b_type in k.ab_types
               and d_type in k.d_types and (not k.same_ab or a_type == b_type)]
    return f"these types fit kind::{' / kind::'.join(matches)}" if matches else None


@lru_cache(maxsize=256)
def infer_kind(a_type: str, b_type: str, d_type: str, block_scaled: bool = False) -> str:
    """The one kind whose type table admits (A, B, D); SpecError if none or several fit.

    e2m1 x e2m1 -> f32 with block scaling fits mxf8f6f4, mxf4 and mxf4nvf4: ambiguous (name the kind).
    A pure function of the four ISA words, so answered once per combination.
    """
    fits = []
    for info in KINDS.values():
        if info.block_scaled != block_scaled:
            continue
        try:
            check_types(info.name, a_type, b_type, d_type)
        except SpecError:
            continue
        fits.append(info.name)
    what = f"{a_type} x {b_type} -> {d_type}{' with block scaling' if block_scaled else ''}"
    if not fits:
        # A kind that takes these A/B types explains best what is wrong (e.g. bf16 -> f16 in kind::f16).
        near = [k for k in KINDS.values() if k.block_scaled == block_scaled
                and a_type in k.ab_types and b_type in k.ab_types]
        if len(near) == 1:
            try:
                check_types(near[0].name, a_type, b_type, d_type)
            except SpecError as e:
                raise SpecError(f"no tcgen05 kind computes {what}: {e.message}", field=e.field,
                                hint=e.hint) from None
        raise SpecError(f"no tcgen05 kind computes {what}", field="A.dtype",
                        hint="kinds: " + "; ".join(f"{k.name}: {'/'.join(k.ab_types)} -> {'/'.join(k.d_types)}"
                                                   for k in KINDS.values() if k.block_scaled == block_scaled))
    if len(fits) > 1:
        raise SpecError(f"{what} fits several kinds ({', '.join(fits)}); name one", field="engine.kind",
                        hint=f"write kind={fits[0]} (or {', '.join(fits[1:])})")
    return fits[0]


# ---- shapes (PTX 9.7.16.2.1, Table 39) ----------------------------------------------------------

@dataclass(frozen=True)
class NSet:
    """A set of legal N values: a union of (lo, hi, step) ranges."""
    ranges: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, *values: int) -> "NSet":
        return cls(tuple((v, v, 1) for v in values))

    def values(self) -> tuple[int, ...]:
        return tuple(sorted({n for lo, hi, step in self.ranges for n in range(lo, hi + 1, step)}))

    def __contains__(self, n: object) -> bool:
        return isinstance(n, int) and any(lo <= n <= hi and (n - lo) % step == 0 for lo, hi, step in self.ranges)

    def describe(self) -> str:
        return ", ".join(str(lo) if lo == hi else f"{lo}..{hi} in steps of {step}" for lo, hi, step in self.ranges)


@dataclass(frozen=True)
class ShapeRule:
    kinds: tuple[str, ...]
    cta_group: int
    sparse: bool | None          # None: dense and sparse alike
    ws: bool
    k96: bool
    ms: tuple[int, ...]
    ns: NSet

    def matches(self, kind: str, cta_group: int, sparse: bool, ws: bool, k96: bool) -> bool:
        return (kind in self.kinds and self.cta_group == cta_group and self.ws == ws and self.k96 == k96
                and (self.sparse is None or self.sparse == sparse))


_FLOAT = ("f16", "tf32", "f8f6f4")
_FP4 = ("mxf4", "mxf4nvf4")
N8 = NSet(((8, 256, 8),))
N16 = NSet(((16, 256, 16),))
N32 = NSet(((32, 256, 32),))


@dataclass(frozen=True)
class K96Shape:
    """The dense K = 96 MMA of the fp4 kinds: one fact, read by the shape rules, the instruction forms and
    their targets, the instruction descriptor, the TMEM layouts, `verify` and `explain`.

    PTX ISA 9.7.16.2.1 Table 39 and its target note list K = 96 only for dense kind::mxf4 / mxf4nvf4 with
    cta_group::2 and M = 256 (Table 44 bit 31; "Arch-specific/Family-specific PTX Features Release History",
    Table 60 in PTX ISA 9.2: "K shape value 96: 8.8, sm_103a"). That is tilec's contract for compiling. NVIDIA's own CUTLASS also issues K = 96 from one SM
    (`SM103_MXF4_ULTRA_SS_VS`: cta_group::1, M = 128, instruction descriptor 0x88200480 with bit 31 set),
    a combination the ISA does not list: `explain` reports it as a warning, compiling refuses it.
    """
    k: int
    kinds: tuple[str, ...]
    sparse: bool                     # K = 96 exists dense only
    cta_group: int
    ms: tuple[int, ...]
    ns: NSet
    min_ptx: tuple[int, int]
    targets: tuple[str, ...]
    block_scales: tuple[str, ...]    # the .scale_vec::NX aliases are defined only "when K = 64 or 128"
    source: str
    outside_cta_group: int           # NVIDIA's one-SM use, outside the ISA's table
    outside_ms: tuple[int, ...]
    outside_source: str

    def lists(self, kind: str, sparse: bool, m: int) -> bool:
        """The ISA's table lists K = 96 for this kind, sparsity and M."""
        return kind in self.kinds and sparse == self.sparse and m in self.ms

    def outside_isa(self, kind: str, sparse: bool, m: int) -> bool:
        """Not in the ISA's table, but what NVIDIA's own one-SM K = 96 atom issues."""
        return kind in self.kinds and sparse == self.sparse and m in self.outside_ms

    def contract(self) -> str:
        return (f"the PTX ISA ({self.source}) lists K = {self.k} only for dense "
                f"{' / '.join('kind::' + k for k in self.kinds)} with cta_group::{self.cta_group}, "
                f"M = {'/'.join(map(str, self.ms))}")

    def outside_note(self) -> str:
        return (f"{self.outside_source} issues K = {self.k} with cta_group::{self.outside_cta_group}, "
                f"M = {'/'.join(map(str, self.outside_ms))}, which the ISA does not list")


K96 = K96Shape(
    k=96, kinds=("mxf4", "mxf4nvf4"), sparse=False, cta_group=2, ms=(256,), ns=N16, min_ptx=(8, 8),
    targets=("sm_103a",), block_scales=("block16", "block32", "implicit"),
    source="Table 39 and its target note; PTX 8.8, sm_103a",
    outside_cta_group=1, outside_ms=(128,),
    outside_source="CUTLASS's one-SM SM103 atom SM103_MXF4_ULTRA_SS_VS (instruction descriptor 0x88200480)")

SHAPE_RULES: tuple[ShapeRule, ...] = (
    # Table 39, non-.ws rows
    ShapeRule(_FLOAT, 1, None, False, False, (64, 128), N8),
    ShapeRule(_FLOAT, 2, None, False, False, (128, 256), N16),
    ShapeRule(("i8",), 1, None, False, False, (64, 128), NSet(((8, 32, 8), (48, 256, 16)))),
    ShapeRule(("i8",), 2, None, False, False, (128, 256), N32),
    ShapeRule(("mxf8f6f4",) + _FP4, 1, None, False, False, (128,), N8),
    ShapeRule(("mxf8f6f4",) + _FP4, 2, False, False, False, (128, 256), N16),
    ShapeRule(("mxf8f6f4",) + _FP4, 2, True, False, False, (256,), N16),      # sparse 2-CTA: M = 256 only
    ShapeRule(K96.kinds, K96.cta_group, K96.sparse, False, True, K96.ms, K96.ns),   # K = 96 (K96 above)
    # Table 39 .ws rows: cta_group::1 only, f16/tf32/f8f6f4/i8
    ShapeRule(_FLOAT + ("i8",), 1, False, True, False, (32, 64, 128), NSet.of(64, 128, 256)),
    ShapeRule(_FLOAT + ("i8",), 1, True, True, False, (32, 64, 128), NSet.of(64, 128)),
)


def shape_rule(kind: str, cta_group: int = 1, sparse: bool = False, ws: bool = False,
               k96: bool = False) -> ShapeRule:
    """The Table 39 row for this variant; SpecError when the variant itself does not exist."""
    info = kind_info(kind)
    if cta_group not in (1, 2):
        raise SpecError(f"cta_group must be 1 or 2, not {cta_group}", field="engine.cta_group")
    if ws and cta_group != 1:
        raise SpecError(".ws exists only with cta_group::1", field="engine.ws")
    if ws and not info.ws:
        raise SpecError(f".ws does not exist for kind::{kind} (only f16, tf32, f8f6f4, i8)", field="engine.ws")
    if k96 and not info.k96:
        raise SpecError(f"K = {K96.k} exists only for kind::mxf4 / mxf4nvf4, not kind::{kind}", field="shape.K")
    if k96 and (sparse != K96.sparse or cta_group != K96.cta_group):
        raise SpecError(f"K = {K96.k} exists only dense with cta_group::{K96.cta_group} "
                        f"(M = {'/'.join(map(str, K96.ms))})", field="shape.K")
    for rule in SHAPE_RULES:
        if rule.matches(kind, cta_group, sparse, ws, k96):
            return rule
    raise AssertionError(f"no shape rule for {kind} cta_group={cta_group} sparse={sparse} ws={ws}")


def check_shape(kind: str, m: int, n: int, cta_group: int = 1, sparse: bool = False, ws: bool = False,
                k96: bool = False) -> None:
    """Raise SpecError(field "shape.M" / "shape.N") unless (M, N) is legal per Table 39.

    M is the full MMA M (both CTAs for cta_group::2).
    """
    rule = shape_rule(kind, cta_group, sparse, ws, k96)
    variant = (f"kind::{kind}{' sparse' if sparse else ''}{' .ws' if ws else ''} cta_group::{cta_group}"
               f"{' K=96' if k96 else ''}")
    if m not in rule.ms:
        raise SpecError(f"M = {m} is not valid for {variant}; valid M: {', '.join(map(str, rule.ms))}",
                        field="shape.M")
    if n not in rule.ns:
        raise SpecError(f"N = {n} is not valid for {variant}; valid N: {rule.ns.describe()}", field="shape.N")


def check_major(kind: str, operand: str, dtype: str, major: str, swizzle: str | None = None,
                n: int | None = None, cta_group: int = 1) -> None:
    """Transpose rules of 9.7.16.10.1 for operand "A" or "B" stored `major`-major with `swizzle`."""
    info = kind_info(kind)
    field = f"{operand}.major"
    if major not in ("K", "MN"):
        raise SpecError(f"major must be K or MN, not {major!r}", field=field)
    if swizzle == "128B_base32B" and not (kind == "tf32" and major == "MN"):
        # Table 49 notes: other kinds cannot transpose with it; CUTLASS: invalid for K-major.
        raise SpecError(f"128B_base32B swizzle is only for MN-major kind::tf32 operands", field=f"{operand}.swizzle")
    if major == "K":
        return
    if not info.transpose:
        raise SpecError(f"kind::{kind} does not support MN-major (transposed) {operand} (PTX Table 49)",
                        field=field, hint="store the operand K-major")
    if dtype in SUBBYTE_TYPES:
        raise SpecError(f"{dtype} (sub-byte) operands must be K-major", field=field,
                        hint="store 4- and 6-bit operands K-major")
    if kind == "tf32" and swizzle is not None and swizzle not in ("128B_base32B", "auto"):
        raise SpecError(f"MN-major tf32 needs the 128B_base32B swizzle, not {swizzle} (PTX 9.7.16.10.1)",
                        field=f"{operand}.swizzle")
    if operand == "B" and n is not None and dtype in ("e4m3", "e5m2", "s8", "u8"):
        allowed = {1: N16, 2: N32}[cta_group]     # Table 50: 8-bit transpose B
        if n not in allowed:
            raise SpecError(f"N = {n} is not valid with an MN-major 8-bit B under cta_group::{cta_group}; "
                            f"valid N: {allowed.describe()} (PTX Table 50)", field="shape.N")


def check_options(kind: str, negate_a: bool = False, negate_b: bool = False, saturate: bool = False,
                  scale_input_d: bool = False) -> None:
    info = kind_info(kind)
    for operand, flag in (("A", negate_a), ("B", negate_b)):
        if flag and not info.negate:
            raise SpecError(f"kind::{kind} cannot negate {operand} (PTX Table 49)", field=f"negate.{operand}")
    if saturate and not info.saturate:
        raise SpecError(f"saturate is only for kind::i8, not kind::{kind} (Table 42 bit 3)", field="saturate")
    if scale_input_d and not info.scale_input_d:
        raise SpecError(f"scale-input-d is only for kind::f16 and kind::tf32, not kind::{kind}",
                        field="scale_input_d")


def check_scale(kind: str, scale_type: str | None, vector_size: int | None = None) -> None:
    """Scale-factor type and vector size of a block-scaled kind (Tables 43/44, PTX 9.7.16.10.9.1)."""
    info = kind_info(kind)
    if not info.block_scaled:
        if scale_type is not None:
            raise SpecError(f"kind::{kind} is not block scaled; it takes no scale factors", field="SFA.dtype")
        return
    if scale_type not in info.scale_types:
        raise SpecError(f"scale type {scale_type} is not valid for kind::{kind}; valid: {', '.join(info.scale_types)}",
                        field="SFA.dtype")
    if vector_size is not None:
        allowed = SCALE_VECTOR_RULES.get((kind, scale_type), info.vector_sizes)
        if vector_size not in allowed:
            raise SpecError(f"kind::{kind} with {scale_type} scales takes vectors of "
                            f"{' or '.join(map(str, allowed))} elements, not {vector_size}", field="block_scale.vec")
