"""Element encodings for the tcgen05 reference model: raw bit codes <-> numbers.

The model reads *codes* (the integers that sit in shared or tensor memory) and decodes them here,
so that a wrong bit placement shows up as a wrong number, never as a silently "helpful" cast.

Decoding goes through ml_dtypes / numpy (one 2**bits lookup table per narrow type, built on first
use). Every type name is a key of `compiler.isa.types.TYPES` (PTX spellings).

Storage of one operand element in shared memory (`smem_element_slots`): every canonical layout
(PTX ISA 9.7.16.3.3) is built from 16-byte chunks holding `T` elements each. The element at slot
`t` of a chunk occupies bits [t*bits, (t+1)*bits) of the chunk read as a little-endian 128-bit
integer. For all full-byte types T = 128 / bits. The sub-byte types differ by MMA kind:

* `.kind::f8f6f4` and `.kind::mxf8f6f4` (PTX 9.7.16.10.4.4, Figures 202/203 "packed along with
  padding"): 16 fp4 / fp6 values are packed contiguously in the low 8 / 12 bytes of a 16-byte
  chunk and the rest is padding, i.e. T = 16 and the layout is sized as if elements were 8-bit.
  This is exactly what TMA writes for `.b4x16_p64` / `.b6x16_p32` (PTX 5.5.1.1.1; CUDA
  `CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B` / `16U6_ALIGN16B`), and why CUTLASS allocates such
  operands as uint8 (`float_e2m1_unpacksmem_t`, "SmemAllocType = uint8_t").
* `.kind::mxf4` and `.kind::mxf4nvf4` (PTX 9.7.16.10.4.6): "two 4-bit elements in a 8-bit
  container, with no padding", i.e. T = 32.

The figures are images; the bit order inside the packed run (element t at bit 4t / 6t, low nibble
first) is the natural little-endian reading, the one TMA's ".b4x16" packing and `__nv_fp4x2`
(low nibble = first element) use. It is an assumption to confirm on silicon (docs/verification.md).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..diagnostics import SpecError
from ..isa.types import TYPES

# Kinds whose fp6/fp4 operands use the padded 16-per-chunk storage (PTX 9.7.16.10.4.4).
_PADDED_SUBBYTE_KINDS = frozenset({"f8f6f4", "mxf8f6f4"})
# Kinds whose fp4 operands are packed two per byte (PTX 9.7.16.10.4.6).
_PACKED_FP4_KINDS = frozenset({"mxf4", "mxf4nvf4"})

# tf32 lives in a 32-bit container; the tensor core uses sign, 8 exponent and the top 10 mantissa
# bits (PTX 5.2.3 "tf32 ... same range as f32 with reduced precision (>= 10 bits)"). The model
# ignores the low 13 bits (truncation); inputs that are exact tf32 are unaffected.
_TF32_KEEP_MASK = 0xFFFFE000

_LUT_CACHE: dict[str, np.ndarray] = {}


def _type(name: str):
    t = TYPES.get(name)
    if t is None:
        raise SpecError(f"unknown element type '{name}'")
    return t


def _np_dtype(name: str) -> np.dtype:
    np_name = _type(name).np_name
    if hasattr(np, np_name):
        return np.dtype(getattr(np, np_name))
    return np.dtype(getattr(ml_dtypes, np_name))


def _lut(name: str) -> np.ndarray:
    """float64 value of every code of a <= 8-bit float type (NaN where the format has NaN)."""
    lut = _LUT_CACHE.get(name)
    if lut is None:
        bits = _type(name).bits
        codes = np.arange(1 << bits, dtype=np.uint8)
        lut = codes.view(_np_dtype(name)).astype(np.float64)
        _LUT_CACHE[name] = lut
    return lut


def decode(codes, type_name: str) -> np.ndarray:
    """Numbers for raw codes: float64 for float/scale types, int64 for integer types."""
    t = _type(type_name)
    codes = np.asarray(codes, dtype=np.uint64)
    mask = np.uint64((1 << t.bits) - 1)
    codes = codes & mask
    if t.is_int:
        values = codes.astype(np.int64)
        if t.signed:
            sign = np.int64(1 << (t.bits - 1))
            values = np.where(values >= sign, values - (sign << np.int64(1)), values)
        return values
    if type_name == "ue4m3":
        # UE4M3 scale factors are e4m3 with the sign bit fixed at 0 (PTX 9.7.16.10.7, Table 54).
        if np.any(codes & np.uint64(0x80)):
            raise SpecError("a ue4m3 scale factor has its sign bit set (unsigned format)")
        return _lut("ue4m3")[codes.astype(np.intp)]
    if type_name == "tf32":
        kept = (codes & np.uint64(_TF32_KEEP_MASK)).astype(np.uint32)
        return kept.view(np.float32).astype(np.float64)
    if t.bits <= 8:
        return _lut(type_name)[codes.astype(np.intp)]
    if t.bits == 16:
        return codes.astype(np.uint16).view(_np_dtype(type_name)).astype(np.float64)
    return codes.astype(np.uint32).view(np.float32).astype(np.float64)


def encode(values, type_name: str) -> np.ndarray:
    """Raw codes (uint64) of `values` rounded to nearest-even in `type_name` (for tests/sweeps)."""
    t = _type(type_name)
    values = np.asarray(values)
    if t.is_int:
        ints = values.astype(np.int64)
        lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.signed else (0, (1 << t.bits) - 1)
        if np.any(ints < lo) or np.any(ints > hi):
            raise SpecError(f"value out of range for {type_name}")
        return (ints & ((1 << t.bits) - 1)).astype(np.uint64)
    if type_name == "tf32":
        bits = values.astype(np.float32).view(np.uint32)
        return (bits & np.uint32(_TF32_KEEP_MASK)).astype(np.uint64)
    stored = values.astype(np.float64).astype(_np_dtype(type_name))
    width = stored.dtype.itemsize
    raw = stored.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[width]).astype(np.uint64)
    return raw & np.uint64((1 << t.bits) - 1)


def representable(type_name: str, rng: np.random.Generator, shape, *, limit: float | None = None):
    """Random exactly representable values of `type_name` (finite), optionally |x| <= limit."""
    t = _type(type_name)
    if t.is_int:
        lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1))) if t.signed else (0, 1 << t.bits)
        return rng.integers(lo, hi, size=shape).astype(np.int64)
    if t.bits <= 8:
        table = _lut(type_name)
        ok = np.isfinite(table)
        if limit is not None:
            ok &= np.abs(table) <= limit
        return rng.choice(table[ok], size=shape)
    # 16/32-bit floats: small integers times a power of two are exact in every such format.
    mant = rng.integers(-64, 65, size=shape).astype(np.float64)
    return mant * 2.0 ** rng.integers(-6, 1, size=shape)


def smem_element_slots(type_name: str, kind: str) -> tuple[int, int]:
    """(value bits, elements per 16-byte chunk) of an A/B element in shared memory (see module doc)."""
    bits = _type(type_name).bits
    if bits in (4, 6) and kind in _PADDED_SUBBYTE_KINDS:
        return bits, 16          # PTX 9.7.16.10.4.4: 16 values + padding per 16 bytes
    if bits == 4 and kind in _PACKED_FP4_KINDS:
        return bits, 32          # PTX 9.7.16.10.4.6: two per byte, no padding
    if bits in (4, 6):
        raise SpecError(f"{type_name} operands are not valid for .kind::{kind}")
    return bits, 128 // bits


def tmem_element_slots(type_name: str, kind: str) -> tuple[int, int, int]:
    """(container bits, elements per 32-bit column, value's lowest bit in its container) of A in TMEM.

    PTX 9.7.16.10.4.3: under .kind::f8f6f4/mxf8f6f4 each fp4/fp6 element sits in its own 8-bit
    container, four containers per 32-bit word. Where the value sits inside the byte is drawn in
    Figures 199/200 (images); the model uses the warp-level `mma .kind::f8f6f4` register format
    (PTX 9.7.14.5.14: e3m2/e2m3 in bits 5:0, e2m1 in bits 5:2) -- an assumption. Full-byte types
    are packed back to back (f16: 2, 8-bit: 4, tf32: 1 per column); mxf4 fp4 two per byte.
    """
    bits = _type(type_name).bits
    if bits in (4, 6) and kind in _PADDED_SUBBYTE_KINDS:
        return 8, 4, 2 if bits == 4 else 0
    if bits == 4 and kind in _PACKED_FP4_KINDS:
        return 4, 8, 0
    return bits, 32 // bits, 0


def round_to(values: np.ndarray, d_type: str, *, saturate: bool = False) -> np.ndarray:
    """Round exact (float64 / int64) results to the D type once, as the final write to TMEM.

    f32/f16: round-to-nearest-even (numpy's correctly rounded casts). s32 (kind::i8): wraps modulo
    2**32, or clamps to [-2**31, 2**31-1] when the idesc saturate bit is set (Table 42, bit 3).
    """
    if d_type == "f32":
        return np.asarray(values, dtype=np.float64).astype(np.float32)
    if d_type == "f16":
        return np.asarray(values, dtype=np.float64).astype(np.float16)
    if d_type == "s32":
        ints = np.asarray(values, dtype=np.int64)
        if saturate:
            return np.clip(ints, -(1 << 31), (1 << 31) - 1).astype(np.int32)
        return ((ints + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    raise SpecError(f"'{d_type}' is not a tcgen05 D type")
