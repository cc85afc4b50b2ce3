"""Parser of the textual IR that compiler/ir.py prints (MLIR-like):

    file     := op alias*
    op       := NAME ['@' ID] [attrs] ['{' op* '}'] ['loc' '(' location ')']
    attrs    := '{' [ID '=' value (',' ID '=' value)*] '}'
    value    := INT | HEX | STRING | 'true' | 'false' | '[' [value (',' value)*] ']' | attrs
    location := '#' ID | 'unknown' | pos | 'fused' '[' [item (',' item)*] ']'
    item     := pos | STRING '(' pos ')'            (a named location: a tile field's position)
    pos      := STRING ':' INT ':' INT ['to' ':' INT]
    alias    := '#' ID '=' 'loc' '(' location ')'

`//` starts a comment to the end of the line (lit RUN/CHECK lines). Values are typed by the op's
definition (compiler/ir.py OP_DEFS) and checked against it, so a bad IR file gets a diagnostic located
in that file: `file:line:col: error: ...` with the line and a caret.
"""
from __future__ import annotations

import re
from typing import Any

from .diagnostics import CompileError, Diagnostic, Loc
from .ir import OP_DEFS, IRError, Op, check_attrs, looks_like_ir, verify_module  # noqa: F401 (re-exported)

MAX_VALUE_DEPTH = 32      # lists and records inside an attribute value (tilec's own nest a few levels)

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+|//[^\n]*)
  | (?P<hex>-?0[xX][0-9a-fA-F]+)
  | (?P<int>-?[0-9]+)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<sym>@[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<alias>\#[A-Za-z_][A-Za-z0-9_]*)
  | (?P<id>[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<punct>[{}\[\]()=,:])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


class _Tok:
    __slots__ = ("kind", "text", "line", "col")

    def __init__(self, kind: str, text: str, line: int, col: int):
        self.kind, self.text, self.line, self.col = kind, text, line, col


class _Parser:
    def __init__(self, text: str, filename: str):
        self.text, self.filename = text, filename
        self.toks = self.tokenize()
        self.i = 0
        self.where: dict[int, _Tok] = {}           # id(op) -> its name token
        self.attr_where: dict[tuple[int, str], _Tok] = {}     # (id(op), attribute) -> its value
        self.key_where: dict[tuple[int, str], _Tok] = {}      # (id(op), attribute) -> its name
        self.pending: list[tuple[Op, _Tok]] = []   # ops whose loc is an alias defined later
        self.aliases: dict[str, tuple[Loc | None, dict[str, Loc]]] = {}

    # ---- errors ---------------------------------------------------------------------------------
    def loc_of(self, t: _Tok) -> Loc:
        return Loc(self.filename, t.line, t.col, t.col + max(len(t.text), 1))

    def fail(self, message: str, t: _Tok | None = None, hint: str | None = None):
        t = t or self.peek()
        raise CompileError([Diagnostic(message, self.loc_of(t), hint)], self.text)

    # ---- tokens ---------------------------------------------------------------------------------
    def tokenize(self) -> list[_Tok]:
        out, pos, line, line_start = [], 0, 1, 0
        text = self.text
        if text.startswith("\ufeff"):
            pos = line_start = 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                t = _Tok("bad", text[pos], line, pos - line_start + 1)
                self.fail(f"unexpected character {text[pos]!r} in IR", t)
            kind = m.lastgroup
            s = m.group()
            if kind != "ws":
                out.append(_Tok(kind, s, line, pos - line_start + 1))
            nl = s.count("\n")
            if nl:
                line += nl
                line_start = pos + s.rfind("\n") + 1
            pos = m.end()
        out.append(_Tok("eof", "", line, pos - line_start + 1))
        return out

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.peek()
        self.i += 1
        return t

    def expect(self, text: str, what: str | None = None) -> _Tok:
        t = self.peek()
        if t.text != text or t.kind in ("str", "eof"):
            self.fail(f"expected '{text}'{' ' + what if what else ''}, found {self.show(t)}", t)
        return self.next()

    @staticmethod
    def show(t: _Tok) -> str:
        return "end of input" if t.kind == "eof" else f"'{t.text}'"

    def integer(self) -> int:
        t = self.next()
        if t.kind not in ("int", "hex"):
            self.fail(f"expected an integer, found {self.show(t)}", t)
        if len(t.text) > 40:
            self.fail("integer literal too long (at most 40 characters)", t)
        return int(t.text, 16) if t.kind == "hex" else int(t.text, 10)     # 010 is ten, as printed widths allow

    def string(self, t: _Tok) -> str:
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), t.text[1:-1])

    # ---- grammar --------------------------------------------------------------------------------
    def module(self) -> Op:
        if self.peek().text != "tilec.module":
            self.fail(f"expected the top-level op 'tilec.module', found {self.show(self.peek())}")
        top = self.op()
        while self.peek().kind == "alias":
            self.alias_def()
        if self.peek().kind != "eof":
            self.fail(f"expected end of input after the module, found {self.show(self.peek())}")
        for op, t in self.pending:
            if t.text not in self.aliases:
                self.fail(f"undefined location alias '{t.text}'", t)
            op.loc, locs = self.aliases[t.text]
            op.locs = dict(locs)
        return top

    def op(self) -> Op:
        t = self.next()
        if t.kind != "id" or "." not in t.text:
            self.fail(f"expected an op name (like tilec.tile), found {self.show(t)}", t)
        d = OP_DEFS.get(t.text)
        if d is None:
            self.fail(f"unknown op '{t.text}'", t, "ops: " + ", ".join(OP_DEFS))
        op = Op(t.text)
        self.where[id(op)] = t
        if self.peek().kind == "sym":
            op.sym = self.next().text[1:]
        if self.peek().text == "{" and self.peek(1).kind == "id" and self.peek(2).text == "=":
            self.attr_dict(op)
        elif self.peek().text == "{" and self.peek(1).text == "}" and self.peek(2).text == "{":
            self.i += 2                          # an empty attribute dictionary before a body
        if self.peek().text == "{" and self.peek().kind == "punct":
            self.next()
            while self.peek().text != "}":
                if self.peek().kind != "id":
                    self.fail(f"expected an op or '}}' closing the body of '{t.text}', found {self.show(self.peek())}")
                op.body.append(self.op())
            self.next()
        if self.peek().text == "loc" and self.peek(1).text == "(":
            self.i += 2
            if self.peek().kind == "alias":
                self.pending.append((op, self.next()))
            else:
                op.loc, op.locs = self.location()
            self.expect(")", "closing loc(")
        after = self.peek()
        if not (after.kind in ("id", "alias", "eof") or after.text == "}"):
            self.fail(f"expected the next op, '}}' or a location after '{t.text}', found {self.show(after)}", after)
        try:
            check_attrs(op)
        except IRError as e:
            at = self.attr_where.get((id(op), e.attr or ""), t)
            if "has no attribute" in str(e):
                at = self.key_where.get((id(op), e.attr or ""), at)
            self.fail(str(e), at)
        if op.name == "tilec.module" and "ptx_version" in op.attrs:
            from .isa.targets import parse_version, version_problem

            if parse_version(op.attrs["ptx_version"]) is None:     # the printer writes it as `.version`
                message, hint = version_problem(op.attrs["ptx_version"])
                self.fail(message, self.attr_where.get((id(op), "ptx_version"), t), hint=hint)
        return op

    def attr_dict(self, op: Op) -> None:
        self.expect("{")
        d = OP_DEFS[op.name]
        while True:
            k = self.next()
            if k.kind != "id":
                self.fail(f"expected an attribute name, found {self.show(k)}", k)
            if k.text in op.attrs:
                self.fail(f"attribute '{k.text}' given twice", k)
            self.expect("=", f"after attribute '{k.text}'")
            vt = self.peek()
            value = self.value()
            o = d.attrs.get(k.text)
            op.attrs[k.text] = o.type.coerce(value) if o is not None else value
            self.attr_where[(id(op), k.text)] = vt
            self.key_where[(id(op), k.text)] = k
            if self.peek().text == ",":
                self.next()
                continue
            self.expect("}", "closing the attributes")
            return

    def value(self, depth: int = 0) -> Any:
        t = self.peek()
        if depth > MAX_VALUE_DEPTH:        # tilec's IR nests a few levels; a deeper value is not IR it wrote
            self.fail(f"a value nested more than {MAX_VALUE_DEPTH} levels deep", t,
                      hint="attribute values are integers, strings, booleans, and lists or records of them")
        if t.kind in ("int", "hex"):
            return self.integer()
        if t.kind == "str":
            self.next()
            return self.string(t)
        if t.kind == "id" and t.text in ("true", "false"):
            self.next()
            return t.text == "true"
        if t.text == "[":
            self.next()
            items = []
            if self.peek().text != "]":
                items.append(self.value(depth + 1))
                while self.peek().text == ",":
                    self.next()
                    items.append(self.value(depth + 1))
            self.expect("]", "closing the list")
            return items
        if t.text == "{":
            self.next()
            rec: dict[str, Any] = {}
            if self.peek().text != "}":
                while True:
                    k = self.next()
                    if k.kind != "id":
                        self.fail(f"expected a field name, found {self.show(k)}", k)
                    if k.text in rec:
                        self.fail(f"field '{k.text}' given twice", k)
                    self.expect("=", f"after field '{k.text}'")
                    rec[k.text] = self.value(depth + 1)
                    if self.peek().text != ",":
                        break
                    self.next()
            self.expect("}", "closing the record")
            return rec
        self.fail(f"expected a value (integer, string, true/false, [...] or {{...}}), found {self.show(t)}", t)

    def pos(self) -> Loc:
        t = self.next()
        if t.kind != "str":
            self.fail(f"expected a location \"file\":line:col, found {self.show(t)}", t)
        self.expect(":")
        line = self.integer()
        self.expect(":")
        col = self.integer()
        end = None
        if self.peek().text == "to":
            self.next()
            self.expect(":")
            end = self.integer()
        return Loc(self.string(t), line, col, end)

    def location(self) -> tuple[Loc | None, dict[str, Loc]]:
        t = self.peek()
        if t.text == "unknown":
            self.next()
            return None, {}
        if t.text == "fused":
            self.next()
            self.expect("[")
            main: Loc | None = None
            named: dict[str, Loc] = {}
            if self.peek().text != "]":
                while True:
                    if self.peek().kind == "str" and self.peek(1).text == "(":
                        name = self.string(self.next())
                        self.next()
                        named[name] = self.pos()
                        self.expect(")")
                    elif main is None:
                        main = self.pos()
                    else:
                        self.fail("a fused location has one unnamed position", self.peek())
                    if self.peek().text != ",":
                        break
                    self.next()
            self.expect("]")
            return main, named
        return self.pos(), {}

    def alias_def(self) -> None:
        t = self.next()
        if t.text in self.aliases:
            self.fail(f"location alias '{t.text}' defined twice", t)
        self.expect("=")
        self.expect("loc")
        self.expect("(")
        self.aliases[t.text] = self.location()
        self.expect(")")


def parse_ir(text: str, filename: str = "<string>") -> Op:
    """The module printed in `text`. Raises CompileError with diagnostics located in `text`."""
    p = _Parser(text, filename)
    module = p.module()
    done = list(module.attrs.get("passes", ()))
    if done:
        # the passes the module records must be registered, each after what it requires
        from .passes.manager import PipelineError, check_pipeline

        try:
            check_pipeline(done)
        except PipelineError as e:
            p.fail(f"attribute 'passes' of 'tilec.module': {e}", p.attr_where.get((id(module), "passes")))
    try:
        verify_module(module)
    except IRError as e:
        t = p.where.get(id(e.op)) if e.op is not None else None
        if e.op is not None and e.attr is not None:
            t = p.attr_where.get((id(e.op), e.attr), t)
        p.fail(str(e), t or p.toks[0])
    return module
