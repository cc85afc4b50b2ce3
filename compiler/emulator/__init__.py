"""The CPU emulator of tilec's PTX: one parser of the PTX subset the kernel writers emit, one machine that
runs it, and host helpers that build a random problem for a compiled tile, run its kernel and compute the
numpy reference.

- `parse`: `parse_module` / `parse_kernel` (no numpy).
- `warp`: the one machine (threads, warps, CTAs, clusters, divergent branches; registers, predicates,
  shared and global memory; ALU, ld/st, cp.async, ldmatrix, mma.sp, mbarrier, TMA, wgmma.mma_async.sp),
  seeded scheduling.
- `tcgen05`: the warp machine plus Tensor Memory and the tcgen05 family (alloc, st/ld, mma through
  compiler.sim, commit, .ashift).
- `sparse_host`, `tcgen05`: problems in each kernel's ABI and the reference D.
- `emulate(result, tile, shape=...)`: any engine, one call (`tilec run --emulate` calls it).

Imported lazily: `import compiler.emulator` costs nothing until a name is used.
"""
from __future__ import annotations

import importlib

from .parse import EmulationError, parse_kernel, parse_module

_WHERE = {
    "emulate": ".api",
    "Emulation": ".api",
    "Deadlock": ".warp",
    "WarpMachine": ".warp",
    "FlatMemory": ".memory",
}

__all__ = sorted([*_WHERE, "EmulationError", "parse_kernel", "parse_module"])


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(name)
