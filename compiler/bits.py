"""Power-of-two integer arithmetic, used by layout selection and the PTX emitters alike.

A leaf module (imports nothing from tilec), so any layer may use it.
"""
from __future__ import annotations


def is_pow2(x: object) -> bool:
    """Is `x` a positive power of two (an int, not a bool)?"""
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def log2(x: int) -> int:
    """The exponent of a power of two; ValueError for anything else."""
    if not is_pow2(x):
        raise ValueError(f"{x!r} is not a power of two")
    return x.bit_length() - 1
