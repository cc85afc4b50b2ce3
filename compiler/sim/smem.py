"""Shared-memory side of the tcgen05 reference model.

Decodes the 64-bit shared-memory matrix descriptor (PTX ISA 9.7.16.4.1, Table 40) with its own
bit extraction (deliberately NOT importing compiler.descriptors / compiler.layout: this is the
independent derivation the compiler's encoders are checked against) and turns a descriptor into
the byte address of every element of an MN x K operand tile, following the canonical layouts of
PTX 9.7.16.3.3.

Canonical layouts (PTX 9.7.16.3.3, in units of 16-byte "chunks" holding T elements each, T = 128 /
element bits; W = swizzle width / 16 = 1, 2, 4, 8 for none / 32B / 64B / 128B):

    K-major : ((8,m),(T,2k)) : ((W*T, SBO), (1, LBO if no swizzle else T))
    MN-major: ((T,W,m),(8,k)) : ((1, T, SBO if no swizzle else LBO), (W*T, LBO if no swizzle else SBO))

In bytes, for K-major row i = r + 8*mb and K chunk c (elements c*T .. c*T+T-1):
    offset = 16*W*r + SBO*mb + (LBO if no swizzle else 16)*c
and for MN-major MN chunk j = w + W*mb (elements j*T .. j*T+T-1) and K index kk = r + R*kb:
    offset = 16*w + (SBO if no swizzle else LBO)*mb + 16*W*r + (LBO if no swizzle else SBO)*kb
with R = 8 K-rows per swizzle atom (4 for the 128B-swizzle-with-32B-atoms mode, CUTLASS
`make_umma_desc`: `((8,n),(4,k))`; single source).

Swizzle (PTX 9.7.16.3.3 "Swizzle<B,4,3>"): XOR applied to the *byte address*: bits [4, 4+B) ^= bits
[7, 7+B) (mode 1, 128B swizzle with 32-byte atoms: CUTLASS `Swizzle<2,5,2>`, bits [5,7) ^= [7,9)).

Which address bits the swizzle sees (PTX does not spell it out; measured on an H100 through wgmma,
whose descriptor has the same fields and text, docs/verification.md "H100 wgmma read-side check"):
    linear  = start_address + offset                       (unswizzled byte address)
    phase   = ((linear >> 7) - base_offset) mod 2**B
    address = linear XOR (phase << M)                        (M = 4, or 5 for 32-byte atoms)
i.e. the swizzle acts on absolute address bits, and the descriptor's 3-bit base offset names the
128-byte row where the pattern starts: with the PTX base-offset rule (9.7.16.4.1: 0 when the pattern
starts on its 1024/512/256-byte boundary, else `(start_address >> 7) & 7`) the pattern starts at the
tile's base. An image swizzled on absolute addresses from a misaligned base (as TMA writes it) needs
base offset 0. Advancing the start address by 32/64/96 bytes inside a 128-byte row (CUTLASS's K-step
practice) does not change the phase. An earlier version of this model counted rows from the start
address; 9 misaligned tiles and 30 probes on the H100 showed the hardware does not.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics import SpecError
from .numerics import decode, smem_element_slots

# ---------------------------------------------------------------------------------------------
# Descriptor fields: PTX ISA 9.7.16.4.1, Table 40 (name, first bit, width).
# ---------------------------------------------------------------------------------------------
_SMEM_DESC_FIELDS = (
    ("start_address", 0, 14),     # bits 0-13: matrix start address, (addr & 0x3FFFF) >> 4
    ("reserved_14", 14, 2),       # bits 14-15: reserved
    ("lbo", 16, 14),              # bits 16-29: leading-dimension byte offset (or absolute address) >> 4
    ("reserved_30", 30, 2),       # bits 30-31: reserved
    ("sbo", 32, 14),              # bits 32-45: stride-dimension byte offset >> 4
    ("fixed_46", 46, 3),          # bits 46-48: fixed constant 0b001
    ("base_offset", 49, 3),       # bits 49-51: matrix base offset
    ("lbo_mode", 52, 1),          # bit 52: 0 = LBO relative offset, 1 = absolute address
    ("reserved_53", 53, 8),       # bits 53-60: fixed 0
    ("swizzle", 61, 3),           # bits 61-63: swizzling mode
)
_FIXED_46_VALUE = 0b001            # Table 40: bits 46-48 "fixed constant value of 0b001"


@dataclass(frozen=True)
class SwizzleMode:
    code: int            # value of descriptor bits 61-63 (Table 40)
    name: str
    atom_bytes: int      # bytes of one swizzle-atom row along the contiguous dimension (16 = none)
    xor_bits: int        # B of Swizzle<B,M,S>: how many address bits are XOR-ed
    xor_shift: int       # M: lowest XOR-ed address bit (4: 16-byte units, 5: 32-byte units)
    k_rows: int          # MN-major: K rows per atom (PTX canonical table: 8)

    @property
    def swizzled(self) -> bool:
        return self.code != 0

    @property
    def repeat_bytes(self) -> int:
        """Bytes after which the XOR pattern repeats (2**B rows of 128 bytes; 128 when unswizzled)."""
        return 128 << self.xor_bits


# Table 40 swizzle codes; Swizzle<B,4,3> per the 9.7.16.3.3 canonical-layout table; code 1 (128B with
# 32-byte atomicity) from CUTLASS `Layout_MN_SW128_32B_Atom` = Swizzle<2,5,2>, 4 K-rows per atom.
SWIZZLE_MODES: dict[int, SwizzleMode] = {m.code: m for m in (
    SwizzleMode(0, "none", 16, 0, 4, 8),
    SwizzleMode(1, "128B_base32B", 128, 2, 5, 4),
    SwizzleMode(2, "128B", 128, 3, 4, 8),
    SwizzleMode(4, "64B", 64, 2, 4, 8),
    SwizzleMode(6, "32B", 32, 1, 4, 8),
)}
SWIZZLE_BY_NAME: dict[str, SwizzleMode] = {m.name: m for m in SWIZZLE_MODES.values()}


@dataclass(frozen=True)
class SmemDescFields:
    """A decoded shared-memory descriptor; byte quantities already multiplied back by 16."""
    start_address: int
    lbo: int                  # bytes (relative), or the absolute byte address when lbo_mode == 1
    sbo: int
    base_offset: int
    lbo_mode: int
    swizzle: SwizzleMode


def _field(value: int, lsb: int, width: int) -> int:
    return (value >> lsb) & ((1 << width) - 1)


def decode_smem_desc(desc: int) -> SmemDescFields:
    """Decode a 64-bit descriptor (Table 40); SpecError for values PTX does not define."""
    if not 0 <= desc < 1 << 64:
        raise SpecError(f"shared-memory descriptor {desc:#x} is not a 64-bit value")
    raw = {name: _field(desc, lsb, width) for name, lsb, width in _SMEM_DESC_FIELDS}
    for name in ("reserved_14", "reserved_30", "reserved_53"):
        if raw[name]:
            raise SpecError(f"shared-memory descriptor {desc:#018x}: reserved field {name} is "
                            f"{raw[name]:#x}, must be 0 (PTX 9.7.16.4.1, Table 40)")
    if raw["fixed_46"] != _FIXED_46_VALUE:
        raise SpecError(f"shared-memory descriptor {desc:#018x}: bits 46-48 are {raw['fixed_46']:#05b}, "
                        "must be the fixed constant 0b001 (PTX 9.7.16.4.1, Table 40)",
                        hint="tcgen05 descriptors set bit 46; a Hopper wgmma descriptor does not")
    mode = SWIZZLE_MODES.get(raw["swizzle"])
    if mode is None:
        raise SpecError(f"shared-memory descriptor {desc:#018x}: swizzle code {raw['swizzle']} is "
                        "invalid (valid: 0, 1, 2, 4, 6; PTX 9.7.16.4.1, Table 40)")
    return SmemDescFields(start_address=raw["start_address"] << 4, lbo=raw["lbo"] << 4,
                          sbo=raw["sbo"] << 4, base_offset=raw["base_offset"],
                          lbo_mode=raw["lbo_mode"], swizzle=mode)


def encode_smem_desc(start_address: int, lbo: int, sbo: int, swizzle: str = "none", *,
                     base_offset: int = 0, lbo_mode: int = 0) -> int:
    """The model's own inverse of decode_smem_desc (for hand-built test images; Table 40).

    Byte quantities must be multiples of 16; like the hardware field, only address bits 4..17 are kept.
    """
    for name, value in (("start address", start_address), ("LBO", lbo), ("SBO", sbo)):
        if value % 16:
            raise SpecError(f"{name} {value} is not a multiple of 16 bytes (PTX 9.7.16.4.1)")
    mode = SWIZZLE_BY_NAME[swizzle]
    fields = {"start_address": (start_address & 0x3FFFF) >> 4, "lbo": (lbo & 0x3FFFF) >> 4,
              "sbo": (sbo & 0x3FFFF) >> 4, "fixed_46": _FIXED_46_VALUE, "base_offset": base_offset,
              "lbo_mode": lbo_mode, "swizzle": mode.code}
    desc = 0
    for name, lsb, width in _SMEM_DESC_FIELDS:
        value = fields.get(name, 0)
        if value >> width:
            raise SpecError(f"descriptor field {name}={value} does not fit in {width} bits")
        desc |= value << lsb
    return desc


# ---------------------------------------------------------------------------------------------
# Canonical layouts (9.7.16.3.3): byte address of each 16-byte chunk.
# ---------------------------------------------------------------------------------------------
def _swizzle(linear: np.ndarray, f: SmemDescFields) -> np.ndarray:
    """Apply Swizzle<B,M,S> to unswizzled byte addresses (rule in the module docstring)."""
    mode = f.swizzle
    if not mode.swizzled:
        return linear
    phase = ((linear >> 7) - f.base_offset) & ((1 << mode.xor_bits) - 1)
    return linear ^ (phase << mode.xor_shift)


def _check_lbo_absolute(f: SmemDescFields, major: str) -> None:
    # 9.7.16.3.1.2.1: absolute LBO only with 128B swizzle (16-byte atoms), K-major, base offset 0.
    if f.swizzle.name != "128B":
        raise SpecError("absolute-address LBO mode (descriptor bit 52) needs 128B swizzling "
                        "(PTX 9.7.16.3.1.2.1)")
    if major != "K":
        raise SpecError("absolute-address LBO mode (descriptor bit 52) is K-major only "
                        "(PTX 9.7.16.3.1.2.1)")
    if f.base_offset:
        raise SpecError("absolute-address LBO mode (descriptor bit 52) needs base offset 0 "
                        "(PTX 9.7.16.3.1.2.1)")


def chunk_addresses(desc: int, major: str, mn_chunks: int, k_chunks: int) -> np.ndarray:
    """Byte address of every 16-byte chunk of a canonical layout, swizzle applied.

    K-major: result[i, c] for MN row i (< mn_chunks) and K chunk c (< k_chunks).
    MN-major: result[j, kk] for MN chunk j (< mn_chunks) and K index kk (< k_chunks).
    """
    f = decode_smem_desc(desc)
    mode = f.swizzle
    row_bytes = mode.atom_bytes            # 16*W: one row of the swizzle atom
    if major == "K":
        if mode.name == "128B_base32B":
            # CUTLASS make_umma_desc: "SWIZZLE_128B_BASE32B is invalid for Major-K"; PTX
            # 9.7.16.10.1 allows this swizzle only for transposed (MN-major) tf32.
            raise SpecError("128B swizzle with 32-byte atomicity is only valid for MN-major operands")
        i = np.arange(mn_chunks, dtype=np.int64)[:, None]
        c = np.arange(k_chunks, dtype=np.int64)[None, :]
        row_part = row_bytes * (i % 8) + f.sbo * (i // 8)
        if f.lbo_mode:
            # 9.7.16.3.1.2: a 48-byte K extent is split in two pieces, "both laid out within the
            # aligned 128-byte address boundary"; LBO holds the absolute address of the second. Model:
            # the first piece runs from the start address to the end of its 128-byte row, the rest
            # continues at the LBO address (assumption: PTX does not spell out the split point).
            _check_lbo_absolute(f, major)
            first_piece = (128 - (f.start_address & 127)) // 16
            linear = np.where(c < first_piece, f.start_address + 16 * c,
                              f.lbo + 16 * (c - first_piece)) + row_part
        else:
            k_stride = 16 if mode.swizzled else f.lbo
            linear = f.start_address + row_part + k_stride * c
    elif major == "MN":
        if f.lbo_mode:
            _check_lbo_absolute(f, major)
        w_count = row_bytes // 16
        j = np.arange(mn_chunks, dtype=np.int64)[:, None]
        kk = np.arange(k_chunks, dtype=np.int64)[None, :]
        mn_group_stride = f.lbo if mode.swizzled else f.sbo
        k_group_stride = f.sbo if mode.swizzled else f.lbo
        linear = (f.start_address + 16 * (j % w_count) + mn_group_stride * (j // w_count)
                  + row_bytes * (kk % mode.k_rows) + k_group_stride * (kk // mode.k_rows))
    else:
        raise SpecError(f"major must be 'K' or 'MN', not {major!r}")
    return _swizzle(linear, f)


def element_addresses(desc: int, type_name: str, major: str, rows: int, k: int,
                      *, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(chunk byte address, slot within chunk) of every element (row, kk) of an MN x K tile."""
    _, per_chunk = smem_element_slots(type_name, kind)
    if major == "K":
        if k % per_chunk:
            raise SpecError(f"K-major {type_name} tile: K={k} is not a multiple of {per_chunk} "
                            "elements per 16-byte chunk")
        chunks = chunk_addresses(desc, "K", rows, k // per_chunk)
        kk = np.arange(k)
        return chunks[:, kk // per_chunk], np.broadcast_to(kk % per_chunk, (rows, k))
    if major == "MN":
        if rows % per_chunk:
            raise SpecError(f"MN-major {type_name} tile: {rows} rows is not a multiple of "
                            f"{per_chunk} elements per 16-byte chunk")
        chunks = chunk_addresses(desc, "MN", rows // per_chunk, k)
        i = np.arange(rows)
        return chunks[i // per_chunk, :], np.broadcast_to((i % per_chunk)[:, None], (rows, k))
    raise SpecError(f"major must be 'K' or 'MN', not {major!r}")


def _as_image(smem) -> np.ndarray:
    if isinstance(smem, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(smem), dtype=np.uint8)
    image = np.asarray(smem)
    if image.dtype != np.uint8 or image.ndim != 1:
        raise SpecError("a shared-memory image must be bytes or a 1-D uint8 array")
    return image


def _chunk_bits(image: np.ndarray, addresses: np.ndarray) -> np.ndarray:
    """(..., 128) bits of the 16-byte chunks at `addresses`, little-endian bit order."""
    if addresses.size and (addresses.min() < 0 or addresses.max() + 16 > image.size):
        raise SpecError(f"the descriptor addresses bytes [{int(addresses.min())}, "
                        f"{int(addresses.max()) + 16}) outside the {image.size}-byte shared-memory image")
    chunk_bytes = image[addresses[..., None] + np.arange(16)]
    return np.unpackbits(chunk_bytes, axis=-1, bitorder="little")


def read_operand_bits(smem, desc: int, type_name: str, major: str, rows: int, k: int,
                      *, kind: str) -> np.ndarray:
    """Raw codes (uint64, shape rows x k) of an MN x K operand tile, gathered as the MMA would."""
    image = _as_image(smem)
    bits, per_chunk = smem_element_slots(type_name, kind)
    chunk_addr, slot = element_addresses(desc, type_name, major, rows, k, kind=kind)
    unique, inverse = np.unique(chunk_addr, return_inverse=True)
    chunk_bits = _chunk_bits(image, unique)[:, : per_chunk * bits].reshape(-1, per_chunk, bits)
    weights = np.uint64(1) << np.arange(bits, dtype=np.uint64)
    codes_per_chunk = (chunk_bits.astype(np.uint64) * weights).sum(axis=-1)    # (chunks, per_chunk)
    return codes_per_chunk[inverse.reshape(rows, k), slot]


def read_operand(smem, desc: int, dtype: str, major: str, rows: int, k: int,
                 *, kind: str | None = None) -> np.ndarray:
    """Decoded MN x K tile (float64, or int64 for integer types) read from a shared-memory image.

    `smem` is the whole shared-memory window as bytes / uint8 array, byte 0 = shared address 0.
    `kind` selects the storage of fp6/fp4 (padded under f8f6f4/mxf8f6f4, packed under mxf4*);
    it defaults to the only kind that accepts the type.
    """
    return decode(read_operand_bits(smem, desc, dtype, major, rows, k, kind=kind or _default_kind(dtype)),
                  dtype)


def write_operand_bits(smem: np.ndarray, desc: int, type_name: str, major: str, codes: np.ndarray,
                       *, kind: str) -> None:
    """Inverse of read_operand_bits: store raw codes into a writable uint8 image (tests, dumps).

    Padding bits of sub-byte chunks are left as they are.
    """
    codes = np.asarray(codes, dtype=np.uint64)
    rows, k = codes.shape
    bits, per_chunk = smem_element_slots(type_name, kind)
    chunk_addr, slot = element_addresses(desc, type_name, major, rows, k, kind=kind)
    unique, inverse = np.unique(chunk_addr, return_inverse=True)
    inverse = inverse.reshape(rows, k)
    if unique.size * per_chunk != rows * k:
        # Two logical elements would land in the same slot: the descriptor describes a layout that
        # is not one-to-one for this tile (e.g. a K extent wider than the swizzle row).
        slots = inverse * per_chunk + slot
        if np.unique(slots).size != rows * k:
            raise SpecError("this descriptor maps two elements of the tile to the same bytes")
    chunk_bits = _chunk_bits(smem, unique)
    value_bits = ((codes[..., None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    view = chunk_bits[:, : per_chunk * bits].reshape(-1, per_chunk, bits)
    view[inverse, slot] = value_bits
    chunk_bits[:, : per_chunk * bits] = view.reshape(-1, per_chunk * bits)
    smem[unique[:, None] + np.arange(16)] = np.packbits(chunk_bits, axis=-1, bitorder="little")


def _default_kind(dtype: str) -> str:
    # Only used to pick the sub-byte storage when the caller did not say; full-byte types do not care.
    return {"e2m1": "f8f6f4", "e2m3": "f8f6f4", "e3m2": "f8f6f4"}.get(dtype, "f16")
