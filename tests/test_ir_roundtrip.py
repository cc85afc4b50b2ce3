"""The printed IR is the program: print -> parse -> print is a fixed point for every example and lit
input, after every pass prefix; a bad IR file gets a diagnostic located in that file."""
import os

import pytest

from compiler import CompileError
from compiler.driver import compile_source
from compiler.ir import print_op
from compiler.ir_parser import looks_like_ir, parse_ir
from compiler.passes.manager import default_order
from tests.golden import goldens


def _source(rel):
    with open(os.path.join(goldens.ROOT, rel), encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


@pytest.mark.parametrize("rel", goldens.inputs())
def test_print_parse_print_is_a_fixed_point(rel):
    text = _source(rel)
    order = list(default_order())
    checked = 0
    for n in range(1, len(order) + 1):
        try:
            result = compile_source(text, rel, passes=order[:n])
        except CompileError:
            break
        printed = result.ir()
        assert looks_like_ir(printed)
        reparsed = parse_ir(printed, rel + ".ir")
        assert print_op(reparsed) == printed
        checked += 1
    if checked == 0:
        assert "error" in "".join(goldens.digest(rel, m) for m in goldens.MODES), rel


GOOD = '''tilec.module {target = "sm_100a"} {
  tilec.tile @t {engine = "tcgen05", m = 128, n = 64, k = 16, k_total = 16} {
    tilec.operand @A {dtype = "bf16", space = "smem"}
  } loc(#loc0)
} loc("t.tile":1:8 to :15)
#loc0 = loc(fused["t.tile":2:6, "shape.N"("t.tile":3:17 to :20)])
'''


def test_parser_keeps_locations():
    m = parse_ir(GOOD, "x.ir")
    tile = m.ops("tilec.tile")[0]
    assert str(tile.loc) == "t.tile:2:6"
    assert tile.locs["shape.N"].col == 17 and tile.locs["shape.N"].end_col == 20
    assert str(m.loc) == "t.tile:1:8"
    assert print_op(parse_ir(print_op(m), "y.ir")) == print_op(m)


@pytest.mark.parametrize("bad, where, message", [
    # the value's column: "  tilec.tile @t {engine = \"tcgen05\", m = " is 41 characters
    (GOOD.replace("m = 128", "m = 4294967296"), (2, 42), "value 4294967296 does not fit PTX type .u32"),
    (GOOD.replace("m = 128", "m = -1"), (2, 42), "value -1 does not fit PTX type .u32"),
    (GOOD.replace('space = "smem"', 'space = "disk"'), (3, 47), "'disk' is not one of"),
    (GOOD.replace("tilec.operand", "tilec.operandz"), (3, 5), "unknown op 'tilec.operandz'"),
    (GOOD.replace("k_total = 16", "k_totl = 16"), (2, 63), "has no attribute 'k_totl'"),
    (GOOD.replace("k = 16, ", ""), (2, 3), "missing attribute 'k'"),
    (GOOD.replace("#loc0 =", "#loc1 ="), (4, 9), "undefined location alias '#loc0'"),
    # without the tile's '}', the module's '}' closes the tile and the aliases follow an open module
    (GOOD.replace("} loc(#loc0)", "loc(#loc0)"), (6, 1), "expected an op or '}' closing the body of 'tilec.module'"),
    (GOOD.replace("@A", "@A @B"), (3, 22), "expected the next op"),
    (GOOD.replace("tilec.module", "tilec.tile"), (1, 1), "expected the top-level op 'tilec.module'"),
])
def test_bad_ir_is_a_located_diagnostic(bad, where, message):
    with pytest.raises(CompileError) as e:
        parse_ir(bad, "bad.ir")
    d = e.value.diagnostics[0]
    assert message in d.message
    assert (d.loc.file, d.loc.line, d.loc.col) == ("bad.ir", *where)
    rendered = e.value.render()
    assert rendered.startswith(f"bad.ir:{where[0]}:{where[1]}: error: ")
    assert "^" in rendered.splitlines()[2]


def test_dsl_and_ir_told_apart_by_content():
    assert looks_like_ir("// RUN: x\n\ntilec.module {target = \"sm_100a\"} {\n}")
    assert not looks_like_ir("// tilec.module in a comment\ntarget sm_100a;\n")
    assert not looks_like_ir("")
