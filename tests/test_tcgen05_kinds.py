"""tcgen05 kinds and shapes: PTX ISA 9.7.16.2.1 Table 39 (PTX ISA 9.7.16.2.1, Table 39), Table 49 (transpose / negate),
Table 50 (8-bit transposed B), scale types / vector sizes (PTX ISA 9.7.16.10.9 operands)."""
import pytest

from compiler.diagnostics import SpecError
from compiler.isa.tcgen05_kinds import (KINDS, check_major, check_options, check_scale, check_shape, infer_kind,
                                    mma_k, shape_rule)


@pytest.mark.parametrize("kind, dense, sparse", [
    ("f16", 16, 32), ("tf32", 8, 16), ("f8f6f4", 32, 64), ("i8", 32, 64),      # Table 39 K columns
    ("mxf8f6f4", 32, 64), ("mxf4", 64, 128), ("mxf4nvf4", 64, 128),
])
def test_mma_k(kind, dense, sparse):
    assert mma_k(kind) == dense and mma_k(kind, sparse=True) == sparse
    # every dense step is 32 bytes of A in smem (f16: 16 x 2 B; tf32: 8 x 4 B; 8-bit: 32 x 1 B; fp4: 64 x 0.5 B)


def test_mma_k_96():
    assert mma_k("mxf4", k96=True) == mma_k("mxf4nvf4", k96=True) == 96
    for kind, sparse in (("f16", False), ("mxf4", True)):
        with pytest.raises(SpecError, match="K = 96"):
            mma_k(kind, sparse, k96=True)


# Table 39: (kind, cta_group, sparse, ws, k96, legal (M, N) samples, illegal M, illegal N)
ROWS = [
    # f16 / tf32 / f8f6f4, cta_group::1: M 64/128, N 8..256 step 8
    *[(k, 1, sp, False, False, [(64, 8), (128, 256), (64, 136)], [32, 256], [4, 12, 264]) for k in ("f16", "tf32", "f8f6f4")
      for sp in (False, True)],
    # ... cta_group::2: M 128/256, N 16..256 step 16
    *[(k, 2, sp, False, False, [(128, 16), (256, 256), (256, 48)], [64], [8, 24, 272]) for k in ("f16", "tf32", "f8f6f4")
      for sp in (False, True)],
    # i8 cta_group::1: N 8, 16, 24, 32 then 48..256 step 16
    ("i8", 1, False, False, False, [(64, 8), (128, 24), (128, 32), (64, 48), (128, 256)], [256], [40, 56, 264]),
    ("i8", 1, True, False, False, [(128, 16), (64, 240)], [32], [40]),
    # i8 cta_group::2: N 32..256 step 32
    ("i8", 2, False, False, False, [(128, 32), (256, 256), (256, 96)], [64], [16, 48, 272]),
    # mxf8f6f4 / mxf4 / mxf4nvf4 cta_group::1: M = 128, N 8..256 step 8 (dense and sparse)
    *[(k, 1, sp, False, False, [(128, 8), (128, 248)], [64, 256], [4, 260]) for k in ("mxf8f6f4", "mxf4", "mxf4nvf4")
      for sp in (False, True)],
    # ... cta_group::2 dense: M 128/256; sparse: M 256 only; N 16..256 step 16
    *[(k, 2, False, False, False, [(128, 16), (256, 256)], [64], [8, 24]) for k in ("mxf8f6f4", "mxf4", "mxf4nvf4")],
    *[(k, 2, True, False, False, [(256, 16), (256, 256)], [128], [8]) for k in ("mxf8f6f4", "mxf4", "mxf4nvf4")],
    # K = 96 (mxf4 / mxf4nvf4, cta_group::2, dense): M = 256
    *[(k, 2, False, False, True, [(256, 16), (256, 256)], [128], [8]) for k in ("mxf4", "mxf4nvf4")],
    # .ws (cta_group::1; f16/tf32/f8f6f4/i8): M 32/64/128; dense N 64/128/256, sparse N 64/128
    *[(k, 1, False, True, False, [(32, 64), (64, 128), (128, 256)], [256, 16], [8, 192, 32]) for k in ("f16", "tf32", "f8f6f4", "i8")],
    *[(k, 1, True, True, False, [(32, 64), (128, 128)], [256], [256, 192]) for k in ("f16", "tf32", "f8f6f4", "i8")],
]


@pytest.mark.parametrize("kind, cta, sparse, ws, k96, legal, bad_m, bad_n", ROWS)
def test_table_39(kind, cta, sparse, ws, k96, legal, bad_m, bad_n):
    for m, n in legal:
        check_shape(kind, m, n, cta_group=cta, sparse=sparse, ws=ws, k96=k96)
    good_m, good_n = legal[0]
    for m in bad_m:
        with pytest.raises(SpecError, match=f"M = {m} is not valid") as err:
            check_shape(kind, m, good_n, cta_group=cta, sparse=sparse, ws=ws, k96=k96)
        assert err.value.field == "shape.M" and "valid M:" in err.value.message
    for n in bad_n:
        with pytest.raises(SpecError, match=f"N = {n} is not valid") as err:
            check_shape(kind, good_m, n, cta_group=cta, sparse=sparse, ws=ws, k96=k96)
        assert err.value.field == "shape.N" and "valid N:" in err.value.message


def test_shape_messages_list_the_legal_values():
    with pytest.raises(SpecError) as err:
        check_shape("i8", 128, 40)
    assert err.value.message.endswith("valid N: 8..32 in steps of 8, 48..256 in steps of 16")
    with pytest.raises(SpecError) as err:
        check_shape("f16", 128, 72, ws=True)
    assert err.value.message.endswith("valid N: 64, 128, 256")


@pytest.mark.parametrize("kwargs, field", [
    (dict(kind="f16", cta_group=2, ws=True), "engine.ws"),            # .ws is cta_group::1 only
    (dict(kind="mxf8f6f4", ws=True), "engine.ws"),                    # no .ws for mx kinds
    (dict(kind="f16", cta_group=3), "engine.cta_group"),
    (dict(kind="f16", k96=True, cta_group=2), "shape.K"),
    (dict(kind="mxf4", k96=True, cta_group=1), "shape.K"),            # K = 96 needs cta_group::2
    (dict(kind="mxf4", k96=True, cta_group=2, sparse=True), "shape.K"),
    (dict(kind="bf16"), "engine.kind"),
])
def test_variants_that_do_not_exist(kwargs, field):
    with pytest.raises(SpecError) as err:
        shape_rule(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("types, block_scaled, kind", [
    (("f16", "f16", "f16"), False, "f16"), (("f16", "f16", "f32"), False, "f16"),
    (("bf16", "bf16", "f32"), False, "f16"), (("tf32", "tf32", "f32"), False, "tf32"),
    (("e4m3", "e2m1", "f16"), False, "f8f6f4"), (("e3m2", "e2m3", "f32"), False, "f8f6f4"),
    (("s8", "u8", "s32"), False, "i8"), (("e5m2", "e4m3", "f32"), True, "mxf8f6f4"),
])
def test_infer_kind(types, block_scaled, kind):
    assert infer_kind(*types, block_scaled=block_scaled) == kind


@pytest.mark.parametrize("types, block_scaled, needle, field", [
    (("bf16", "bf16", "f16"), False, "no bf16 -> f16 form", "D.dtype"),  # kind::f16 explains: bf16 -> f32 only
    (("f16", "bf16", "f32"), False, "same type", "B.dtype"),             # kind::f16 needs one A/B type
    (("f16", "f16", "s32"), False, "D type s32", "D.dtype"),
    (("f16", "f16", "f32"), True, "no tcgen05 kind", "A.dtype"),         # f16 is never block scaled
    (("e2m1", "e2m1", "f32"), True, "several kinds", "engine.kind"),     # mxf8f6f4, mxf4, mxf4nvf4
])
def test_infer_kind_errors(types, block_scaled, needle, field):
    with pytest.raises(SpecError, match=needle) as err:
        infer_kind(*types, block_scaled=block_scaled)
    assert err.value.field == field


@pytest.mark.parametrize("kind, transpose, negate", [                   # Table 49
    ("tf32", True, True), ("f16", True, True), ("f8f6f4", True, True), ("mxf8f6f4", True, True),
    ("i8", True, False), ("mxf4", False, True), ("mxf4nvf4", False, True),
])
def test_table_49_transpose_and_negate(kind, transpose, negate):
    assert (KINDS[kind].transpose, KINDS[kind].negate) == (transpose, negate)
    dtype = KINDS[kind].ab_types[0]
    swizzle = "128B_base32B" if kind == "tf32" else "128B"
    if transpose:
        check_major(kind, "A", dtype, "MN", swizzle)
    else:
        with pytest.raises(SpecError, match="does not support MN-major"):
            check_major(kind, "A", dtype, "MN", swizzle)
    if negate:
        check_options(kind, negate_a=True, negate_b=True)
    else:
        with pytest.raises(SpecError, match="cannot negate"):
            check_options(kind, negate_b=True)


def test_transpose_swizzle_rules():
    # Table 49 notes: tf32 transposes only with 128B swizzle / 32B atomicity; other kinds never with it
    with pytest.raises(SpecError, match="128B_base32B"):
        check_major("tf32", "B", "tf32", "MN", "128B")
    with pytest.raises(SpecError, match="only for MN-major kind::tf32"):
        check_major("f16", "B", "f16", "MN", "128B_base32B")
    with pytest.raises(SpecError, match="only for MN-major kind::tf32"):
        check_major("tf32", "A", "tf32", "K", "128B_base32B")


@pytest.mark.parametrize("cta, good, bad", [(1, (16, 144, 256), (8, 24, 136)), (2, (32, 96, 256), (16, 48))])
def test_table_50_eight_bit_transposed_b(cta, good, bad):
    for dtype, kind in (("e4m3", "f8f6f4"), ("s8", "i8"), ("e5m2", "mxf8f6f4")):
        for n in good:
            check_major(kind, "B", dtype, "MN", "128B", n=n, cta_group=cta)
        for n in bad:
            with pytest.raises(SpecError, match="Table 50") as err:
                check_major(kind, "B", dtype, "MN", "128B", n=n, cta_group=cta)
            assert err.value.field == "shape.N"
    check_major("f8f6f4", "B", "e4m3", "K", "128B", n=8, cta_group=1)      # K-major B: no extra rule
    check_major("f16", "B", "f16", "MN", "128B", n=8, cta_group=1)         # 16-bit B: no extra rule


def test_options():
    check_options("i8", saturate=True)
    check_options("f16", scale_input_d=True)
    check_options("tf32", scale_input_d=True)
    with pytest.raises(SpecError, match="saturate"):
        check_options("f8f6f4", saturate=True)
    with pytest.raises(SpecError, match="scale-input-d"):
        check_options("f8f6f4", scale_input_d=True)


@pytest.mark.parametrize("kind, scale, vec, ok", [
    ("mxf8f6f4", "ue8m0", 32, True), ("mxf8f6f4", "ue8m0", 16, False), ("mxf8f6f4", "ue4m3", 32, False),
    ("mxf4", "ue8m0", 32, True), ("mxf4", "ue4m3", 16, False),
    ("mxf4nvf4", "ue8m0", 32, True), ("mxf4nvf4", "ue8m0", 16, True),
    ("mxf4nvf4", "ue4m3", 16, True), ("mxf4nvf4", "ue4m3", 32, False),     # UE4M3 only with block16
    ("f16", None, None, True), ("f16", "ue8m0", None, False),
])
def test_scale_types_and_vector_sizes(kind, scale, vec, ok):
    if ok:
        check_scale(kind, scale, vec)
    else:
        with pytest.raises(SpecError):
            check_scale(kind, scale, vec)
