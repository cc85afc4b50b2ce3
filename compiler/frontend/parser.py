"""The Lark LALR parser for grammar/tile.lark, built once and cached on disk.

Building the LALR tables costs ~50 ms; loading them from the cache ~7 ms (../shared/reference/
tooling-notes.md). The cache file name includes a hash of the grammar text and Lark's version, and
is written to a temporary file and renamed, so parallel lit workers never read a half-written cache.
After the parse, the Lark tree is converted into small plain nodes that keep every token's position.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import CompileError, Diagnostic, Loc

_GRAMMAR_NAME = "tile.lark"


def grammar_path() -> Path:
    here = Path(__file__).resolve().parent.parent.parent / "grammar" / _GRAMMAR_NAME
    if here.is_file():
        return here
    installed = Path(sys.prefix) / "share" / "tilec" / "grammar" / _GRAMMAR_NAME
    return installed


def _cache_dir() -> Path:
    env = os.environ.get("TILEC_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "tilec" if xdg else Path.home() / ".cache" / "tilec"


_PARSER = None


def get_parser():
    """The shared LALR parser (built or loaded once per process)."""
    global _PARSER
    if _PARSER is not None:
        return _PARSER
    import lark

    text = grammar_path().read_text()
    key = hashlib.sha256((text + lark.__version__).encode()).hexdigest()[:16]
    cache = _cache_dir() / f"tile-lalr-{key}.cache"
    parser = None
    if cache.is_file():
        try:
            with open(cache, "rb") as f:
                parser = lark.Lark.load(f)
        except Exception:       # a stale or foreign cache file: rebuild below
            parser = None
    if parser is None:
        parser = lark.Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=False)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".tile-lalr-")
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
            lines = text.splitlines() or [""]
            loc = Loc(filename, len(lines), len(lines[-1]) + 1)
            msg = "unexpected end of file"
        else:
            loc = _tok_loc(filename, tok)
            msg = f"unexpected {tok.value!r}"
        hint = f"expected {_describe_expected(e.expected)}"
        if "SEMICOLON" in e.expected and tok.type != "SEMICOLON":
            hint += " (is a ';' missing at the end of the previous statement?)"
        raise CompileError([Diagnostic(msg, loc, hint=hint)], text) from None
    except lark.exceptions.UnexpectedEOF as e:   # pragma: no cover - LALR reports UnexpectedToken($END)
        lines = text.splitlines() or [""]
        raise CompileError([Diagnostic("unexpected end of file", Loc(filename, len(lines), len(lines[-1]) + 1))],
                           text) from None
    return _convert(tree, filename)


def _convert(tree, filename: str) -> FileNode:
    from lark import Token

    def value(node) -> Value:
        if node.data == "list":
            items = [value(c) for c in node.children if c is not None]
            m = node.meta
            loc = Loc(filename, m.line, m.column, m.end_column if m.end_line == m.line else None)
            return Value("list", "", loc, items)
        tok = node.children[0]
        return Value(node.data, str(tok), _tok_loc(filename, tok))

    def statement(node) -> Statement:
        head = node.children[0]
        args = []
        for a in node.children[1:]:
            if a.data == "kv_arg":
                key = a.children[0]
                args.append(Arg(str(key), _tok_loc(filename, key), value(a.children[1])))
            else:
                args.append(Arg(None, None, value(a.children[0])))
        m = node.meta
        end = Loc(filename, m.end_line, max(m.end_column - 1, 1))
        kind = "operand" if node.data == "operand_stmt" else "keyword"
        return Statement(kind, str(head), _tok_loc(filename, head), args, end)

    stmts, tiles = [], []
    for child in tree.children:
        if child.data == "tile":
            name = child.children[0]
            assert isinstance(name, Token)
            m = child.meta
            tiles.append(TileNode(str(name), Loc(filename, m.line, m.column, m.column + 4),
                                  _tok_loc(filename, name), [statement(s) for s in child.children[1:]]))
        else:
            stmts.append(statement(child))
    return FileNode(stmts, tiles)
