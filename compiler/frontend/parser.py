"""The Lark LALR parser for grammar/tile.lark, built once and cached on disk.

Building the LALR tables costs ~50 ms; loading them from the cache ~7 ms (../shared/reference/
tooling-notes.md). The cache file name includes a hash of the grammar text and Lark's version, and
is written to a temporary file and renamed, so parallel lit workers never read a half-written cache.
After the parse, the Lark tree is converted into small plain nodes that keep every token's position.
"""
from __future__ import annotations

import os
import sys
import zlib
from dataclasses import dataclass, field

from ..diagnostics import CompileError, Diagnostic, Loc

_GRAMMAR_NAME = "tile.lark"


def grammar_path() -> str:
    # os.path rather than pathlib: pathlib costs several ms of start-up that every lit RUN line pays.
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "grammar", _GRAMMAR_NAME)
    if os.path.isfile(here):
        return here
    return os.path.join(sys.prefix, "share", "tilec", "grammar", _GRAMMAR_NAME)


def _cache_dir() -> str:
    env = os.environ.get("TILEC_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg, "tilec") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "tilec")


_PARSER = None


def get_parser():
    """The shared LALR parser (built or loaded once per process)."""
    global _PARSER
    if _PARSER is not None:
        return _PARSER
    import lark

    with open(grammar_path(), encoding="utf-8") as f:
        text = f.read()
    # crc32 (zlib is built in) rather than hashlib: the key only has to change with the grammar.
    key = f"{zlib.crc32((text + lark.__version__).encode()):08x}"
    cache = os.path.join(_cache_dir(), f"tile-lalr-{key}.cache")
    parser = None
    if os.path.isfile(cache):
        try:
            with open(cache, "rb") as f:
                parser = lark.Lark.load(f)
        except Exception:       # a stale or foreign cache file: rebuild below
            parser = None
    if parser is None:
        # The basic lexer builds one scanner; the contextual one compiles a scanner per parser state on
        # first use (~10 ms of regex compilation on every cold start). The grammar needs no context.
        parser = lark.Lark(text, parser="lalr", lexer="basic", propagate_positions=False,
                           maybe_placeholders=False)
        try:
            import tempfile

            os.makedirs(os.path.dirname(cache), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), prefix=".tile-lalr-")
            with os.fdopen(fd, "wb") as f:
                parser.save(f)
            os.replace(tmp, cache)
        except OSError:         # read-only home: run without a cache
            pass
    _PARSER = parser
    return parser


# ---- syntax tree ---------------------------------------------------------------------------------

@dataclass
class Value:
    kind: str                   # "atom" | "ratio" | "string" | "list"
    text: str                   # token text ("" for lists)
    loc: Loc
    items: list["Value"] = field(default_factory=list)


@dataclass
class Arg:
    key: str | None
    key_loc: Loc | None
    value: Value

    @property
    def loc(self) -> Loc:
        return self.key_loc or self.value.loc


@dataclass
class Statement:
    kind: str                   # "operand" (`A: ...;`) | "keyword" (`shape ...;`)
    head: str
    loc: Loc
    args: list[Arg]
    end_loc: Loc | None = None  # position of the closing ';'


@dataclass
class TileNode:
    name: str
    loc: Loc
    name_loc: Loc
    statements: list[Statement]


@dataclass
class FileNode:
    statements: list[Statement]
    tiles: list[TileNode]


def _tok_loc(filename: str, tok) -> Loc:
    return Loc(filename, tok.line, tok.column, tok.end_column if tok.end_line == tok.line else None)


_TERMINAL_WORDS = {
    "SEMICOLON": "';'", "COLON": "':'", "EQUAL": "'='", "LBRACE": "'{'", "RBRACE": "'}'",
    "LSQB": "'['", "RSQB": "']'", "COMMA": "','", "ATOM": "a name or number", "RATIO": "a ratio such as 2:4",
    "STRING": "a string", "TILE": "'tile'", "$END": "end of file",
}


def _describe_expected(expected) -> str:
    words = sorted({_TERMINAL_WORDS.get(e, e) for e in expected})
    if len(words) > 4:
        return ", ".join(words[:4]) + ", ..."
    return " or ".join(words)


def parse(text: str, filename: str = "<string>") -> FileNode:
    import lark

    parser = get_parser()
    try:
        tree = parser.parse(text)
    except lark.exceptions.UnexpectedCharacters as e:
        loc = Loc(filename, e.line, e.column)
        ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else "?"
        raise CompileError([Diagnostic(f"unexpected character {ch!r}", loc,
                                       hint=f"expected {_describe_expected(e.allowed)}" if e.allowed else None)],
                           text) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            loc = _end_of_file(text, filename)
            msg = "unexpected end of file"
        else:
            loc = _tok_loc(filename, tok)
            msg = f"unexpected {tok.value!r}"
        hint = f"expected {_describe_expected(e.expected)}"
        if "SEMICOLON" in e.expected and tok.type != "SEMICOLON":
            hint += " (is a ';' missing at the end of the previous statement?)"
        raise CompileError([Diagnostic(msg, loc, hint=hint)], text) from None
    except lark.exceptions.UnexpectedEOF as e:   # pragma: no cover - LALR reports UnexpectedToken($END)
        raise CompileError([Diagnostic("unexpected end of file", _end_of_file(text, filename))], text) from None
    return _convert(tree, filename, text)


def _end_of_file(text: str, filename: str) -> Loc:
    """Just after the last non-blank line. Lines are counted as Lark counts them (only '\n' ends a
    line; str.splitlines would also split at '\r', '\x0b', '\u2028', ... and point past the file)."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    n = len(lines)
    while n > 1 and not lines[n - 1].strip():
        n -= 1
    return Loc(filename, n, len(lines[n - 1]) + 1)


# Lists nest two deep in the DSL (rows=[[0:1, 2:3], [1:3]]); anything far deeper is a typo, and the
# recursive conversion below must not run out of stack on it.
MAX_LIST_DEPTH = 16


def _convert(tree, filename: str, text: str = "") -> FileNode:
    from lark import Token

    def value(node, depth: int = 0) -> Value:
        if node.data == "list":
            lsqb, rsqb = node.children[0], node.children[-1]
            if depth >= MAX_LIST_DEPTH:
                raise CompileError([Diagnostic(f"lists nest at most {MAX_LIST_DEPTH} deep", _tok_loc(filename, lsqb),
                                               hint="the DSL's deepest value is a list of lists, e.g. rows=[[0:1, 2:3]]")],
                                   text)
            items = [value(c, depth + 1) for c in node.children[1:-1] if c is not None]
            end = rsqb.end_column if rsqb.line == lsqb.line else None
            return Value("list", "", Loc(filename, lsqb.line, lsqb.column, end), items)
        tok = node.children[0]
        return Value(node.data, str(tok), _tok_loc(filename, tok))

    def statement(node) -> Statement:
        head, semi = node.children[0], node.children[-1]
        args = []
        for a in node.children[1:-1]:
            if a.data == "kv_arg":
                key = a.children[0]
                args.append(Arg(str(key), _tok_loc(filename, key), value(a.children[1])))
            else:
                args.append(Arg(None, None, value(a.children[0])))
        end = Loc(filename, semi.line, semi.column)
        kind = "operand" if node.data == "operand_stmt" else "keyword"
        return Statement(kind, str(head), _tok_loc(filename, head), args, end)

    stmts, tiles = [], []
    for child in tree.children:
        if child.data == "tile":
            kw, name = child.children[0], child.children[1]
            assert isinstance(name, Token)
            tiles.append(TileNode(str(name), _tok_loc(filename, kw),
                                  _tok_loc(filename, name), [statement(s) for s in child.children[2:]]))
        else:
            stmts.append(statement(child))
    return FileNode(stmts, tiles)
