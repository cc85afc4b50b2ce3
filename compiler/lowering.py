"""FileSpec -> IR module. The tile's spec rides along as the tile op's payload, so passes can ask it
for the source location of any field."""
from __future__ import annotations

from .ir import Op
from .spec import FileSpec

# TileSpec fields mirrored as tile-op attributes (printed in IR dumps) when set.
_TILE_ATTRS = ("kind", "cta_group", "ws", "collector", "ashift", "block_scale", "negate_a", "negate_b",
               "saturate", "max_shift", "scale_input_d", "disable_output_lane")
_DEFAULTS = {"cta_group": 1, "ws": False, "ashift": False, "negate_a": False, "negate_b": False,
             "saturate": False, "max_shift": 0}


def lower(spec: FileSpec) -> Op:
    attrs = {"target": spec.target}
    if spec.ptx_version:
        attrs["ptx_version"] = f"{spec.ptx_version[0]}.{spec.ptx_version[1]}"
    module = Op("tilec.module", attrs=attrs, loc=spec.loc("target"), locs=dict(spec.locs), payload={"spec": spec})
    for t in spec.tiles:
        a = {"engine": t.engine, "m": t.m, "n": t.n, "k": t.k, "k_total": t.total_k}
        for key in _TILE_ATTRS:
            v = getattr(t, key)
            if v is not None and _DEFAULTS.get(key, None) != v:
                a[key] = v
        tile = Op("tilec.tile", t.name, a, loc=t.loc("tile"), locs=dict(t.locs), payload=t)
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
            tile.body.append(Op("tilec.sparsity", None, sa, loc=t.loc("sparsity")))
        module.body.append(tile)
    return module
