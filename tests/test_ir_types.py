"""Typed IR attributes (issue 14): every integer that reaches PTX carries the PTX type it lands in, and
one rule in the IR verifier checks every value against its type."""
import pytest

from compiler import CompileError, compile_source
from compiler.ir import OP_DEFS, AtMost, IRError, ListOf, Op, PtxInt, check_attrs

# Every (op, attribute) typed as a PTX integer, directly or as the elements of a list.
PTX_INT_ATTRS = [(op, attr, o.type if isinstance(o.type, PtxInt) else o.type.elem)
                 for op, d in OP_DEFS.items() for attr, o in d.attrs.items()
                 if isinstance(o.type, PtxInt) or (isinstance(o.type, ListOf) and isinstance(o.type.elem, PtxInt))]


def test_every_ptx_integer_attribute_is_found():
    names = {(op, attr) for op, attr, _ in PTX_INT_ATTRS}
    for want in [("tilec.tile", "k_total"), ("tilec.smem_layout", "offset"), ("tilec.instr_desc", "value"),
                 ("tilec.smem_desc", "values"), ("tilec.kernel", "a_row_bytes"), ("tilec.pipeline", "stages")]:
        assert want in names


@pytest.mark.parametrize("op_name, attr, t", PTX_INT_ATTRS, ids=[f"{o}.{a}" for o, a, _ in PTX_INT_ATTRS])
def test_the_range_rule_holds_for_every_ptx_integer_attribute(op_name, attr, t):
    """The type's own bounds pass, one past either bound is an out-of-range IRError naming the value and
    the PTX type."""
    def op_with(value):
        op = Op(op_name, "A" if OP_DEFS[op_name].sym else None, {attr: [value] if isinstance(
            OP_DEFS[op_name].attrs[attr].type, ListOf) else value})
        return op

    for ok in (t.lo, t.hi):
        try:
            check_attrs(op_with(ok))
        except IRError as e:
            assert not e.out_of_range and "missing attribute" in str(e)      # others required, not this one
    for bad in (t.lo - 1, t.hi + 1):
        with pytest.raises(IRError) as e:
            check_attrs(op_with(bad))
        assert e.value.attr == attr
        if isinstance(t, AtMost) and bad > t.hi:        # a hardware limit below the type's: says which
            assert f"value {bad} is more than {t.hi} ({t.why})" in str(e.value)
            continue
        assert e.value.out_of_range
        assert f"value {bad} does not fit PTX type .{t.name}" in str(e.value)


def test_plan_attributes_that_size_loops_stop_at_the_hardware_limit():
    # attributes an edited IR could set to 2^32 - 1 (a 2^32-step loop in the emitter): TMEM columns (512,
    # PTX 9.7.16.7.1), a K block and a ring's stages
    ws = OP_DEFS["tilec.ws_plan"].attrs
    assert {a: ws[a].type.hi for a in ("accumulators", "acc_columns", "tmem_columns", "d_chunk", "k_block", "stages")} \
        == {"accumulators": 512, "acc_columns": 512, "tmem_columns": 512, "d_chunk": 512, "k_block": 8192, "stages": 256}


def test_u32_and_s32_bounds():
    # PTX ISA 5.2.2: .u32 holds 0 .. 2^32 - 1, .s32 -2^31 .. 2^31 - 1, .u64 0 .. 2^64 - 1
    from compiler.ir import S32, U32, U64

    assert (U32.lo, U32.hi) == (0, 4294967295)
    assert (S32.lo, S32.hi) == (-2147483648, 2147483647)
    assert (U64.lo, U64.hi) == (0, 18446744073709551615)


BF16 = """target sm_100a;
tile t {
  engine tcgen05;
  shape M=128 N=256 K=16;
  loop K=%d;
  A: bf16 smem major=K swizzle=128B;
  B: bf16 smem major=K swizzle=128B;
  D: f32 tmem;
}
"""


def test_a_derived_immediate_that_would_wrap_is_a_located_diagnostic():
    # A row of A is K * 2 bytes (bf16): K = 2^31 gives 2^32, one past .u32 (issue 14: rc 0 before, with
    # `mul.lo.u32 ..., 4294967296` in the kernel)
    with pytest.raises(CompileError) as e:
        compile_source(BF16 % 2**31, "big.tile")
    (d,) = e.value.diagnostics
    assert (d.loc.line, d.loc.col) == (5, 10)                     # the loop K token
    assert "value 4294967296 does not fit PTX type .u32" in d.message and "a_row_bytes" in d.message
    # K itself past .u32: the tile's own k_total
    with pytest.raises(CompileError, match="'k_total' of 'tilec.tile @t': value 4294967296 does not fit"):
        compile_source(BF16 % 2**32, "big.tile")


def test_a_loop_k_whose_immediates_fit_compiles():
    # K = 2^30: rows of 2^31 bytes, within .u32 (the b operand of the copy's 64-bit row offset,
    # mad.wide.u32 row, row bytes, in-row offset: PTX ISA mad.wide takes .u32 sources)
    k = 2**30
    result = compile_source(BF16 % k, "edge.tile")
    assert f"mad.wide.u32 %rd7, %r26, {2 * k}, %rd8;" in result.ptx
    assert "4294967296" not in result.ptx
