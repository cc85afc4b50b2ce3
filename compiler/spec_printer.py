"""Tile specs back to DSL text: `print_file(FileSpec)` and `print_tile(TileSpec)`.

The printer is the inverse of the front end (compiler/frontend/build.py): for every spec the DSL can
express, `parse_source(print_file(spec), spec.filename) == spec` (source locations are not part of
spec equality). A spec the DSL cannot express raises `SpecError` naming the field, instead of
printing text that would not parse back to it:
- a value outside the DSL's vocabulary (an unknown element type, space, swizzle, ratio, ...);
- a name or word that is not one token of the grammar (grammar/tile.lark terminals ATOM / RATIO);
- a negative or non-integer number (the grammar has no sign);
- a combination the front end rejects (static metadata without a pattern, a zero-column mask given
  both as a value and as columns, duplicate tile names, a file without tiles).

Canonical values, i.e. what the front end produces and therefore what round-trips: tuples (not lists)
for `rows`, `columns` and `disable_output_lane`; `block_scale` as the spec stores it ("block16",
"block32", "scale_vec::1X", ...); `sparsity.metadata` "static" whenever a pattern or rows are given.

`compile_tile` prints a spec built in code before compiling it, so every spec the API accepts has a
DSL form (useful for bug reports: print it, save it, `tilec compile` it).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar

from .diagnostics import SpecError
from .spec import (METADATA_SOURCES, OPERAND_NAMES, SCHEDULE_MMAS, SPACES, SWIZZLES, FileSpec, OperandSpec,
                   ScheduleSpec, SparsitySpec, TileSpec, ZeroColumnsSpec)

__all__ = ["print_file", "print_tile", "TILE_STATEMENTS"]

INDENT = "  "
MIN_RANGE_RUN = 3          # consecutive integers written as `a..b` from this run length on


# ---- tokens ---------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _terminal(name: str) -> re.Pattern[str]:
    """A terminal of grammar/tile.lark as a compiled regex, read from the parser itself so the printer
    can never disagree with the lexer."""
    from .frontend.parser import get_parser

    return re.compile(get_parser().terminal_regex(name))


def _token(text: object, field: str, what: str, ratio_ok: bool = True) -> str:
    """`text` as one value token: an ATOM (names, numbers, qualified words such as a::fill) or, where the
    front end accepts one, a RATIO (2:4)."""
    if isinstance(text, str) and (_terminal("ATOM").fullmatch(text)
                                  or (ratio_ok and _terminal("RATIO").fullmatch(text))):
        return text
    raise SpecError(f"{what} {text!r} cannot be written in the tile DSL: it is not a single word",
                    field, "use letters, digits, '_', '.' and '::' (grammar/tile.lark ATOM)")


def _word(value: object, choices: Iterable[str], field: str, what: str) -> str:
    choices = list(choices)
    if isinstance(value, str) and value in choices:
        return value
    raise SpecError(f"unknown {what} {value!r}", field, "one of: " + ", ".join(choices))


def _uint(value: object, field: str, what: str, positive: bool = False) -> int:
    """A number the grammar can write: a non-negative int (no bools, no sign)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        kind = "positive" if positive else "non-negative"
        raise SpecError(f"{what} must be a {kind} integer to be written in the tile DSL, not {value!r}", field)
    from .frontend.build import MAX_INT

    if value > MAX_INT:
        raise SpecError(f"{what} {value} does not fit 64 bits; the tile DSL takes integers up to 2**64 - 1", field)
    return value


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{field} must be True or False, not {value!r}", field)
    return value


def _int_list(values: object, field: str, what: str, hexadecimal: bool = False) -> str:
    """`[a, b, c..d]`: ascending runs of MIN_RANGE_RUN or more consecutive integers become `c..d` (the front
    end expands `c..d` to c, c+1, ..., d in place, so order and repeats are preserved). Hexadecimal lists
    (lane masks) are written element by element."""
    if not isinstance(values, tuple):
        raise SpecError(f"{what} must be a tuple of integers, not {values!r}", field)
    items = [_uint(v, field, what) for v in values]
    from .frontend.build import MAX_LIST_ITEMS

    # The front end takes at most MAX_LIST_ITEMS items per list, ranges expanded (README "Limits").
    if len(items) > MAX_LIST_ITEMS:
        raise SpecError(f"{what} has {len(items)} items; the tile DSL takes at most {MAX_LIST_ITEMS}", field)
    if hexadecimal:
        return "[" + ", ".join(f"{v:#x}" if hexadecimal else str(v) for v in items) + "]"
    out: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        if j - i + 1 >= MIN_RANGE_RUN:
            out.append(f"{items[i]}..{items[j]}")
        else:
            out.extend(str(v) for v in items[i:j + 1])
        i = j + 1
    return "[" + ", ".join(out) + "]"


def _statement(head: str, *args: str | None) -> str:
    return " ".join([head, *(a for a in args if a is not None)]) + ";"


# ---- one renderer per DSL statement ----------------------------------------------------------------
# Each takes the tile and returns the statement lines it needs (none when every field it covers has its
# default value). The words accepted are the ones the front end accepts: its own tables
# (compiler/frontend/build.py), the spec's (compiler/spec.py) and the ISA's (compiler/isa/).

def _engine(t: TileSpec) -> list[str]:
    from .frontend.build import ENGINES

    cta_group = _uint(t.cta_group, "engine.cta_group", "cta_group")
    return [_statement(
        "engine", _word(t.engine, ENGINES, "engine.name", "engine"),
        f"cta_group={cta_group}" if cta_group != 1 else None,
        f"kind={_token(t.kind, 'engine.kind', 'kind')}" if t.kind is not None else None,
        "ws" if _flag(t.ws, "engine.ws") else None,
        "ashift" if _flag(t.ashift, "engine.ashift") else None,
        f"collector={_token(t.collector, 'engine.collector', 'collector')}" if t.collector is not None else None)]


def _shape(t: TileSpec) -> list[str]:
    return [_statement("shape", *(f"{dim}={_uint(getattr(t, dim.lower()), f'shape.{dim}', f'shape {dim}')}"
                                  for dim in "MNK"))]


def _loop(t: TileSpec) -> list[str]:
    if t.k_total is None:
        return []
    return [_statement("loop", f"K={_uint(t.k_total, 'loop.K', 'loop K')}")]


def _operand(name: str, o: OperandSpec) -> str:
    from .isa.swizzle import MAJORS
    from .isa.types import TYPES

    if not isinstance(o, OperandSpec):
        raise SpecError(f"operand {name} must be an OperandSpec, not {type(o).__name__}", name)
    return _statement(
        f"{name}:", _word(o.dtype, TYPES, f"{name}.dtype", "element type"),
        _word(o.space, SPACES, f"{name}.space", "memory space"),
        f"major={_word(o.major, MAJORS, f'{name}.major', 'major-ness')}" if o.major is not None else None,
        f"swizzle={_word(o.swizzle, SWIZZLES, f'{name}.swizzle', 'swizzle')}" if o.swizzle is not None else None)


def _operands(t: TileSpec) -> list[str]:
    if not isinstance(t.operands, dict):
        raise SpecError(f"operands must be a dict of OperandSpec, not {type(t.operands).__name__}", "tile")
    for name in t.operands:
        _word(name, OPERAND_NAMES, "tile", "operand")
    return [_operand(name, o) for name, o in t.operands.items()]


def _rows(rows: object) -> str:
    """rows=[[0:1, 2:3], [1:3]]: per row, per chunk, the kept positions (a pair `a:b` or one index)."""
    field = "sparsity.rows"
    if not isinstance(rows, tuple) or not rows or any(not isinstance(r, tuple) or not r for r in rows):
        raise SpecError("rows must be a non-empty tuple of non-empty tuples of kept positions", field)

    def chunk(c: object) -> str:
        if isinstance(c, tuple) and len(c) in (1, 2):
            return ":".join(str(_uint(i, field, "a kept position")) for i in c)
        raise SpecError(f"a chunk of rows is (a,) or (a, b), not {c!r}", field,
                        "the DSL writes one kept index or a pair a:b per chunk")

    return "[" + ", ".join("[" + ", ".join(chunk(c) for c in r) + "]" for r in rows) + "]"


_P = TypeVar("_P")


def _part(value: object, cls: type[_P], field: str) -> _P | None:
    """An optional part of a tile (its sparsity, its zero columns): None, or checked to be a `cls`."""
    if value is not None and not isinstance(value, cls):
        raise SpecError(f"{field} must be a {cls.__name__}, not {type(value).__name__}", field)
    return value


def _sparsity(t: TileSpec) -> list[str]:
    from .isa.sparsity import GRANULARITIES

    sp = _part(t.sparsity, SparsitySpec, "sparsity")
    if sp is None:
        return []
    metadata = _word(sp.metadata, METADATA_SOURCES, "sparsity.metadata", "metadata source")
    given = [k for k in ("pattern", "rows") if getattr(sp, k) is not None]
    # The front end's rules (build.py Builder.sparsity): static metadata names exactly one of pattern / rows,
    # runtime metadata neither.
    if metadata == "static" and len(given) != 1:
        raise SpecError("static metadata needs exactly one of pattern and rows", "sparsity.metadata")
    if metadata == "runtime" and given:
        raise SpecError(f"runtime metadata takes no {given[0]}", f"sparsity.{given[0]}",
                        "use metadata='static', or drop the pattern")
    selector = _uint(sp.selector, "sparsity.selector", "selector")
    return [_statement(
        "sparsity", _word(sp.ratio, GRANULARITIES, "sparsity.ratio", "sparsity ratio"), f"metadata={metadata}",
        f"pattern={_token(sp.pattern, 'sparsity.pattern', 'pattern')}" if sp.pattern is not None else None,
        f"rows={_rows(sp.rows)}" if sp.rows is not None else None,
        f"selector={selector}" if selector else None)]


def _block_scale(t: TileSpec) -> list[str]:
    from .frontend.build import BLOCK_SCALE_VECS

    if t.block_scale is None:
        return []
    if t.block_scale == "implicit":
        return [_statement("block_scale")]
    # BLOCK_SCALE_VECS maps DSL words to stored values; its first word per value is the short one (16, 2X).
    words: dict[str, str] = {}
    for word, stored in BLOCK_SCALE_VECS.items():
        words.setdefault(stored, word)
    stored = _word(t.block_scale, words, "block_scale.vec", "block-scale vector size")
    return [_statement("block_scale", f"vec={words[stored]}")]


def _negate(t: TileSpec) -> list[str]:
    which = [x for x, flag in (("A", t.negate_a), ("B", t.negate_b)) if _flag(flag, f"negate.{x}")]
    return [_statement("negate", *which)] if which else []


def _saturate(t: TileSpec) -> list[str]:
    return [_statement("saturate")] if _flag(t.saturate, "saturate") else []


def _max_shift(t: TileSpec) -> list[str]:
    shift = _uint(t.max_shift, "max_shift.value", "max_shift")
    return [_statement("max_shift", str(shift))] if shift else []


def _scale_input_d(t: TileSpec) -> list[str]:
    if t.scale_input_d is None:
        return []
    return [_statement("scale_input_d", str(_uint(t.scale_input_d, "scale_input_d.value", "scale_input_d")))]


def _disable_output_lane(t: TileSpec) -> list[str]:
    if t.disable_output_lane is None:
        return []
    return [_statement("disable_output_lane",
                       _int_list(t.disable_output_lane, "disable_output_lane.value", "a lane mask", hexadecimal=True))]


def _zero_columns(t: TileSpec) -> list[str]:
    z = _part(t.zero_columns, ZeroColumnsSpec, "zero_columns")
    if z is None:
        return []
    if (z.value is None) == (z.columns is None):
        raise SpecError("zero_columns needs exactly one of value (a raw mask) and columns", "zero_columns")
    shift = _uint(z.shift, "zero_columns.shift", "column shift")
    if z.value is not None:
        what = f"mask={_uint(z.value, 'zero_columns.mask', 'zero-column mask'):#018x}"
    else:
        cols = z.columns
        if not isinstance(cols, tuple) or not cols:
            raise SpecError("zero_columns.columns must be a non-empty tuple of column tuples (one per sub-mask)",
                            "zero_columns.cols")
        # One sub-mask prints flat (cols=[0..3]); the front end reads a flat list as one sub-mask.
        lists = [_int_list(c, "zero_columns.cols", "a zeroed column") for c in cols]
        what = "cols=" + (lists[0] if len(lists) == 1 else "[" + ", ".join(lists) + "]")
    return [_statement("zero_columns", what, f"shift={shift}" if shift else None)]


def _schedule(t: TileSpec) -> list[str]:
    s = getattr(t, "schedule", None)
    if s is None:
        return []

    def dims(*names: str) -> str:
        return "x".join(str(_uint(getattr(s, n), f"schedule.{n}", n, positive=True)) for n in names)

    if s.mma not in SCHEDULE_MMAS:
        raise SpecError(f"schedule mma must be 'sync' or 'wgmma', not {s.mma!r}", "schedule.mma")
    return [_statement("schedule", f"cta={dims('cta_m', 'cta_n', 'cta_k')}",
                       f"warps={dims('warps_m', 'warps_n')}",
                       f"stages={_uint(s.stages, 'schedule.stages', 'stages')}",
                       None if s.mma == "sync" else f"mma={s.mma}",
                       None if s.cluster == 1 else f"cluster={_uint(s.cluster, 'schedule.cluster', 'cluster')}",
                       *_schedule_options(s),
                       None if getattr(s, "accumulators", None) is None else
                       f"accumulators={_uint(s.accumulators, 'schedule.accumulators', 'accumulators', positive=True)}",
                       None if getattr(s, "promote", None) is None else
                       f"promote={_uint(s.promote, 'schedule.promote', 'promote', positive=True)}")]


def _schedule_options(s: ScheduleSpec) -> list[str | None]:
    """persistent=, raster=, split_k= when they differ from their defaults."""
    from .spec import SCHEDULE_PERSISTENT, SPLIT_K_STREAM

    if s.persistent not in SCHEDULE_PERSISTENT:
        raise SpecError(f"schedule persistent must be one of {', '.join(SCHEDULE_PERSISTENT)}, not {s.persistent!r}",
                        "schedule.persistent")
    split = s.split_k
    if split != SPLIT_K_STREAM:
        split = _uint(split, "schedule.split_k", "split_k")
    return [None if s.persistent == "none" else f"persistent={s.persistent}",
            None if s.raster is None else f"raster={_uint(s.raster, 'schedule.raster', 'raster')}",
            None if split == 1 else f"split_k={split}"]


if TYPE_CHECKING:
    from .spec import ScheduleSpec


def schedule_statement(schedule: ScheduleSpec) -> str:
    """`schedule ...;` for one ScheduleSpec, as print_tile writes it (`tilec tune --write` puts it in a tile)."""
    from types import SimpleNamespace

    return _schedule(SimpleNamespace(schedule=schedule))[0]   # type: ignore[arg-type]


def _epilogue(t: TileSpec) -> list[str]:
    from .spec import EPILOGUE_ACCS, EPILOGUE_ACTS, EPILOGUE_BIAS, EPILOGUE_BIAS_TYPES, EPILOGUE_PARAM

    e = getattr(t, "epilogue", None)
    if e is None:
        return []
    scalars: list[str] = []
    scale: list[str] = []
    for key in ("alpha", "beta", "scale"):
        v = getattr(e, key, None)
        if v is None:
            continue
        whole, _, frac = v.partition(".") if isinstance(v, str) else ("", "", "")
        if v != EPILOGUE_PARAM and not (whole.isdigit() and (frac.isdigit() or not frac) and "." not in frac):
            raise SpecError(f"epilogue {key} must be a non-negative decimal literal (a string such as '0.5') or "
                            f"'{EPILOGUE_PARAM}', not {v!r}", f"epilogue.{key}")
        (scale if key == "scale" else scalars).append(f"{key}={v}")
    words = []
    for key, choices, default in (("bias", EPILOGUE_BIAS, "none"), ("bias_type", EPILOGUE_BIAS_TYPES, None),
                                  ("act", EPILOGUE_ACTS, "none"), ("acc", EPILOGUE_ACCS, None)):
        v = getattr(e, key, default)
        if v != default:
            words.append(f"{key}={_word(v, choices, f'epilogue.{key}', f'epilogue {key}')}")
    return [_statement("epilogue", *scalars, *words, *scale)]


@dataclass(frozen=True)
class TileStatement:
    """One DSL statement of a tile body: the TileSpec fields it writes and its renderer."""
    keyword: str
    fields: tuple[str, ...]
    render: Callable[[TileSpec], list[str]]


# In print order. `tests/test_spec_roundtrip.py` checks that these cover every TileSpec field.
TILE_STATEMENTS: tuple[TileStatement, ...] = (
    TileStatement("engine", ("engine", "kind", "cta_group", "ws", "collector", "ashift"), _engine),
    TileStatement("shape", ("m", "n", "k"), _shape),
    TileStatement("loop", ("k_total",), _loop),
    TileStatement("A: ... D:", ("operands",), _operands),
    TileStatement("sparsity", ("sparsity",), _sparsity),
    TileStatement("block_scale", ("block_scale",), _block_scale),
    TileStatement("negate", ("negate_a", "negate_b"), _negate),
    TileStatement("saturate", ("saturate",), _saturate),
    TileStatement("max_shift", ("max_shift",), _max_shift),
    TileStatement("scale_input_d", ("scale_input_d",), _scale_input_d),
    TileStatement("disable_output_lane", ("disable_output_lane",), _disable_output_lane),
    TileStatement("zero_columns", ("zero_columns",), _zero_columns),
    TileStatement("schedule", ("schedule",), _schedule),
    TileStatement("epilogue", ("epilogue",), _epilogue),
)

# TileSpec fields that are not statements: the tile's name (its header) and the source locations.
HEADER_FIELDS = ("name", "locs")


def printed_fields() -> set[str]:
    return {f for st in TILE_STATEMENTS for f in st.fields} | set(HEADER_FIELDS)


def print_tile(tile: TileSpec) -> str:
    """`tile NAME { ... }` for one tile spec (raises SpecError when the DSL cannot express it)."""
    if not isinstance(tile, TileSpec):
        raise SpecError(f"expected a TileSpec, not {type(tile).__name__}")
    missing = {f.name for f in fields(tile)} - printed_fields()
    if missing:     # a new spec field nobody taught the printer: never drop it silently
        raise SpecError(f"the spec printer does not know the field(s) {', '.join(sorted(missing))}")
    name = _token(tile.name, "tile", "tile name", ratio_ok=False)
    body = [line for st in TILE_STATEMENTS for line in st.render(tile)]
    return f"tile {name} {{\n" + "".join(f"{INDENT}{line}\n" for line in body) + "}\n"


def print_file(spec: FileSpec) -> str:
    """The whole file: `target`, `ptx` (when pinned) and every tile, separated by blank lines."""
    from .isa.targets import TARGETS, format_version

    if not isinstance(spec, FileSpec):
        raise SpecError(f"expected a FileSpec, not {type(spec).__name__}")
    head = [_statement("target", _word(spec.target, TARGETS, "target", "target"))]
    if spec.ptx_version is not None:
        v = spec.ptx_version
        if not (isinstance(v, tuple) and len(v) == 2):
            raise SpecError(f"ptx_version must be a (major, minor) tuple, not {v!r}", "ptx")
        head.append(_statement("ptx", format_version((_uint(v[0], "ptx", "PTX major version"),
                                                      _uint(v[1], "ptx", "PTX minor version")))))
    tiles: Sequence[TileSpec] = spec.tiles
    if not tiles:
        raise SpecError("a tile file needs at least one tile", "tile")
    seen: set[str] = set()
    for t in tiles:
        if isinstance(t, TileSpec) and t.name in seen:
            raise SpecError(f"tile '{t.name}' appears twice; tile names must be unique", "tile")
        seen.add(getattr(t, "name", ""))
    return "\n".join(head) + "\n\n" + "\n".join(print_tile(t) for t in tiles)
