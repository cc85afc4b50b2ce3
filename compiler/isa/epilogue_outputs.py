"""What the fused epilogue may convert its accumulators into, and the PTX that does it: the one table of
(accumulator, D type, C, bias type, output scale) legality (compiler/passes/epilogue_lowering.py reads it
and blames the field; the kernels emit the templates as they are).

Accumulators (PTX 9.7.14.6 mma.sp, 9.7.15.6.3 wgmma.mma_async.sp): f32 for float inputs, s32 for integer
ones. The epilogue's arithmetic is f32; s32 accumulators enter it through `cvt.rn.f32.s32` (round to
nearest even: exact up to 2^24), except for an s32 D, which is stored as the MMA leaves it.

Conversions into D (PTX 9.7.9.21 cvt, 9.7.9.22 cvt.pack):
- f16 / bf16: `cvt.rn.{f16x2,bf16x2}.f32 d, a, b` (a into the upper half, b the lower; sm_80, PTX 7.0).
- e4m3: `cvt.rn.satfinite.e4m3x2.f32 d, a, b` (a 16-bit d, a into the upper byte; .satfinite: a finite
  value beyond the largest finite e4m3 (448) becomes +-448, NaN stays NaN; sm_89+, PTX 7.8).
- s8: `cvt.rni.s32.f32` (round to the nearest integer, ties to even; a float-to-integer cvt clamps to the
  destination's range and turns NaN into 0), then `cvt.pack.sat.s8.s32.b32 d, a, b, c`, which saturates
  a and b to [-128, 127] and packs d = c << 16 | a << 8 | b (sm_72+, PTX 6.5).
A 1-byte D packs four elements into one 32-bit word ({w} from {x0}..{x3}, x0 in the low byte: D's byte
order), four words making one 16-byte store; two elements go into the low half of {w} for the kernels'
pair stores. An output scale (`epilogue scale=`) multiplies the activation's result before these
conversions: it is the quantisation scale of a narrow D (s8, e4m3), not an output of the other types.

The bias vector (`epilogue bias_type=`) is read in its own type and widened to f32 when loaded: f16 by
`cvt.f32.f16` (exact), bf16 by moving its 16 bits to the top of a 32-bit word (bf16 is the upper half of an
f32: exact, and no sm_90 `cvt.f32.bf16` needed).
"""
from __future__ import annotations

from dataclasses import dataclass

from .targets import TARGETS, Version

ACCUMULATORS = ("f32", "s32")


@dataclass(frozen=True)
class OutputType:
    """One D type of the fused epilogue."""
    name: str
    accumulators: tuple[str, ...]      # accumulator types it is converted from
    arithmetic: bool                   # alpha, beta*C, bias, act (f32) may apply before the store
    scaled: bool                       # takes the output scale (scale=)
    pair: str | None = None            # cvt packing an element pair (2-byte D), as `cvt d, hi, lo`
    quad: tuple[str, ...] = ()         # templates packing {x0}..{x3} into {w} (1-byte D)
    half: tuple[str, ...] = ()         # templates packing {x0}, {x1} into the low 16 bits of {w}
    min_sm: int = 80
    min_ptx: Version = (7, 0)

    @property
    def bytes(self) -> int:
        from .types import TYPES

        return TYPES[self.name].bits // 8

    def target_problem(self, target: str) -> str | None:
        """Why `target` cannot convert into this type (None: it can)."""
        t = TARGETS.get(target)
        if t is not None and t.sm < self.min_sm:
            return f"the conversion into {self.name} needs sm_{self.min_sm} or newer, not {target}"
        return None


_E4M3_PAIR = "cvt.rn.satfinite.e4m3x2.f32"
# {x0} .. {x3} -> {w}: the conversions put x1 above x0 (a = x1, b = x0), so byte e of {w} is element e
_E4M3_QUAD = (f"{_E4M3_PAIR} {{h0}}, {{x1}}, {{x0}}", f"{_E4M3_PAIR} {{h1}}, {{x3}}, {{x2}}",
              "mov.b32 {w}, {{{h0}, {h1}}}")
_E4M3_HALF = (f"{_E4M3_PAIR} {{h0}}, {{x1}}, {{x0}}", "cvt.u32.u16 {w}, {h0}")
_S8_QUAD = ("cvt.rni.s32.f32 {i0}, {x2}", "cvt.rni.s32.f32 {i1}, {x3}",
            "cvt.pack.sat.s8.s32.b32 {w}, {i1}, {i0}, 0",               # x3 << 8 | x2
            "cvt.rni.s32.f32 {i0}, {x0}", "cvt.rni.s32.f32 {i1}, {x1}",
            "cvt.pack.sat.s8.s32.b32 {w}, {i1}, {i0}, {w}")             # (x3 x2) << 16 | x1 << 8 | x0
_S8_HALF = ("cvt.rni.s32.f32 {i0}, {x0}", "cvt.rni.s32.f32 {i1}, {x1}",
            "cvt.pack.sat.s8.s32.b32 {w}, {i1}, {i0}, 0")

OUTPUTS: dict[str, OutputType] = {o.name: o for o in (
    OutputType("f32", ("f32",), arithmetic=True, scaled=False),
    OutputType("f16", ("f32",), arithmetic=True, scaled=False, pair="cvt.rn.f16x2.f32"),
    OutputType("bf16", ("f32",), arithmetic=True, scaled=False, pair="cvt.rn.bf16x2.f32"),
    OutputType("s32", ("s32",), arithmetic=False, scaled=False),
    OutputType("s8", ("f32", "s32"), arithmetic=True, scaled=True, quad=_S8_QUAD, half=_S8_HALF,
               min_sm=72, min_ptx=(6, 5)),
    OutputType("e4m3", ("f32",), arithmetic=True, scaled=True, quad=_E4M3_QUAD, half=_E4M3_HALF,
               min_sm=89, min_ptx=(7, 8)),
)}

# s32 accumulators into the f32 arithmetic (round to nearest even)
ACC_TO_F32 = {"s32": "cvt.rn.f32.s32 {x}, {a}"}
# C is read in the accumulator type; where it may enter: with the MMAs (alpha = beta = 1: the accumulators
# start from C) always, beside the accumulators in the epilogue (beta*C in f32) for f32 only (an s32 C there
# would need its own conversion; integer tiles keep C in the accumulators)
C_IN_EPILOGUE = {"f32": True, "s32": False}


@dataclass(frozen=True)
class BiasType:
    """The bias vector's element type and how one element is widened to f32 ({f} from the low or high
    16 bits of the 32-bit word {w}; f32: loaded as it is)."""
    name: str
    bytes: int
    low: tuple[str, ...] = ()
    high: tuple[str, ...] = ()


BIAS_TYPES: dict[str, BiasType] = {b.name: b for b in (
    BiasType("f32", 4),
    # f16: the halves as .b16 registers {h0} (low), {h1} (high), each widened exactly (cvt.f32.f16)
    BiasType("f16", 2, low=("mov.b32 {{{h0}, {h1}}}, {w}", "cvt.f32.f16 {f}, {h0}"),
             high=("mov.b32 {{{h0}, {h1}}}, {w}", "cvt.f32.f16 {f}, {h1}")),
    # bf16: the upper 16 bits of an f32 with the same value
    BiasType("bf16", 2, low=("shl.b32 {f}, {w}, 16",), high=("and.b32 {f}, {w}, 0xFFFF0000",)),
)}
DEFAULT_BIAS_TYPE = "f32"
