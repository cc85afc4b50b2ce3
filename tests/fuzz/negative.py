"""The negative table: one illegal tile per combination class, generated from the compiler's own
legality tables, each with the source token its diagnostic must point at.

A case is a legal base tile (`Tile`) with one field made illegal; `Tile.render(mark)` writes the tile
and reports where the token of field `mark` was written (line, column, text), computed from the text
itself, independently of the compiler's `locs`. Field names are the keys the front end records
locations under (compiler/frontend/build.py), e.g. "A.dtype", "shape.N", "sparsity.selector".

Classes and their sources (PTX ISA section numbers as in the tables' own docstrings):
  tcgen05 types          tcgen05_kinds.KINDS (Table 39 kinds/types; Tables 42-44)
  tcgen05 M / N / K      tcgen05_kinds.SHAPE_RULES (9.7.16.2.1 Table 39 "valid shapes")
  tcgen05 majors/swizzle tcgen05_kinds.check_major (9.7.16.10.1 Tables 49/50)
  tcgen05 options        tcgen05_kinds.KINDS negate/saturate/scale_input_d (Table 49, Table 42)
  tcgen05 forms          tcgen05_forms.KIND_FORMS / Tcgen05Mma (9.7.16.10.9.1-4, Table 54)
  tcgen05 form x target  tcgen05_forms.FEATURES (Table 60/61, target and PTX ISA notes)
  mma.sp forms           mma_sp.forms.FORM_ROWS (9.7.14.6.3), selectors (9.7.14.6.1), targets
  vocabulary             frontend/build.py word lists, targets.TARGETS, types.TYPES
`known_wrong_location` lists the cases whose diagnostic is known to point at the wrong token; the
test marks them xfail with the reason (each is reported to the owner of the code that blames).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import lru_cache


# ---- tile text with located fields ------------------------------------------------------------------------

@dataclass(frozen=True)
class Operand:
    dtype: str
    space: str
    major: str | None = None
    swizzle: str | None = None


@dataclass(frozen=True)
class Tile:
    """A tile file; every field renders as its own token so its position can be reported."""
    target: str = "sm_100a"
    ptx: str | None = None
    name: str = "t"
    engine: str = "tcgen05"
    kind: str | None = None
    cta_group: int | None = None
    ws: bool = False
    ashift: bool = False
    collector: str | None = None
    m: object = 128
    n: object = 64
    k: object = 16
    loop: object | None = None
    operands: tuple[tuple[str, Operand], ...] = ()
    sparsity: str | None = None           # ratio
    metadata: str | None = None
    selector: object | None = None
    block_scale: str | None = None        # vec word as written
    negate: tuple[str, ...] = ()
    saturate: bool = False
    scale_input_d: object | None = None
    disable_output_lane: str | None = None  # list text
    zero_columns: str | None = None         # "mask=0x0" / "cols=[...]"

    def with_operand(self, name: str, **changes) -> "Tile":
        ops = tuple((n, replace(o, **changes) if n == name else o) for n, o in self.operands)
        return replace(self, operands=ops)

    def operand(self, name: str) -> Operand:
        return dict(self.operands)[name]

    def render(self, mark: str | None = None) -> tuple[str, tuple[int, int, str] | None]:
        """(text, (line, col, token) of field `mark`); `mark` must name a field that is written."""
        lines: list[list[tuple[str | None, str]]] = []      # per line: (field or None, text) pieces

        def stmt(indent: str, *pieces):
            lines.append([(None, indent)] + [p if isinstance(p, tuple) else (None, p) for p in pieces])

        def kv(key: str, fld: str, value) -> list:
            return [(None, f" {key}="), (fld, str(value))]

        stmt("", ("target", "target"), " ", ("target.value", self.target), ";")
        if self.ptx is not None:
            stmt("", ("ptx", "ptx"), " ", ("ptx.value", self.ptx), ";")
        stmt("", ("tile.keyword", "tile"), " ", ("tile", self.name), " {")
        eng = [("engine", "engine"), " ", ("engine.name", self.engine)]
        if self.kind is not None:
            eng += kv("kind", "engine.kind", self.kind)
        if self.cta_group is not None:
            eng += kv("cta_group", "engine.cta_group", self.cta_group)
        if self.ws:
            eng += [" ", ("engine.ws", "ws")]
        if self.ashift:
            eng += [" ", ("engine.ashift", "ashift")]
        if self.collector is not None:
            eng += kv("collector", "engine.collector", self.collector)
        stmt("  ", *eng, ";")
        stmt("  ", ("shape", "shape"), " M=", ("shape.M", str(self.m)),
             " N=", ("shape.N", str(self.n)), " K=", ("shape.K", str(self.k)), ";")
        if self.loop is not None:
            stmt("  ", ("loop", "loop"), " K=", ("loop.K", str(self.loop)), ";")
        for name, o in self.operands:
            pieces = [(name, name), ": ", (f"{name}.dtype", o.dtype), " ", (f"{name}.space", o.space)]
            if o.major is not None:
                pieces += kv("major", f"{name}.major", o.major)
            if o.swizzle is not None:
                pieces += kv("swizzle", f"{name}.swizzle", o.swizzle)
            stmt("  ", *pieces, ";")
        if self.sparsity is not None:
            pieces = [("sparsity", "sparsity"), " ", ("sparsity.ratio", self.sparsity)]
            if self.metadata is not None:
                pieces += kv("metadata", "sparsity.metadata", self.metadata)
            if self.selector is not None:
                pieces += kv("selector", "sparsity.selector", self.selector)
            stmt("  ", *pieces, ";")
        if self.block_scale is not None:
            stmt("  ", ("block_scale", "block_scale"), " vec=", ("block_scale.vec", self.block_scale), ";")
        if self.negate:
            stmt("  ", ("negate", "negate"), *[p for x in self.negate for p in (" ", (f"negate.{x}", x))], ";")
        if self.saturate:
            stmt("  ", ("saturate", "saturate"), ";")
        if self.scale_input_d is not None:
            stmt("  ", ("scale_input_d", "scale_input_d"), " ", ("scale_input_d.value", str(self.scale_input_d)), ";")
        if self.disable_output_lane is not None:
            stmt("  ", ("disable_output_lane", "disable_output_lane"), " ",
                 ("disable_output_lane.value", self.disable_output_lane), ";")
        if self.zero_columns is not None:
            stmt("  ", ("zero_columns", "zero_columns"), " ", ("zero_columns.value", self.zero_columns), ";")
        stmt("", "}")
        out, where = [], None
        for i, pieces in enumerate(lines, start=1):
            col = 1
            text = ""
            for fld, piece in pieces:
                if fld == mark and mark is not None:
                    where = (i, col, piece)
                text += piece
                col += len(piece)
            out.append(text)
        if mark is not None and where is None:
            raise ValueError(f"field {mark!r} is not written in this tile")
        return "\n".join(out) + "\n", where


# ---- cases ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NegativeCase:
    id: str                  # unique, stable: "class/detail"
    klass: str               # the combination class
    tile: Tile
    blame: str               # the field whose token the first diagnostic must point at
    needle: str | None       # text the message must contain (the offending value), or None
    cite: str                # the table / section that makes the tile illegal
    wrong_location: str | None = None   # known bug: why the compiler points elsewhere (xfail)

    def source(self) -> tuple[str, tuple[int, int, str]]:
        text, where = self.tile.render(self.blame)
        assert where is not None
        return text, where


def _ops(**kw) -> tuple[tuple[str, Operand], ...]:
    return tuple((k, v) for k, v in kw.items())


# -- tcgen05 base tiles ---------------------------------------------------------------------------------

def _vec_word(kind: str) -> str | None:
    """A block-scale vector spelling the kind takes on sm_100a (KIND_FORMS / Table 54)."""
    from compiler.isa.tcgen05_forms import KIND_FORMS

    sizes = KIND_FORMS[kind].block_vector_sizes
    if not sizes:
        return None
    return {"scale_vec::1X": "1X", "scale_vec::2X": "2X", "scale_vec::4X": "4X", "block16": "16",
            "block32": "32"}[sizes[0]]


def tcgen05_base(kind: str, cta_group: int = 1, sparse: bool = False, ws: bool = False) -> Tile:
    """A legal tile (through `verify`) for one Table 39 row of `kind`: the row's largest M, its
    smallest N, the kind's first types, K-major operands, scale factors for block-scaled kinds."""
    from compiler.isa.tcgen05_kinds import KINDS, shape_rule

    info = KINDS[kind]
    rule = shape_rule(kind, cta_group, sparse, ws)
    a = info.ab_types[0]
    d = info.pairs[0][1] if info.pairs else info.d_types[0]
    ops = _ops(A=Operand(a, "smem"), B=Operand(a, "smem"), D=Operand(d, "tmem"))
    if info.block_scaled:
        ops += _ops(SFA=Operand(info.scale_types[0], "tmem"), SFB=Operand(info.scale_types[0], "tmem"))
    return Tile(kind=kind, cta_group=cta_group if cta_group != 1 else None, ws=ws, m=max(rule.ms),
                n=rule.ns.values()[0], k=info.sparse_k if sparse else info.dense_k, operands=ops,
                sparsity=info.sparsity if sparse else None, block_scale=_vec_word(kind))


def _shape_variants():
    """(kind, rule) for every Table 39 row expressible in the DSL (K = 96 is not: no K=96 syntax)."""
    from compiler.isa.tcgen05_kinds import SHAPE_RULES

    for rule in SHAPE_RULES:
        if rule.k96:
            continue
        for kind in rule.kinds:
            for sparse in ((False, True) if rule.sparse is None else (rule.sparse,)):
                yield kind, rule, sparse


def _variant_name(kind, rule, sparse) -> str:
    return f"{kind}-cg{rule.cta_group}{'-sp' if sparse else ''}{'-ws' if rule.ws else ''}"


def tcgen05_type_cases():
    from compiler.isa.tcgen05_kinds import KINDS
    from compiler.isa.types import TYPES

    for kind, info in KINDS.items():
        base = tcgen05_base(kind)
        for t in TYPES:
            if t not in info.ab_types:
                for op in ("A", "B"):
                    yield NegativeCase(f"tcgen05-type/{kind}/{op}-{t}", "tcgen05 A/B type", base.with_operand(op, dtype=t),
                                       f"{op}.dtype", t, "Table 39 kinds/types (tcgen05_kinds.KINDS)")
            if t not in info.d_types:
                yield NegativeCase(f"tcgen05-type/{kind}/D-{t}", "tcgen05 D type", base.with_operand("D", dtype=t),
                                   "D.dtype", t, "Table 39 kinds/types (tcgen05_kinds.KINDS)")
        if info.same_ab and len(info.ab_types) > 1:
            other = info.ab_types[1]
            yield NegativeCase(f"tcgen05-type/{kind}/B-differs-{other}", "tcgen05 A/B type",
                               base.with_operand("B", dtype=other), "B.dtype", other, "Table 39: A and B of one type")
        for a in info.ab_types:
            for d in info.d_types:
                if info.pairs is not None and (a, d) not in info.pairs:
                    tile = base.with_operand("A", dtype=a).with_operand("B", dtype=a).with_operand("D", dtype=d)
                    yield NegativeCase(f"tcgen05-type/{kind}/{a}-to-{d}", "tcgen05 A->D pair", tile, "D.dtype", d,
                                       "Table 39 (A, D) pairs")
    # no kind named: the types alone must find the kind (infer_kind); a type no kind takes is the A token
    for t in TYPES:
        if not any(t in k.ab_types for k in KINDS.values()):
            tile = replace(tcgen05_base("f16"), kind=None).with_operand("A", dtype=t)
            yield NegativeCase(f"tcgen05-type/inferred/A-{t}", "tcgen05 inferred kind", tile, "A.dtype", t,
                               "Table 39: no kind takes this A type")


_M_CANDIDATES = (16, 32, 48, 64, 96, 128, 192, 256, 512)


def _outside(ns) -> list[int]:
    """N values just outside each legal range of `ns` (one step and one unit beyond each end, half a
    step inside), that `ns` does not contain."""
    vals = set()
    for lo, hi, step in ns.ranges:
        vals.update((lo - step, lo - 1, hi + 1, hi + step, 0))
        if step > 1:
            vals.add(lo + step // 2)
    return sorted(v for v in vals if v >= 0 and v not in ns)


def tcgen05_shape_cases():
    from compiler.isa.tcgen05_kinds import KINDS

    for kind, rule, sparse in _shape_variants():
        base = tcgen05_base(kind, rule.cta_group, sparse, rule.ws)
        name = _variant_name(kind, rule, sparse)
        for m in _M_CANDIDATES:
            if m not in rule.ms:
                yield NegativeCase(f"tcgen05-M/{name}/M{m}", "Table 39 M", replace(base, m=m), "shape.M", str(m),
                                   "9.7.16.2.1 Table 39 valid shapes")
        for n in _outside(rule.ns):
            yield NegativeCase(f"tcgen05-N/{name}/N{n}", "Table 39 N", replace(base, n=n), "shape.N", str(n),
                               "9.7.16.2.1 Table 39 valid shapes")
        good_k = base.k
        for k in sorted({good_k // 2, good_k * 2, KINDS[kind].dense_k if sparse else KINDS[kind].sparse_k} - {good_k}):
            yield NegativeCase(f"tcgen05-K/{name}/K{k}", "Table 39 K", replace(base, k=k), "shape.K", str(k),
                               "9.7.16.2.1 Table 39 (K per kind)")
        yield NegativeCase(f"tcgen05-loop/{name}/loop{good_k + 1}", "loop K multiple", replace(base, loop=good_k + 1),
                           "loop.K", str(good_k + 1), "a loop runs whole instructions (K per kind, Table 39)")


def tcgen05_major_cases():
    from compiler.isa.tcgen05_kinds import KINDS, N16, N32, SUBBYTE_TYPES, shape_rule

    for kind, info in KINDS.items():
        base = tcgen05_base(kind)
        for op in ("A", "B"):
            if not info.transpose:
                yield NegativeCase(f"tcgen05-major/{kind}/{op}-MN", "Table 49 transpose", base.with_operand(op, major="MN"),
                                   f"{op}.major", None, "9.7.16.10.1 Table 49: no transpose for this kind")
                continue
            for t in info.ab_types:
                if t in SUBBYTE_TYPES:
                    tile = base.with_operand("A", dtype=t).with_operand("B", dtype=t).with_operand(op, major="MN")
                    yield NegativeCase(f"tcgen05-major/{kind}/{op}-{t}-MN", "sub-byte MN-major", tile, f"{op}.major",
                                       t, "9.7.16.10.1 Table 49: 4/6-bit operands are K-major")
            for swz in ("none", "32B", "64B", "128B"):
                if kind == "tf32":
                    yield NegativeCase(f"tcgen05-swizzle/tf32/{op}-MN-{swz}", "Table 49 tf32 MN swizzle",
                                       base.with_operand(op, major="MN", swizzle=swz), f"{op}.swizzle", swz,
                                       "9.7.16.10.1: MN-major tf32 needs 128B_base32B")
            for major in ("K", "MN") if kind != "tf32" else ("K",):
                yield NegativeCase(f"tcgen05-swizzle/{kind}/{op}-{major}-128B_base32B", "128B_base32B swizzle",
                                   base.with_operand(op, major=major, swizzle="128B_base32B"), f"{op}.swizzle", None,
                                   "Table 49 notes: 128B_base32B only for MN-major tf32")
        # Table 50: an MN-major 8-bit B restricts N (cta_group::1 -> multiples of 16, ::2 -> of 32)
        for t in info.ab_types:
            if t in ("e4m3", "e5m2", "s8", "u8") and info.transpose:
                for cta_group, allowed in ((1, N16), (2, N32)):
                    rule = shape_rule(kind, cta_group)
                    bad = [n for n in rule.ns.values() if n not in allowed][:2]
                    for n in bad:
                        tile = replace(tcgen05_base(kind, cta_group), n=n).with_operand("A", dtype=t) \
                            .with_operand("B", dtype=t, major="MN")
                        yield NegativeCase(f"tcgen05-N/{kind}-cg{cta_group}/{t}-MN-B-N{n}", "Table 50 N", tile,
                                           "shape.N", str(n), "9.7.16.10.1 Table 50: N with an MN-major 8-bit B")


def tcgen05_layout_cases():
    """9.7.16.3.3 canonical layouts: a K-major operand's K extent (one instruction's K here) must fill
    whole swizzle atoms; every swizzle whose atom line is wider than that extent is illegal."""
    from compiler.isa.swizzle import SWIZZLE_MODES as SWIZZLES
    from compiler.layout import container_bits_for
    from compiler.isa.tcgen05_kinds import KINDS

    for kind, info in KINDS.items():
        if info.block_scaled:       # layout-selection first reports that the emitter cannot scale blocks
            continue
        base = tcgen05_base(kind)
        extent = base.k * container_bits_for(info.ab_types[0], kind) // 8
        for swz, mode in SWIZZLES.items():
            if "K" in mode.majors and extent % mode.width:
                for op in ("A", "B"):
                    yield NegativeCase(f"tcgen05-layout/{kind}/{op}-K{base.k}-{swz}", "canonical layout atom",
                                       base.with_operand(op, major="K", swizzle=swz), f"{op}.swizzle", None,
                                       f"9.7.16.3.3: a {swz} atom line is {mode.width} B, the K extent {extent} B")


def tcgen05_option_cases():
    from compiler.isa.tcgen05_kinds import KINDS

    for kind, info in KINDS.items():
        base = tcgen05_base(kind)
        if not info.negate:
            for op in ("A", "B"):
                yield NegativeCase(f"tcgen05-option/{kind}/negate-{op}", "Table 49 negate", replace(base, negate=(op,)),
                                   f"negate.{op}", None, "9.7.16.10.1 Table 49: no negate for this kind")
        if not info.saturate:
            yield NegativeCase(f"tcgen05-option/{kind}/saturate", "Table 42 saturate", replace(base, saturate=True),
                               "saturate", "saturate", "Table 42 bit 3: saturate is for kind::i8")
        if not info.scale_input_d:
            yield NegativeCase(f"tcgen05-option/{kind}/scale_input_d", "scale-input-d", replace(base, scale_input_d=1),
                               "scale_input_d", None, "9.7.16.10.9.1: scale-input-d only for f16/tf32")


def tcgen05_form_cases():
    """Qualifier rules of the instruction forms (tcgen05_forms.Tcgen05Mma; 9.7.16.10.9.1-4)."""
    from compiler.isa.tcgen05_forms import KIND_FORMS

    vec_words = {"block16": "16", "block32": "32", "scale_vec::1X": "1X", "scale_vec::2X": "2X", "scale_vec::4X": "4X"}
    for kind, kf in KIND_FORMS.items():
        base = tcgen05_base(kind)
        if kf.block_scaled:
            for choice, word in vec_words.items():
                if choice not in kf.block_vector_sizes:
                    yield NegativeCase(f"tcgen05-form/{kind}/vec-{word}", "Table 54 vector size",
                                       replace(base, block_scale=word), "block_scale.vec", None,
                                       "Table 54 valid scale vector sizes")
            yield NegativeCase(f"tcgen05-form/{kind}/ws", ".ws kinds", replace(base, ws=True), "engine.ws", None,
                               "9.7.16.10.9.3: .ws takes f16/tf32/f8f6f4/i8")
        else:
            yield NegativeCase(f"tcgen05-form/{kind}/block_scale", "block_scale on a plain kind",
                               replace(base, block_scale="32"), "block_scale.vec", None,
                               "9.7.16.10.9.1: .block_scale only for the mx kinds")
        ws = tcgen05_base(kind, ws=True) if kf.ws else None
        if ws is not None:
            for buf in ("a", "b4"):
                yield NegativeCase(f"tcgen05-form/{kind}/ws-collector-{buf}", "collector buffer",
                                   replace(ws, collector=f"{buf}::fill"), "engine.collector", None,
                                   "9.7.16.10.9.3: .ws uses buffers b0..b3")
            yield NegativeCase(f"tcgen05-form/{kind}/ws-cta_group2", ".ws cta_group", replace(ws, cta_group=2),
                               "engine.ws", None, "9.7.16.10.9.3: .ws only with cta_group::1")
        yield NegativeCase(f"tcgen05-form/{kind}/collector-b0", "collector buffer", replace(base, collector="b0::fill"),
                           "engine.collector", None, "9.7.16.10.9.1: non-.ws uses buffer a")
        yield NegativeCase(f"tcgen05-form/{kind}/cta_group3", "cta_group", replace(base, cta_group=3),
                           "engine.cta_group", "3", "9.7.16.10.9.1: .cta_group::1 or ::2")
        yield NegativeCase(f"tcgen05-form/{kind}/zero_columns-without-ws", "zero-column mask",
                           replace(base, zero_columns="mask=0x0"), "zero_columns", None,
                           "9.7.16.10.9.3: zero-column mask is a .ws operand")
        if not kf.block_scaled:
            yield NegativeCase(f"tcgen05-form/{kind}/ashift-A-smem", ".ashift", replace(base, ashift=True),
                               "engine.ashift", None, "9.7.16.10.9.1: .ashift shifts A in TMEM")


def _dsl_expressible(form) -> bool:
    """Forms the DSL can write: K = 96 and an omitted vector size ("implicit") have no syntax."""
    return not form.k96 and form.block_scale != "implicit"


def _tile_for_form(form) -> Tile:
    kind = form.kind
    base = tcgen05_base(kind, form.cta_group, form.sparse, form.ws)
    vec = {"block16": "16", "block32": "32", "scale_vec::1X": "1X", "scale_vec::2X": "2X",
           "scale_vec::4X": "4X"}.get(form.block_scale or "")
    tile = replace(base, block_scale=vec, collector=form.collector, ashift=form.ashift,
                   disable_output_lane=("[0, 0, 0, 0, 0, 0, 0, 0]" if form.cta_group == 2 else "[0, 0, 0, 0]")
                   if form.disable_output_lane else None,
                   scale_input_d=1 if form.scale_input_d else None,
                   zero_columns="mask=0x0" if form.zero_column_mask else None)
    if form.a_in_tmem:
        tile = tile.with_operand("A", space="tmem")
    return tile


@lru_cache(maxsize=None)
def feature_classes():
    """One DSL-expressible form per distinct set of FEATURES rows (the target/PTX rules only depend on
    which rows a form uses). The FEATURES predicates read the kind, the block-scale choice, sparsity,
    scale-input-d and K = 96 only, so forms over those fields (all other qualifiers off) reach every
    class that all_forms() reaches, without enumerating its thousands of collector/operand variants."""
    from compiler.diagnostics import SpecError
    from compiler.isa.tcgen05_forms import KIND_FORMS, Tcgen05Mma

    seen = {}
    for kind, kf in KIND_FORMS.items():
        for block_scale, sparse, sid in itertools.product(kf.block_vector_sizes or (None,), (False, True),
                                                          (False, True)):
            try:
                form = Tcgen05Mma(kind, sparse=sparse, block_scale=block_scale, scale_input_d=sid)
            except SpecError:
                continue
            if _dsl_expressible(form):
                seen.setdefault(tuple(f.name for f in form.features()), form)
    return tuple(seen.items())


def tcgen05_target_cases():
    from compiler.isa.targets import TARGETS, format_version

    for names, form in feature_classes():
        req = form.requirements()
        tile = _tile_for_form(form)
        label = "+".join(n.split(" ")[0] for n in names[1:]) or "base"
        fid = f"{form.kind}{'-sp' if form.sparse else ''}{'-ws' if form.ws else ''}-{label}"
        for target in TARGETS:
            if target not in req.targets:
                yield NegativeCase(f"tcgen05-target/{fid}/{target}", "FEATURES target", replace(tile, target=target),
                                   "target.value", target, "Table 60/61 and target ISA notes (tcgen05_forms.FEATURES)")
        for target in sorted(req.targets):
            need = req.min_ptx_on(target)
            below = (need[0], need[1] - 1) if need[1] else (need[0] - 1, 9)
            yield NegativeCase(f"tcgen05-ptx/{fid}/{target}-ptx{format_version(below)}", "FEATURES PTX version",
                               replace(tile, target=target, ptx=format_version(below)), "ptx.value",
                               format_version(below), "PTX ISA notes (tcgen05_forms.FEATURES min_ptx)")


# -- mma.sp ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def expressible_sp_forms():
    """mma.sp forms the cases start from: block-scaled kinds with their first BLOCK_SCALES row (written
    as SFA/SFB of its scale type and `block_scale vec=`), .satfinite is `saturate;`."""
    from compiler.isa.mma_sp.forms import BLOCK_SCALES, all_forms

    first = {}
    for s in BLOCK_SCALES:
        first.setdefault(s.kind, s)
    return tuple(f for f in all_forms() if f.block_scale is None or f.block_scale == first[f.kind])


def sp_tile(form, target: str | None = None) -> Tile:
    lay = form.layout
    scales = {}
    if form.block_scale is not None:       # scale_A / scale_B (PTX 9.7.14.3)
        scales = dict(SFA=Operand(form.block_scale.scale_type, "global"),
                      SFB=Operand(form.block_scale.scale_type, "global"))
    ops = _ops(A=Operand(form.a_type, "global"), B=Operand(form.b_type, "global"),
               C=Operand(form.c_type, "global"), D=Operand(form.d_type, "global"), **scales)
    return Tile(target=target or form.row.target_rule.targets()[0], engine="mma.sp", kind=form.kind,
                m=lay.m, n=lay.n, k=form.k, operands=ops, sparsity=form.granularity.name, saturate=form.satfinite,
                block_scale=form.block_scale.scale_vec if form.block_scale is not None else None)


def _sp_id(form) -> str:
    return form.name.replace("::", "-")


def mma_sp_cases():
    from compiler.isa.mma_sp.forms import FORM_ROWS
    from compiler.isa.targets import MAX_PTX, TARGETS, format_version
    from compiler.isa.types import TYPES

    for form in expressible_sp_forms():
        base = sp_tile(form)
        fid = _sp_id(form)
        for sel in range(5):
            if sel not in form.selectors:
                yield NegativeCase(f"mma.sp-selector/{fid}/sel{sel}", "mma.sp selector", replace(base, selector=sel),
                                   "sparsity.selector", str(sel), "9.7.14.6.1 sparsity selector per shape/type")
        need, _ = form.requirements(base.target)
        if need <= MAX_PTX:
            below = (need[0], need[1] - 1) if need[1] else (need[0] - 1, 9)
            yield NegativeCase(f"mma.sp-ptx/{fid}/ptx{format_version(below)}", "mma.sp PTX version",
                               replace(base, ptx=format_version(below)), "ptx.value", format_version(below),
                               "9.7.14.6.3 PTX ISA notes (FormRow.min_ptx)")
    # form x target: the target rule belongs to the form's row, so each (row, target) the rule rejects is
    # one class; the forms of a row take turns as its representative, so every form is tried somewhere.
    for row in FORM_ROWS:
        forms = [f for f in expressible_sp_forms() if f.row is row]
        bad = [t for t in TARGETS if not row.target_rule.allows(TARGETS[t])]
        for i, target in enumerate(bad):
            form = forms[i % len(forms)]
            yield NegativeCase(f"mma.sp-target/{_sp_id(form)}/{target}", "mma.sp target",
                               replace(sp_tile(form), target=target), "target.value", target,
                               "9.7.14.6.3 target ISA notes (FormRow.target_rule)")
    # per form row: types, shape and ratio that the row does not take
    for row in FORM_ROWS:
        form = next(f for f in expressible_sp_forms() if f.row is row)
        base = sp_tile(form)
        rid = f"{row.shape}-{row.kind or 'none'}-{row.a_types[0]}"
        for t in TYPES:
            if not any(t in r.a_types for r in FORM_ROWS if r.kind == row.kind):
                yield NegativeCase(f"mma.sp-type/{rid}/A-{t}", "mma.sp A type", base.with_operand("A", dtype=t),
                                   "A.dtype", t, "9.7.14.6.3 type table (FORM_ROWS)")
            if t not in row.cd_types:
                yield NegativeCase(f"mma.sp-type/{rid}/C-{t}", "mma.sp C type",
                                   base.with_operand("C", dtype=t).with_operand("D", dtype=t), "C.dtype", t,
                                   "9.7.14.6.3 type table (FORM_ROWS)")
        other_d = next((t for t in ("f16", "f32", "s32") if t != form.c_type), None)
        yield NegativeCase(f"mma.sp-type/{rid}/D-{other_d}", "mma.sp D != C", base.with_operand("D", dtype=other_d),
                           "D.dtype", other_d, "9.7.14.6.3: .dtype == .ctype")
        if not row.satfinite:
            yield NegativeCase(f"mma.sp-option/{rid}/saturate", "mma.sp satfinite", replace(base, saturate=True),
                               "saturate", None, "9.7.14.6.3: .satfinite only for integer forms")
        for ratio in ("2:4", "1:2", "4:8"):
            if ratio != row.granularity:
                yield NegativeCase(f"mma.sp-ratio/{rid}/{ratio}", "mma.sp sparsity ratio", replace(base, sparsity=ratio),
                                   "sparsity.ratio", ratio, "9.7.14.6.1 granularity per type")
        shapes = {r.shape for r in FORM_ROWS if form.a_type in r.a_types and r.kind == row.kind}
        for k in (8, 16, 32, 64, 128, 256):
            if f"m16n8k{k}" not in shapes:
                yield NegativeCase(f"mma.sp-shape/{rid}/k{k}", "mma.sp shape", replace(base, k=k), "shape", None,
                                   "9.7.14.6.3 shapes per type (the shape statement: M, N, K together)")
                break
    yield from _sp_block_scale_cases()
    base = sp_tile(expressible_sp_forms()[0])
    yield NegativeCase("mma.sp-kind/unknown", "mma.sp kind", replace(base, kind="f16"), "engine.kind", "f16",
                       "9.7.14.6.3 .kind values (mma_sp.forms.KINDS)")
    for op in "ABCD":
        yield NegativeCase(f"mma.sp-space/{op}-smem", "mma.sp operand space", base.with_operand(op, space="smem"),
                           f"{op}.space", "smem", "mma.sp operands are registers (global or reg in the DSL)")


def _sp_block_scale_cases():
    """Block scaling of mma.sp (PTX 9.7.14.3 Table 36; compiler/isa/mma_sp/forms.BLOCK_SCALES): vector sizes
    and scale types a kind does not take, SFB of another type than SFA, tcgen05's block16/32 spelling, and
    scale factors on a kind without block scaling."""
    from compiler.isa.mma_sp.forms import BLOCK_SCALES

    seen = set()
    for form in expressible_sp_forms():
        if form.block_scale is None or form.kind in seen:
            continue
        seen.add(form.kind)          # one form per kind: the rules are the kind's
        base = sp_tile(form)
        kind = form.kind
        for vec in ("1X", "2X", "4X"):
            if not any(s.kind == kind and s.scale_vec == vec for s in BLOCK_SCALES):
                yield NegativeCase(f"mma.sp-block_scale/{kind}/vec-{vec}", "mma.sp block scale vector",
                                   replace(base, block_scale=vec), "block_scale.vec", vec,
                                   "9.7.14.3 Table 36 (forms.BLOCK_SCALES)")
        for stype in ("ue8m0", "ue4m3"):
            if not any(s.kind == kind and s.scale_type == stype and s.scale_vec == form.block_scale.scale_vec
                       for s in BLOCK_SCALES):
                yield NegativeCase(f"mma.sp-block_scale/{kind}/SFA-{stype}", "mma.sp scale type",
                                   base.with_operand("SFA", dtype=stype).with_operand("SFB", dtype=stype),
                                   "SFA.dtype", stype, "9.7.14.3 Table 36 (forms.BLOCK_SCALES)")
        other = "ue4m3" if form.block_scale.scale_type == "ue8m0" else "ue8m0"
        yield NegativeCase(f"mma.sp-block_scale/{kind}/SFB-{other}", "mma.sp SFB type != SFA type",
                           base.with_operand("SFB", dtype=other), "SFB.dtype", other,
                           "9.7.14.6.3 syntax: one .stype for scale_A and scale_B")
        yield NegativeCase(f"mma.sp-block_scale/{kind}/vec-32", "mma.sp block scale spelling",
                           replace(base, block_scale="32"), "block_scale.vec", "32",
                           "9.7.14.6.3 syntax: .scale_vec::1X/2X/4X (block16/block32 are tcgen05 words)")
    plain = sp_tile(expressible_sp_forms()[0])
    yield NegativeCase("mma.sp-block_scale/plain/vec-1X", "mma.sp block scale on a plain kind",
                       replace(plain, block_scale="1X"), "block_scale.vec", "1X",
                       "9.7.14.6.3 syntax: .block_scale only with .kind::mxf8f6f4/mxf4/mxf4nvf4")
    yield NegativeCase("mma.sp-block_scale/plain/SFA", "mma.sp scale factors on a plain kind",
                       replace(plain, operands=plain.operands + (("SFA", Operand("ue8m0", "global")),)),
                       "SFA.dtype", "ue8m0",
                       "9.7.14.6.3 syntax: scale operands only with .kind::mxf8f6f4/mxf4/mxf4nvf4")


# -- vocabulary (front end) ------------------------------------------------------------------------------

def vocabulary_cases():
    base = tcgen05_base("f16")
    sp = sp_tile(expressible_sp_forms()[0])
    words = (
        ("target", replace(base, target="sm_100b"), "target.value", "sm_100b"),
        ("ptx", replace(base, ptx="8.x"), "ptx.value", "8.x"),
        ("engine", replace(base, engine="tcgen06"), "engine.name", "tcgen06"),
        ("engine-mma", replace(base, engine="mma"), "engine.name", None),
        ("type", base.with_operand("A", dtype="bf61"), "A.dtype", "bf61"),
        ("space", base.with_operand("A", space="shmem"), "A.space", "shmem"),
        ("major", base.with_operand("A", major="M"), "A.major", "M"),
        ("swizzle", base.with_operand("B", swizzle="182B"), "B.swizzle", "182B"),
        ("ratio", replace(sp, sparsity="3:4"), "sparsity.ratio", "3:4"),
        ("metadata", replace(sp, metadata="dynamic"), "sparsity.metadata", "dynamic"),
        ("selector", replace(sp, selector="one"), "sparsity.selector", "one"),
        ("vec", replace(tcgen05_base("mxf4"), block_scale="3X"), "block_scale.vec", "3X"),
        ("shape-M", replace(base, m="12B"), "shape.M", "12B"),
        ("shape-N", replace(base, n="0x"), "shape.N", "0x"),
        ("cta_group", replace(base, cta_group="two"), "engine.cta_group", "two"),
        ("operand-space-B-tmem", base.with_operand("B", space="tmem"), "B.space", "tmem"),
        ("operand-space-D-smem", base.with_operand("D", space="smem"), "D.space", "smem"),
    )
    for name, tile, blame, needle in words:
        yield NegativeCase(f"vocabulary/{name}", "vocabulary", tile, blame, needle,
                           "compiler/frontend/build.py word lists; targets.TARGETS; types.TYPES")


GENERATORS = (tcgen05_type_cases, tcgen05_shape_cases, tcgen05_major_cases, tcgen05_layout_cases, tcgen05_option_cases,
              tcgen05_form_cases, tcgen05_target_cases, mma_sp_cases, vocabulary_cases)


@lru_cache(maxsize=None)
def all_cases() -> tuple[NegativeCase, ...]:
    cases = tuple(itertools.chain.from_iterable(g() for g in GENERATORS))
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise AssertionError(f"duplicate negative case ids: {sorted(dupes)[:5]}")
    return cases


# ---- checking one case -------------------------------------------------------------------------------------

FILENAME = "negative.tile"


@dataclass
class Result:
    case: NegativeCase
    text: str
    expected: tuple[int, int, str]
    got: tuple[int, int] | None       # first diagnostic's (line, col), None if it compiled or had no loc
    message: str | None
    problem: str | None = field(default=None)   # None: the diagnostic is where and what it should be


def check_case(case: NegativeCase) -> Result:
    from compiler.diagnostics import CompileError
    from compiler.driver import compile_source

    text, expected = case.source()
    try:
        compile_source(text, FILENAME)
    except CompileError as e:
        d = e.diagnostics[0]
        got = (d.loc.line, d.loc.col) if d.loc else None
        res = Result(case, text, expected, got, d.message)
        if got != expected[:2]:
            res.problem = (f"diagnostic at {got[0]}:{got[1]} " if got else "unlocated diagnostic ") + \
                          f"({d.message!r}), expected {expected[0]}:{expected[1]} '{expected[2]}'"
        elif case.needle is not None and case.needle.lower() not in d.message.lower():
            res.problem = f"message {d.message!r} does not name '{case.needle}'"
        return res
    return Result(case, text, expected, None, None, "compiled without an error")
