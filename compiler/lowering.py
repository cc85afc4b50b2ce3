"""FileSpec -> IR module: every field of every tile becomes a printed attribute or op, and every field's
source location a named location of the tile op, so the IR text alone is the program
(compiler/passes/derive.py rebuilds the TileSpec from it)."""
from __future__ import annotations

from .ir import Hex, Op
from .spec import FileSpec, TileSpec

# TileSpec fields mirrored as tile-op attributes when they differ from their defaults.
_TILE_ATTRS = ("kind", "cta_group", "ws", "collector", "ashift", "block_scale", "negate_a", "negate_b",
               "saturate", "max_shift", "scale_input_d", "disable_output_lane")
_DEFAULTS = {"cta_group": 1, "ws": False, "ashift": False, "negate_a": False, "negate_b": False,
             "saturate": False, "max_shift": 0}
_SCHEDULE_FIELDS = ("cta_m", "cta_n", "cta_k", "warps_m", "warps_n", "stages", "mma", "cluster")
# optional schedule fields: printed only when they differ from their defaults (no value: the kernel's own)
_SCHEDULE_OPTIONAL = {"persistent": "none", "raster": None, "split_k": 1, "accumulators": None, "promote": None}


def lower(spec: FileSpec) -> Op:
    attrs = {"target": spec.target}
    if spec.ptx_version:
        attrs["ptx_version"] = f"{spec.ptx_version[0]}.{spec.ptx_version[1]}"
    module = Op("tilec.module", attrs=attrs, loc=spec.loc("target"), locs=dict(spec.locs))
    for t in spec.tiles:
        module.body.append(lower_tile(t))
    return module


def lower_tile(t: TileSpec) -> Op:
    a = {"engine": t.engine, "m": t.m, "n": t.n, "k": t.k, "k_total": t.total_k}
    for key in _TILE_ATTRS:
        v = getattr(t, key)
        if v is not None and _DEFAULTS.get(key, None) != v:
            a[key] = tuple(Hex(x) for x in v) if key == "disable_output_lane" else v
    # k_total is always printed (the tile's whole K); whether a loop statement gave it is in the
    # locations ("loop.K"), which is all a later pass asks it for (which statement to blame).
    tile = Op("tilec.tile", t.name, a, loc=t.loc("tile"), locs=dict(t.locs))
    for name, o in t.operands.items():
        oa = {"dtype": o.dtype, "space": o.space}
        if o.major:
            oa["major"] = o.major
        if o.swizzle:
            oa["swizzle"] = o.swizzle
        tile.body.append(Op("tilec.operand", name, oa, loc=t.loc(name)))
    if t.sparsity:
        s = t.sparsity
        sa = {"ratio": s.ratio, "metadata": s.metadata, "selector": s.selector}
        if s.pattern:
            sa["pattern"] = s.pattern
        if s.rows:
            sa["rows"] = tuple(tuple(tuple(c) for c in r) for r in s.rows)
        tile.body.append(Op("tilec.sparsity", None, sa, loc=t.loc("sparsity")))
    if t.zero_columns is not None:
        z = t.zero_columns
        za: dict = {}
        if z.value is not None:
            za["value"] = Hex(z.value)
        if z.columns is not None:
            za["columns"] = tuple(tuple(c) for c in z.columns)
        za["shift"] = z.shift
        tile.body.append(Op("tilec.zero_columns", None, za, loc=t.loc("zero_columns")))
    if t.schedule is not None:
        sa = {f: getattr(t.schedule, f) for f in _SCHEDULE_FIELDS}
        for f, default in _SCHEDULE_OPTIONAL.items():
            v = getattr(t.schedule, f)
            if v != default or type(v) is not type(default):
                sa[f] = v
        tile.body.append(Op("tilec.schedule", None, sa, loc=t.loc("schedule")))
    if t.epilogue is not None:
        e = t.epilogue
        ea = {k: getattr(e, k) for k in ("alpha", "beta") if getattr(e, k) is not None}
        ea.update(bias=e.bias, act=e.act)
        for k in ("acc", "scale", "bias_type"):
            if getattr(e, k) is not None:
                ea[k] = getattr(e, k)
        tile.body.append(Op("tilec.epilogue", None, ea, loc=t.loc("epilogue")))
    return tile
