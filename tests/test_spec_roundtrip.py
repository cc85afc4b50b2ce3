"""Spec -> DSL text -> spec: `parse_source(print_file(spec)) == spec` (compiler/spec_printer.py).

Checked on every examples/*.tile, on every lit test input that parses, and with hypothesis over
generated specs in the DSL's vocabulary (grammar/tile.lark + the word tables of
compiler/frontend/build.py); specs the DSL cannot express are rejected with a SpecError naming the field.
"""
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import spec as spec_module
from compiler.diagnostics import CompileError, SpecError
from compiler.driver import parse_source
from compiler.frontend.build import BLOCK_SCALE_VECS, ENGINES, MAJORS, METADATA_SOURCES, SPACES, SWIZZLES
from compiler.isa.sparsity import GRANULARITIES
from compiler.spec import (OPERAND_NAMES, FileSpec, OperandSpec, SparsitySpec, TileSpec, ZeroColumnsSpec)
from compiler.spec_printer import HEADER_FIELDS, TILE_STATEMENTS, print_file, print_tile
from compiler.isa.targets import PTX_RELEASES, TARGETS
from compiler.isa.types import TYPES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))
LIT_INPUTS = sorted((ROOT / "tests" / "lit").rglob("*.tile"))


def _roundtrip(spec: FileSpec) -> str:
    text = print_file(spec)
    again = parse_source(text, spec.filename)
    assert again == spec, text
    assert print_file(again) == text          # printing is a function of the spec alone
    return text


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_round_trips(path):
    _roundtrip(parse_source(path.read_text(), str(path)))


def test_examples_exist():
    assert len(EXAMPLES) >= 3


def test_every_lit_input_that_parses_round_trips():
    parsed = 0
    for path in LIT_INPUTS:
        try:
            spec = parse_source(path.read_text(), str(path))
        except CompileError:          # the syntax-error tests: nothing to print
            continue
        _roundtrip(spec)
        parsed += 1
    assert parsed >= 10


def test_printer_covers_every_tile_field():
    # A new TileSpec field without a printer statement would be dropped silently; print_tile refuses it
    # and this test names it.
    covered = {f for s in TILE_STATEMENTS for f in s.fields} | set(HEADER_FIELDS)
    assert {f.name for f in fields(TileSpec)} <= covered


def test_printed_text_of_a_spec_built_in_code():
    tile = TileSpec("ws_tile", "tcgen05", 128, 64, 16,
                    {"A": OperandSpec("f16", "smem", "K", "32B"), "B": OperandSpec("f16", "smem"),
                     "D": OperandSpec("f32", "tmem")},
                    k_total=32, ws=True, zero_columns=ZeroColumnsSpec(columns=((0, 1, 2, 3, 8, 9, 10, 11),), shift=2),
                    disable_output_lane=None, negate_b=True)
    text = print_tile(tile)
    # Each field appears in its statement (the DSL tour in README); runs of >= 3 consecutive columns are
    # written as ranges, a single sub-mask flat.
    assert "  engine tcgen05 ws;\n" in text
    assert "  shape M=128 N=64 K=16;\n  loop K=32;\n" in text
    assert "  A: f16 smem major=K swizzle=32B;\n  B: f16 smem;\n" in text
    assert "  negate B;\n" in text
    assert "  zero_columns cols=[0..3, 8..11] shift=2;\n" in text
    _roundtrip(FileSpec("sm_100a", [tile], (8, 6), "code.tile"))


def test_static_rows_and_hex_masks_round_trip():
    tile = TileSpec("sp", "mma.sp", 16, 8, 32,
                    {x: OperandSpec("f16" if x in "AB" else "f32", "global") for x in "ABCD"},
                    sparsity=SparsitySpec("2:4", "static", rows=(((0, 1), (2, 3)), ((1,),)), selector=1),
                    disable_output_lane=(0xFFFF0000, 0, 1, 0x80000000))
    text = _roundtrip(FileSpec("sm_80", [tile], None, "rows.tile"))
    assert "sparsity 2:4 metadata=static rows=[[0:1, 2:3], [1]] selector=1;" in text
    assert "disable_output_lane [0xffff0000, 0x0, 0x1, 0x80000000];" in text


def test_lists_past_the_front_end_limit_are_refused_and_the_limit_itself_round_trips():
    """The front end takes at most MAX_LIST_ITEMS items per list, ranges expanded or literal (README
    "Limits"): a longer list is not expressible and the printer says which field; the limit itself is
    written (as a range) and read back."""
    from compiler.frontend.build import MAX_LIST_ITEMS

    at_limit = _tile(zero_columns=ZeroColumnsSpec(columns=(tuple(range(MAX_LIST_ITEMS)),)))
    assert f"cols=[0..{MAX_LIST_ITEMS - 1}]" in _roundtrip(FileSpec("sm_100a", [at_limit]))
    too_long = _tile(zero_columns=ZeroColumnsSpec(columns=(tuple(range(MAX_LIST_ITEMS + 1)),)))
    with pytest.raises(SpecError, match=f"has {MAX_LIST_ITEMS + 1} items") as e:
        print_tile(too_long)
    assert e.value.field == "zero_columns.cols"
    assert "cols=[0..9]" in print_tile(_tile(zero_columns=ZeroColumnsSpec(columns=(tuple(range(10)),))))


# ---- specs the DSL cannot express ------------------------------------------------------------------

def _tile(**kw):
    base = dict(name="t", engine="tcgen05", m=128, n=64, k=16,
                operands={"A": OperandSpec("f16", "smem"), "B": OperandSpec("f16", "smem"),
                          "D": OperandSpec("f32", "tmem")})
    base.update(kw)
    return TileSpec(**base)


@pytest.mark.parametrize("tile, field", [
    (_tile(operands={"A": OperandSpec("bf17", "smem")}), "A.dtype"),
    (_tile(operands={"A": OperandSpec("f16", "shared")}), "A.space"),
    (_tile(operands={"A": OperandSpec("f16", "smem", swizzle="256B")}), "A.swizzle"),
    (_tile(operands={"E": OperandSpec("f16", "smem")}), "tile"),
    (_tile(engine="wgmma"), "engine.name"),
    (_tile(m=-128), "shape.M"),
    (_tile(n=True), "shape.N"),
    (_tile(name="my tile"), "tile"),
    (_tile(name="2:4"), "tile"),                    # a ratio token is not a name
    (_tile(kind="f16 f32"), "engine.kind"),
    (_tile(sparsity=SparsitySpec("3:4")), "sparsity.ratio"),
    (_tile(sparsity=SparsitySpec("2:4", "static")), "sparsity.metadata"),
    (_tile(sparsity=SparsitySpec("2:4", "runtime", pattern="first_two")), "sparsity.pattern"),
    (_tile(sparsity=SparsitySpec("2:4", "static", rows=(((0, 1, 2),),))), "sparsity.rows"),
    (_tile(sparsity=SparsitySpec("2:4", "static", rows=())), "sparsity.rows"),
    (_tile(zero_columns=ZeroColumnsSpec(value=1, columns=((0,),))), "zero_columns"),
    (_tile(zero_columns=ZeroColumnsSpec(columns=())), "zero_columns.cols"),
    (_tile(disable_output_lane=[1, 2, 3, 4]), "disable_output_lane.value"),
    (_tile(max_shift=-8), "max_shift.value"),
])
def test_inexpressible_specs_name_their_field(tile, field):
    with pytest.raises(SpecError) as e:
        print_tile(tile)
    assert e.value.field == field, e.value.message


def test_file_level_rejections():
    t = _tile()
    with pytest.raises(SpecError, match="at least one tile"):
        print_file(FileSpec("sm_100a", []))
    with pytest.raises(SpecError, match="appears twice"):
        print_file(FileSpec("sm_100a", [t, replace(t)]))
    with pytest.raises(SpecError, match="unknown target"):
        print_file(FileSpec("sm_100x", [t]))
    with pytest.raises(SpecError, match="PTX major version"):
        print_file(FileSpec("sm_100a", [t], (-8, 6)))


# ---- hypothesis: every spec in the DSL's vocabulary round-trips --------------------------------------

ATOM = r"[A-Za-z0-9_][A-Za-z0-9_.]{0,6}(::[A-Za-z0-9_]{1,4})?"      # grammar/tile.lark ATOM, bounded
NAME = st.from_regex(ATOM, fullmatch=True)
WORD = st.one_of(NAME, st.from_regex(r"[0-9]{1,2}:[0-9]{1,2}", fullmatch=True))   # ATOM or RATIO
U8 = st.integers(0, 255)
POS = st.integers(1, 512)


def _maybe(s):
    return st.one_of(st.none(), s)


operand_specs = st.builds(OperandSpec, st.sampled_from(list(TYPES)), st.sampled_from(SPACES),
                          _maybe(st.sampled_from(MAJORS)), _maybe(st.sampled_from(SWIZZLES)))
chunk = st.one_of(st.tuples(U8), st.tuples(U8, U8))
rows = st.lists(st.lists(chunk, min_size=1, max_size=4).map(tuple), min_size=1, max_size=4).map(tuple)


@st.composite
def sparsities(draw):
    ratio = draw(st.sampled_from(tuple(GRANULARITIES)))
    source = draw(st.sampled_from(METADATA_SOURCES))
    selector = draw(st.integers(0, 7))
    if source == "runtime":
        return SparsitySpec(ratio, "runtime", selector=selector)
    if draw(st.booleans()):
        return SparsitySpec(ratio, "static", pattern=draw(WORD), selector=selector)
    return SparsitySpec(ratio, "static", rows=draw(rows), selector=selector)


zero_columns = st.one_of(
    st.builds(ZeroColumnsSpec, value=st.integers(0, 2**64 - 1), shift=st.integers(0, 40)),
    st.builds(ZeroColumnsSpec, columns=st.lists(st.lists(st.integers(0, 40), max_size=12).map(tuple),
                                                min_size=1, max_size=4).map(tuple),
              shift=st.integers(0, 40)))

schedule = st.none()
if hasattr(spec_module, "ScheduleSpec"):          # the schedule statement, when the tree has it
    _options = {}
    if hasattr(spec_module, "SCHEDULE_PERSISTENT"):   # persistent= / raster= / split_k= (issue 17)
        _options = dict(persistent=st.sampled_from(spec_module.SCHEDULE_PERSISTENT),
                        raster=_maybe(st.integers(0, 2**32)),
                        split_k=st.one_of(st.integers(0, 64), st.just(spec_module.SPLIT_K_STREAM)))
    schedule = _maybe(st.builds(spec_module.ScheduleSpec, POS, POS, POS, st.integers(1, 8), st.integers(1, 8),
                                st.integers(0, 8), **_options))


@st.composite
def tiles(draw, name):
    kw = dict(
        name=name, engine=draw(st.sampled_from(ENGINES)), m=draw(U8), n=draw(U8), k=draw(U8),
        operands=draw(st.dictionaries(st.sampled_from(OPERAND_NAMES), operand_specs, max_size=6)),
        k_total=draw(_maybe(st.integers(0, 4096))), kind=draw(_maybe(WORD)), cta_group=draw(st.integers(0, 4)),
        ws=draw(st.booleans()), collector=draw(_maybe(NAME)), ashift=draw(st.booleans()),
        sparsity=draw(_maybe(sparsities())),
        block_scale=draw(_maybe(st.sampled_from(sorted(set(BLOCK_SCALE_VECS.values()))))),
        negate_a=draw(st.booleans()), negate_b=draw(st.booleans()), saturate=draw(st.booleans()),
        max_shift=draw(st.integers(0, 64)), scale_input_d=draw(_maybe(st.integers(0, 20))),
        disable_output_lane=draw(_maybe(st.lists(st.integers(0, 2**32 - 1), max_size=8).map(tuple))),
        zero_columns=draw(_maybe(zero_columns)))
    if hasattr(spec_module, "ScheduleSpec"):
        kw["schedule"] = draw(schedule)
    return TileSpec(**kw)


@st.composite
def file_specs(draw):
    names = draw(st.lists(NAME, min_size=1, max_size=3, unique=True))
    return FileSpec(draw(st.sampled_from(list(TARGETS))), [draw(tiles(n)) for n in names],
                    # the DSL's `ptx X.Y;` names a released PTX ISA version (PTX Release History)
                    draw(_maybe(st.sampled_from(sorted(PTX_RELEASES)))), "generated.tile")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file_specs())
def test_generated_specs_round_trip(spec):
    _roundtrip(spec)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file_specs())
def test_generated_specs_round_trip_long(spec):
    _roundtrip(spec)
