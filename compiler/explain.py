"""`tilec explain`: decode a descriptor field by field, reporting (never raising) what is illegal.

Explainers take the raw value (plus context such as the kind) and return an `Explanation`. They are
registered in `EXPLAINERS` by name; other modules add theirs with `register()` (the zero-column mask
explainer lives in compiler/descriptors/zero_column_mask.py and is registered lazily as "zcm"). The report
types (`Explanation`, `Field`) live in compiler/descriptors/explanation.py, below both, so the descriptors
never import this module.
The field tables are the encoders' own (compiler/isa/descriptors.py, read by descriptors/instr.py and smem.py), so an explanation
can never disagree with what the compiler emits.
"""
from __future__ import annotations

from collections.abc import Callable

from .descriptors.explanation import Explanation, Field


def _as_unsigned(value, bits: int, violations: list[str]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << bits:
        violations.append(f"{value!r} is not a {bits}-bit unsigned value; showing its low {bits} bits")
        return value & ((1 << bits) - 1) if isinstance(value, int) else 0
    return value


# ---- instruction descriptor (PTX 9.7.16.4.2, Tables 42-44) ----------------------------------------

def _describe(attr: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if attr in ("a_major", "b_major"):
        return "MN-major (transposed)" if value == "MN" else "K-major"
    if attr == "max_shift":
        return "no shift" if value == 0 else f"at most {value} rows"
    return str(value)


def explain_idesc(value: int, kind: str | None = None) -> Explanation:
    """Every field of the instruction descriptor for `kind`, plus violations (reserved bits, invalid codes,
    illegal type combinations, M/N out of range). Never raises."""
    from .descriptors.instr import InstrDesc
    from .isa.descriptors import CODES, IMPLICIT, LAYOUTS, TABLE_NAME
    from .diagnostics import SpecError
    from .isa.tcgen05_kinds import K96

    violations: list[str] = []
    value = _as_unsigned(value, 32, violations)
    if kind not in LAYOUTS:
        what = "no kind given" if kind is None else f"{kind!r} is not a tcgen05 kind"
        violations.append(f"{what}: the descriptor format depends on the kind (one of: {', '.join(LAYOUTS)})")
        return Explanation([], violations, f"idesc {value:#010x}")
    layout = LAYOUTS[kind]
    fields: list[Field] = []
    attrs: dict = {}
    for f in layout:
        raw = f.bits.extract(value)
        if f.attr is None:
            meaning = f.meaning
            if raw:
                violations.append(f"reserved bits {f.bits.bits} are set ({raw:#x})")
        elif f.shift is not None:
            attrs[f.attr] = raw << f.shift
            meaning = f"{f.attr.upper()} = {raw << f.shift} ({f.meaning})"
            if raw == 0:
                violations.append(f"bits {f.bits.bits}: {f.attr.upper()} = 0")
        else:
            inverse = {code: v for v, code in CODES[kind][f.attr].items()}
            if raw in inverse:
                attrs[f.attr] = inverse[raw]
                meaning = f"{f.meaning}: {_describe(f.attr, inverse[raw])}"
            else:
                legal = ", ".join(f"{c} = {_describe(f.attr, v)}" for c, v in sorted(inverse.items()))
                meaning = f"{f.meaning}: invalid code {raw} (valid: {legal})"
                violations.append(f"bits {f.bits.bits} ({f.bits.name}): code {raw} is not valid for kind::{kind}")
        fields.append(Field(f.bits.name, f.bits.bits, raw, meaning))
    warnings: list[str] = []
    if not violations:
        # Field-level decoding succeeded: the constructor checks the combination (type pairs, shapes, ...).
        try:
            InstrDesc(kind=kind, **{a: attrs.get(a, IMPLICIT.get(a)) for a in
                                    ("a_type", "b_type", "d_type", "m", "n", "a_major", "b_major", "negate_a",
                                     "negate_b", "sparse", "sparsity_selector", "saturate", "max_shift",
                                     "scale_type", "a_scale_id", "b_scale_id", "k96")})
        except SpecError as e:
            # K = 96 from one SM is NVIDIA's own value (K96.outside_isa): the ISA does not list it, so
            # tilec never compiles it, but it is not a broken descriptor. The K = 96 check runs last in
            # InstrDesc, so every other field has been checked when it fires.
            if e.field == "shape.K" and attrs.get("k96") and K96.outside_isa(kind, attrs.get("sparse", False),
                                                                             attrs.get("m")):
                warnings.append(f"the PTX ISA does not list this combination: {e.message}")
            else:
                violations.append(e.message)
    return Explanation(fields, violations, f"idesc {value:#010x}, kind::{kind} ({TABLE_NAME[layout]})",
                       warnings)


# ---- shared-memory descriptor (PTX 9.7.16.4.1) ----------------------------------------------------

def explain_smem_desc(value: int) -> Explanation:
    """Every field of a tcgen05 shared-memory descriptor, plus violations. Never raises."""
    from .descriptors.smem import check_bits
    from .isa import descriptors as smem      # the smem-descriptor field table (PTX 9.7.16.4.1)

    violations: list[str] = []
    value = _as_unsigned(value, 64, violations)
    absolute = smem.LBO_MODE.extract(value) == 1
    swizzle = smem.SWIZZLE_NAMES.get(smem.SWIZZLE.extract(value))

    def meaning(f: smem.BitField, raw: int) -> str:
        if f in smem.RESERVED:
            return "reserved, must be 0"
        if f is smem.START:
            return f"matrix start address = {raw << 4:#x} (field << 4)"
        if f is smem.LBO:
            if absolute:
                return f"absolute LBO address = {raw << 4:#x} (field << 4)"
            return (f"leading-dimension byte offset = {raw << 4} B (field << 4; unused, 'assumed 1', "
                    f"for K-major swizzled layouts)")
        if f is smem.SBO:
            return f"stride-dimension byte offset = {raw << 4} B (field << 4)"
        if f is smem.FIXED:
            return "fixed constant 0b001" + ("" if raw == smem.FIXED_VALUE else f": found {raw:#05b}")
        if f is smem.BASE_OFFSET:
            return f"matrix base offset {raw}" + (" (swizzle pattern starts on its repeat)" if raw == 0 else "")
        if f is smem.LBO_MODE:
            return "LBO mode: absolute address (sm_103a)" if raw else "LBO mode: relative offset"
        return f"swizzle: {swizzle}" if swizzle else f"swizzle: invalid code {raw} (valid 0, 1, 2, 4, 6)"

    table = sorted(smem.FIELDS + smem.RESERVED, key=lambda f: f.lo)
    fields = [Field(f.name, f.bits, f.extract(value), meaning(f, f.extract(value))) for f in table]
    violations.extend(check_bits(value))
    mode = "absolute" if absolute else "relative"
    return Explanation(fields, violations, f"smem-desc {value:#018x} ({swizzle or 'invalid swizzle'}, {mode} LBO)")


# ---- registry ----------------------------------------------------------------------------------

def _explain_zcm(value: int, m: int | None = None, n: int | None = None):
    from .descriptors.zero_column_mask import explain_zcm

    return explain_zcm(value, m=m, n=n)


EXPLAINERS: dict[str, Callable[..., Explanation]] = {
    "idesc": explain_idesc,
    "smem-desc": explain_smem_desc,
    "zcm": _explain_zcm,
}


def register(name: str, explainer: Callable[..., Explanation]) -> None:
    """Add an explainer (value, **context) -> Explanation under `name`."""
    EXPLAINERS[name] = explainer
