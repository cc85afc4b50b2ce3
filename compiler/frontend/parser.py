"""The tile DSL's parser: grammar/tile.lark, LALR(1) tables built by Lark, walked by this module.

grammar/tile.lark is the one definition of the syntax. Lark builds its LALR(1) tables (and checks the
grammar); the tables, the lexer's terminals and the rules are then saved to a JSON cache (keyed by a
CRC of the grammar text and Lark's version; written to a temporary file and renamed, so parallel lit
workers never read a half-written cache). With a warm cache this module lexes and parses with those
tables itself and never imports Lark: importing Lark costs ~50 ms, more than everything else a cold
`tilec compile` does, and the lit suite pays start-up on every RUN line. A missing, stale or damaged
cache (the file carries a CRC of its tables; valid JSON of another shape counts as damaged) imports
Lark and rebuilds it. tests/test_parser_differential.py checks this module against Lark's parser. The walker follows Lark's LALR parser step for step (shift; reduce and
goto on the rule's origin; accept when a reduce on end-of-input reaches the end state), and its lexer
follows Lark's basic lexer (Lark's terminal order; a string terminal that a regex terminal also
matches, like `tile` and ATOM, is the string terminal when the text is exactly it).
Syntax errors are located diagnostics naming the terminals the parser could take there.
"""
from __future__ import annotations

import gc
import json
import os
import re
import sys
import zlib
from itertools import chain

from ..diagnostics import ECHO_CHARS, CompileError, Diagnostic, Loc, echo

_GRAMMAR_NAME = "tile.lark"
CACHE_FORMAT = 3


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
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT \
            or data.get("grammar_crc32") != grammar_crc(text):
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
    """Lark's LALR(1) tables and lexer for `grammar`, as plain JSON-able data."""
    import lark

    p = lark.Lark(grammar, parser="lalr", lexer="basic", propagate_positions=False, maybe_placeholders=False)
    lexer = p.parser.lexer
    # The lexer exactly as Lark's basic lexer scans: its scanner's terminals in its order (a string
    # terminal that an equal-priority regex terminal matches whole, like `tile` and ATOM, is dropped from
    # the scan) and its "unless" callbacks, which retype such a regex token when its text is exactly
    # the string (literal -> string terminal, per regex terminal; the first listed wins, as in Lark).
    scan_terminals = lexer.scanner.terminals
    keywords: dict[str, dict[str, str]] = {}
    for name, callback in lexer.callback.items():
        for t in callback.scanner.terminals:
            keywords.setdefault(name, {}).setdefault(t.pattern.value, t.name)
    table = p.parser.parser.parser.parse_table
    rules = list(p.rules)
    index = {id(r): i for i, r in enumerate(rules)}
    # Lark numbers the LALR states in the iteration order of its item sets, which follows the process's
    # string hashing (PYTHONHASHSEED): the same automaton gets other numbers in another process. The tables
    # written (the wheel's file, the user cache) must be the same bytes for the same grammar, so states are
    # renumbered canonically: breadth-first from the start state, following shifts and gotos in sorted
    # symbol order (the automaton itself is unique up to this numbering).
    start, end = table.start_states["start"], table.end_states["start"]
    number = {start: 0}
    queue = [start]
    for state in queue:
        for sym in sorted(table.states[state]):
            action, arg = table.states[state][sym]
            if str(action) == "Shift" and arg not in number:
                number[arg] = len(number)
                queue.append(arg)
    states: dict[str, dict[str, list]] = {}
    for state in queue:                 # a state no shift reaches is never entered: it is left out
        row = {}
        for sym in sorted(table.states[state]):
            action, arg = table.states[state][sym]
            if str(action) == "Shift":
                row[sym] = [0, number[arg]]
            else:
                i = index.get(id(arg))
                if i is None:
                    i = rules.index(arg)
                row[sym] = [1, i]
        states[str(number[state])] = row
    terminals = [[t.name, t.pattern.to_regexp()] for t in scan_terminals]
    return {
        "format": CACHE_FORMAT,
        "terminals": terminals,
        "ignore": sorted(lexer.ignore_types),
        # the lexer's regex (_scanner_pattern), worked out here once rather than by every process
        "scanner": _scanner_pattern([(n, r) for n, r in terminals], frozenset(lexer.ignore_types)),
        "keywords": {name: dict(sorted(words.items())) for name, words in sorted(keywords.items())},
        "rules": [[r.origin.name, r.alias, len(r.expansion)] for r in rules],
        "states": states,
        "start": number[start],
        "end": number[end],
    }


_PARSER: "TileParser | None" = None


def _tables_crc(tables) -> str:
    return f"{zlib.crc32(json.dumps(tables, sort_keys=True, separators=(',', ':')).encode()):08x}"


def _load_cache(path: str) -> "TileParser | None":
    """The parser from a cache file, or None when the file is missing, unreadable, corrupt (its
    checksum does not match), or valid JSON of another shape: the caller then rebuilds it. A bad cache
    must never make a compile fail (it used to, until the file was deleted by hand)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT \
                or data.get("crc") != _tables_crc(data.get("tables")):
            return None
        return TileParser(data["tables"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
        return None             # re.error is a ValueError; UnicodeDecodeError too


def _parser_or_none(tables) -> "TileParser | None":
    """A parser of `tables`, or None when they are of another shape."""
    try:
        return TileParser(tables)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
        return None


def cache_path(grammar: str | None = None) -> str:
    """The cache file for `grammar` (default: grammar/tile.lark's text)."""
    if grammar is None:
        with open(grammar_path(), encoding="utf-8") as f:
            grammar = f.read()
    # crc32 (zlib is built in) rather than hashlib: the key only has to change with the grammar, Lark's
    # version or the cache format (so that checkouts of different formats never rewrite each other's file).
    key = f"{zlib.crc32(f'{CACHE_FORMAT}:{_lark_version()}:{grammar}'.encode()):08x}"
    return os.path.join(_cache_dir(), f"tile-lalr-{key}.json")


def get_parser() -> "TileParser":
    """The shared parser (tables loaded from the cache, or built with Lark once)."""
    global _PARSER
    if _PARSER is not None:
        return _PARSER
    with open(grammar_path(), encoding="utf-8") as f:
        text = f.read()
    packaged = _packaged_tables(text)
    parser = _parser_or_none(packaged) if packaged is not None else None
    if parser is not None:
        _PARSER = parser
        return _PARSER
    cache = cache_path(text)
    parser = _load_cache(cache) if os.path.isfile(cache) else None
    if parser is None:
        tables = build_tables(text)
        parser = TileParser(tables)
        try:
            import tempfile

            os.makedirs(os.path.dirname(cache), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), prefix=".tile-lalr-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"format": CACHE_FORMAT, "crc": _tables_crc(tables), "tables": tables}, f)
                os.replace(tmp, cache)      # atomic: parallel lit workers never read a half-written file
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:         # read-only home: run without a cache
            pass
    _PARSER = parser
    return _PARSER


def _regex_syntax():
    """The standard library's regex parser and its opcode constants (re._parser from Python 3.11,
    sre_parse before)."""
    try:
        from re import _constants as c, _parser as p
    except ImportError:                                 # Python 3.10
        import sre_constants as c
        import sre_parse as p
    return p, c


# A regex that is a plain string: characters without a special meaning, or escaped punctuation.
_LITERAL = re.compile(r"(?:\\[^A-Za-z0-9]|[^\\.^$*+?{}\[\]|()])+")


def _first_chars(regex: str) -> frozenset[str] | None:
    """The characters a match of `regex` can start with, or None when that is not simply known (then
    nothing is assumed). Reads the regex's syntax tree: literals, classes of literals and ranges,
    groups, alternatives, repeats of at least one."""
    if _LITERAL.fullmatch(regex):                       # an escaped string terminal, like `\{` or `;`
        return frozenset(regex[1] if regex[0] == "\\" else regex[0])
    p, c = _regex_syntax()
    repeats = {c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)}

    def first(items) -> frozenset[str] | None:
        if not items:
            return None
        op, arg = items[0]
        if op is c.LITERAL:
            return frozenset(chr(arg))
        if op is c.IN:
            out: set[str] = set()
            for iop, iarg in arg:
                if iop is c.LITERAL:
                    out.add(chr(iarg))
                elif iop is c.RANGE and iarg[1] - iarg[0] < 256:
                    out.update(map(chr, range(iarg[0], iarg[1] + 1)))
                else:                                   # negation, categories, wide ranges
                    return None
            return frozenset(out)
        if op is c.SUBPATTERN:
            return first(list(arg[-1]))
        if op in repeats and arg[0] >= 1:
            return first(list(arg[2]))
        if op is c.BRANCH:
            sets = [first(list(b)) for b in arg[1]]
            return None if any(s is None for s in sets) else frozenset().union(*sets)
        return None

    try:
        return first(list(p.parse(regex)))
    except Exception:                                   # any regex this reading does not cover
        return None


def _run_class(regex: str) -> str | None:
    """For a regex that matches exactly a run of one or more characters of one class (like
    common.WS, `(?:[ \t\f\r\n])+`): that class, as a regex; else None."""
    p, c = _regex_syntax()

    def unwrap(items):
        while len(items) == 1 and items[0][0] is c.SUBPATTERN:
            items = list(items[0][1][-1])
        return items

    try:
        items = unwrap(list(p.parse(regex)))
        if len(items) != 1 or items[0][0] is not c.MAX_REPEAT or tuple(items[0][1][:2]) != (1, c.MAXREPEAT):
            return None
        inner = unwrap(list(items[0][1][2]))
        if len(inner) != 1 or inner[0][0] is not c.IN:
            return None
    except Exception:
        return None
    chars = _first_chars(regex)
    return None if chars is None else "[" + "".join(re.escape(ch) for ch in sorted(chars)) + "]"


def _scanner_pattern(terminals: list[tuple[str, str]], ignore: frozenset[str]) -> str:
    """The lexer's regex: the terminals as alternatives in Lark's order (the first that matches at a
    position wins, as in Lark's basic lexer).

    An ignored terminal that matches runs of one character class (whitespace) is also matched in front
    of every token, `RUN*(?:other terminals)|(?P<NAME>RUN+)`, when no other terminal can start with one
    of its characters: where Lark's lexer meets such a character it skips exactly that maximal run
    (nothing listed before the terminal matches there), and after it no other terminal could have
    matched inside the run (so the greedy prefix never gives characters back). Each match is then a
    token with the blanks in front of it; the second branch takes blanks before the end of the text or
    before a character nothing matches (where the syntax error is reported, as before). One regex match
    per token instead of two."""
    for name, regex in terminals:
        if name not in ignore:
            continue
        run, mine = _run_class(regex), _first_chars(regex)
        if run is None or mine is None:
            continue
        others = [_first_chars(r) for n, r in terminals if n != name]
        if any(o is None or o & mine for o in others):
            continue
        rest = "|".join(f"(?P<{n}>{r})" for n, r in terminals if n != name)
        return f"{run}*(?:{rest})|(?P<{name}>{run}+)"
    return "|".join(f"(?P<{name}>{regex})" for name, regex in terminals)


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
    def __init__(self, tables: dict):
        """`tables` as build_tables returns them; anything of another shape is a ValueError/TypeError
        (a cache file of another shape is then rebuilt, see _load_cache)."""
        terminals = [(str(name), str(regex)) for name, regex in tables["terminals"]]
        self.terminals = dict(terminals)
        self.ignore = frozenset(map(str, tables["ignore"]))
        self.keywords = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in tables["keywords"].items()}
        # (origin, alias, length, number): the number is the rule's index in Lark's rule list
        self.rules = [(str(o), None if a is None else str(a), int(n), i) for i, (o, a, n) in enumerate(tables["rules"])]
        self.states = {int(k): {str(sym): (int(a[0]), int(a[1])) for sym, a in v.items()}
                       for k, v in tables["states"].items()}
        self.start, self.end = int(tables["start"]), int(tables["end"])
        # The driver's form of the same table: per state, symbol -> target state (shift, or goto on a
        # rule's origin) when >= 0, or ~rule number (reduce) when < 0.
        self.actions = {k: {sym: (arg if action == 0 else ~arg) for sym, (action, arg) in row.items()}
                        for k, row in self.states.items()}
        pattern = tables.get("scanner")            # in tables from build_tables
        self.scanner = re.compile(pattern if isinstance(pattern, str) else _scanner_pattern(terminals, self.ignore))
        names = set(self.terminals) | {"$END"} | {k for kw in self.keywords.values() for k in kw.values()}
        origins = {r[0] for r in self.rules}
        for row in self.states.values():
            for sym, (action, arg) in row.items():
                if sym not in names and sym not in origins:
                    raise ValueError(f"parser tables: unknown symbol {sym!r}")
                if action == 0 and arg not in self.states or action == 1 and not 0 <= arg < len(self.rules) \
                        or action not in (0, 1):
                    raise ValueError(f"parser tables: bad action {action, arg}")
        if self.start not in self.states or self.end not in self.states or not self.ignore <= set(self.terminals):
            raise ValueError("parser tables: bad start/end state or ignored terminal")

    def terminal_regex(self, name: str) -> str:
        return self.terminals[name]

    def parse_tree(self, text: str, build):
        """Lex and run the LALR automaton; `build(rule, children)` makes each reduced value, where
        `rule` is (origin, alias, length, number in Lark's rule list).

        Lark's basic lexer and LALR parser step for step, in one loop (a token generator and per-token
        tuples cost a third of the time): at each position the scanner's first listed terminal that
        matches, ignored terminals skipped, keyword retyping; shift, or reduce and goto on the rule's
        origin until the token shifts; accept when a reduce on end-of-input reaches the end state."""
        actions, rules, end = self.actions, self.rules, self.end
        ignore, keywords = self.ignore, self.keywords
        state = self.start
        state_stack = [state]
        values: list = []
        pos, line, line_start = 0, 1, 0
        # finditer tries the scanner at each position in turn, as Lark's match per position does, and
        # costs half as much; a match that starts past `pos` means nothing matched at `pos`. The None
        # after the last match is end-of-input.
        for m in chain(self.scanner.finditer(text), (None,)):
            if m is not None:
                start = m.start()
                if start != pos:
                    raise _SyntaxError(None, pos, line, pos - line_start + 1, self._expected(state))
                kind = m.lastgroup
                pos = m.end()
                if kind in ignore:                  # skipped; only its line breaks count
                    value = m.group()
                    if "\n" in value:
                        line += value.count("\n")
                        line_start = start + value.rfind("\n") + 1
                    continue
                token_start = m.start(kind)
                if token_start != start:            # blanks the scanner skipped in front (_scanner_pattern)
                    nl = text.count("\n", start, token_start)
                    if nl:
                        line += nl
                        line_start = text.rfind("\n", start, token_start) + 1
                    start = token_start
                value = text[start:pos]
                col = start - line_start + 1
                if "\n" in value:
                    end_line = line + value.count("\n")
                    line_start = start + value.rfind("\n") + 1
                    tok = Token(keywords[kind].get(value, kind) if kind in keywords else kind, value,
                                line, col, end_line, pos - line_start + 1)
                    line = end_line
                else:
                    tok = Token(keywords[kind].get(value, kind) if kind in keywords else kind, value,
                                line, col, line, col + len(value))
                kind = tok.type
            elif pos < len(text):
                raise _SyntaxError(None, pos, line, pos - line_start + 1, self._expected(state))
            else:
                col = pos - line_start + 1
                tok = Token("$END", "", line, col, line, col)
                kind = "$END"
            while True:
                action = actions[state].get(kind)
                if action is None:
                    raise _SyntaxError(tok, pos - len(tok.value), tok.line, tok.column, self._expected(state))
                if action >= 0:                         # shift
                    state = action
                    state_stack.append(state)
                    values.append(tok)
                    break
                rule = rules[~action]                   # reduce, then goto on the rule's origin
                size = rule[2]
                if size == 1:
                    children = [values.pop()]
                    state_stack.pop()
                elif size:
                    children = values[-size:]
                    del values[-size:]
                    del state_stack[-size:]
                else:
                    children = []
                state = actions[state_stack[-1]][rule[0]]
                state_stack.append(state)
                values.append(build(rule, children))
                if kind == "$END" and state == end:
                    return values[-1]

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
    # The parse allocates about ten objects per token and frees none of them: the cyclic garbage
    # collector's passes over that growing heap find nothing and cost a sixth of a big file's parse.
    gc_was_on = gc.isenabled()
    gc.disable()
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
            msg = f"unexpected {echo(tok.value)!r}"
        hint = f"expected {_describe_expected(e.expected)}"
        if "SEMICOLON" in e.expected and tok.type != "SEMICOLON":
            hint += " (is a ';' missing at the end of the previous statement?)"
        raise CompileError([Diagnostic(msg, loc, hint=hint)], text) from None
    finally:
        if gc_was_on:
            gc.enable()


def _end_of_file(text: str, filename: str) -> Loc:
    """Just after the last non-blank line. Lines are counted as Lark counts them (only '\n' ends a
    line; str.splitlines would also split at '\r', '\x0b', '\u2028', ... and point past the file)."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    n = len(lines)
    while n > 1 and not lines[n - 1].strip():
        n -= 1
    return Loc(filename, n, len(lines[n - 1]) + 1)


# ---- limits of the syntax (README "Limits") ------------------------------------------------------------
# Lists nest two deep in the DSL (rows=[[0:1, 2:3], [1:3]]); anything far deeper is a typo.
MAX_LIST_DEPTH = 16
# A list names TMEM lanes, D columns or sparsity rows: at most 256 meaningful items. 4096 is 16 times
# that; build.py applies the same bound to lists after `a..b` ranges are expanded.
MAX_LIST_ITEMS = 4096
# Names, numbers and strings. The PTX ISA (4.4, Identifiers) sets no maximum identifier length and asks
# implementations to support at least 1024 characters; no word of the DSL needs more (tile names, the
# longest to reach PTX, have a lower limit in build.py so that tilec's derived symbols stay within it).
MAX_TOKEN_CHARS = 1024


class _Builder:
    """Makes the syntax-tree nodes as the automaton reduces (grammar/tile.lark rule -> node).

    Linear in the input: a repetition helper rule (`__x_star_n: item | __x_star_n item`, left
    recursive) appends to the one list its first reduction made, rather than copying the list so far
    on every item (which made lists of 100,000 items and files of 10,000 tiles quadratic)."""

    def __init__(self, filename: str, text: str):
        self.filename, self.text = filename, text

    def fail(self, message: str, loc: Loc, hint: str | None = None):
        raise CompileError([Diagnostic(message, loc, hint)], self.text)

    def loc(self, tok: Token) -> Loc:
        if len(tok.value) > MAX_TOKEN_CHARS:
            what = "string" if tok.type == "STRING" else "word"
            self.fail(f"{what} '{tok.value[:ECHO_CHARS]}...' is {len(tok.value):,} characters long; "
                      f"at most {MAX_TOKEN_CHARS} are allowed",
                      _tok_loc(self.filename, tok), "names, numbers and strings are at most "
                      f"{MAX_TOKEN_CHARS} characters (the PTX ISA's minimum identifier length)")
        return Loc(self.filename, tok.line, tok.column, tok.end_column if tok.end_line == tok.line else None)

    def build(self, rule: tuple, ch: list):
        # The rules in the order of how often they reduce (a value per word, a helper per list item).
        origin, alias = rule[0], rule[1]
        if origin == "value":
            if alias != "list":
                tok = ch[0]
                value = tok.value
                if len(value) > MAX_TOKEN_CHARS:
                    self.loc(tok)
                return Value(alias, value, Loc(self.filename, tok.line, tok.column,
                                               tok.end_column if tok.end_line == tok.line else None))
            lsqb, rsqb = ch[0], ch[-1]
            items: list[Value] = []
            for c in ch[1:-1]:
                items.extend(c) if isinstance(c, _Seq) else items.append(c)
            depth = 1 + max((i.depth for i in items), default=0)
            if depth > MAX_LIST_DEPTH:
                self.fail(f"lists nest at most {MAX_LIST_DEPTH} deep", self.loc(lsqb),
                          "the DSL's deepest value is a list of lists, e.g. rows=[[0:1, 2:3]]")
            if len(items) > MAX_LIST_ITEMS:
                self.fail(f"list has {len(items):,} items; at most {MAX_LIST_ITEMS} are allowed",
                          items[MAX_LIST_ITEMS].loc,
                          "lists name TMEM lanes, D columns or sparsity rows (a few hundred at most)")
            end = rsqb.end_column if rsqb.line == lsqb.line else None
            return Value("list", "", Loc(self.filename, lsqb.line, lsqb.column, end), items, depth)
        if origin[:2] == "__":                         # repetition helper: flatten, drop punctuation
            first = ch[0] if ch else None
            if type(first) is _Seq:
                if len(ch) == 2:                       # the common case: one more item
                    c = ch[1]
                    if type(c) is _Seq:
                        first.extend(c)
                    elif not (type(c) is Token and c.type == "COMMA"):
                        first.append(c)
                    return first
                out, rest = first, ch[1:]
            else:
                out, rest = _Seq(), ch
            for c in rest:
                if isinstance(c, _Seq):
                    out.extend(c)
                elif not (isinstance(c, Token) and c.type == "COMMA"):
                    out.append(c)
            return out
        if origin == "arg":
            if alias == "kv_arg":
                return Arg(ch[0].value, self.loc(ch[0]), ch[2])
            return Arg(None, None, ch[0])
        if origin == "statement":
            head, semi = ch[0], ch[-1]
            args = [a for c in ch[1:-1] if not isinstance(c, Token) for a in (c if isinstance(c, _Seq) else [c])]
            kind = "operand" if alias == "operand_stmt" else "keyword"
            return Statement(kind, head.value, self.loc(head), args, Loc(self.filename, semi.line, semi.column))
        if origin == "_item":
            return ch[0]
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
