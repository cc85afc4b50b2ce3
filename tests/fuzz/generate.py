"""Tile text from the grammar (grammar/tile.lark) and the vocabulary of the tables.

All randomness goes through a `Chooser`, so the same generators serve the hypothesis strategies
(`HypothesisChooser`: shrinkable draws) and the long benchmark run (`random.Random`, fast and seeded).

Three generators, picked at random by `source`:
- `tcgen05_tile` / `mma_sp_tile`: a tile assembled from one row of the legality tables (a kind with its
  types and a Table 39 shape; an mma.sp form), so that most inputs get deep into the pipeline, then
  perturbed a few times (a value swapped for another word or number, a statement dropped, duplicated
  or added, an argument added);
- `random_tile`: statements straight from the grammar with any head, keys and values (atoms, ratios,
  strings, nested lists) drawn from the vocabulary, numbers and junk.
The file around the tiles gets a target, an optional PTX version, comments and odd whitespace.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from . import vocab


class Chooser(Protocol):
    def choice(self, seq: Sequence): ...

    def randint(self, lo: int, hi: int) -> int: ...

    def chance(self, p: float) -> bool: ...


class RandomChooser:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def choice(self, seq):
        return self.rng.choice(seq)

    def randint(self, lo, hi):
        return self.rng.randint(lo, hi)

    def chance(self, p):
        return self.rng.random() < p


class HypothesisChooser:
    """Draws through hypothesis; every draw shrinks towards the first choice / the low end / False."""

    def __init__(self, draw):
        self.draw = draw

    def choice(self, seq):
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(seq)))

    def randint(self, lo, hi):
        from hypothesis import strategies as st

        return self.draw(st.integers(lo, hi))

    def chance(self, p):
        from hypothesis import strategies as st

        return self.draw(st.integers(0, 999)) >= round(1000 * (1 - p))


# ---- statements ------------------------------------------------------------------------------------

@dataclass
class Stmt:
    head: str
    operand: bool = False                      # `A: ...;` rather than `engine ...;`
    args: list[tuple[str | None, str]] = field(default_factory=list)   # (key or None, value text)

    def render(self, sep: str = " ") -> str:
        parts = [f"{self.head}:" if self.operand else self.head]
        parts += [v if k is None else f"{k}={v}" for k, v in self.args]
        return sep.join(parts) + ";"


def _kv(**kw) -> list[tuple[str | None, str]]:
    return [(k, str(v)) for k, v in kw.items()]


def number(c: Chooser) -> str:
    if c.chance(0.7):
        return str(c.choice(vocab.table_ints()))
    return c.choice(vocab.all_numbers())


def word(c: Chooser) -> str:
    w = vocab.words()
    role = c.choice(tuple(w))
    if c.chance(0.1):
        return c.choice(vocab.JUNK_WORDS)
    return c.choice(w[role])


def value(c: Chooser, depth: int = 0) -> str:
    """Any value the grammar takes: atom, ratio, string or (nested) list."""
    pick = c.randint(0, 9)
    if pick <= 3:
        return number(c)
    if pick <= 6:
        return word(c)
    if pick == 7:
        return f"{c.randint(0, 9)}:{c.randint(0, 9)}" if c.chance(0.5) else c.choice(vocab.words()["ratios"])
    if pick == 8 or depth >= 3:
        return '"' + c.choice(("", "x", "first_two", "2:4", "é", "a b")) + '"'
    items = [value(c, depth + 1) for _ in range(c.randint(0, 4))]
    if c.chance(0.2):                          # a range item as int_list understands it
        items.append(f"{number(c)}..{number(c)}")
    return "[" + ", ".join(items) + "]"


def list_of_ints(c: Chooser, count: int, hi: int, ranges: bool = False) -> str:
    """`count` integers in [0, hi]; with `ranges`, sometimes an `a..b` range item of any size."""
    items = [str(c.randint(0, hi)) for _ in range(count)]
    if ranges and c.chance(0.3):
        items.append(f"{number(c)}..{number(c)}")
    return "[" + ", ".join(items) + "]"


# ---- tiles from the tables ----------------------------------------------------------------------------

def tcgen05_tile(c: Chooser) -> list[Stmt]:
    """A tcgen05 tile from one kind and one Table 39 row. Most tiles (`strict`) also keep to the
    option, major and swizzle rules of the kind tables, so they get through to PTX emission."""
    from compiler.isa.tcgen05_kinds import KINDS, SHAPE_RULES, SUBBYTE_TYPES

    strict = c.chance(0.7)
    info = KINDS[c.choice(tuple(KINDS))]
    rules = [r for r in SHAPE_RULES if info.name in r.kinds]
    if strict:      # the kernel emitter builds dense cta_group::1 tiles (.ws only with M = 128)
        rules = [r for r in rules if r.cta_group == 1 and not r.sparse and (not r.ws or 128 in r.ms)] or rules
    rule = c.choice(rules)
    sparse = bool(rule.sparse) if rule.sparse is not None else (not strict and c.chance(0.15))
    engine = Stmt("engine", args=[(None, "tcgen05")])
    if info.block_scaled or c.chance(0.5):
        engine.args.append(("kind", info.name))
    if rule.cta_group != 1 or c.chance(0.2):
        engine.args.append(("cta_group", str(rule.cta_group)))
    if rule.ws:
        engine.args.append((None, "ws"))
    if c.chance(0.05 if strict else 0.1):
        engine.args.append((None, "ashift"))
    if c.chance(0.1):
        collectors = [x for x in vocab.words()["collectors"] if x.startswith("b" if rule.ws else "a")]
        engine.args.append(("collector", c.choice(collectors if strict else vocab.words()["collectors"])))
    k = info.sparse_k if sparse else info.dense_k
    m = 128 if strict and rule.ws else c.choice(rule.ms)
    stmts = [engine, Stmt("shape", args=_kv(M=m, N=c.choice(rule.ns.values()), K=k))]
    if c.chance(0.6):
        stmts.append(Stmt("loop", args=_kv(K=k * c.choice((1, 2, 3, 4, 8, 16)))))
    a = c.choice(info.ab_types)
    b = a if info.same_ab else c.choice(info.ab_types)
    d = c.choice([dd for aa, dd in info.pairs if aa == a] if info.pairs else info.d_types)
    for name, dtype in (("A", a), ("B", b)):
        space = "smem" if name == "B" or strict or c.chance(0.85) else "tmem"
        op = Stmt(name, True, [(None, dtype), (None, space)])
        majors = vocab.words()["majors"]
        if strict and (not info.transpose or dtype in SUBBYTE_TYPES):
            majors = ("K",)
        major = c.choice(majors)
        if c.chance(0.5) or major != "K":
            op.args.append(("major", major))
        swizzles = vocab.words()["swizzles"]
        if strict:
            swizzles = (("128B_base32B", "auto") if info.name == "tf32" and major == "MN"
                        else tuple(x for x in swizzles if x != "128B_base32B"))
        if c.chance(0.5) or (strict and info.name == "tf32" and major == "MN"):
            op.args.append(("swizzle", c.choice(swizzles)))
        stmts.append(op)
    stmts.append(Stmt("D", True, [(None, d), (None, "tmem")]))
    if info.block_scaled:
        scale = c.choice(info.scale_types)
        stmts += [Stmt("SFA", True, [(None, scale), (None, "tmem")]),
                  Stmt("SFB", True, [(None, scale), (None, "tmem")])]
        if c.chance(0.8):
            stmts.append(Stmt("block_scale", args=[("vec", c.choice(vocab.words()["vecs"]))]))
    if sparse:
        stmts.append(Stmt("sparsity", args=[(None, info.sparsity)]))
    options = {
        "negate": (info.negate, lambda: Stmt("negate", args=[(None, x) for x in c.choice((("A",), ("B",), ("A", "B")))])),
        "saturate": (info.saturate, lambda: Stmt("saturate")),
        "max_shift": (True, lambda: Stmt("max_shift", args=[(None, "0" if strict else number(c))])),
        "scale_input_d": (info.scale_input_d and not rule.ws,
                          lambda: Stmt("scale_input_d", args=[(None, str(c.randint(0, 15 if strict else 16)))])),
        "disable_output_lane": (not rule.ws and not info.block_scaled,
                                lambda: Stmt("disable_output_lane", args=[(None, list_of_ints(
                                    c, 4 if strict else c.choice((4, 8, 3)), 2**32 - 1 if strict else 2**32,
                                    ranges=not strict))])),
        "zero_columns cols": (rule.ws, lambda: Stmt("zero_columns", args=[("cols", list_of_ints(
                                  c, c.randint(0, 4), 300, ranges=not strict))]
                                                    + ([("shift", str(c.randint(0, 64)))] if c.chance(0.5) else []))),
        "zero_columns mask": (rule.ws, lambda: Stmt("zero_columns", args=[("mask", hex(c.randint(0, 2**64)))])),
    }
    names = [n for n, (legal, _) in options.items() if legal or not strict]
    for name in sorted({c.choice(names) for _ in range(c.randint(0, 2))}) if names else ():
        stmts.append(options[name][1]())
    return stmts


def mma_sp_tile(c: Chooser) -> list[Stmt]:
    """An mma.sp tile from one form of the table; `strict` tiles keep to its selectors and metadata."""
    from compiler.isa.mma_sp.forms import all_forms

    strict = c.chance(0.7)
    form = c.choice(all_forms())
    engine = Stmt("engine", args=[(None, "mma.sp")])
    if form.kind or c.chance(0.05):
        engine.args.append(("kind", form.kind or c.choice(vocab.words()["sp_kinds"])))
    stmts = [engine, Stmt("shape", args=_kv(M=form.layout.m, N=form.layout.n, K=form.k))]
    if c.chance(0.6):
        stmts.append(Stmt("loop", args=_kv(K=form.k * c.choice((1, 2, 3, 4)))))
    for name, dtype in zip("ABCD", (form.a_type, form.b_type, form.c_type, form.d_type)):
        stmts.append(Stmt(name, True, [(None, dtype), (None, c.choice(("global", "global", "reg")))]))
    sp = Stmt("sparsity", args=[(None, form.granularity.name)])
    pick = c.randint(0, 3)
    if pick == 1:
        sp.args.append(("metadata", "runtime"))
    elif pick == 2:
        sp.args.append(("pattern", c.choice(vocab.words()["patterns"])))
    elif pick == 3:
        gran = form.granularity
        rows = []
        for _ in range(c.randint(1, 3)):
            entries = []
            for _ in range(c.randint(1, 3)):
                if strict:        # kept groups, increasing (ordered metadata), as element positions
                    first, second = sorted(c.choice([(x, y) for x in range(gran.groups) for y in range(gran.groups)
                                                     if x < y or gran.keep == 1]))
                    if gran.keep == 1:
                        entries.append(str(first))
                    else:
                        entries.append(f"{first * gran.group}:{second * gran.group}")
                else:
                    x, y = sorted((c.randint(0, gran.chunk - 1), c.randint(0, gran.chunk - 1)))
                    entries.append(f"{x}:{y}" if c.chance(0.8) else str(x))
            rows.append("[" + ", ".join(entries) + "]")
        sp.args.append(("rows", "[" + ", ".join(rows) + "]"))
    if c.chance(0.6):
        selectors = form.selectors if strict else form.selectors + (form.selectors[-1] + 1,)
        sp.args.append(("selector", str(c.choice(selectors))))
    stmts.append(sp)
    if form.satfinite or (not strict and c.chance(0.05)):
        stmts.append(Stmt("saturate"))
    return stmts


def random_stmt(c: Chooser) -> Stmt:
    w = vocab.words()
    operand = c.chance(0.3)
    if operand:
        head = c.choice(w["operands"]) if c.chance(0.8) else word(c)
    else:
        head = c.choice(w["keywords"]) if c.chance(0.8) else word(c)
    keys = vocab.STATEMENT_KEYS.get("operand" if operand else head, ())
    args: list[tuple[str | None, str]] = []
    for _ in range(c.randint(0, 4)):
        if keys and c.chance(0.6):
            args.append((c.choice(keys), value(c)))
        elif c.chance(0.2):
            args.append((c.choice(vocab.JUNK_WORDS + ("M", "K", "vec", "kind")), value(c)))
        elif c.chance(0.2):
            args.append((None, c.choice(vocab.FLAGS)))
        else:
            args.append((None, value(c)))
    return Stmt(head, operand, args)


def random_tile(c: Chooser) -> list[Stmt]:
    return [random_stmt(c) for _ in range(c.randint(0, 8))]


# ---- perturbations ---------------------------------------------------------------------------------------

def perturb(c: Chooser, stmts: list[Stmt]) -> None:
    """One local change to a statement list (in place)."""
    pick = c.randint(0, 6)
    if not stmts or pick == 0:
        stmts.insert(c.randint(0, len(stmts)), random_stmt(c))
        return
    i = c.randint(0, len(stmts) - 1)
    st = stmts[i]
    if pick == 1:
        del stmts[i]
    elif pick == 2:
        stmts.insert(c.randint(0, len(stmts)), Stmt(st.head, st.operand, list(st.args)))
    elif pick in (3, 4) and st.args:
        j = c.randint(0, len(st.args) - 1)
        key, _ = st.args[j]
        st.args[j] = (key, number(c) if c.chance(0.5) else value(c))
    elif pick == 5 and st.args:
        del st.args[c.randint(0, len(st.args) - 1)]
    else:
        keys = vocab.STATEMENT_KEYS.get("operand" if st.operand else st.head, ()) or ("x",)
        st.args.append((c.choice(keys), value(c)) if c.chance(0.7) else (None, value(c)))


_SEPARATORS = (" ", " ", " ", "  ", "\n", "\t", " // note\n", " # hash\n", "\r\n", " \n  ")


def render_tile(c: Chooser, name: str, stmts: list[Stmt]) -> str:
    sep = c.choice(_SEPARATORS) if c.chance(0.2) else " "
    body = "".join("  " + s.render(sep) + "\n" for s in stmts)
    return f"tile {name} {{\n{body}}}\n"


def source(c: Chooser) -> str:
    """A whole file: target, optional ptx, one to three tiles."""
    w = vocab.words()
    out = []
    if c.chance(0.05):
        out.append("// leading comment\n")
    makers = (tcgen05_tile, tcgen05_tile, mma_sp_tile, mma_sp_tile, random_tile)
    tiles = []
    for i in range(c.choice((1, 1, 1, 2, 3))):
        stmts = c.choice(makers)(c)
        for _ in range(c.choice((0, 0, 1, 1, 2, 3))):
            perturb(c, stmts)
        name = f"t{i}" if c.chance(0.9) else c.choice(("t0", "tile", "1t", "a.b", "x::y", "reg", "_", "T" * 300))
        tiles.append(render_tile(c, name, stmts))
    engines = "".join(tiles)
    if c.chance(0.95):
        if "mma.sp" in engines and c.chance(0.6):
            target = c.choice(("sm_80", "sm_89", "sm_90", "sm_120a", "sm_120f", "sm_100a"))
        elif c.chance(0.8):
            target = c.choice(("sm_100a", "sm_100f", "sm_103a", "sm_110a", "sm_110f"))
        else:
            target = c.choice(w["targets"] + vocab.JUNK_WORDS[:4])
        out.append(f"target {target};\n")
    if c.chance(0.25):
        out.append(f"ptx {c.choice(('7.1', '8.0', '8.5', '8.6', '8.7', '8.8', '9.0', '9.1', '10.0', '8', '8.6.1', '0.0'))};\n")
    if c.chance(0.05):
        out.append(random_stmt(c).render() + "\n")
    out += tiles
    return "".join(out)
