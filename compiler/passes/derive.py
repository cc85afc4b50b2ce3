"""What a tile op's printed attributes determine: the objects passes and emitters work with, rebuilt
from the IR alone (nothing rides along unprinted).

- `tile_spec`: the TileSpec (every field and its source location) from the tile op, its operands,
  sparsity, zero_columns and schedule ops (lowering writes them; compiler/lowering.py);
- `mma_form`: the instruction form from `tilec.mma_form`, a key into the ISA tables (verify writes it);
- `smem_layout`, `pipeline`, `tmem_plan`, `scale_layouts`: the layout-selection plans;
- `tcgen05_metadata`, `static_metadata`: the sparse-metadata-packing tables;
- `facts`: all of them by the names the emitters use.
Each is a pure function of the attributes, so an IR read back from text gives the same objects.
"""
from __future__ import annotations

from operator import is_
from typing import Any

from ..diagnostics import SpecError
from ..ir import Op, snapshot_attrs
from ..spec import EpilogueSpec, FileSpec, OperandSpec, ScheduleSpec, SparsitySpec, TileSpec, ZeroColumnsSpec, field_loc


def required(tile: Op, name: str, provider: str, sym: str | None = None) -> Op:
    op = tile.op(name, sym)
    if op is None:
        raise SpecError(f"tile '{tile.sym}' has no {name}{' @' + sym if sym else ''}: run {provider} first")
    return op


# ---- the file and the tile as written ------------------------------------------------------------

def module_spec(module: Op):
    """The file-level part of the FileSpec (target, PTX version as written, their locations)."""

    v = module.attrs.get("ptx_version")
    # as spelled (verify, not the reader, decides whether it is a released version)
    major, _, minor = (v or "").partition(".")
    version = (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
    return FileSpec(module.attrs["target"], [], version, locs=dict(module.locs))


def file_spec(module: Op):
    """The FileSpec a module holds (its PTX version: as written before verify, resolved after)."""
    from dataclasses import replace

    spec = module_spec(module)
    return replace(spec, tiles=[tile_spec(t) for t in module.ops("tilec.tile")],
                   filename=module.loc.file if module.loc else spec.filename)


def tile_loc(tile: Op, key: str | None = None):
    """The location of a tile field, falling back to its statement, then to the tile (spec.field_loc)."""
    return field_loc(tile.locs, key, tile.loc)


# ---- the tile as written ---------------------------------------------------------------------------

_FLAGS = ("ws", "ashift", "negate_a", "negate_b", "saturate")


_SPEC_OPS = ("tilec.operand", "tilec.sparsity", "tilec.zero_columns", "tilec.schedule", "tilec.epilogue")


def tile_spec(tile: Op) -> TileSpec:
    """The TileSpec of a tile op. Each pass and emitter asks for it; it is rebuilt only when what it is
    made from (the tile's symbol, attributes and locations, its operand, sparsity, zero_columns and
    schedule ops and their attributes) changed since the last call, so callers share one object and
    must not modify it."""
    cached = tile.__dict__.get("_tile_spec")
    if cached is not None:
        sym, attrs, locs, body, parts, spec = cached
        if tile.sym == sym and tile.attrs == attrs and tile.locs == locs:
            now = tile.body
            # the same body list holding the same ops (passes append): the same spec ops, else look again
            if not (len(now) == len(body) and all(map(is_, now, body))):
                found = [o for o in now if o.name in _SPEC_OPS]
                if len(found) != len(parts) or not all(map(is_, found, (p[0] for p in parts))):
                    parts = None
                else:
                    tile.__dict__["_tile_spec"] = (sym, attrs, locs, list(now), parts, spec)
            if parts is not None and all(o.sym == osym and o.attrs == snap for o, osym, snap in parts):
                return spec
    spec = _tile_spec(tile)
    tile.__dict__["_tile_spec"] = (tile.sym, snapshot_attrs(tile.attrs), dict(tile.locs), list(tile.body),
                                   [(o, o.sym, snapshot_attrs(o.attrs)) for o in tile.body if o.name in _SPEC_OPS],
                                   spec)
    return spec


def _tile_spec(tile: Op) -> TileSpec:
    a = tile.attrs
    operands = {o.sym: OperandSpec(o.attrs["dtype"], o.attrs["space"], o.attrs.get("major"), o.attrs.get("swizzle"))
                for o in tile.ops("tilec.operand")}
    sparsity = None
    sp = tile.op("tilec.sparsity")
    if sp is not None:
        s = sp.attrs
        rows = s.get("rows")
        sparsity = SparsitySpec(s["ratio"], s["metadata"], s.get("pattern"),
                                tuple(tuple(tuple(c) for c in r) for r in rows) if rows is not None else None,
                                s["selector"])
    zero = None
    z = tile.op("tilec.zero_columns")
    if z is not None:
        cols = z.attrs.get("columns")
        zero = ZeroColumnsSpec(int(z.attrs["value"]) if "value" in z.attrs else None,
                               tuple(tuple(c) for c in cols) if cols is not None else None, z.attrs["shift"])
    schedule = None
    sc = tile.op("tilec.schedule")
    if sc is not None:
        schedule = ScheduleSpec(**sc.attrs)
    epilogue = None
    ep = tile.op("tilec.epilogue")
    if ep is not None:
        epilogue = EpilogueSpec(**ep.attrs)
    kind = a.get("kind")
    if kind == "none":                  # verify's word for an mma.sp form without .kind
        kind = None
    # k_total: a loop statement gave it when its location is recorded or it differs from one instruction
    k_total = a["k_total"] if (a["k_total"] != a["k"] or "loop.K" in tile.locs) else None
    dol = a.get("disable_output_lane")
    return TileSpec(
        name=tile.sym or "", engine=a["engine"], m=a["m"], n=a["n"], k=a["k"], operands=operands, k_total=k_total,
        kind=kind, cta_group=a.get("cta_group", 1), collector=a.get("collector"), sparsity=sparsity,
        block_scale=a.get("block_scale"), max_shift=a.get("max_shift", 0), scale_input_d=a.get("scale_input_d"),
        disable_output_lane=tuple(int(v) for v in dol) if dol is not None else None, zero_columns=zero,
        schedule=schedule, epilogue=epilogue, locs=dict(tile.locs), **{f: a.get(f, False) for f in _FLAGS})


# ---- verify: the instruction form -------------------------------------------------------------------

_TCGEN05_FORM_FIELDS = ("kind", "cta_group", "sparse", "ws", "a_in_tmem", "block_scale", "collector", "ashift",
                        "disable_output_lane", "scale_input_d", "zero_column_mask", "k96")


def form_op(engine: str, form: Any, scale_type: str | None, loc=None) -> Op:
    """The `tilec.mma_form` op of a form verify chose: its opcode (for the reader) and its key."""
    if engine == "tcgen05":
        attrs: dict[str, Any] = {"opcode": form.opcode()}
        for f in _TCGEN05_FORM_FIELDS:
            v = getattr(form, f)
            if v is not None and v is not False:
                attrs[f] = v
        if scale_type is not None:
            attrs["scale_type"] = scale_type
    else:
        attrs = {"opcode": f"mma.sp.{form.name}", "shape": form.shape, "a": form.a_type, "b": form.b_type,
                 "c": form.c_type, "d": form.d_type}
        if form.kind:
            attrs["kind"] = form.kind
        if form.satfinite:
            attrs["satfinite"] = True
        if form.block_scale is not None:
            attrs["block_scale"] = form.block_scale.scale_vec
            attrs["scale_type"] = form.block_scale.scale_type
    return Op("tilec.mma_form", None, attrs, loc=loc)


def mma_form(tile: Op) -> Any:
    """The form object of the tile's `tilec.mma_form` (a Tcgen05Mma or an mma.sp Form), made again only
    when the op's attributes (or the tile's engine) changed since the last call: each pass after verify
    asks for it, and a form checks its ISA rules when made."""
    op = required(tile, "tilec.mma_form", "verify")
    engine = tile.attrs["engine"]
    cached = op.__dict__.get("_form")
    if cached is not None and cached[0] == engine and cached[1] == op.attrs:
        return cached[2]
    form = _mma_form(tile, op.attrs)
    op.__dict__["_form"] = (engine, snapshot_attrs(op.attrs), form)
    return form


def _mma_form(tile: Op, a: dict[str, Any]) -> Any:
    if tile.attrs["engine"] == "tcgen05":
        from ..isa.tcgen05_forms import Tcgen05Mma

        return Tcgen05Mma(**{f: a[f] for f in _TCGEN05_FORM_FIELDS if f in a})
    from ..isa.mma_sp.forms import find_form

    return find_form(a["shape"], a["a"], a["b"], a["c"], a["d"], kind=a.get("kind"),
                     satfinite=a.get("satfinite", False), scale_type=a.get("scale_type"),
                     scale_vec=a.get("block_scale"))


def scale_type(tile: Op) -> str | None:
    return required(tile, "tilec.mma_form", "verify").attrs.get("scale_type")


# ---- layout-selection -------------------------------------------------------------------------------

def operand_extents(spec: TileSpec, name: str) -> tuple[int, int]:
    """(MN, K) elements of operand `name` held by one CTA for one MMA's full K loop."""
    sparse = spec.sparsity is not None
    if name == "A":
        return spec.m // spec.cta_group, (spec.total_k // 2 if sparse else spec.total_k)
    return spec.n // spec.cta_group if spec.cta_group == 2 else spec.n, spec.total_k


def smem_layout(tile: Op, lay_op: Op, spec: TileSpec | None = None):
    """The CanonicalLayout (compiler/layout.py) a `tilec.smem_layout` op describes."""
    from ..layout import canonical_layout, container_bits_for

    spec = spec or tile_spec(tile)
    name = lay_op.sym or ""
    o = spec.operands[name]
    mn, _ = operand_extents(spec, name)
    k_block = lay_op.attrs["k_block"]
    k = k_block // 2 if (name == "A" and spec.sparsity is not None) else k_block
    return canonical_layout(o.dtype, lay_op.attrs["major"], lay_op.attrs["swizzle"], mn, k,
                            container_bits=container_bits_for(o.dtype, tile.attrs["kind"]))


def pipeline(tile: Op) -> dict[str, int]:
    return dict(required(tile, "tilec.pipeline", "layout-selection").attrs)


_TMEM_FIELDS = ("d", "d_columns", "meta", "meta_columns", "sfa", "sfa_columns", "sfb", "sfb_columns", "a",
                "a_columns", "scratch")


def tmem_plan_attrs(plan) -> dict[str, int]:
    """The printed form of a TmemPlan: D, then each region that exists (base and columns), and the
    allocation (PTX 9.7.16.7.1: a power of two in [32, 512] columns)."""
    out = {"d": plan.d, "d_columns": plan.d_columns}
    if plan.scratch is not None:
        out["scratch"] = plan.scratch
    for region in ("meta", "sfa", "sfb", "a"):
        if getattr(plan, region) is not None:
            out[region] = getattr(plan, region)
            out[f"{region}_columns"] = getattr(plan, f"{region}_columns")
    out["allocated"] = plan.allocated
    return out


def tmem_plan(tile: Op):
    from .plans import TmemPlan

    a = required(tile, "tilec.tmem_plan", "layout-selection").attrs
    return TmemPlan(**{f: a[f] for f in _TMEM_FIELDS if f in a})


def scale_layouts(tile: Op, spec: TileSpec | None = None, form: Any = None):
    """The SFA/SFB TMEM layouts of a block-scaled tcgen05 tile (compiler/isa/tmem.py), or None."""
    spec = spec or tile_spec(tile)
    form = form or mma_form(tile)
    if form.block_scale is None:
        return None
    # isa.tmem and plans are imported where used, after the early returns: `tilec opt X.tile` imports
    # this module and does not load them
    from ..isa.tmem import data_path, scale_layouts as layouts

    dp = data_path(spec.m, spec.cta_group, spec.sparsity is not None, spec.ws)
    return layouts(tile.attrs["kind"], form.block_scale, dp, spec.n, k96=form.k96)


# ---- sparse-metadata-packing ------------------------------------------------------------------------

def _table(meta: Op, lanes: int | None = None) -> tuple:
    """The `words` of a static tilec.metadata reshaped to its `period` (row-major), each entry of an
    mma.sp table being the words of the warp's `lanes` lanes."""
    dims = list(meta.attrs["period"]) + ([lanes] if lanes else [])
    flat = [int(w) for w in meta.attrs["words"]]

    def shape(items: list[int], dims: list[int]):
        if len(dims) == 1:
            return tuple(items)
        step = len(items) // dims[0]
        return tuple(shape(items[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0]))

    return shape(flat, dims)


def tcgen05_metadata(tile: Op):
    meta = tile.op("tilec.metadata")
    if meta is None:
        return None
    from ..isa.tmem import METADATA_CHUNK
    from .plans import Tcgen05Metadata

    kind = tile.attrs["kind"]
    table = _table(meta) if meta.attrs["source"] == "static" else ()
    return Tcgen05Metadata(meta.attrs["source"], kind, METADATA_CHUNK[kind], meta.attrs["words_per_row"], table)


def static_metadata(tile: Op):
    """The [pm][pk][32] word table of an mma.sp tile's static metadata, or None."""
    meta = tile.op("tilec.metadata")
    if meta is None or meta.attrs["source"] != "static":
        return None
    return _table(meta, lanes=32)


# ---- all of it ----------------------------------------------------------------------------------

def facts(tile: Op) -> dict[str, Any]:
    """Everything the passes so far determined about `tile`, by the names the emitters use."""
    out: dict[str, Any] = {}
    if tile.op("tilec.mma_form") is None:
        return out
    spec = tile_spec(tile)
    form = out["form"] = mma_form(tile)
    out["scale_type"] = scale_type(tile)
    if tile.attrs["engine"] == "tcgen05":
        if tile.op("tilec.pipeline") is not None:
            p = pipeline(tile)
            out["k_block"], out["smem_bytes"] = p["k_block"], p["smem_bytes"]
            out["tmem_plan"] = tmem_plan(tile)
        scales = scale_layouts(tile, spec, form)
        if scales is not None:
            out["scale_layouts"] = scales
        meta = tcgen05_metadata(tile)
        if meta is not None:
            out["tcgen05_metadata"] = meta
    else:
        out["static_metadata"] = static_metadata(tile)
    return out


class _Facts(dict):
    """`facts`, with the InstrDesc (decoded from tilec.instr_desc) made when asked for."""

    def __init__(self, tile: Op):
        super().__init__(facts(tile))
        self.tile = tile

    def __missing__(self, key: str):
        idesc = self.tile.op("tilec.instr_desc")
        if key != "idesc" or idesc is None:
            raise KeyError(key)
        from ..descriptors.instr import InstrDesc

        self[key] = InstrDesc.decode(int(idesc.attrs["value"]), self.tile.attrs["kind"])
        return self[key]


class OpView:
    """An op as the emitters read it: its printed parts, plus `facts` rebuilt from them (a smem layout
    op's CanonicalLayout). Reading only: the op is the IR."""

    def __init__(self, op: Op, facts: dict[str, Any] | None = None):
        self.ir = op
        self.name, self.sym, self.attrs, self.loc, self.locs = op.name, op.sym, op.attrs, op.loc, op.locs
        self.facts = facts or {}


class _LayoutView(OpView):
    """A tilec.smem_layout op whose CanonicalLayout (facts["layout"]) is made when first read. It keeps
    the tile op and its spec, not the tile's view (which holds this view: a reference cycle would leave
    every compile's IR to the cyclic garbage collector)."""

    def __init__(self, op: Op, tile: "TileView"):
        super().__init__(op)
        self._tile_op, self._tile_spec = tile.ir, tile.payload

    @property
    def facts(self) -> dict[str, Any]:       # type: ignore[override]
        if "layout" not in self._facts:
            self._facts["layout"] = smem_layout(self._tile_op, self.ir, self._tile_spec)
        return self._facts

    @facts.setter
    def facts(self, value: dict[str, Any]) -> None:
        self._facts = value


class TileView(OpView):
    """A tile op with `payload` (its TileSpec) and `facts` (form, k_block, smem_bytes, tmem_plan,
    scale_layouts, tcgen05_metadata / static_metadata, idesc: see `facts`) rebuilt from its attributes,
    and its smem layout ops with their CanonicalLayout. What every emitter takes."""

    def __init__(self, tile: Op):
        self.payload: Any = tile_spec(tile)        # a TileSpec (Any: emitters read fields a verified tile has)
        super().__init__(tile, _Facts(tile))
        self.body = [self._wrap(o) for o in tile.body]

    def _wrap(self, o: Op) -> OpView:
        if o.name == "tilec.smem_layout":
            return _LayoutView(o, self)
        return OpView(o)

    def ops(self, name: str, sym: str | None = None) -> list[OpView]:
        return [o for o in self.body if o.name == name and (sym is None or o.sym == sym)]

    def op(self, name: str, sym: str | None = None) -> OpView | None:
        found = self.ops(name, sym)
        return found[0] if found else None


def tile_view(tile: "Op | TileView") -> TileView:
    """The one view of a tile op that codegen (compiler/ptx/) and the emulator read."""
    return tile if isinstance(tile, TileView) else TileView(tile)
