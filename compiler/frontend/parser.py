"""The tile DSL's parser: grammar/tile.lark, LALR(1) tables built by Lark, walked by this module.

grammar/tile.lark is the one definition of the syntax. Lark builds its LALR(1) tables (and checks the
grammar); the tables, the lexer's terminals and the rules are then saved to a JSON cache (keyed by a
CRC of the grammar text and Lark's version; written to a temporary file and renamed, so parallel lit
workers never read a half-written cache). With a warm cache this module lexes and parses with those
tables itself and never imports Lark: importing Lark costs ~50 ms, more than everything else a cold
`tilec compile` does, and the lit suite pays start-up on every RUN line. A missing or stale cache
imports Lark and rebuilds it. The walker follows Lark's LALR parser step for step (shift; reduce and
goto on the rule's origin; accept when a reduce on end-of-input reaches the end state), and its lexer
follows Lark's basic lexer (Lark's terminal order; a string terminal that a regex terminal also
matches, like `tile` and ATOM, is the string terminal when the text is exactly it).
Syntax errors are located diagnostics naming the terminals the parser could take there.
"""
from __future__ import annotations

import json
import os
import re
import sys
import zlib

from ..diagnostics import CompileError, Diagnostic, Loc

_GRAMMAR_NAME = "tile.lark"
CACHE_FORMAT = 1


def grammar_path() -> str:
    """grammar/tile.lark of a source checkout, else the copy an installed wheel carries (see setup.py)."""
    # os.path rather than pathlib: pathlib costs several ms of start-up that every lit RUN line pays.
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "grammar", _GRAMMAR_NAME)
    if os.path.isfile(here):
        return here
    return os.path.join(PACKAGED_DIR, _GRAMMAR_NAME)


# A wheel carries the grammar and its tables in compiler/frontend/grammar/ (written by setup.py's build step,
# absent from a source checkout). Tables are used only when built from the very grammar text being parsed.
PACKAGED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grammar")
PACKAGED_TABLES = "tile-lalr.json"


def grammar_crc(text: str) -> str:
    # crc32 (zlib is built in) rather than hashlib: the key only has to change with the grammar.
    return f"{zlib.crc32(text.encode()):08x}"


def _packaged_tables(text: str) -> dict | None:
    try:
        with open(os.path.join(PACKAGED_DIR, PACKAGED_TABLES), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("format") != CACHE_FORMAT or data.get("grammar_crc32") != grammar_crc(text):
        return None
    return data


def _cache_dir() -> str:
    env = os.environ.get("TILEC_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg, "tilec") if xdg else os.path.join(os.path.expanduser("~"), ".cache", "tilec")


def _lark_version() -> str:
    """Lark's version from its package metadata file, without importing Lark."""
    for base in sys.path:
        try:
            names = os.listdir(base or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("lark-") and name.endswith(".dist-info"):
                return name[len("lark-"):-len(".dist-info")]
    return "unknown"


def build_tables(grammar: str) -> dict:
    """Lark's LALR(1) tables for `grammar`, as plain JSON-able data."""
    import lark

    p = lark.Lark(grammar, parser="lalr", lexer="basic", propagate_positions=False, maybe_placeholders=False)
    lexer = p.parser.lexer
    terminals = [(t.name, t.pattern.to_regexp(), t.pattern.type == "str") for t in lexer.terminals]
    # A string terminal fully matched by an earlier regex terminal is produced by that terminal's match
    # (Lark's "unless" callback): record literal -> string terminal per regex terminal.
    keywords: dict[str, dict[str, str]] = {}
    for name, regex, is_str in terminals:
        if not is_str:
            continue
        literal = re.sub(r"\\(.)", r"\1", regex)
        for other, oregex, ostr in terminals:
            if not ostr and re.fullmatch(oregex, literal):
                keywords.setdefault(other, {})[literal] = name
                break
    table = p.parser.parser.parser.parse_table
    rules = list(p.rules)
    index = {id(r): i for i, r in enumerate(rules)}
    states: dict[str, dict[str, list]] = {}
    for state, actions in table.states.items():
        row = {}
        for sym, (action, arg) in actions.items():
            if str(action) == "Shift":
                row[sym] = [0, arg]
            else:
                i = index.get(id(arg))
                if i is None:
                    i = rules.index(arg)
                row[sym] = [1, i]
        states[str(state)] = row
    return {
        "format": CACHE_FORMAT,
        "terminals": [[n, r] for n, r, _ in terminals],
        "ignore": sorted(lexer.ignore_types),
        "keywords": keywords,
        "rules": [[r.origin.name, r.alias, len(r.expansion)] for r in rules],
        "states": states,
        "start": table.start_states["start"],
        "end": table.end_states["start"],
    }


_PARSER: "TileParser | None" = None


def get_parser() -> "TileParser":
    """The shared parser (tables loaded from the cache, or built with Lark once)."""
    global _PARSER
    if _PARSER is not None:
        return _PARSER
    with open(grammar_path(), encoding="utf-8") as f:
        text = f.read()
    data = _packaged_tables(text)
    if data is not None:
        _PARSER = TileParser(data)
        return _PARSER
    # crc32 (zlib is built in) rather than hashlib: the key only has to change with the grammar.
    key = f"{zlib.crc32((text + _lark_version()).encode()):08x}"
    cache = os.path.join(_cache_dir(), f"tile-lalr-{key}.json")
    data = None
    if os.path.isfile(cache):
        try:
            with open(cache, encoding="utf-8") as f:
                data = json.load(f)
            if data.get("format") != CACHE_FORMAT:
                data = None
        except (OSError, ValueError):      # a stale or foreign cache file: rebuild below
            data = None
    if data is None:
        data = build_tables(text)
        try:
            import tempfile

            os.makedirs(os.path.dirname(cache), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), prefix=".tile-lalr-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, cache)
        except OSError:         # read-only home: run without a cache
            pass
    _PARSER = TileParser(data)
    return _PARSER


class Token:
    """A lexed token; positions are 1-based, end_column exclusive (as Lark counts them)."""
    __slots__ = ("type", "value", "line", "column", "end_line", "end_column")

    def __init__(self, type_: str, value: str, line: int, column: int, end_line: int, end_column: int):
        self.type, self.value = type_, value
        self.line, self.column, self.end_line, self.end_column = line, column, end_line, end_column

    def __str__(self) -> str:
        return self.value


class _Seq(list):
    """The value of a Lark repetition helper rule (`__x_star_n`): its items, punctuation dropped."""


class _SyntaxError(Exception):
    def __init__(self, token: Token | None, pos: int, line: int, column: int, expected: set[str]):
        super().__init__()
        self.token, self.pos, self.line, self.column, self.expected = token, pos, line, column, expected


class TileParser:
    def __init__(self, data: dict):
        self.terminals = {name: regex for name, regex in data["terminals"]}
        self.ignore = frozenset(data["ignore"])
        self.keywords = data["keywords"]
        self.rules = [tuple(r) for r in data["rules"]]
        self.states = {int(k): {sym: tuple(a) for sym, a in v.items()} for k, v in data["states"].items()}
        self.start, self.end = data["start"], data["end"]
        self.scanner = re.compile("|".join(f"(?P<{name}>{regex})" for name, regex in data["terminals"]))

    def terminal_regex(self, name: str) -> str:
        return self.terminals[name]

    def _tokens(self, text: str):
        scan, ignore, keywords = self.scanner.match, self.ignore, self.keywords
        pos, line, line_start, n = 0, 1, 0, len(text)
        while pos < n:
            m = scan(text, pos)
            if m is None:
                yield None, pos, line, pos - line_start + 1
                return
            kind, value = m.lastgroup, m.group()
            col = pos - line_start + 1
            nl = value.count("\n")
            end_line = line + nl
            end_col = (len(value) - value.rfind("\n")) if nl else col + len(value)
            if kind not in ignore:
                kw = keywords.get(kind)
                if kw is not None and value in kw:
                    kind = kw[value]
                yield Token(kind, value, line, col, end_line, end_col), pos, line, col
            if nl:
                line_start = pos + value.rfind("\n") + 1
            line = end_line
            pos = m.end()
        yield Token("$END", "", line, pos - line_start + 1, line, pos - line_start + 1), pos, line, \
            pos - line_start + 1

    def parse_tree(self, text: str, build):
        """Run the LALR automaton; `build(origin, alias, children)` makes each reduced value."""
        states, rules = self.states, self.rules
        state_stack = [self.start]
        values: list = []
        for tok, pos, line, col in self._tokens(text):
            if tok is None:
                raise _SyntaxError(None, pos, line, col, self._expected(state_stack[-1]))
            while True:
                action = states[state_stack[-1]].get(tok.type)
                if action is None:
                    raise _SyntaxError(tok, pos, line, col, self._expected(state_stack[-1]))
                if action[0] == 0:                     # shift
                    state_stack.append(action[1])
                    values.append(tok)
                    break
                origin, alias, size = rules[action[1]]  # reduce, then goto on the rule's origin
                if size:
                    children = values[-size:]
                    del values[-size:]
                    del state_stack[-size:]
                else:
                    children = []
                value = build(origin, alias, children)
                state_stack.append(states[state_stack[-1]][origin][1])
                values.append(value)
                if tok.type == "$END" and state_stack[-1] == self.end:
                    return values[-1]
        raise AssertionError("the automaton ended without accepting")   # pragma: no cover

    def _expected(self, state: int) -> set[str]:
        return {sym for sym in self.states[state] if sym.isupper() or sym == "$END"}


# ---- syntax tree ---------------------------------------------------------------------------------
# Plain slotted classes rather than dataclasses: a dataclass costs ~0.5 ms to create at import (its
# methods are generated with exec), paid by every `tilec` process; these are internal to the front end.

class _Node:
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class Value(_Node):
    __slots__ = ("kind", "text", "loc", "items", "depth")

    def __init__(self, kind: str, text: str, loc: Loc, items: list[Value] | None = None, depth: int = 0):
        self.kind = kind                # "atom" | "ratio" | "string" | "list"
        self.text = text                # token text ("" for lists)
        self.loc = loc
        self.items = items if items is not None else []
        self.depth = depth              # list nesting depth (0 for tokens)


class Arg(_Node):
    __slots__ = ("key", "key_loc", "value")

    def __init__(self, key: str | None, key_loc: Loc | None, value: Value):
        self.key, self.key_loc, self.value = key, key_loc, value

    @property
    def loc(self) -> Loc:
        return self.key_loc or self.value.loc


class Statement(_Node):
    __slots__ = ("kind", "head", "loc", "args", "end_loc")

    def __init__(self, kind: str, head: str, loc: Loc, args: list[Arg], end_loc: Loc | None = None):
        self.kind = kind                # "operand" (`A: ...;`) | "keyword" (`shape ...;`)
        self.head, self.loc, self.args = head, loc, args
        self.end_loc = end_loc          # position of the closing ';'


class TileNode(_Node):
    __slots__ = ("name", "loc", "name_loc", "statements")

    def __init__(self, name: str, loc: Loc, name_loc: Loc, statements: list[Statement]):
        self.name, self.loc, self.name_loc, self.statements = name, loc, name_loc, statements


class FileNode(_Node):
    __slots__ = ("statements", "tiles")

    def __init__(self, statements: list[Statement], tiles: list[TileNode]):
        self.statements, self.tiles = statements, tiles


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
    parser = get_parser()
    try:
        return parser.parse_tree(text, _Builder(filename, text).build)
    except _SyntaxError as e:
        if e.token is None:
            ch = text[e.pos] if 0 <= e.pos < len(text) else "?"
            raise CompileError([Diagnostic(f"unexpected character {ch!r}", Loc(filename, e.line, e.column),
                                           hint=f"expected {_describe_expected(e.expected)}")], text) from None
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


def _end_of_file(text: str, filename: str) -> Loc:
    """Just after the last non-blank line. Lines are counted as Lark counts them (only '\n' ends a
    line; str.splitlines would also split at '\r', '\x0b', '\u2028', ... and point past the file)."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    n = len(lines)
    while n > 1 and not lines[n - 1].strip():
        n -= 1
    return Loc(filename, n, len(lines[n - 1]) + 1)


# Lists nest two deep in the DSL (rows=[[0:1, 2:3], [1:3]]); anything far deeper is a typo.
MAX_LIST_DEPTH = 16


class _Builder:
    """Makes the syntax-tree nodes as the automaton reduces (grammar/tile.lark rule -> node)."""

    def __init__(self, filename: str, text: str):
        self.filename, self.text = filename, text

    def loc(self, tok: Token) -> Loc:
        return _tok_loc(self.filename, tok)

    def build(self, origin: str, alias: str | None, ch: list):
        if origin.startswith("__"):                    # repetition helper: flatten, drop punctuation
            out = _Seq()
            for c in ch:
                if isinstance(c, _Seq):
                    out.extend(c)
                elif not (isinstance(c, Token) and c.type == "COMMA"):
                    out.append(c)
            return out
        if origin == "_item":
            return ch[0]
        if origin == "value":
            if alias == "list":
                lsqb, rsqb = ch[0], ch[-1]
                items: list[Value] = []
                for c in ch[1:-1]:
                    items.extend(c) if isinstance(c, _Seq) else items.append(c)
                depth = 1 + max((i.depth for i in items), default=0)
                if depth > MAX_LIST_DEPTH:
                    raise CompileError([Diagnostic(f"lists nest at most {MAX_LIST_DEPTH} deep", self.loc(lsqb),
                                                   hint="the DSL's deepest value is a list of lists, "
                                                        "e.g. rows=[[0:1, 2:3]]")], self.text)
                end = rsqb.end_column if rsqb.line == lsqb.line else None
                return Value("list", "", Loc(self.filename, lsqb.line, lsqb.column, end), items, depth)
            return Value(alias, ch[0].value, self.loc(ch[0]))
        if origin == "arg":
            if alias == "kv_arg":
                return Arg(ch[0].value, self.loc(ch[0]), ch[2])
            return Arg(None, None, ch[0])
        if origin == "statement":
            head, semi = ch[0], ch[-1]
            args = [a for c in ch[1:-1] if not isinstance(c, Token) for a in (c if isinstance(c, _Seq) else [c])]
            kind = "operand" if alias == "operand_stmt" else "keyword"
            return Statement(kind, head.value, self.loc(head), args, Loc(self.filename, semi.line, semi.column))
        if origin == "tile":
            kw, name = ch[0], ch[1]
            body = ch[3] if len(ch) == 5 else []
            return TileNode(name.value, self.loc(kw), self.loc(name), list(body))
        if origin == "start":
            stmts, tiles = [], []
            for item in (ch[0] if ch else []):
                (tiles if isinstance(item, TileNode) else stmts).append(item)
            return FileNode(stmts, tiles)
        raise AssertionError(f"no node for grammar rule {origin!r}")   # pragma: no cover
