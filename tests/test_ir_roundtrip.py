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


# ---- the IR text is the program -------------------------------------------------------------------

def _until_emission():
    order = list(default_order())
    return order[:order.index("ptx-emission")]


@pytest.mark.parametrize("rel", goldens.inputs())
def test_compiling_the_emitted_ir_gives_the_same_ptx(rel):
    """`tilec compile --emit ir X.tile > X.ir; tilec compile X.ir` is byte-identical to compiling X.tile,
    for the real kernels and the smem-dump variant; `tilec opt X.ir` prints X.ir again."""
    from compiler.driver import compile_ir

    path = os.path.join(goldens.ROOT, rel)
    text = _source(rel)
    for options in (None, {"variant": "smem-dump"}):
        try:
            want = compile_source(text, path, options=options).ptx
        except CompileError:
            continue
        ir_text = compile_source(text, path, passes=_until_emission()).ir()
        assert "ptx.kernel" not in ir_text
        assert print_op(parse_ir(ir_text, "x.ir")) == ir_text            # opt X.ir: the same text
        assert compile_ir(ir_text, "x.ir", options=options).ptx == want


@pytest.mark.parametrize("rel", goldens.inputs())
def test_diagnostics_after_a_round_trip_point_at_the_tile(rel):
    """A tile the passes reject, lowered to IR text and compiled from it, gets the same diagnostic, at the
    same .tile line and column with the same source line and caret."""
    from compiler.driver import compile_ir, parse_source
    from compiler.lowering import lower

    path = os.path.join(goldens.ROOT, rel)
    text = _source(rel)
    try:
        spec = parse_source(text, path)
    except CompileError:
        return                                  # a front-end error: there is no IR to round-trip
    try:
        compile_source(text, path)
        return
    except CompileError as e:
        want = e.render()
    with pytest.raises(CompileError) as got:
        compile_ir(print_op(lower(spec)), "lowered.ir")
    assert got.value.render() == want


# ---- the command line -----------------------------------------------------------------------------

def _cli(argv, capsys, monkeypatch=None, stdin=None):
    import io

    from compiler.cli import main

    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_ir_round_trip(tmp_path, capsys, monkeypatch):
    """compile --emit ir > X.ir; opt X.ir prints X.ir (parse and print, no passes); compile X.ir (a file
    or stdin) gives the PTX of X.tile; opt X.ir --passes continues the pipeline from the text."""
    src = os.path.join(goldens.ROOT, "examples", "gemm_bf16.tile")
    rc, ptx, _ = _cli(["compile", src], capsys)
    assert rc == 0
    rc, ir_text, _ = _cli(["compile", "--emit", "ir", src], capsys)
    assert rc == 0 and ir_text.startswith("tilec.module") and "tilec.kernel" in ir_text
    ir_file = tmp_path / "g.ir"
    ir_file.write_text(ir_text)
    assert _cli(["opt", str(ir_file)], capsys) == (0, ir_text, "")
    assert _cli(["compile", str(ir_file)], capsys) == (0, ptx, "")
    assert _cli(["compile", "-"], capsys, monkeypatch, stdin=ir_text) == (0, ptx, "")
    assert _cli(["compile", "--emit", "ir", str(ir_file)], capsys) == (0, ir_text, "")
    # from the lowered IR, pass by pass
    rc, lowered, _ = _cli(["opt", src], capsys)
    assert rc == 0 and "passes =" not in lowered and "tilec.mma_form" not in lowered
    (tmp_path / "l.ir").write_text(lowered)
    rc, verified, _ = _cli(["opt", str(tmp_path / "l.ir"), "--passes", "verify"], capsys)
    assert rc == 0 and 'passes = ["verify"]' in verified and "tilec.mma_form" in verified
    (tmp_path / "v.ir").write_text(verified)
    rc, _, err = _cli(["opt", str(tmp_path / "v.ir"), "--passes", "verify"], capsys)
    assert rc == 2 and "'verify' already ran" in err
    assert _cli(["compile", str(tmp_path / "v.ir")], capsys) == (0, ptx, "")
    # an IR file that went through ptx-emission carries no PTX: compiling it says so
    rc, done, _ = _cli(["opt", str(tmp_path / "v.ir"), "--passes", ",".join(list(default_order())[1:])], capsys)
    (tmp_path / "d.ir").write_text(done)
    rc, out, err = _cli(["compile", str(tmp_path / "d.ir")], capsys)
    assert rc == 1 and "has been through ptx-emission" in err
    rc, out, err = _cli(["compile", str(ir_file), "--arch", "sm_100a"], capsys)
    assert rc == 2 and "apply to DSL input" in err


def test_cli_bad_ir_is_a_located_diagnostic(tmp_path, capsys):
    bad = tmp_path / "bad.ir"
    bad.write_text(GOOD.replace("m = 128", "m = 4294967296"))
    rc, out, err = _cli(["compile", str(bad)], capsys)
    assert rc == 1 and out == ""
    assert err.startswith(f"{bad}:2:42: error: attribute 'm' of 'tilec.tile @t': value 4294967296 does not fit "
                          "PTX type .u32")
    assert err.splitlines()[2].strip() == "^~~~~~~~~~"


def _lit_ir_inputs():
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(goldens.ROOT, "tests", "lit")):
        dirnames[:] = sorted(d for d in dirnames if d != "Output")
        out += [os.path.relpath(os.path.join(dirpath, f), goldens.ROOT) for f in filenames if f.endswith(".ir")]
    return sorted(out)


def test_there_are_ir_lit_inputs():
    assert len(_lit_ir_inputs()) >= 6


@pytest.mark.parametrize("rel", _lit_ir_inputs())
def test_ir_lit_inputs_are_fixed_points(rel):
    """The hand-written IR inputs (with their comments) print as themselves less the comments, and that
    text is a fixed point."""
    text = _source(rel)
    try:
        printed = print_op(parse_ir(text, rel))
    except CompileError:
        assert "RUN: not %tilec" in text          # a negative test of the IR reader
        return
    assert print_op(parse_ir(printed, rel)) == printed
    body = "\n".join(ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("//"))
    assert printed == body
