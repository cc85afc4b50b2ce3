"""Element types: one row per type, the single source of truth for names and widths.

Names are the PTX spellings (PTX ISA 5.2 "Fundamental types" and the tcgen05 / mma type tables).
`np_name` is the host dtype used for data (numpy, or ml_dtypes for the narrow float formats).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElemType:
    name: str          # PTX name, as written in the DSL
    bits: int          # width of one element's value
    category: str      # "float" | "int" | "scale"
    signed: bool
    np_name: str       # numpy / ml_dtypes dtype name for host data

    @property
    def is_float(self) -> bool:
        return self.category == "float"

    @property
    def is_int(self) -> bool:
        return self.category == "int"


TYPES: dict[str, ElemType] = {t.name: t for t in (
    ElemType("f16", 16, "float", True, "float16"),
    ElemType("bf16", 16, "float", True, "bfloat16"),
    ElemType("tf32", 32, "float", True, "float32"),    # stored in a 32-bit container
    ElemType("f32", 32, "float", True, "float32"),
    ElemType("e4m3", 8, "float", True, "float8_e4m3fn"),
    ElemType("e5m2", 8, "float", True, "float8_e5m2"),
    ElemType("e2m3", 6, "float", True, "float6_e2m3fn"),
    ElemType("e3m2", 6, "float", True, "float6_e3m2fn"),
    ElemType("e2m1", 4, "float", True, "float4_e2m1fn"),
    ElemType("s8", 8, "int", True, "int8"),
    ElemType("u8", 8, "int", False, "uint8"),
    ElemType("s4", 4, "int", True, "int4"),
    ElemType("u4", 4, "int", False, "uint4"),
    ElemType("s32", 32, "int", True, "int32"),
    ElemType("ue8m0", 8, "scale", False, "float8_e8m0fnu"),
    ElemType("ue4m3", 8, "scale", False, "float8_e4m3fn"),  # sign bit always 0
)}


def lookup(name: str) -> ElemType | None:
    return TYPES.get(name)
