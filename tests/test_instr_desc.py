"""InstrDesc: the 32-bit tcgen05 instruction descriptor, PTX ISA 9.7.16.4.2 Tables 42, 43, 44.

Expected codes are typed from the tables' "Values" columns (not read back from the module's tables).
"""
import pytest
from hypothesis import assume, given, settings, strategies as st

from compiler.descriptors import InstrDesc
from compiler.isa.descriptors import LAYOUTS
from compiler.diagnostics import SpecError
from compiler.isa.tcgen05_kinds import KINDS, SHAPE_RULES

BASE = {
    "tf32": dict(a_type="tf32", b_type="tf32", d_type="f32", m=128, n=64),
    "f16": dict(a_type="f16", b_type="f16", d_type="f32", m=128, n=64),
    "f8f6f4": dict(a_type="e4m3", b_type="e4m3", d_type="f32", m=128, n=64),
    "i8": dict(a_type="s8", b_type="s8", d_type="s32", m=128, n=64),
    "mxf8f6f4": dict(a_type="e4m3", b_type="e4m3", d_type="f32", m=128, n=64),
    "mxf4": dict(a_type="e2m1", b_type="e2m1", d_type="f32", m=128, n=64),
    "mxf4nvf4": dict(a_type="e2m1", b_type="e2m1", d_type="f32", m=128, n=64, scale_type="ue8m0"),
}
TABLE42 = ("tf32", "f16", "f8f6f4", "i8")
FP4 = ("mxf4", "mxf4nvf4")


def bits(value, lo, width):
    return (value >> lo) & ((1 << width) - 1)


def make(kind, **overrides):
    return InstrDesc(kind, **{**BASE[kind], **overrides})


def test_digest_worked_idesc_0x08100010():
    # a worked Table 42 value, kind::f16, Table 42: D = F32 -> 1 << 4 = 0x10; A = B = F16 -> 0 at bits 7-9 / 10-12;
    # K-major (no transpose) -> bits 15, 16 = 0; N = 64 -> 64 >> 3 = 8 at bit 17 = 0x100000;
    # M = 128 -> 128 >> 4 = 8 at bit 24 = 0x08000000. Sum: 0x08100010.
    desc = InstrDesc("f16", "f16", "f16", "f32", 128, 64)
    assert desc.encode() == 0x10 + 0x100000 + 0x08000000 == 0x08100010
    assert InstrDesc.decode(0x08100010, "f16") == desc


# (kind, overrides, bit lo, width, raw): one row per legal value of each field of Tables 42-44.
CASES = []
for kind in TABLE42:                                             # Table 42
    CASES += [(kind, dict(sparse=True, sparsity_selector=v), 0, 2, v) for v in range(4)]   # bits 0-1: 0-3
    CASES += [(kind, dict(sparse=False), 2, 1, 0), (kind, dict(sparse=True), 2, 1, 1)]     # bit 2
    CASES += [(kind, dict(negate_a=False), 13, 1, 0), (kind, dict(a_major="MN"), 15, 1, 1),
              (kind, dict(b_major="MN"), 16, 1, 1), (kind, dict(n=8), 17, 6, 1), (kind, dict(n=256), 17, 6, 32),
              (kind, dict(m=64), 24, 5, 4), (kind, dict(m=128), 24, 5, 8), (kind, dict(m=256), 24, 5, 16),
              (kind, dict(m=32), 24, 5, 2)]                       # M >> 4 (M = 32 only for .ws)
    CASES += [(kind, dict(max_shift=s), 30, 2, code) for s, code in ((0, 0), (8, 1), (16, 2), (32, 3))]
    if kind != "i8":                                              # Negate: i8 "No Negate = 0" only
        CASES += [(kind, dict(negate_a=True), 13, 1, 1), (kind, dict(negate_b=True), 14, 1, 1)]
CASES += [("i8", dict(saturate=True), 3, 1, 1), ("i8", dict(saturate=False), 3, 1, 0),    # bit 3, i8 only
          ("tf32", {}, 4, 2, 1),                                                          # dtype F32 = 1
          ("f16", dict(d_type="f16"), 4, 2, 0), ("f16", dict(d_type="f32"), 4, 2, 1),
          ("f8f6f4", dict(d_type="f32"), 4, 2, 1), ("f8f6f4", dict(d_type="f16"), 4, 2, 0),
          ("i8", {}, 4, 2, 2),                                                            # S32 = 2
          ("tf32", {}, 7, 3, 2), ("tf32", {}, 10, 3, 2),                                   # TF32 = 2
          ("f16", dict(a_type="f16", b_type="f16"), 7, 3, 0),
          ("f16", dict(a_type="bf16", b_type="bf16"), 7, 3, 1), ("f16", dict(a_type="bf16", b_type="bf16"), 10, 3, 1),
          ("i8", dict(a_type="u8"), 7, 3, 0), ("i8", dict(a_type="s8"), 7, 3, 1),
          ("i8", dict(b_type="u8"), 10, 3, 0), ("i8", dict(b_type="s8"), 10, 3, 1)]
F8F6F4_CODES = (("e4m3", 0), ("e5m2", 1), ("e2m3", 3), ("e3m2", 4), ("e2m1", 5))        # Tables 42 and 43
for kind in ("f8f6f4", "mxf8f6f4"):
    CASES += [(kind, dict(a_type=t), 7, 3, c) for t, c in F8F6F4_CODES]
    CASES += [(kind, dict(b_type=t), 10, 3, c) for t, c in F8F6F4_CODES]
CASES += [("mxf8f6f4", dict(b_scale_id=v), 4, 2, v) for v in range(4)]                   # Table 43 bits 4-5
CASES += [("mxf8f6f4", dict(a_scale_id=v), 29, 2, v) for v in range(4)]                  # bits 29-30
CASES += [("mxf8f6f4", {}, 23, 1, 1), ("mxf8f6f4", dict(sparse=True, m=128), 2, 1, 1),   # UE8M0 = 1
          ("mxf8f6f4", dict(m=128), 27, 2, 1), ("mxf8f6f4", dict(m=256), 27, 2, 2),      # M >> 7
          ("mxf8f6f4", dict(a_major="MN", b_major="MN"), 15, 2, 3),
          ("mxf8f6f4", dict(negate_a=True, negate_b=True), 13, 2, 3), ("mxf8f6f4", dict(n=136), 17, 6, 17)]
for kind in FP4:                                                                         # Table 44
    CASES += [(kind, dict(b_scale_id=v), 4, 2, v) for v in (0, 2)]
    CASES += [(kind, dict(a_scale_id=v), 29, 2, v) for v in (0, 2)]
    CASES += [(kind, {}, 7, 3, 1), (kind, {}, 10, 2, 1),                                 # E2M1 = 1
              (kind, dict(m=128), 27, 2, 1), (kind, dict(m=256), 27, 2, 2), (kind, dict(sparse=True), 2, 1, 1),
              (kind, dict(negate_a=True), 13, 1, 1), (kind, dict(negate_b=True), 14, 1, 1),
              (kind, dict(k96=True, m=256), 31, 1, 1), (kind, dict(k96=False), 31, 1, 0), (kind, dict(n=248), 17, 6, 31)]
CASES += [("mxf4", {}, 23, 1, 1), ("mxf4nvf4", dict(scale_type="ue8m0"), 23, 1, 1),
          ("mxf4nvf4", dict(scale_type="ue4m3"), 23, 1, 0)]


@pytest.mark.parametrize("kind, overrides, lo, width, raw", CASES)
def test_table_field_values(kind, overrides, lo, width, raw):
    desc = make(kind, **overrides)
    value = desc.encode()
    assert bits(value, lo, width) == raw
    assert InstrDesc.decode(value, kind) == desc


@pytest.mark.parametrize("kind, overrides, field", [
    ("f16", dict(a_type="bf16", b_type="bf16", d_type="f16"), "D.dtype"),     # bf16 -> f16 not allowed
    ("f16", dict(b_type="bf16"), "B.dtype"),                                  # A and B of one type
    ("f16", dict(a_type="tf32", b_type="tf32"), "A.dtype"),
    ("tf32", dict(d_type="f16"), "D.dtype"),
    ("f8f6f4", dict(d_type="s32"), "D.dtype"),
    ("i8", dict(a_type="s4"), "A.dtype"),
    ("i8", dict(d_type="f32"), "D.dtype"),
    ("mxf8f6f4", dict(d_type="f16"), "D.dtype"),                              # mx kinds: f32 only
    ("mxf4", dict(a_type="e4m3"), "A.dtype"),
    ("i8", dict(negate_a=True), "negate.A"),                                  # Table 42: i8 no negate
    ("i8", dict(negate_b=True), "negate.B"),
    ("f16", dict(saturate=True), "saturate"),                                 # bit 3: i8 only
    ("mxf4", dict(a_major="MN"), "A.major"),                                  # Table 44: no transpose
    ("mxf4nvf4", dict(b_major="MN"), "B.major"),
    ("f8f6f4", dict(a_type="e2m1", a_major="MN"), "A.major"),                 # sub-byte must be K-major
    ("f8f6f4", dict(b_type="e3m2", b_major="MN"), "B.major"),
    ("f16", dict(a_major="T"), "A.major"),
    ("mxf4", dict(b_scale_id=1), "SFB"),                                      # Table 44: 0 or 2
    ("mxf4nvf4", dict(a_scale_id=3), "SFA"),
    ("mxf8f6f4", dict(scale_type="ue4m3"), "SFA.dtype"),                      # Table 43: UE8M0 only
    ("mxf4", dict(scale_type="ue4m3"), "SFA.dtype"),
    ("mxf4nvf4", dict(scale_type=None), "SFA.dtype"),                         # two choices: must be given
    ("f16", dict(scale_type="ue8m0"), "SFA.dtype"),                           # not block scaled
    ("f16", dict(a_scale_id=2), "SFA"),
    ("f16", dict(k96=True), "shape.K"),
    ("mxf8f6f4", dict(k96=True, m=256), "shape.K"),
    ("mxf4", dict(k96=True, m=128), "shape.K"),                               # K = 96 only with M = 256
    ("mxf4", dict(k96=True, m=256, sparse=True), "shape.K"),
    ("f16", dict(n=4), "shape.N"), ("f16", dict(n=264), "shape.N"), ("f16", dict(n=12), "shape.N"),
    ("f16", dict(m=48), "shape.M"), ("f16", dict(m=512), "shape.M"),
    ("mxf8f6f4", dict(m=64), "shape.M"),                                      # block scaled: 128/256 only
    ("i8", dict(n=40), "shape.N"),                                            # no i8 variant has N = 40
    ("f16", dict(max_shift=4), "max_shift.value"),
    ("f16", dict(sparsity_selector=1), "sparsity.selector"),                  # selector without sparsity
    ("f16", dict(sparse=True, sparsity_selector=4), "sparsity.selector"),
    ("mxf8f6f4", dict(sparse=True, sparsity_selector=1), "sparsity.selector"),  # Table 43 bits 0-1 reserved
    ("mxf4", dict(max_shift=8), "max_shift.value"),                           # no such field in Table 44
    ("f16", dict(sparse=1), "sparsity"),                                      # flags are booleans
])
def test_illegal_descriptors_raise_with_field(kind, overrides, field):
    with pytest.raises(SpecError) as err:
        make(kind, **overrides)
    assert err.value.field == field


def test_unknown_kind():
    with pytest.raises(SpecError, match="unknown tcgen05 kind"):
        InstrDesc("f64", "f16", "f16", "f32", 128, 64)


# reserved bit -> the range the tables print for it
RESERVED = {"f16": {6: "6", 23: "23", 29: "29"},                                                   # Table 42
            "mxf8f6f4": {0: "0-1", 1: "0-1", 3: "3", 6: "6", 24: "24-26", 25: "24-26", 26: "24-26", 31: "31"},
            "mxf4": {0: "0-1", 1: "0-1", 3: "3", 6: "6", 12: "12", 24: "24-26", 25: "24-26", 26: "24-26"}}


@pytest.mark.parametrize("kind, bit, label", [(k, b, lab) for k, bs in RESERVED.items() for b, lab in bs.items()])
def test_decode_rejects_reserved_bits(kind, bit, label):
    value = make(kind).encode() | (1 << bit)
    with pytest.raises(SpecError, match=f"reserved bits {label} must be 0"):
        InstrDesc.decode(value, kind)


@pytest.mark.parametrize("kind, lo, code", [
    ("f16", 7, 2), ("f16", 10, 5), ("f16", 4, 2), ("f16", 4, 3),          # no TF32/E2M1/S32 codes in kind::f16
    ("f8f6f4", 7, 2), ("f8f6f4", 7, 6), ("f8f6f4", 10, 7),                # 2, 6, 7 unused in the f8f6f4 column
    ("mxf4", 7, 5), ("mxf4", 7, 0),                                       # E2M1 is 1 under mxf4 (5 under f8f6f4)
    ("i8", 7, 2), ("tf32", 7, 0), ("i8", 4, 1),
])
def test_decode_rejects_invalid_codes(kind, lo, code):
    width = 2 if lo == 4 else 3
    value = (make(kind).encode() & ~(((1 << width) - 1) << lo)) | (code << lo)
    with pytest.raises(SpecError, match=f"bits {lo}-{lo + width - 1}"):
        InstrDesc.decode(value, kind)


def test_decode_rejects_zero_m_and_n():
    with pytest.raises(SpecError, match="bits 17-22"):
        InstrDesc.decode(0x08000010, "f16")          # the worked example without N
    with pytest.raises(SpecError, match="bits 24-28"):
        InstrDesc.decode(0x00100010, "f16")          # ... without M


def test_decode_rejects_non_32_bit():
    with pytest.raises(SpecError, match="32-bit"):
        InstrDesc.decode(1 << 32, "f16")


@st.composite
def descriptors(draw):
    kind = draw(st.sampled_from(sorted(KINDS)))
    info = KINDS[kind]
    rules = [r for r in SHAPE_RULES if kind in r.kinds]
    a = draw(st.sampled_from(info.ab_types))
    b = a if info.same_ab else draw(st.sampled_from(info.ab_types))
    kw = dict(a_type=a, b_type=b, d_type=draw(st.sampled_from(info.d_types)),
              m=draw(st.sampled_from(sorted({m for r in rules for m in r.ms}))),
              n=draw(st.sampled_from(sorted({n for r in rules for n in r.ns.values()}))),
              a_major=draw(st.sampled_from(("K", "MN"))), b_major=draw(st.sampled_from(("K", "MN"))),
              negate_a=draw(st.booleans()), negate_b=draw(st.booleans()), sparse=draw(st.booleans()))
    if kind in TABLE42:
        kw.update(sparsity_selector=draw(st.integers(0, 3)) if kw["sparse"] else 0,
                  saturate=draw(st.booleans()), max_shift=draw(st.sampled_from((0, 8, 16, 32))))
    else:
        ids = (0, 1, 2, 3) if kind == "mxf8f6f4" else (0, 2)
        kw.update(scale_type=draw(st.sampled_from(info.scale_types)),
                  a_scale_id=draw(st.sampled_from(ids)), b_scale_id=draw(st.sampled_from(ids)),
                  k96=draw(st.booleans()) if info.k96 else False)
    try:
        return InstrDesc(kind, **kw)
    except SpecError:
        assume(False)


@settings(max_examples=300)
@given(descriptors())
def test_round_trip(desc):
    value = desc.encode()
    assert 0 <= value < 1 << 32
    assert InstrDesc.decode(value, desc.kind) == desc


@settings(max_examples=300)
@given(st.integers(0, (1 << 32) - 1), st.sampled_from(sorted(LAYOUTS)))
def test_any_value_decodes_or_raises_spec_error(value, kind):
    try:
        desc = InstrDesc.decode(value, kind)
    except SpecError:
        return
    assert desc.encode() == value
