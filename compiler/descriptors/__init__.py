"""Descriptors of the tcgen05 family, each encodable, decodable and explainable.

- `InstrDesc`: the 32-bit instruction descriptor (PTX ISA 9.7.16.4.2, Tables 42-44).
- `SmemDesc`: the 64-bit shared-memory matrix descriptor (PTX ISA 9.7.16.4.1).
- `ZeroColumnMask`: the 64-bit zero-column mask descriptor (PTX ISA 9.7.16.4.3).

Loaded lazily so that importing one does not pay for the others.
"""
from __future__ import annotations

from ..lazy import lazy_getattr

_WHERE = {
    "InstrDesc": ".instr",
    "SmemDesc": ".smem",
    "ZeroColumnMask": ".zero_column_mask",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_getattr(__name__, _WHERE)
