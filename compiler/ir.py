"""tilec IR: ops with typed attributes, source locations and nested bodies; an MLIR-like printer and
a verifier that runs between passes.

    tilec.module {target = "sm_100a"} {
      tilec.tile @gemm {engine = "tcgen05", m = 128, n = 256, k = 16, k_total = 64, ...} {
        tilec.operand @A {dtype = "bf16", space = "smem", major = "K", swizzle = "128B"}
        tilec.smem_layout @A {lbo = 16, sbo = 1024, ...}           // layout-selection
        tilec.smem_desc @A {k_step = 0, value = 0x4000004000010000} // descriptor-materialization
        tilec.instr_desc {kind = "f16", value = 0x08400490}
      }
      ptx.kernel @gemm {entry = "gemm", lines = 212}              // ptx-emission
    }

Every op kind is declared in `OP_DEFS` (required attributes and their Python types, the ops allowed in
its body); `verify_module` checks a module against it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from .diagnostics import Loc


class Hex(int):
    """An integer attribute printed in hexadecimal (descriptor values)."""

    def __repr__(self) -> str:
        return hex(self)


@dataclass
class Op:
    name: str
    sym: str | None = None                 # the @symbol, if any
    attrs: dict[str, Any] = field(default_factory=dict)
    body: list["Op"] = field(default_factory=list)
    loc: Loc | None = None
    payload: Any = None                    # non-printed input data (the TileSpec of a tile)
    facts: dict[str, Any] = field(default_factory=dict)   # non-printed analysis results of passes

    def ops(self, name: str, sym: str | None = None) -> list["Op"]:
        return [o for o in self.body if o.name == name and (sym is None or o.sym == sym)]

    def op(self, name: str, sym: str | None = None) -> "Op | None":
        found = self.ops(name, sym)
        return found[0] if found else None

    def walk(self) -> Iterator["Op"]:
        yield self
        for o in self.body:
            yield from o.walk()


# name -> (required attrs {name: types}, allowed body op names or None for "no body")
OP_DEFS: dict[str, tuple[dict[str, tuple], tuple[str, ...] | None]] = {
    "tilec.module": ({"target": (str,)}, ("tilec.tile", "ptx.kernel")),
    "tilec.tile": ({"engine": (str,), "m": (int,), "n": (int,), "k": (int,), "k_total": (int,)},
                   ("tilec.operand", "tilec.sparsity", "tilec.smem_layout", "tilec.smem_desc",
                    "tilec.instr_desc", "tilec.metadata", "tilec.zero_column_mask", "tilec.mma_form")),
    "tilec.operand": ({"dtype": (str,), "space": (str,)}, None),
    "tilec.sparsity": ({"ratio": (str,), "metadata": (str,), "selector": (int,)}, None),
    "tilec.smem_layout": ({"major": (str,), "swizzle": (str,), "lbo": (int,), "sbo": (int,),
                           "offset": (int,), "size": (int,), "k_block": (int,)}, None),
    "tilec.smem_desc": ({"values": (tuple,)}, None),
    "tilec.instr_desc": ({"kind": (str,), "value": (int,)}, None),
    "tilec.metadata": ({"source": (str,)}, None),
    "tilec.zero_column_mask": ({"value": (int,)}, None),
    "tilec.mma_form": ({"opcode": (str,)}, None),
    "ptx.kernel": ({"entry": (str,), "lines": (int,)}, None),
}


class IRError(Exception):
    pass


def verify_module(module: Op) -> None:
    """Structural checks: known ops, required attributes of the right type, legal nesting, unique syms."""
    def check(op: Op, parent: Op | None):
        spec = OP_DEFS.get(op.name)
        if spec is None:
            raise IRError(f"unknown op '{op.name}'")
        required, allowed = spec
        for key, types in required.items():
            if key not in op.attrs:
                raise IRError(f"'{op.name}' is missing attribute '{key}'")
            if not isinstance(op.attrs[key], types):
                raise IRError(f"'{op.name}' attribute '{key}' has type {type(op.attrs[key]).__name__}")
        if allowed is None and op.body:
            raise IRError(f"'{op.name}' cannot have a body")
        seen = set()
        for child in op.body:
            if allowed is not None and child.name not in allowed:
                raise IRError(f"'{child.name}' is not allowed inside '{op.name}'")
            if child.sym is not None and child.name in ("tilec.tile", "tilec.operand", "ptx.kernel"):
                key = (child.name, child.sym)
                if key in seen:
                    raise IRError(f"duplicate '{child.name} @{child.sym}'")
                seen.add(key)
            check(child, op)

    if module.name != "tilec.module":
        raise IRError("top-level op must be 'tilec.module'")
    check(module, None)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Hex):
        return f"0x{int(v):0{8 if v < 1 << 32 else 16}x}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if v is None:
        return "none"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return repr(v)


def print_op(op: Op, indent: int = 0, with_locs: bool = False) -> str:
    pad = "  " * indent
    head = pad + op.name + (f" @{op.sym}" if op.sym else "")
    if op.attrs:
        head += " {" + ", ".join(f"{k} = {_fmt(v)}" for k, v in op.attrs.items()) + "}"
    if with_locs and op.loc:
        head += f" loc({op.loc})"
    if not op.body:
        return head
    inner = "\n".join(print_op(c, indent + 1, with_locs) for c in op.body)
    return f"{head} {{\n{inner}\n{pad}}}"
