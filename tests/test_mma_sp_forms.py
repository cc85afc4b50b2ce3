"""The warp-level mma.sp form table (compiler/isa/mma_sp/forms.py) against the PTX text.

Sources: seed ../shared/seeds/ptx-mma-sp-sparse-storage.txt (PTX ISA 9.7.14.6.1: granularity, selector
values), PTX ISA 9.7.14.6.3 (syntax, register counts, min PTX, targets; its ptxas 13.0 matrix).
Assembling the forms is tests/test_mma_sp_kernel.py's job.
"""
from __future__ import annotations

import pytest

from compiler.diagnostics import SpecError
from compiler.isa.mma_sp.forms import (
    BLOCK_SCALES, FORM_ROWS, GRANULARITIES, ORDERED_METADATA_PTX, all_forms, find_form, layout_for,
)
from compiler.isa.targets import MAX_PTX, TARGETS


def regs(k: int, bits: int) -> int:
    # A (compressed 16 x k/2) and B (k x 8) both hold 128*k elements' worth of bits over 32 lanes of
    # 32-bit registers: 16 * (k/2) * bits / (32 * 32) = k * bits / 128.
    return k * bits // 128


# PTX ISA 9.7.14.6.3 "Register counts and requirements" table, one line per row:
# (shape, A type, B type, C/D type, kind, A regs, B regs, C/D regs, selectors, min PTX, min target)
DIGEST_TABLE = [
    ("m16n8k16", "f16", "f16", "f16", None, regs(16, 16), regs(16, 16), 2, (0, 1, 2, 3), (7, 1), "sm_80"),
    ("m16n8k16", "f16", "f16", "f32", None, 2, 2, 4, (0, 1, 2, 3), (7, 1), "sm_80"),
    ("m16n8k16", "bf16", "bf16", "f32", None, 2, 2, 4, (0, 1, 2, 3), (7, 1), "sm_80"),
    ("m16n8k32", "f16", "f16", "f16", None, regs(32, 16), regs(32, 16), 2, (0, 1), (7, 1), "sm_80"),
    ("m16n8k32", "bf16", "bf16", "f32", None, 4, 4, 4, (0, 1), (7, 1), "sm_80"),
    ("m16n8k8", "tf32", "tf32", "f32", None, regs(8, 32), regs(8, 32), 4, (0, 1, 2, 3), (7, 1), "sm_80"),
    ("m16n8k16", "tf32", "tf32", "f32", None, regs(16, 32), 4, 4, (0, 1), (7, 1), "sm_80"),
    ("m16n8k32", "s8", "u8", "s32", None, regs(32, 8), regs(32, 8), 4, (0, 1), (7, 1), "sm_80"),
    ("m16n8k64", "u8", "s8", "s32", None, regs(64, 8), 4, 4, (0,), (7, 1), "sm_80"),
    ("m16n8k64", "s4", "u4", "s32", None, regs(64, 4), regs(64, 4), 4, (0, 1), (7, 1), "sm_80"),
    ("m16n8k128", "u4", "u4", "s32", None, regs(128, 4), 4, 4, (0,), (7, 1), "sm_80"),
    ("m16n8k64", "e4m3", "e5m2", "f32", None, regs(64, 8), 4, 4, (0,), (8, 4), "sm_89"),
    ("m16n8k64", "e3m2", "e2m1", "f16", "f8f6f4", regs(64, 8), 4, 2, (0,), (8, 7), "sm_120a"),
    ("m16n8k64", "e2m1", "e4m3", "f32", "f8f6f4", 4, 4, 4, (0,), (8, 7), "sm_120a"),
    ("m16n8k64", "e2m3", "e5m2", "f32", "mxf8f6f4", 4, 4, 4, (0,), (8, 7), "sm_120a"),
    # mxf4 e2m1 is packed 8 per register (PTX ISA 9.7.14.6.3 "packed, no padding"): k128 * 4 bits / 128 = 4
    ("m16n8k128", "e2m1", "e2m1", "f32", "mxf4", regs(128, 4), 4, 4, (0,), (8, 7), "sm_120a"),
    ("m16n8k128", "e2m1", "e2m1", "f32", "mxf4nvf4", 4, 4, 4, (0,), (8, 7), "sm_120a"),
]


@pytest.mark.parametrize("shape,a,b,cd,kind,ar,br,cr,sels,ptx,target", DIGEST_TABLE,
                         ids=[f"{r[0]}-{r[1]}-{r[3]}-{r[4]}" for r in DIGEST_TABLE])
def test_digest_table(shape, a, b, cd, kind, ar, br, cr, sels, ptx, target):
    f = find_form(shape, a, b, cd, cd, kind)
    assert (f.a_regs, f.b_regs, f.c_regs, f.d_regs) == (ar, br, cr, cr)
    assert f.selectors == sels
    assert f.min_ptx == ptx
    need, err = f.requirements(target)
    assert err is None and need == max(ptx, TARGETS[target].min_ptx)


# Seed 9.7.14.6.1: granularity per type.
@pytest.mark.parametrize("a_type,shape,gran", [
    ("f16", "m16n8k16", "2:4"), ("bf16", "m16n8k32", "2:4"),      # "half-precision and .bf16": 2:4
    ("tf32", "m16n8k8", "1:2"), ("tf32", "m16n8k16", "1:2"),      # ".tf32": 1:2
    ("s8", "m16n8k32", "2:4"), ("u8", "m16n8k64", "2:4"),         # ".u8/.s8": 2:4
    ("s4", "m16n8k64", "4:8"), ("u4", "m16n8k128", "4:8"),        # ".u4/.s4": pair-wise 4:8
    ("e4m3", "m16n8k64", "2:4"), ("e2m1", "m16n8k64", "2:4"),     # f8f6f4 / mxf8f6f4: 2:4
    ("e2m1", "m16n8k128", "4:8"),                                 # mxf4 / mxf4nvf4: pair-wise 4:8
])
def test_granularity_per_type(a_type, shape, gran):
    lay = layout_for(a_type, shape)
    assert lay.granularity.name == gran
    g = GRANULARITIES[gran]
    # 50% sparsity: half of each chunk is kept
    assert g.kept_elements * 2 == g.chunk
    assert g.pairwise == (gran == "4:8")


def test_e2m1_storage_depends_on_shape():
    # PTX ISA 9.7.14.6.3: kind::f8f6f4 puts e2m1 in an 8-bit container; kind::mxf4* packs it 8 per register
    assert layout_for("e2m1", "m16n8k64").storage_bits == 8
    assert layout_for("e2m1", "m16n8k128").storage_bits == 4


# Seed 9.7.14.6.1, "sparsity selector" paragraphs.
@pytest.mark.parametrize("shape,a_type,legal", [
    ("m16n8k16", "f16", (0, 1, 2, 3)),     # one thread: {0,1,2,3}
    ("m16n8k32", "bf16", (0, 1)),          # a thread pair: 0 (T0,T1) or 1 (T2,T3)
    ("m16n8k8", "tf32", (0, 1, 2, 3)),
    ("m16n8k16", "tf32", (0, 1)),
    ("m16n8k32", "u8", (0, 1)),            # m16n8k32 .u8/.s8 and m16n8k64 .u4/.s4: a pair
    ("m16n8k64", "s4", (0, 1)),
    ("m16n8k64", "s8", (0,)),              # m16n8k64 .u8/.s8 and m16n8k128 .u4/.s4: all four, 0
    ("m16n8k128", "s4", (0,)),
    ("m16n8k64", "e5m2", (0,)),            # f8f6f4 m16n8k64: all four, 0
    ("m16n8k128", "e2m1", (0,)),           # mxf4 m16n8k128: all four, 0
])
def test_selectors_from_seed(shape, a_type, legal):
    lay = layout_for(a_type, shape)
    assert lay.selectors == legal
    form = next(f for f in all_forms() if f.shape == shape and f.a_type == a_type)
    for s in legal:
        form.check_selector(s)
    for s in (*range(-1, 5), True, "0", 1.0):
        if s in legal and isinstance(s, int) and not isinstance(s, bool):
            continue
        with pytest.raises(SpecError) as e:
            form.check_selector(s)
        assert e.value.field == "sparsity.selector"


def test_selector_2_3_rejected_where_ptxas_accepts():
    # ptxas accepts it; the PTX ISA does not: ptxas accepts 2/3 for m16n8k32.f32.f16.f16.f32 though PTX leaves it undefined
    f = find_form("m16n8k32", "f16", "f16", "f32", "f32")
    for s in (2, 3):
        with pytest.raises(SpecError, match="thread pair") as e:
            f.check_selector(s)
        assert e.value.hint == "use one of 0, 1"


def test_all_forms_count():
    # f16: 2 shapes x (->f16, ->f32) = 4; bf16: 2; tf32: 2; s8/u8: 2 shapes x 4 sign pairs x satfinite 2
    # = 16; s4/u4: 16; e4m3/e5m2 no kind: 4 pairs; kind::f8f6f4: 5 x 5 types x (f32, f16) = 50;
    # mxf8f6f4: 25 x 1 scale combination; mxf4: 1; mxf4nvf4: 3 scale combinations (BLOCK_SCALES)
    expected = 4 + 2 + 2 + 16 + 16 + 4 + 50 + 25 + 1 + 3
    forms = all_forms()
    assert len(forms) == expected
    assert len({f.name for f in forms}) == expected
    assert sum(1 for s in BLOCK_SCALES if s.kind == "mxf4nvf4") == 3


@pytest.mark.parametrize("args,kw,text", [
    # the brief's example
    (("m16n8k32", "f16", "f16", "f32", "f32"), {},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"),
    (("m16n8k32", "s8", "u8", "s32", "s32"), {"satfinite": True},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32"),
    (("m16n8k64", "e3m2", "e2m1", "f16", "f16", "kind::f8f6f4"), {},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.kind::f8f6f4.f16.e3m2.e2m1.f16"),
    (("m16n8k64", "e4m3", "e2m3", "f32", "f32", "mxf8f6f4"), {},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
     ".f32.e4m3.e2m3.f32.ue8m0"),
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4"), {"scale_type": "ue4m3"},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k128.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
     ".f32.e2m1.e2m1.f32.ue4m3"),
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4"), {},
     "mma.sp::ordered_metadata.sync.aligned.m16n8k128.row.col.kind::mxf4.block_scale.scale_vec::2X"
     ".f32.e2m1.e2m1.f32.ue8m0"),
])
def test_instruction_text(args, kw, text):
    # PTX ISA 9.7.14.6.3 syntax: mma.SPV.sync.aligned.SHAPE.row.col[.satfinite].DTYPE.ATYPE.BTYPE.CTYPE; kinds and
    # block scale after .row.col, scale type last
    f = find_form(*args, **kw)
    assert f.instruction((8, 7)) == text


def test_ordered_metadata_from_ptx_8_5():
    f = find_form("m16n8k16", "bf16", "bf16", "f32", "f32")
    assert f.instruction((8, 4)).startswith("mma.sp.sync.aligned.")
    assert f.instruction(ORDERED_METADATA_PTX).startswith("mma.sp::ordered_metadata.sync.aligned.")
    with pytest.raises(SpecError):
        f.instruction((7, 0))        # plain .sp needs PTX 7.1 (PTX ISA 9.7.14.6.3: "rejected at PTX 7.0")


@pytest.mark.parametrize("args,kw,field,hint_part", [
    (("m16n8k16", "s8", "s8", "s32", "s32"), {}, "shape", "m16n8k32, m16n8k64"),
    (("m16n8k16", "bf16", "bf16", "f16", "f16"), {}, "C.dtype", "f32"),      # bf16 accumulates in f32 only
    (("m16n8k16", "f16", "f16", "f32", "f16"), {}, "D.dtype", "f32"),        # .dtype == .ctype
    (("m16n8k16", "f16", "bf16", "f32", "f32"), {}, "B.dtype", "f16"),
    (("m16n8k64", "e3m2", "e3m2", "f32", "f32"), {}, "A.dtype", "f8f6f4"),   # fp6 needs a kind
    (("m16n8k64", "e4m3", "e4m3", "f16", "f16"), {}, "C.dtype", "f32"),      # no-kind fp8: f32 only
    (("m16n8k64", "e4m3", "e4m3", "f32", "f32", "f8"), {}, "kind", "f8f6f4"),
    (("m16n8k16", "f16", "f16", "f32", "f32"), {"satfinite": True}, "satfinite", None),
    (("m16n8k16", "f16", "f16", "f32", "f32"), {"scale_type": "ue8m0"}, "scale_type", None),
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4"), {"scale_vec": "1X"}, "scale_vec",
     "scale_vec::4X with .ue4m3"),
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4"), {"scale_type": "ue4m3"}, "scale_type",
     "scale_vec::2X with .ue8m0"),
    (("m16n8k64", "f64", "f16", "f32", "f32"), {}, "A.dtype", "f16"),
    (("m16n8k64", "e2m1", "e2m1", "f32", "f32", "mxf4"), {}, "shape", "m16n8k128"),
])
def test_find_form_errors(args, kw, field, hint_part):
    with pytest.raises(SpecError) as e:
        find_form(*args, **kw)
    assert e.value.field == field
    if hint_part:
        assert hint_part in e.value.hint


@pytest.mark.parametrize("form_args,target,ptx,field,message_part", [
    # fp8 without kind needs sm_89 (PTX ISA 9.7.14.6.3; ptxas "requires .target sm_89 or higher")
    (("m16n8k64", "e4m3", "e4m3", "f32", "f32"), "sm_80", None, "target", "runs on sm_89"),
    # kinds: sm_120a family only (ptxas: "not supported on .target 'sm_100a'")
    (("m16n8k64", "e2m1", "e2m1", "f32", "f32", "f8f6f4"), "sm_100a", None, "target", "runs on sm_120a"),
    # sparse block-scaled fp4: not on family targets (ptxas "'Sparse mma with block scale' not supported
    # on .target 'sm_120f'")
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4"), "sm_120f", None, "target", "runs on sm_120a"),
    (("m16n8k16", "f16", "f16", "f32", "f32"), "sm_80", (7, 0), "ptx", "needs PTX ISA 7.1"),
    (("m16n8k16", "f16", "f16", "f32", "f32"), "sm_90", (7, 1), "ptx", "needs PTX ISA 7.8"),
    (("m16n8k16", "f16", "f16", "f32", "f32"), "sm_80", (9, 1), "ptx", "newer than"),
    (("m16n8k16", "f16", "f16", "f32", "f32"), "sm_999", None, "target", "unknown target"),
    # 4X with ue8m0 is PTX 9.1, beyond the pinned ptxas (PTX ISA 9.7.14.6.3)
    (("m16n8k128", "e2m1", "e2m1", "f32", "f32", "mxf4nvf4"), "sm_120a", None, "ptx", "needs PTX ISA 9.1"),
])
def test_requirement_errors(form_args, target, ptx, field, message_part):
    kw = {"scale_vec": "4X", "scale_type": "ue8m0"} if "mxf4nvf4" in form_args else {}
    f = find_form(*form_args, **kw)
    _, err = f.requirements(target, ptx)
    assert err is not None and err.field == field and message_part in err.message


def test_requirements_ptx_floor_is_max_of_form_and_target():
    f = find_form("m16n8k64", "e2m1", "e2m1", "f16", "f16", "f8f6f4")
    assert f.requirements("sm_120a") == ((8, 7), None)     # form 8.7, sm_120a 8.7
    assert f.requirements("sm_120f") == ((8, 8), None)     # sm_120f needs .version 8.8
    assert f.requirements("sm_121a", (9, 0)) == ((8, 8), None)


def test_target_rules_match_digest():
    by_kind = {r.kind: r.target_rule.targets() for r in FORM_ROWS}
    assert by_kind["f8f6f4"] == by_kind["mxf8f6f4"] == ["sm_120a", "sm_120f", "sm_121a", "sm_121f"]
    assert by_kind["mxf4"] == by_kind["mxf4nvf4"] == ["sm_120a", "sm_121a"]
    fp8 = next(r for r in FORM_ROWS if r.kind is None and "e4m3" in r.a_types)
    assert "sm_80" not in fp8.target_rule.targets() and "sm_89" in fp8.target_rule.targets()
    f16 = next(r for r in FORM_ROWS if "f16" in r.a_types)
    assert f16.target_rule.targets() == list(TARGETS)          # every known target is sm_80 or newer


def test_every_form_has_a_valid_target():
    for f in all_forms():
        target = f.row.target_rule.targets()[0]
        need, err = f.requirements(target)
        if f.min_ptx > MAX_PTX:
            assert err is not None and err.field == "ptx"
        else:
            assert err is None, f.name
