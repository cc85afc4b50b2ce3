"""Differential test: tilec's table-walking parser against Lark's own LALR(1) parser.

compiler/frontend/parser.py lexes and parses with Lark's tables from a JSON cache, without importing
Lark (start-up). This checks that it behaves as Lark does on the same grammar: Lark's LALR parser with
its basic lexer (the configuration the tables are built from) and `propagate_positions=True`, over
every example, every lit input, hand-picked edge cases and fuzzed inputs (tests/fuzz generators and
mutators: 500 in the default slice, 12,000 under the `slow` marker). For every input:

- Lark accepts it: tilec's driver accepts it and, given Lark's own tree-building callbacks, builds the
  same tree, token for token, with the same positions (line, column, end line, end column, offsets) on
  every token and every subtree; and the syntax tree tilec's front end builds (FileNode) shows the
  statements, tiles, arguments and values of Lark's tree at Lark's positions (unless a documented
  limit of the front end rejects the input: list depth or length, word length).
- Lark rejects it: tilec's driver rejects it at the same place (the same offending character, or the
  same unexpected token at the same position with the same set of expected terminals).
"""
from __future__ import annotations

import functools
import random
import re

import pytest

lark = pytest.importorskip("lark")

from compiler.diagnostics import CompileError  # noqa: E402
from compiler.frontend import parser as tp  # noqa: E402
from fuzz import generate, mutate  # noqa: E402

DEFAULT_FUZZ = 500
SLOW_FUZZ = 12_000


@functools.lru_cache(maxsize=None)
def reference() -> "lark.Lark":
    with open(tp.grammar_path(), encoding="utf-8") as f:
        grammar = f.read()
    return lark.Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=False)


@functools.lru_cache(maxsize=None)
def _lark_callbacks() -> list:
    """Per rule number of tilec's tables, Lark's tree-building callback for that grammar rule."""
    ref = reference()
    callbacks = ref.parser.parser.parser.callbacks
    ours = tp.get_parser().rules
    assert [(r.origin.name, r.alias, len(r.expansion)) for r in ref.rules] == [r[:3] for r in ours]
    return [callbacks[r] for r in ref.rules]


# ---- outcomes ------------------------------------------------------------------------------------------

def _flatten(tree) -> list[tuple]:
    """Lark tree -> pre-order list of nodes with every position (iterative: fuzzed lists nest 5,000 deep)."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, lark.Tree):
            m = node.meta
            where = () if m.empty else (m.line, m.column, m.end_line, m.end_column, m.start_pos, m.end_pos)
            out.append(("tree", node.data, len(node.children), where))
            stack.extend(reversed(node.children))
        else:
            out.append(("token", node.type, str(node), node.start_pos, node.line, node.column,
                        node.end_line, node.end_column, node.end_pos))
    return out


def lark_outcome(text: str):
    """Lark's outcome, and its tree when it accepts the text."""
    try:
        tree = reference().parse(text)
        return ("tree", _flatten(tree)), tree
    except lark.UnexpectedCharacters as e:
        return ("character", e.pos_in_stream, e.line, e.column), None
    except lark.UnexpectedToken as e:
        return _token_error(e.token.type, str(e.token), e.token.line, e.token.column, e.expected), None


def _token_error(type_, value, line, column, expected):
    # Lark places the end-of-input token at the last token (or 1:1); tilec at the end of the text,
    # and its diagnostic just after the last non-blank line: an end-of-input error is the same error.
    where = () if type_ == "$END" else (line, column)
    return ("token", type_, value, where, tuple(sorted(expected)))


def tilec_outcome(text: str):
    """tilec's driver (lexer + automaton) with Lark's tree-building callbacks on tilec's tokens."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    callbacks = _lark_callbacks()

    def lark_token(tok):
        start = starts[tok.line - 1] + tok.column - 1
        end = starts[tok.end_line - 1] + tok.end_column - 1
        return lark.Token(tok.type, tok.value, start, tok.line, tok.column, tok.end_line, tok.end_column, end)

    def build(rule, children):
        kids = [lark_token(c) if isinstance(c, tp.Token) else c for c in children]
        return callbacks[rule[3]](kids)

    try:
        return ("tree", _flatten(tp.get_parser().parse_tree(text, build)))
    except tp._SyntaxError as e:
        if e.token is None:
            return ("character", e.pos, e.line, e.column)
        return _token_error(e.token.type, e.token.value, e.token.line, e.token.column, e.expected)


# ---- the front end's syntax tree against Lark's -----------------------------------------------------------

def _value_from_lark(tree) -> tuple:
    if tree.data == "list":
        lsqb, *items, rsqb = tree.children
        m = tree.meta
        return ("list", m.line, m.column, m.end_column if m.end_line == m.line else None,
                tuple(_value_from_lark(i) for i in items))
    (tok,) = tree.children
    return (tree.data, str(tok), tok.line, tok.column, tok.end_column if tok.end_line == tok.line else None)


def _value_from_tilec(v) -> tuple:
    if v.kind == "list":
        return ("list", v.loc.line, v.loc.col, v.loc.end_col, tuple(_value_from_tilec(i) for i in v.items))
    return (v.kind, v.text, v.loc.line, v.loc.col, v.loc.end_col)


def _statement_from_lark(tree) -> tuple:
    head, *args, semi = tree.children
    out = []
    for a in args:
        if a.data == "kv_arg":
            key, value = a.children
            out.append((str(key), key.line, key.column, _value_from_lark(value)))
        else:
            out.append((None, None, None, _value_from_lark(a.children[0])))
    kind = "operand" if tree.data == "operand_stmt" else "keyword"
    return ("statement", kind, str(head), head.line, head.column, tuple(out), semi.line, semi.column)


def _statement_from_tilec(st) -> tuple:
    args = tuple((a.key, a.key_loc and a.key_loc.line, a.key_loc and a.key_loc.col, _value_from_tilec(a.value))
                 for a in st.args)
    return ("statement", st.kind, st.head, st.loc.line, st.loc.col, args, st.end_loc.line, st.end_loc.col)


def file_from_lark(tree) -> list[tuple]:
    items = []
    for c in tree.children:
        if c.data == "tile":
            kw, name, *stmts = c.children
            items.append(((kw.line, kw.column), ("tile", str(name), kw.line, kw.column, name.line, name.column,
                                                 tuple(_statement_from_lark(s) for s in stmts))))
        else:
            items.append(((c.children[0].line, c.children[0].column), _statement_from_lark(c)))
    return [item for _, item in sorted(items, key=lambda p: p[0])]


def file_from_tilec(node) -> list[tuple]:
    items = [((st.loc.line, st.loc.col), _statement_from_tilec(st)) for st in node.statements]
    items += [((t.loc.line, t.loc.col), ("tile", t.name, t.loc.line, t.loc.col, t.name_loc.line, t.name_loc.col,
                                         tuple(_statement_from_tilec(s) for s in t.statements)))
              for t in node.tiles]
    return [item for _, item in sorted(items, key=lambda p: p[0])]


_LIMIT_MESSAGES = ("lists nest at most", "items; at most", "characters long; at most")


def check_same(text: str) -> bool:
    """Assert tilec parses `text` as Lark does; True when Lark accepts it."""
    want, tree = lark_outcome(text)
    got = tilec_outcome(text)
    assert got == want, f"tilec's parser and Lark's differ on:\n{text[:3000]!r}"
    if want[0] != "tree":
        with pytest.raises(CompileError):
            tp.parse(text, "d.tile")
        return False
    try:
        node = tp.parse(text, "d.tile")
    except CompileError as e:                       # only a documented limit may reject what Lark accepts
        assert len(e.diagnostics) == 1 and any(m in e.diagnostics[0].message for m in _LIMIT_MESSAGES), e.render()
        return True
    assert file_from_tilec(node) == file_from_lark(tree), text[:3000]
    return True


# ---- inputs ------------------------------------------------------------------------------------------

EDGE_CASES = [
    "", " ", "\n\n", "// only a comment", "# hash comment\n", "tile", "tile t", "tile t {", "tile t { }",
    "tile t {}}", "target tile;", "tiles x;", "tile tile { }", "tilex: a;", "x::y::z q;", "a.b.c 1.2.3;",
    "x [;", "x [];", "x [,];", "x [1,];", "x [1 2];", "x [[[]]];", "x = 1;", "x y=;", "x y==1;", "x : : y;",
    "x \"str\" \"\";", "x \"unterminated;\n", "x 2:4:8;", "x 2:;", "x :4;", "x 0x1F 0b101 1e5;",
    "x\r\ny;\r\n", "x;\ry;", "x\x0by;", "x\u00a0y;", "x\ufeffy;", "\ufefftarget sm_100a;", "x é;",
    "x; tile t { y; } z; tile u { w: a; }", "tile t { tile u { } }", "{ }", "}", ";", ":", "=", ",", "]",
    "x\t\f y;", "x /* c */ y;", "x // c\n y;", "x # c\n ;", "x ;;", "x y\n", "x\n", "x y \n\n\n   \n",
]


def corpus_inputs() -> list[str]:
    return list(mutate.corpus())


def fuzzed_inputs(count: int, seed: int) -> list[str]:
    """Half generated from the grammar and the tables, half mutated corpus files (tests/fuzz)."""
    out = []
    for i in range(count):
        c = generate.RandomChooser(random.Random(f"differential:{seed}:{i}"))
        if i % 2:
            out.append(mutate.mutated_corpus_file(c))
        else:
            src = generate.source(c)
            out.append(mutate.mutate(c, src) if i % 4 == 2 else src)
    return out


def test_corpus_covers_examples_and_lit():
    assert len(corpus_inputs()) >= 100        # 10 examples and every lit input (tests/fuzz/mutate.corpus)


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_edge_cases_parse_as_lark_parses(text):
    check_same(text)


def test_every_example_and_lit_input_parses_as_lark_parses():
    for text in corpus_inputs():
        check_same(text)


def test_fuzzed_inputs_parse_as_lark_parses():
    inputs = fuzzed_inputs(DEFAULT_FUZZ, seed=0)
    accepted = 0
    for text in inputs:
        accepted += check_same(text)
    # The fuzzed inputs must reach both sides: accepted trees and every kind of rejection.
    assert 100 <= accepted <= len(inputs) - 100, accepted


@pytest.mark.slow
def test_many_fuzzed_inputs_parse_as_lark_parses():
    for text in fuzzed_inputs(SLOW_FUZZ, seed=1):
        check_same(text)


def test_the_comparison_sees_a_wrong_position(monkeypatch):
    """The check is not vacuous: a driver that misplaces one token's column is caught."""
    real = tp.Token.__init__

    def shifted(self, type_, value, line, column, end_line, end_column):
        real(self, type_, value, line, column + (value == "bf16"), end_line, end_column)

    monkeypatch.setattr(tp.Token, "__init__", shifted)
    with pytest.raises(AssertionError, match="differ"):
        check_same("A: bf16 smem;")


def test_the_comparison_sees_a_wrong_keyword(monkeypatch):
    """... and a lexer that stops retyping the `tile` keyword (tokens typed unlike Lark's) is caught."""
    monkeypatch.setattr(tp.get_parser(), "keywords", {})
    with pytest.raises(AssertionError, match="differ"):
        check_same("tile t { }")
