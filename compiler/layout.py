"""Canonical shared-memory layouts of tcgen05.mma operands (PTX ISA 9.7.16.3) and their descriptors.

A tile of `mn x k` elements (MN = M for A, N for B) is stored in the canonical layout of
PTX 9.7.16.3.3. Units: a *chunk* is 16 bytes (one "128-bit normalised element", T = 128 / element
bits values); a *line* is one index along the non-contiguous dimension (an MN row for K-major, a
K row for MN-major). The layout is built from *swizzle atoms* of `atom_rows` lines x `width` bytes
(8 x 16 B core matrices without swizzle, 8 x 32/64/128 B with swizzle; 4 x 128 B for 128B_base32B),
row-major inside the atom, and the atoms are repeated along MN first, then along K (the order
CUTLASS's `tile_to_shape(Layout_*_Atom, ...)` produces). A byte offset inside the tile is then

    swz(line_offset(line) + chunk_offset(chunk)) + byte inside the chunk

with `swz` the swizzle functor Swizzle<B,M,S> of 9.7.16.3.3 acting on byte offsets:
x ^ ((x >> S) & (((1 << B) - 1) << M)). The tile base must be aligned to the swizzle repeat
(`alignment`); then relative and absolute addresses swizzle alike.

LBO / SBO follow the definitions of 9.7.16.3.1 / 9.7.16.3.2 (see `_STRIDE_ROLES`).

Sub-byte elements (research notes, sources cited):
* `.kind::mxf4` / `.kind::mxf4nvf4` read e2m1 *packed*, two per byte (PTX 9.7.16.10.4 "packing
  formats" figure for mxf4; CUTLASS/DeepGEMM use the packed TMA type `CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B`,
  "2 nibbles/byte"). -> `container_bits = 4`, T = 32 elements per chunk. Nibble order inside a byte:
  element 0 in bits 3:0 (little-endian, as every packed-e2m1 producer writes it; not stated in text).
* `.kind::f8f6f4` / `.kind::mxf8f6f4` read 4- and 6-bit types *padded*: PTX 9.7.16.10.4.4 "The 4-bit and
  6-bit floating point elements in shared memory must be contiguously packed along with padding"
  (Figures 202/203). The padded unit is the TMA / tcgen05.cp source format `.b4x16_p64` (16 packed
  4-bit values = 8 B, then 64 bits of padding) and `.b6x16_p32` (16 packed 6-bit values = 12 B, then
  32 bits of padding); cuTensorMap types `16U4_ALIGN16B` / `16U6_ALIGN16B` ("16 packed 4-bit elements ...
  to a 16-byte-aligned space in SMEM, adding 8 bytes of padding", Colfax CUTLASS sub-byte tutorial).
  So one 16-byte chunk holds 16 elements: address arithmetic is that of an 8-bit type
  (`container_bits = 8`, T = 16) and element j of a chunk sits at bits elem_bits*j of the chunk.
  CUTLASS's `float_e2m1_unpacksmem_t` with smem alloc type uint8_t is the same footprint.
`container_bits_for(dtype, kind)` returns the right value per kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from .bits import log2
from .descriptors.smem import SmemDesc
from .isa.descriptors import LBO_MODES
from .diagnostics import SpecError
from .isa.swizzle import MAJORS, SWIZZLE_MODES, SwizzleMode
from .isa.tcgen05_kinds import SUBBYTE_CONTAINER_BITS
from .isa.types import TYPES

CHUNK_BYTES = 16          # PTX 9.7.16.3: matrices are normalised to 128-bit elements

# What choose_swizzle tries, widest first: the swizzled modes of both majors (128B_base32B is only chosen
# where it is required: tf32 MN-major).
_AUTO_ORDER = tuple(m.name for m in sorted(SWIZZLE_MODES.values(), key=lambda m: -m.width)
                    if m.xor_bits and len(m.majors) == 2)

# Which stride is LBO and which SBO (PTX 9.7.16.3.1 / 9.7.16.3.2, and the canonical-layout table of
# 9.7.16.3.3 that names them in the stride tuples):
#   K-major, none:      LBO = stride between K-adjacent core matrices ("8x2 tile" columns)  -> chunk groups
#                       SBO = stride between 8-row groups                                    -> line groups
#   K-major, swizzled:  LBO "not used, assumed to be 1"; we encode 1 (16 B), as CUTLASS make_umma_desc and
#                       the Figure 189 table ("Encoding of LBO in descriptor: 1 (assumed)") do
#                       SBO = stride between 8-row groups                                    -> line groups
#   MN-major, none:     LBO = stride between 8-K-row groups ("first 8 columns to the next 8") -> line groups
#                       SBO = stride between MN-adjacent 16-byte columns ("row to next row")  -> chunk groups
#   MN-major, swizzled: LBO = stride between MN atoms ((swizzle-bytes/16) rows to the next)   -> chunk groups
#                       SBO = stride between 8- (4-) K-row groups                             -> line groups
_STRIDE_ROLES: dict[tuple[str, bool], tuple[str, str]] = {
    ("K", False): ("chunk", "line"),
    ("K", True): ("unused", "line"),
    ("MN", False): ("line", "chunk"),
    ("MN", True): ("chunk", "line"),
}
UNUSED_LBO = 16   # bytes; encodes as 1 ("assumed 1")

# (value bits, container bits) pairs that exist: native widths, and the two padded formats.
_STORAGE_FORMATS: dict[tuple[int, int], str] = {
    (4, 4): "packed 4-bit (.b4x16)",
    (8, 8): "8-bit", (16, 16): "16-bit", (32, 32): "32-bit",
    (4, 8): "padded .b4x16_p64 (16 values in 8 B + 8 B padding per chunk)",
    (6, 8): "padded .b6x16_p32 (16 values in 12 B + 4 B padding per chunk)",
}


def _elem_bits(dtype: str) -> int:
    if dtype not in TYPES:
        raise SpecError(f"unknown element type {dtype!r}", field="dtype")
    return TYPES[dtype].bits


def container_bits_for(dtype: str, kind: str | None = None) -> int:
    """Shared-memory bits per element for `dtype` read by `.kind::<kind>` (module docstring)."""
    bits = _elem_bits(dtype)
    if bits >= 8:
        return bits
    if kind in SUBBYTE_CONTAINER_BITS:       # padded (f8f6f4 kinds) or packed (fp4-only kinds)
        return max(bits, SUBBYTE_CONTAINER_BITS[kind])
    return 8 if bits == 6 else bits      # a 6-bit value has no packed form (128 / 6 is not whole)


def swizzle_bytes(x: int, swizzle: str) -> int:
    """Swizzle<B,M,S> of PTX 9.7.16.3.3 applied to a byte offset."""
    mode = SWIZZLE_MODES[swizzle]
    return x ^ ((x >> mode.xor_shift) & (((1 << mode.xor_bits) - 1) << mode.xor_base))


@dataclass(frozen=True)
class Term:
    """One term of a `CopyMap` offset: ((coord >> shift) & mask(width)) * stride (no mask if width None)."""
    coord: str          # "line" | "chunk"
    shift: int
    width: int | None
    stride: int

    def apply(self, value: int) -> int:
        v = value >> self.shift
        if self.width is not None:
            v &= (1 << self.width) - 1
        return v * self.stride


@dataclass(frozen=True)
class CopyMap:
    """Where each 16-byte chunk of a canonical tile goes, for code that copies chunk by chunk.

    byte offset of (line, chunk) = swz(sum(term.apply(line or chunk))) with
    swz(x) = x ^ ((x >> swizzle_shift) & (((1 << swizzle_bits) - 1) << swizzle_base)).
    For every mode but 128B_base32B, swizzle_base = 4 and swizzle_shift = 3 (Swizzle<B,4,3>).
    """
    contiguous: str      # "K" | "MN": the dimension along which a line's chunks run
    lines: int
    chunks_per_line: int
    terms: tuple[Term, ...]
    swizzle_bits: int
    swizzle_base: int = 4
    swizzle_shift: int = 3

    def swizzle(self, x: int) -> int:
        return x ^ ((x >> self.swizzle_shift) & (((1 << self.swizzle_bits) - 1) << self.swizzle_base))

    def byte_offset(self, line: int, chunk: int) -> int:
        coords = {"line": line, "chunk": chunk}
        return self.swizzle(sum(t.apply(coords[t.coord]) for t in self.terms))


@dataclass(frozen=True)
class CanonicalLayout:
    """An `mn x k` operand tile in the PTX 9.7.16.3.3 canonical layout (see module docstring)."""
    dtype: str
    major: str
    swizzle: str
    mn: int
    k: int
    container_bits: int

    # ---- geometry -------------------------------------------------------------------------------
    @cached_property
    def elem_bits(self) -> int:
        return _elem_bits(self.dtype)

    @cached_property
    def mode(self) -> SwizzleMode:
        return SWIZZLE_MODES[self.swizzle]

    @cached_property
    def elems_per_chunk(self) -> int:
        """T of PTX 9.7.16.3.3: elements per 128-bit normalised element (per 16-byte chunk)."""
        return 128 // self.container_bits

    @cached_property
    def data_bytes_per_chunk(self) -> int:
        """Bytes of a chunk that hold values (the rest is the zero padding of the padded formats)."""
        return self.elems_per_chunk * self.elem_bits // 8

    @cached_property
    def contiguous(self) -> str:
        return self.major

    @cached_property
    def lines(self) -> int:
        return self.mn if self.major == "K" else self.k

    @cached_property
    def chunks_per_line(self) -> int:
        return (self.k if self.major == "K" else self.mn) // self.elems_per_chunk

    @cached_property
    def width_chunks(self) -> int:
        return self.mode.width // CHUNK_BYTES

    @cached_property
    def atom_rows(self) -> int:
        return self.mode.atom_rows

    @cached_property
    def atom_bytes(self) -> int:
        return self.mode.atom_bytes

    @cached_property
    def line_group_stride(self) -> int:
        """Bytes between consecutive groups of `atom_rows` lines."""
        if self.major == "K":                    # atoms repeat along MN (= lines) first
            return self.atom_bytes
        return self.chunks_per_line // self.width_chunks * self.atom_bytes

    @cached_property
    def chunk_group_stride(self) -> int:
        """Bytes between consecutive groups of `width_chunks` chunks along a line."""
        if self.major == "MN":                   # atoms repeat along MN (= chunks) first
            return self.atom_bytes
        return self.lines // self.atom_rows * self.atom_bytes

    def _stride(self, role: str) -> int:
        if role == "line":
            return self.line_group_stride
        return self.chunk_group_stride if role == "chunk" else UNUSED_LBO

    @cached_property
    def lbo(self) -> int:
        """Leading-dimension byte offset as PTX 9.7.16.3.1 defines it (16 = "unused, assumed 1")."""
        return self._stride(_STRIDE_ROLES[(self.major, self.swizzle != "none")][0])

    @cached_property
    def sbo(self) -> int:
        """Stride-dimension byte offset as PTX 9.7.16.3.2 defines it."""
        return self._stride(_STRIDE_ROLES[(self.major, self.swizzle != "none")][1])

    @cached_property
    def size_bytes(self) -> int:
        return self.lines * self.chunks_per_line * CHUNK_BYTES

    @cached_property
    def alignment(self) -> int:
        return self.mode.alignment

    @cached_property
    def storage(self) -> str:
        return _STORAGE_FORMATS[(self.elem_bits, self.container_bits)]

    # ---- addressing -----------------------------------------------------------------------------
    def _unswizzled(self, line: int, chunk: int) -> int:
        rows, width = self.atom_rows, self.width_chunks
        return ((line % rows) * self.mode.width + (line // rows) * self.line_group_stride
                + (chunk % width) * CHUNK_BYTES + (chunk // width) * self.chunk_group_stride)

    def _check_coord(self, row: int, k: int) -> None:
        if not (0 <= row < self.mn and 0 <= k < self.k):
            raise IndexError(f"element ({row}, {k}) outside the {self.mn} x {self.k} tile")

    def bit_offset(self, row: int, k: int) -> int:
        """Bit address (from the tile base) of the least significant bit of element (row, k)."""
        self._check_coord(row, k)
        line, along = (row, k) if self.major == "K" else (k, row)
        chunk, index = divmod(along, self.elems_per_chunk)
        return swizzle_bytes(self._unswizzled(line, chunk), self.swizzle) * 8 + index * self.elem_bits

    def offset(self, row: int, k: int) -> int:
        """Byte offset of element (mn index `row`, k index `k`); for sub-byte types the byte holding
        its least significant bit (a 6-bit value may continue into the next byte)."""
        return self.bit_offset(row, k) // 8

    def k_step_start(self, k0: int) -> int:
        """Byte delta of the descriptor start address for an MMA K step whose first element is k0.

        It is the unswizzled position of element (0, k0): a step's first line sits at an atom's line 0,
        whose swizzle XOR is zero, so this equals `offset(0, k0)`.
        """
        if not 0 <= k0 < self.k:
            raise SpecError(f"K step start {k0} outside the tile's K extent {self.k}", field="tile.k")
        if self.major == "K":
            if k0 % self.elems_per_chunk:
                raise SpecError(f"K step start {k0} is not on a 16-byte boundary "
                                f"({self.elems_per_chunk} {self.dtype} elements per 16 B)", field="tile.k")
            return self._unswizzled(0, k0 // self.elems_per_chunk)
        if k0 % self.atom_rows:
            raise SpecError(f"MN-major K step start {k0} is not a multiple of {self.atom_rows} K rows",
                            field="tile.k")
        return self._unswizzled(k0, 0)

    def copy_map(self) -> CopyMap:
        """The chunk -> byte offset map (see `CopyMap`), equal to `offset()` chunk by chunk."""
        return self._copy_map

    @cached_property
    def _copy_map(self) -> CopyMap:       # a value of the layout: made once per layout object
        rows, width = self.atom_rows, self.width_chunks
        terms = [Term("line", 0, log2(rows), self.mode.width),
                 Term("line", log2(rows), None, self.line_group_stride)]
        if width > 1:
            terms.append(Term("chunk", 0, log2(width), CHUNK_BYTES))
        terms.append(Term("chunk", log2(width), None, self.chunk_group_stride))
        return CopyMap(contiguous=self.major, lines=self.lines, chunks_per_line=self.chunks_per_line,
                       terms=tuple(terms), swizzle_bits=self.mode.xor_bits,
                       swizzle_base=self.mode.xor_base, swizzle_shift=self.mode.xor_shift)

    # ---- descriptors ----------------------------------------------------------------------------
    def step_bytes(self, mma_k: int) -> int:
        return mma_k * self.container_bits // 8

    def descriptor(self, k0: int, mma_k: int, base_address: int = 0, lbo_mode: str = "relative") -> SmemDesc:
        """The SmemDesc of the MMA K step [k0, k0 + mma_k) of this tile placed at `base_address`."""
        self._check_step(k0, mma_k, lbo_mode)
        if base_address % 16:
            raise SpecError(f"tile base address {base_address:#x} is not 16-byte aligned (PTX 9.7.16.4.1)")
        base_offset = 0
        if self.swizzle != "none" and base_address % self.alignment:
            # PTX ISA 9.7.16.4.1, Table 40: a pattern that does not start on its repeat boundary needs
            # base_offset = (pattern start >> 7) & 7. offset()/copy_map() stay relative to an aligned base.
            if base_address % 128:
                raise SpecError(f"swizzled tile base {base_address:#x} must be 128-byte aligned "
                                f"({self.alignment}-byte aligned for base offset 0)",
                                hint=f"align {self.swizzle}-swizzled tiles to {self.alignment} bytes")
            base_offset = (base_address >> 7) & 7
        start = base_address + self.k_step_start(k0)
        if lbo_mode == "absolute":
            if base_offset:
                raise SpecError("absolute LBO mode requires matrix base offset 0 (PTX 9.7.16.3.1.2.1)",
                                hint="align the tile to 1024 bytes")
            # The step's bytes past the 128-byte line continue at the next K atom's line 0:
            # LBO holds that absolute address (PTX 9.7.16.3.1.2). Set for every step.
            next_atom = (k0 * self.container_bits // 8) // self.mode.width + 1
            lbo = base_address + next_atom * self.chunk_group_stride
        else:
            lbo = self.lbo
        return SmemDesc(start, lbo, self.sbo, self.swizzle, base_offset, lbo_mode)

    def step_descriptors(self, mma_k: int, base_address: int = 0, lbo_mode: str = "relative") -> tuple[int, ...]:
        """The encoded SmemDesc of each MMA K step of the tile at `base_address`, in K order: a pure
        function of the layout and the three arguments, so each layout object keeps what it computed."""
        key = (mma_k, base_address, lbo_mode)
        try:
            known = self.__dict__["_step_descriptors"]
        except KeyError:
            known = self.__dict__["_step_descriptors"] = {}
        values = known.get(key)
        if values is None:
            values = known[key] = tuple(self.descriptor(k0, mma_k, base_address, lbo_mode).encode()
                                        for k0 in range(0, self.k, mma_k))
        return values

    def _check_step(self, k0: int, mma_k: int, lbo_mode: str) -> None:
        if lbo_mode not in LBO_MODES:
            raise SpecError(f"unknown LBO mode {lbo_mode!r}; valid: relative, absolute")
        step = self.step_bytes(mma_k)
        if lbo_mode == "absolute":
            # PTX 9.7.16.3.1.2 / .2.1: K = 48 B only, 128B swizzle (16 B atomicity), K-major only.
            if self.major != "K" or self.swizzle != "128B" or step != 48:
                raise SpecError(f"absolute LBO mode is only for K-major, 128B-swizzled operands with a 48-byte "
                                f"MMA K (here {self.major}-major, {self.swizzle}, {step} B)",
                                field="lbo_mode", hint="PTX 9.7.16.3.1.2.1; sm_103a only")
        if self.major == "MN":
            if mma_k % self.atom_rows:
                raise SpecError(f"MMA K = {mma_k} is not a whole number of {self.atom_rows}-row groups "
                                f"of the MN-major {self.swizzle} layout", field="tile.k")
            return
        if (mma_k * self.container_bits) % 128:
            raise SpecError(f"MMA K = {mma_k} {self.dtype} is not a whole number of 16-byte chunks",
                            field="tile.k")
        if self.swizzle != "none" and lbo_mode == "relative":
            within = (k0 * self.container_bits // 8) % self.mode.width
            if within + step > self.mode.width:
                hint = ("use lbo_mode='absolute' (sm_103a, PTX 9.7.16.3.1.2)"
                        if step == 48 and self.swizzle == "128B" else "use a wider swizzle")
                raise SpecError(f"the MMA K step at k={k0} spans bytes {within}..{within + step - 1} of a "
                                f"{self.mode.width}-byte swizzle line: K-major swizzled layouts have no LBO "
                                f"(PTX 9.7.16.3.1: 'not used'), so a step cannot leave its atom",
                                field="swizzle", hint=hint)


def canonical_layout(dtype: str, major: str, swizzle: str, mn: int, k: int,
                     container_bits: int | None = None) -> CanonicalLayout:
    """Build and validate the canonical layout of an `mn x k` tile (module docstring). A layout is a
    value (frozen, its geometry computed once per object): the same arguments give the same object."""
    try:
        hash((dtype, major, swizzle, mn, k, container_bits))
    except TypeError:                   # not a layout key at all: the checks below say why
        return _canonical_layout.__wrapped__(dtype, major, swizzle, mn, k, container_bits)
    return _canonical_layout(dtype, major, swizzle, mn, k, container_bits)


@lru_cache(maxsize=512)
def _canonical_layout(dtype: str, major: str, swizzle: str, mn: int, k: int,
                      container_bits: int | None) -> CanonicalLayout:
    bits = _elem_bits(dtype)
    if major not in MAJORS:
        raise SpecError(f"major must be 'K' or 'MN', not {major!r}", field="major")
    if swizzle == "auto":
        swizzle = choose_swizzle(dtype, major, mn, k, container_bits)
    if swizzle not in SWIZZLE_MODES:
        raise SpecError(f"unknown swizzle {swizzle!r}; valid: auto, {', '.join(SWIZZLE_MODES)}", field="swizzle")
    mode = SWIZZLE_MODES[swizzle]
    if major not in mode.majors:
        raise SpecError(f"{swizzle} swizzle has no {major}-major canonical layout", field="swizzle",
                        hint="CUTLASS make_umma_desc: SWIZZLE_128B_BASE32B is invalid for Major-K")
    cbits = container_bits if container_bits is not None else container_bits_for(dtype)
    if (bits, cbits) not in _STORAGE_FORMATS:
        raise SpecError(f"{dtype} ({bits}-bit) cannot be stored in {cbits}-bit containers; "
                        f"storage formats: {', '.join(f'{v}-bit in {c}' for v, c in _STORAGE_FORMATS)}",
                        field="dtype")
    for name, value in (("mn", mn), ("k", k)):
        if not isinstance(value, int) or value <= 0:
            raise SpecError(f"tile {name} = {value!r} must be a positive integer", field=f"tile.{name}")
    per_chunk = 128 // cbits
    contiguous_name, contiguous = ("k", k) if major == "K" else ("mn", mn)
    line_name, lines = ("mn", mn) if major == "K" else ("k", k)
    line_bytes = contiguous * cbits // 8
    if contiguous % per_chunk or line_bytes % mode.width:
        raise SpecError(f"{major}-major {swizzle} tile: the contiguous extent {contiguous_name} = {contiguous} "
                        f"{dtype} ({contiguous * cbits / 8:g} B) must be a multiple of the {mode.width}-byte "
                        f"atom width", field=f"tile.{contiguous_name}",
                        hint="choose a narrower swizzle (swizzle=auto picks one)")
    if lines % mode.atom_rows:
        raise SpecError(f"{major}-major {swizzle} tile: {line_name} = {lines} must be a multiple of "
                        f"{mode.atom_rows} (lines per atom, PTX 9.7.16.3.3)", field=f"tile.{line_name}")
    return CanonicalLayout(dtype, major, swizzle, mn, k, cbits)


def choose_swizzle(dtype: str, major: str, mn: int, k: int, container_bits: int | None = None,
                   mma_k: int | None = None) -> str:
    """swizzle="auto": the widest swizzle whose atom the contiguous extent fills a whole number of times.

    tf32 MN-major takes 128B_base32B: PTX 9.7.16.10.1 allows tf32 transpose only with it (PTX ISA 9.7.16.2.1, Table 39).
    With `mma_k` given, K-major modes whose line is narrower than one MMA K step are skipped.
    """
    bits = container_bits if container_bits is not None else container_bits_for(dtype)
    if major not in MAJORS:
        raise SpecError(f"major must be 'K' or 'MN', not {major!r}", field="major")
    line_bytes = (k if major == "K" else mn) * bits // 8
    if dtype == "tf32" and major == "MN":
        if line_bytes % 128 or k % 4:
            raise SpecError(f"MN-major tf32 needs the 128B_base32B swizzle: MN = {mn} must be a multiple of 32 "
                            f"and K = {k} of 4", field="swizzle",
                            hint="tf32 may be transposed only with 128-byte swizzle, 32-byte atoms (PTX 9.7.16.10.1)")
        return "128B_base32B"
    step = mma_k * bits // 8 if mma_k else 0
    for name in _AUTO_ORDER:
        width = SWIZZLE_MODES[name].width
        if line_bytes % width:
            continue
        if major == "K" and step and width % step:      # a step would cross its atom (no LBO when swizzled)
            continue
        return name
    return "none"


def smem_descriptors(dtype: str, major: str, swizzle: str, mn: int, k: int, mma_k: int,
                     base_address: int = 0, lbo_mode: str = "relative",
                     container_bits: int | None = None) -> list[int]:
    """The encoded 64-bit SmemDesc of each MMA K step of the tile (k / mma_k of them, in K order).

    `mma_k` counts stored elements (for sparse A: the compressed K of one MMA).
    """
    if swizzle == "auto":
        swizzle = choose_swizzle(dtype, major, mn, k, container_bits, mma_k)
    layout = canonical_layout(dtype, major, swizzle, mn, k, container_bits)
    if not isinstance(mma_k, int) or mma_k <= 0 or k % mma_k:
        raise SpecError(f"tile K = {k} is not a whole number of MMA K steps of {mma_k}", field="tile.k")
    return list(layout.step_descriptors(mma_k, base_address, lbo_mode))
