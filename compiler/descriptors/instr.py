"""The 32-bit tcgen05 instruction descriptor (PTX ISA 9.7.16.4.2, Tables 42, 43, 44).

One field table per descriptor format drives `encode`, `decode` and `explain` (compiler/explain.py):
- Table 42: .kind::tf32, .kind::f16, .kind::f8f6f4, .kind::i8
- Table 43: .kind::mxf8f6f4
- Table 44: .kind::mxf4, .kind::mxf4nvf4
The field tables and per-kind value codes (`LAYOUTS`, `CODES`, transcribed from the "Values" columns) are
ISA facts and live in compiler/isa/descriptors.py; this module encodes, decodes and checks with them.

`m` is the full MMA M (both CTAs for cta_group::2). `max_shift` is the maximum shift amount in
rows (0, 8, 16 or 32; Table 42 bits 30-31, meaningful only for `.ws`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields as dc_fields

from ..diagnostics import SpecError
from ..isa.descriptors import CODES, IMPLICIT, LAYOUTS, TABLE_NAME, IField
from ..isa.tcgen05_kinds import K96, SHAPE_RULES, check_major, check_types, kind_info


# Spec field blamed for each attribute (compiler/spec.py field paths).
SPEC_FIELD = {"a_type": "A.dtype", "b_type": "B.dtype", "d_type": "D.dtype", "m": "shape.M", "n": "shape.N",
              "a_major": "A.major", "b_major": "B.major", "negate_a": "negate.A", "negate_b": "negate.B",
              "sparse": "sparsity", "sparsity_selector": "sparsity.selector", "saturate": "saturate",
              "max_shift": "max_shift.value", "scale_type": "SFA.dtype", "a_scale_id": "SFA",
              "b_scale_id": "SFB", "k96": "shape.K"}

KINDS = tuple(LAYOUTS)


def layout_of(kind: str) -> tuple[IField, ...]:
    if kind not in LAYOUTS:
        raise SpecError(f"unknown tcgen05 kind {kind!r}; kinds: {', '.join(KINDS)}", field="engine.kind")
    return LAYOUTS[kind]


def _legal(codes: dict) -> str:
    return ", ".join(str(v) for v in codes)


def encode_field(kind: str, field: IField, value) -> int:
    """The raw bits of one field for `value`; SpecError naming the field if it cannot be stored."""
    if field.shift is not None:
        unit = 1 << field.shift
        raw = value >> field.shift if isinstance(value, int) else -1
        if not isinstance(value, int) or value % unit or not 0 < raw <= field.bits.mask:
            where = f"bits {field.bits.bits} ({field.bits.name})"
            top = field.bits.mask << field.shift
            raise SpecError(f"{field.attr.upper()} = {value} cannot be encoded in {where} for kind::{kind}: "
                            f"it must be a multiple of {unit} in {unit}..{top}", field=SPEC_FIELD[field.attr])
        return raw
    codes = CODES[kind][field.attr]
    if value not in codes or isinstance(value, bool) != isinstance(next(iter(codes)), bool):
        where = f"bits {field.bits.bits} ({field.bits.name})"
        raise SpecError(f"{field.attr} = {value!r} is not valid for kind::{kind} ({where}); "
                        f"valid: {_legal(codes)}", field=SPEC_FIELD[field.attr])
    return codes[value]


def decode_field(kind: str, field: IField, raw: int):
    """The attribute value stored in `raw`; SpecError (naming the bits) if the code is not legal."""
    if field.attr is None:
        if raw:
            raise SpecError(f"reserved bits {field.bits.bits} must be 0 for kind::{kind}, found {raw:#x}")
        return None
    if field.shift is not None:
        if raw == 0:
            raise SpecError(f"bits {field.bits.bits} ({field.attr.upper()} >> {field.shift}) are 0: "
                            f"{field.attr.upper()} = 0 is not a valid shape")
        return raw << field.shift
    inverse = {code: v for v, code in CODES[kind][field.attr].items()}
    if raw not in inverse:
        raise SpecError(f"bits {field.bits.bits} ({field.attr}): code {raw} is not valid for kind::{kind}; "
                        f"valid codes: {', '.join(f'{c} = {v}' for c, v in sorted(inverse.items()))}")
    return inverse[raw]


def k96_problem(kind: str, sparse: bool, m: int) -> str:
    """Why bit 31 (K = 96) does not fit this descriptor, naming the ISA's rule and, where it applies,
    NVIDIA's own one-SM use that the ISA does not list (compiler/isa/tcgen05_kinds.py, K96)."""
    from ..isa.tcgen05_kinds import K96

    what = f"K = {K96.k} with{' sparse A and' if sparse else ''} M = {m}: {K96.contract()}"
    return what + (f"; {K96.outside_note()}" if K96.outside_isa(kind, sparse, m) else "")


# (field values, their types) of every descriptor checked so far -> (scale type, encoding)
_CHECKED: dict[tuple, tuple] = {}


@dataclass(frozen=True)
class InstrDesc:
    kind: str
    a_type: str
    b_type: str
    d_type: str
    m: int
    n: int
    a_major: str = "K"
    b_major: str = "K"
    negate_a: bool = False
    negate_b: bool = False
    sparse: bool = False
    sparsity_selector: int = 0
    saturate: bool = False
    max_shift: int = 0
    scale_type: str | None = None
    a_scale_id: int = 0
    b_scale_id: int = 0
    k96: bool = False

    def __post_init__(self) -> None:
        # A descriptor's legality and encoding are a pure function of its field values: the checks run
        # once per distinct values (their types too: True and 1 are different inputs) and later
        # descriptors of the same values take the outcome (the filled-in scale type, the encoding).
        values = tuple(self.__dict__.values())
        try:
            key = (values, tuple(map(type, values)))
            known = _CHECKED.get(key)
        except TypeError:                   # an unhashable field value: the checks below say why
            key = known = None
        if known is not None:
            if known[0] != self.scale_type:
                object.__setattr__(self, "scale_type", known[0])
            object.__setattr__(self, "_encoded", known[1])
            return
        self._check()
        encoded = self.encode()             # every stored value must have a code
        if self.k96 and not K96.lists(self.kind, self.sparse, self.m):
            # last, so that `explain` can report NVIDIA's own one-SM K = 96 (K96.outside_isa) as a warning
            # knowing every other field is valid
            raise SpecError(k96_problem(self.kind, self.sparse, self.m), field="shape.K")
        object.__setattr__(self, "_encoded", encoded)
        if key is not None:
            if len(_CHECKED) >= 4096:
                _CHECKED.clear()
            _CHECKED[key] = (self.scale_type, encoded)

    def _check(self) -> None:
        info = kind_info(self.kind)
        check_types(self.kind, self.a_type, self.b_type, self.d_type)
        if info.block_scaled and self.scale_type is None and len(info.scale_types) == 1:
            object.__setattr__(self, "scale_type", info.scale_types[0])     # the only legal scale type
        if info.block_scaled and self.scale_type is None:
            raise SpecError(f"kind::{self.kind} needs a scale factor type ({' or '.join(info.scale_types)})",
                            field="SFA.dtype", hint="give SFA/SFB operands with their type")
        for operand, dtype, major in (("A", self.a_type, self.a_major), ("B", self.b_type, self.b_major)):
            check_major(self.kind, operand, dtype, major)
        # M and N must belong to some Table 39 variant of the kind (cta_group / .ws are not known here;
        # compiler.isa.tcgen05_kinds.check_shape checks the exact row).
        rules = [r for r in SHAPE_RULES if self.kind in r.kinds]
        ms = sorted({m for r in rules for m in r.ms})
        if self.m not in ms:
            raise SpecError(f"M = {self.m} is not valid for kind::{self.kind}; valid M: {', '.join(map(str, ms))}",
                            field="shape.M")
        if not any(self.n in r.ns for r in rules):
            ns = sorted({n for r in rules for n in r.ns.values()})
            raise SpecError(f"N = {self.n} is not valid for kind::{self.kind}; valid N: "
                            f"{', '.join(map(str, ns))}", field="shape.N")
        if not self.sparse and self.sparsity_selector:
            raise SpecError("the sparsity selector is only meaningful for sparse MMAs (Table 42 bits 0-1)",
                            field="sparsity.selector")
        layout = layout_of(self.kind)
        stored = {f.attr for f in layout if f.attr}
        for attr, implicit in IMPLICIT.items():
            if attr not in stored and getattr(self, attr) != implicit:
                raise SpecError(f"{attr} = {getattr(self, attr)!r} has no field in the kind::{self.kind} descriptor "
                                f"({TABLE_NAME[layout]}); it must be {implicit!r}", field=SPEC_FIELD[attr])

    def encode(self) -> int:
        value = self.__dict__.get("_encoded")
        if value is not None:
            return value
        value = 0
        for field in layout_of(self.kind):
            if field.attr is not None:
                value |= field.bits.insert(encode_field(self.kind, field, getattr(self, field.attr)))
        return value

    @classmethod
    def decode(cls, value: int, kind: str) -> "InstrDesc":
        """Inverse of `encode`; SpecError naming the bits on reserved bits or illegal codes."""
        if not isinstance(value, int) or not 0 <= value < 1 << 32:
            raise SpecError(f"instruction descriptor {value!r} is not a 32-bit unsigned value")
        attrs = {}
        for field in layout_of(kind):
            decoded = decode_field(kind, field, field.bits.extract(value))
            if field.attr is not None:
                attrs[field.attr] = decoded
        return cls(kind=kind, **{a: attrs.get(a, IMPLICIT.get(a)) for a in
                                 (f.name for f in dc_fields(cls) if f.name != "kind")})
