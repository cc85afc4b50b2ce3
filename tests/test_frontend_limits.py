"""The front end's limits, its linear parse, and the files it reads (issue 14).

Every limit (README "Limits") is a located diagnostic, exit status 1, never unbounded work or an
internal error: input size (compiler/frontend/source.py), list length and depth and word length
(compiler/frontend/parser.py), integer magnitude, tile count, tile-name length and error count
(compiler/frontend/build.py); what diagnostics echo of the input is bounded (compiler/diagnostics.py).
Parsing is linear: the parser's work, counted, grows 10x when the input grows 10x. A UTF-8 byte-order
mark is accepted; a parser cache that is corrupt or of the wrong shape is rebuilt.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.diagnostics import CompileError, Diagnostic, Loc
from compiler.driver import compile_file, compile_source
from compiler.frontend import build, parser as tp, source
from compiler.frontend.build import parse_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gemm_bf16.tile"
VALID = EXAMPLE.read_text()
HEADER = "target sm_100a;\n"
TILE = "tile t{i} {{ engine tcgen05; shape M=128 N=256 K=16; }}\n"


def diagnostics_of(text: str, name: str = "x.tile") -> list[Diagnostic]:
    with pytest.raises(CompileError) as e:
        parse_spec(text, name)
    return e.value.diagnostics


def only_error(text: str) -> Diagnostic:
    (d,) = diagnostics_of(text)
    return d


def tilec(*args: str, stdin=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler", *args], stdin=stdin, capture_output=True,
                          timeout=timeout, cwd=ROOT)


# ---- input size ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["path", "stdin"])
def test_dev_zero_stops_at_the_input_limit_with_a_diagnostic(how):
    """`tilec compile /dev/zero` grew to 8 GB; now it reads one byte past the limit and stops."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    if how == "path":
        r = tilec("compile", "/dev/zero", "-o", os.devnull)
        name = "/dev/zero"
    else:
        with open("/dev/zero", "rb") as zero:
            r = tilec("compile", "-", "-o", os.devnull, stdin=zero)
        name = "<stdin>"
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, err[:2000]
    # the byte after the limit, on line 1 (/dev/zero has no newline): column MAX + 1
    assert err.startswith(f"{name}:1:{source.MAX_INPUT_BYTES + 1}: error: input is larger than 4 MiB"), err[:300]
    assert "hint: " in err and len(err) < 2000


def test_an_input_one_byte_over_the_limit_is_refused_at_its_position(tmp_path):
    comment = "// " + "x" * 77 + "\n"                    # 81 bytes a line
    lines = (source.MAX_INPUT_BYTES - len(VALID.encode())) // len(comment)
    text = VALID + comment * lines
    text += "/" * (source.MAX_INPUT_BYTES + 1 - len(text.encode()))
    assert len(text.encode()) == source.MAX_INPUT_BYTES + 1
    p = tmp_path / "big.tile"
    p.write_text(text)
    with pytest.raises(CompileError) as e:
        compile_file(p)
    (d,) = e.value.diagnostics
    last_line = text[:source.MAX_INPUT_BYTES].count("\n") + 1
    col = source.MAX_INPUT_BYTES - text[:source.MAX_INPUT_BYTES].rfind("\n")
    assert (d.loc.line, d.loc.col) == (last_line, col), d.loc
    p.write_text(text[:-1])                                # exactly the limit: read and compiled
    assert compile_file(p).ptx == compile_source(VALID).ptx


# ---- byte-order mark ----------------------------------------------------------------------------------

def test_a_utf8_bom_is_accepted_everywhere(tmp_path, capsys, monkeypatch):
    want = compile_source(VALID, "x.tile").ptx
    bom = tmp_path / "bom.tile"
    bom.write_bytes(b"\xef\xbb\xbf" + VALID.encode())
    assert compile_source("\ufeff" + VALID, "x.tile").ptx == want
    assert compile_file(bom).ptx == want
    out = tmp_path / "out.ptx"
    assert main(["compile", str(bom), "-o", str(out)]) == 0
    assert out.read_text() == want
    with open(bom, "rb") as f:
        r = tilec("compile", "-", stdin=f)
    assert r.returncode == 0 and r.stdout.decode() == want, r.stderr


def test_columns_after_a_bom_count_from_the_first_real_character(tmp_path):
    bom = tmp_path / "bom.tile"
    bom.write_bytes(b"\xef\xbb\xbftarget sm_999;\n")
    with pytest.raises(CompileError) as e:
        compile_file(bom)
    assert (e.value.diagnostics[0].loc.line, e.value.diagnostics[0].loc.col) == (1, 8)


def test_bad_utf8_after_a_bom_is_located_in_characters(tmp_path):
    bad = tmp_path / "bad.tile"
    bad.write_bytes(b"\xef\xbb\xbftarget \xc3\xa9\xff;\n")       # BOM, 'target ', 'é' (2 bytes), bad byte
    with pytest.raises(CompileError) as e:
        compile_file(bad)
    (d,) = e.value.diagnostics
    assert (d.loc.line, d.loc.col) == (1, 9) and "0xff" in d.message


# ---- the parser cache ---------------------------------------------------------------------------------

@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory and no parser loaded yet in this process."""
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tp, "_PARSER", None)
    yield tp.cache_path()
    monkeypatch.setattr(tp, "_PARSER", None)


def _valid_tables() -> dict:
    with open(tp.grammar_path(), encoding="utf-8") as f:
        return tp.build_tables(f.read())


BAD_CACHES = {
    "truncated": lambda t: json.dumps({"format": tp.CACHE_FORMAT, "tables": t})[:200],
    "binary": lambda t: "\udcff\x00garbage",
    "a list": lambda t: "[]",
    "a number": lambda t: "42",
    "no tables": lambda t: json.dumps({"format": tp.CACHE_FORMAT}),
    "wrong checksum": lambda t: json.dumps({"format": tp.CACHE_FORMAT, "crc": "00000000", "tables": t}),
    "tables of another shape": lambda t: json.dumps(
        {"format": tp.CACHE_FORMAT, "crc": tp._tables_crc({"states": []}), "tables": {"states": []}}),
    "a state that shifts nowhere": lambda t: (lambda bad: json.dumps(
        {"format": tp.CACHE_FORMAT, "crc": tp._tables_crc(bad), "tables": bad}))(
        {**t, "states": {**t["states"], "0": {"ATOM": [0, 99999]}}}),
    "format 1 of an older tilec": lambda t: json.dumps({"format": 1, **t}),
}


@pytest.mark.parametrize("make", list(BAD_CACHES.values()), ids=list(BAD_CACHES))
def test_a_bad_parser_cache_is_rebuilt(fresh_cache, make):
    tables = _valid_tables()
    os.makedirs(os.path.dirname(fresh_cache), exist_ok=True)
    with open(fresh_cache, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(make(tables))
    assert tp._load_cache(fresh_cache) is None
    assert compile_source(VALID).ptx                       # compiles, and rewrote the cache ...
    assert tp._load_cache(fresh_cache) is not None         # ... which now loads


def test_a_bad_parser_cache_never_fails_a_cli_run(tmp_path):
    """Every later compile used to fail until the file was deleted by hand."""
    env = {**os.environ, "TILEC_CACHE_DIR": str(tmp_path)}
    first = subprocess.run([sys.executable, "-m", "compiler", "compile", str(EXAMPLE)], env=env,
                           capture_output=True, text=True, cwd=ROOT)
    (cache,) = [tmp_path / n for n in os.listdir(tmp_path) if n.startswith("tile-lalr")]   # (ptxas's cache too)
    cache.write_text('{"format": %d, "tables": []}' % tp.CACHE_FORMAT)
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "compiler", "compile", str(EXAMPLE)], env=env,
                           capture_output=True, text=True, cwd=ROOT)
        assert (r.returncode, r.stdout, r.stderr) == (0, first.stdout, "")


# ---- list length and depth, word and name length ----------------------------------------------------------

def _list_tile(items: str) -> str:
    return HEADER + f"tile t {{ engine tcgen05; shape M=128 N=256 K=16; disable_output_lane [{items}]; }}\n"


def test_a_list_of_more_than_the_limit_is_refused_at_the_first_extra_item():
    n = tp.MAX_LIST_ITEMS
    text = _list_tile(", ".join(["7"] * (n + 1)))
    d = only_error(text)
    assert d.message == f"list has {n + 1:,} items; at most {n} are allowed"
    assert d.loc.col == text.split("\n")[1].index("[") + 1 + 3 * n + 1      # "7, " per item
    tp.parse(_list_tile(", ".join(["7"] * n)))             # the limit itself parses


def test_a_word_longer_than_the_limit_is_refused_and_not_echoed_whole():
    n = tp.MAX_TOKEN_CHARS
    d = only_error(HEADER + "tile t { engine " + "w" * (n + 1) + "; }\n")
    assert d.message == f"word '{'w' * 48}...' is {n + 1:,} characters long; at most {n} are allowed"
    assert len(d.render(HEADER + "tile t { engine " + "w" * (n + 1) + "; }\n")) < 1000


def test_a_tile_name_longer_than_the_limit_is_refused():
    n = build.MAX_NAME_CHARS
    d = only_error(HEADER + f"tile {'t' * (n + 1)} {{ engine tcgen05; shape M=128 N=256 K=16; }}\n")
    assert d.message == f"tile name '{'t' * 48}...' is {n + 1} characters long; at most {n} are allowed"
    assert (d.loc.line, d.loc.col) == (2, 6)
    assert parse_spec(HEADER + f"tile {'t' * n} {{ engine tcgen05; shape M=128 N=256 K=16; }}\n").tiles


def test_a_huge_name_gives_a_short_diagnostic(tmp_path):
    """A 10 MB tile name gave 30 MB of diagnostics; a 3 MB one (under the input limit) gives one line."""
    p = tmp_path / "name.tile"
    p.write_text(HEADER + "tile " + "n" * 3_000_000 + " { engine tcgen05; }\n")
    r = tilec("compile", str(p), "-o", os.devnull)
    assert r.returncode == 1 and len(r.stderr) < 1500, r.stderr[:1500]
    assert f"{p}:2:6: error: word 'nnn" in r.stderr.decode()


# ---- integers -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("literal", ["18446744073709551616", "0x10000000000000000", "0b1" + "0" * 64,
                                     "9" * 1000, "0" * 30 + "18446744073709551616"])
def test_an_integer_over_64_bits_is_a_located_error(literal):
    text = VALID.replace("loop K=64;", f"loop K={literal};")
    d = only_error(text)
    assert "is too large: integers are at most 2**64 - 1" in d.message
    assert (d.loc.line, d.loc.col) == (8, text.split("\n")[7].index(literal) + 1)


@pytest.mark.parametrize("literal", ["18446744073709551615", "0xFFFFFFFFFFFFFFFF", "0" * 40 + "64"])
def test_the_largest_integer_is_read(literal):
    spec = parse_spec(VALID.replace("loop K=64;", f"loop K={literal};"))
    assert spec.tiles[0].k_total == int(literal, 16 if literal.startswith("0x") else 10)


@pytest.mark.parametrize("where, text", [
    ("ratio", VALID.replace("}", "sparsity 2:4 rows=[[" + "9" * 5000 + ":1]];\n}")),
    ("ptx version", "ptx 8." + "9" * 5000 + ";\n" + VALID),
    ("schedule", VALID.replace("}", "schedule cta=" + "9" * 5000 + "x1x1;\n}")),
    ("loop", VALID.replace("loop K=64;", "loop K=" + "9" * 5000 + ";")),
])
def test_integers_over_4300_digits_are_a_diagnostic_not_an_internal_error(where, text, tmp_path):
    """They ended in Python's int-to-str limit (ValueError), exit status 3."""
    p = tmp_path / "int.tile"
    p.write_text(text)
    assert main(["compile", str(p), "-o", str(tmp_path / "o.ptx")]) == 1
    only_error(text)


@pytest.mark.parametrize("where, text", [
    ("ratio", VALID.replace("}", "sparsity 2:4 rows=[[" + "9" * 30 + ":1]];\n}")),
    ("schedule", VALID.replace("}", "schedule cta=" + "9" * 30 + "x1x1;\n}")),
])
def test_every_integer_the_front_end_reads_is_bounded(where, text):
    assert "is too large" in only_error(text).message


def test_a_huge_ptx_version_is_an_unreleased_version():
    """Versions come from the released list (compiler/isa/targets.py), which bounds them."""
    d = only_error("ptx 8." + "9" * 30 + ";\n" + VALID)
    assert "was never released" in d.message and (d.loc.line, d.loc.col) == (1, 5)


# ---- tile count and error count ---------------------------------------------------------------------------

def test_more_tiles_than_the_limit_is_refused_at_the_first_extra_tile():
    n = build.MAX_TILES
    text = HEADER + "".join(TILE.format(i=i) for i in range(n + 1))
    d = only_error(text)
    assert d.message == f"file has {n + 1:,} tiles; at most {n} are allowed"
    assert (d.loc.line, d.loc.col) == (n + 2, 1)
    assert len(parse_spec(HEADER + "".join(TILE.format(i=i) for i in range(n))).tiles) == n


def test_reporting_stops_after_the_error_limit():
    text = HEADER + "".join(f"tile t{i} {{ engine tcgen05; shape M=128 N=256 K=16; bogus; }}\n" for i in range(300))
    ds = diagnostics_of(text)
    assert len(ds) == build.MAX_ERRORS
    assert ds[-1].notes == [f"stopped after {build.MAX_ERRORS} errors; the rest of the file was not checked"]


# ---- bounded echo ---------------------------------------------------------------------------------------

def test_a_long_source_line_is_shown_as_a_window_with_the_caret_on_the_spot():
    line = "a" * 5000 + "XYZ" + "b" * 5000
    d = Diagnostic("bad", Loc("f", 1, 5001, 5004))
    out = d.render(line).split("\n")
    assert out[1].startswith("  ...") and out[1].endswith("...") and len(out[1]) <= 2 + 160 + 6
    caret = out[2].index("^")
    assert out[1][caret:caret + 3] == "XYZ" and out[2][caret:] == "^~~"


def test_messages_hints_and_notes_are_bounded():
    d = Diagnostic("m" * 10_000, Loc("f", 1, 1), hint="h" * 10_000, notes=["n" * 10_000])
    assert len(d.render("x")) < 3 * 1000 + 200


# ---- linear parsing ---------------------------------------------------------------------------------------

def parser_work(text: str) -> int:
    """Deterministic work of tp.parse: one per reduction and per child handed to it, plus the final
    length of every distinct list the builder returns (a builder that copies the list so far on every
    item, as the quadratic one did, makes n lists of average length n/2)."""
    calls = 0
    made: dict[int, list] = {}
    real = tp._Builder.build

    def counting(self, rule, children):
        nonlocal calls
        calls += 1 + len(children)
        out = real(self, rule, children)
        if isinstance(out, list):
            made[id(out)] = out               # kept alive, so ids are not reused
        return out

    tp._Builder.build = counting
    try:
        tp.parse(text)
    finally:
        tp._Builder.build = real
    return calls + sum(len(x) for x in made.values())


def _tiles(n: int) -> str:
    return HEADER + "".join(TILE.format(i=i) for i in range(n))


def _items(n: int) -> str:
    return _list_tile(", ".join(str(i % 10) for i in range(n)))


@pytest.mark.parametrize("make", [_tiles, _items], ids=["tiles", "list items"])
def test_parser_work_is_linear(make):
    small, large = parser_work(make(400)), parser_work(make(4000))
    assert large <= 10.5 * small, (small, large)


def test_the_work_count_sees_a_quadratic_builder(monkeypatch):
    """The count is not vacuous: the old builder (a new list per item) is caught."""
    real = tp._Builder.build

    def copying(self, rule, children):
        out = real(self, rule, children)
        return tp._Seq(out) if isinstance(out, tp._Seq) else out

    monkeypatch.setattr(tp._Builder, "build", copying)
    small, large = parser_work(_items(400)), parser_work(_items(4000))
    assert large > 50 * small, (small, large)
