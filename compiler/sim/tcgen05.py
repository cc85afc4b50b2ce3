"""Reference model of `tcgen05.mma` (PTX ISA 9.7.16): D = op(A) * op(B) (+ D * 2^-scale_input_d).

Everything is read from the bytes the hardware would read: A and B through their shared-memory
descriptors (compiler.sim.smem), the 32-bit instruction descriptor decoded here from Tables 42-44
with this module's own bit extraction, sparse metadata from a tensor-memory image laid out as the
PTX ISA 9.7.16.10.8.4 describes, the zero-column mask generated from its 64-bit descriptor (9.7.16.4.3).
Products are exact in float64 (int64 for kind::i8); the sum is rounded once to the D type.

What the model does not claim (see docs/verification.md): the hardware's internal accumulation
precision and rounding order, NaN payloads, denormal flushing, and every rule marked "assumption".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics import SpecError
from ..isa.types import TYPES
from .numerics import decode, round_to, smem_element_slots, tmem_element_slots
from .smem import decode_smem_desc, read_operand_bits

# ---------------------------------------------------------------------------------------------
# Instruction descriptor layouts (PTX 9.7.16.4.2): (field, first bit, width).
# ---------------------------------------------------------------------------------------------
_IDESC_TABLE_42 = (              # .kind::tf32, .kind::f16, .kind::f8f6f4, .kind::i8
    ("sparse_selector", 0, 2),   # bits 0-1
    ("sparse", 2, 1),            # bit 2: dense = 0, sparse = 1
    ("saturate", 3, 1),          # bit 3: integer saturate (i8 only)
    ("d_type", 4, 2),            # bits 4-5: F16 = 0, F32 = 1, S32 = 2
    ("reserved_6", 6, 1),
    ("a_type", 7, 3),            # bits 7-9
    ("b_type", 10, 3),           # bits 10-12
    ("negate_a", 13, 1),
    ("negate_b", 14, 1),
    ("transpose_a", 15, 1),      # 1 = A is MN-major
    ("transpose_b", 16, 1),      # 1 = B is MN-major
    ("n_shr3", 17, 6),           # bits 17-22: N >> 3
    ("reserved_23", 23, 1),
    ("m_shr4", 24, 5),           # bits 24-28: M >> 4
    ("reserved_29", 29, 1),
    ("max_shift", 30, 2),        # bits 30-31: B-reuse shift in .ws (no numeric effect)
)
_IDESC_TABLE_43 = (              # .kind::mxf8f6f4
    ("reserved_0", 0, 2),
    ("sparse", 2, 1),
    ("reserved_3", 3, 1),
    ("b_sf_id", 4, 2),           # bits 4-5: matrix B scale factor data ID
    ("reserved_6", 6, 1),
    ("a_type", 7, 3),
    ("b_type", 10, 3),
    ("negate_a", 13, 1),
    ("negate_b", 14, 1),
    ("transpose_a", 15, 1),
    ("transpose_b", 16, 1),
    ("n_shr3", 17, 6),
    ("scale_type", 23, 1),       # bit 23: UE8M0 = 1
    ("reserved_24", 24, 3),
    ("m_shr7", 27, 2),           # bits 27-28: M >> 7
    ("a_sf_id", 29, 2),          # bits 29-30: matrix A scale factor data ID
    ("reserved_31", 31, 1),
)
_IDESC_TABLE_44 = (              # .kind::mxf4, .kind::mxf4nvf4
    ("reserved_0", 0, 2),
    ("sparse", 2, 1),
    ("reserved_3", 3, 1),
    ("b_sf_id", 4, 2),           # 0 or 2
    ("reserved_6", 6, 1),
    ("a_type", 7, 3),            # E2M1 = 1
    ("b_type", 10, 2),           # E2M1 = 1 (2-bit field)
    ("reserved_12", 12, 1),
    ("negate_a", 13, 1),
    ("negate_b", 14, 1),
    ("transpose_a", 15, 1),      # must be 0
    ("transpose_b", 16, 1),      # must be 0
    ("n_shr3", 17, 6),
    ("scale_type", 23, 1),       # UE4M3 = 0 (mxf4nvf4 only), UE8M0 = 1
    ("reserved_24", 24, 3),
    ("m_shr7", 27, 2),
    ("a_sf_id", 29, 2),          # 0 or 2
    ("k96", 31, 1),              # 0: dense K=64 / sparse K=128; 1: dense K=96
)

_F8F6F4_CODES = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}   # Tables 42/43 atype/btype


def _range(lo: int, hi: int, step: int) -> frozenset[int]:
    return frozenset(range(lo, hi + 1, step))


# Valid M and N (PTX ISA 9.7.16.2.1, Table 39), keyed by shape class and cta_group.
_SHAPES: dict[tuple[str, int], tuple[frozenset[int], frozenset[int]]] = {
    ("float", 1): (frozenset({64, 128}), _range(8, 256, 8)),
    ("float", 2): (frozenset({128, 256}), _range(16, 256, 16)),
    ("i8", 1): (frozenset({64, 128}), frozenset({8, 16, 24, 32}) | _range(48, 256, 16)),
    ("i8", 2): (frozenset({128, 256}), _range(32, 256, 32)),
    ("mx", 1): (frozenset({128}), _range(8, 256, 8)),
    ("mx", 2): (frozenset({128, 256}), _range(16, 256, 16)),
    ("ws", 1): (frozenset({32, 64, 128}), frozenset({64, 128, 256})),
}
_WS_SPARSE_N = frozenset({64, 128})            # Table 39: .ws sparse N


@dataclass(frozen=True)
class Granularity:
    """Structured sparsity of A (PTX ISA 9.7.16.10.8.1)."""
    name: str
    chunk: int          # dense elements described by one 4-bit metadata code
    kept: int           # elements stored per chunk
    pair: int           # kept elements travel in pairs (4:8) or alone


GRANULARITIES = {g.name: g for g in (Granularity("1:2", 2, 1, 1), Granularity("2:4", 4, 2, 1),
                                     Granularity("4:8", 8, 4, 2))}
# 2:4 and 4:8 codes: bits [1:0] = first kept index, bits [3:2] = second (increasing pairs only;
# PTX ISA 9.7.16.10.8.2/.3: the tcgen05 list's 0b0110 is decreasing and is not emitted by tilec).
_TWO_INDEX_CODES = frozenset({0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110})
# 1:2 (tf32): 0b0100 keeps element 0, 0b1110 keeps element 1 (PTX 9.7.16.10.8.1).
_ONE_OF_TWO_CODES = {0b0100: 0, 0b1110: 1}


@dataclass(frozen=True)
class KindSpec:
    name: str
    idesc_table: str                     # "42" | "43" | "44"
    idesc_fields: tuple
    type_codes: dict[int, str]           # atype/btype field value -> element type
    d_types: dict[int, str]              # d_type field value -> D type (mx kinds: fixed f32)
    k_dense: int                         # Table 39: K of one dense MMA, in elements
    granularity: str                     # sparse A pattern
    meta_layout: str                     # "16bit" (f16/tf32) | "8bit" (8-bit/fp4 kinds): PTX ISA 9.7.16.10.8.4
    shape_class: str
    negate_ok: bool = True               # 9.7.16.10.1: negate not for i8
    transpose_ok: bool = True            # not for mxf4 / mxf4nvf4
    scale_input_d_ok: bool = False       # only f16 / tf32 (PTX ISA 9.7.16.10.9 operands)
    block_scaled: bool = False
    scale_types: dict[int, str] | None = None   # idesc bit 23 -> scale type
    same_ab_type: bool = False           # kind::f16: A and B both f16 or both bf16
    ws_ok: bool = True                   # .ws: f16, tf32, f8f6f4, i8 only


KINDS: dict[str, KindSpec] = {k.name: k for k in (
    KindSpec("f16", "42", _IDESC_TABLE_42, {0: "f16", 1: "bf16"}, {0: "f16", 1: "f32"}, 16, "2:4",
             "16bit", "float", scale_input_d_ok=True, same_ab_type=True),
    KindSpec("tf32", "42", _IDESC_TABLE_42, {2: "tf32"}, {1: "f32"}, 8, "1:2", "16bit", "float",
             scale_input_d_ok=True),
    # Table 42 lists F32 for f8f6f4's dtype; Table 39 allows an f16 D as well (PTX ISA 9.7.16.2.1, Table 39).
    KindSpec("f8f6f4", "42", _IDESC_TABLE_42, _F8F6F4_CODES, {0: "f16", 1: "f32"}, 32, "2:4",
             "8bit", "float"),
    KindSpec("i8", "42", _IDESC_TABLE_42, {0: "u8", 1: "s8"}, {2: "s32"}, 32, "2:4", "8bit", "i8",
             negate_ok=False),
    KindSpec("mxf8f6f4", "43", _IDESC_TABLE_43, _F8F6F4_CODES, {}, 32, "2:4", "8bit", "mx",
             block_scaled=True, scale_types={1: "ue8m0"}, ws_ok=False),
    KindSpec("mxf4", "44", _IDESC_TABLE_44, {1: "e2m1"}, {}, 64, "4:8", "8bit", "mx",
             transpose_ok=False, block_scaled=True, scale_types={1: "ue8m0"}, ws_ok=False),
    KindSpec("mxf4nvf4", "44", _IDESC_TABLE_44, {1: "e2m1"}, {}, 64, "4:8", "8bit", "mx",
             transpose_ok=False, block_scaled=True, scale_types={0: "ue4m3", 1: "ue8m0"}, ws_ok=False),
)}

# Block-scale vector qualifiers (PTX 9.7.16.10.7.1, Tables 54/55): scale factors per row of A
# (and per column of B) for one MMA, by (qualifier, kind); K=96 values in the second slot.
_SCALE_VEC_BLOCKS: dict[tuple[str, str], tuple[int, int | None]] = {
    ("1X", "mxf8f6f4"): (1, None), ("block32", "mxf8f6f4"): (1, None),
    ("2X", "mxf4"): (2, None), ("block32", "mxf4"): (2, 3),
    ("2X", "mxf4nvf4"): (2, None), ("block32", "mxf4nvf4"): (2, 3),
    ("4X", "mxf4nvf4"): (4, None), ("block16", "mxf4nvf4"): (4, 6),
}
_SCALE_VEC_DEFAULT = {"mxf8f6f4": "1X", "mxf4": "block32"}   # mxf4nvf4 must name one (PTX ISA 9.7.16.10.9 operands)
_UE4M3_VECS = frozenset({"4X", "block16"})                    # Table 55: UE4M3 only with 4X/block16


@dataclass(frozen=True)
class InstrFields:
    """A decoded instruction descriptor, interpreted for its kind."""
    kind: str
    m: int
    n: int
    k: int                  # dense K of this MMA, in elements
    sparse: bool
    selector: int
    saturate: bool
    d_type: str
    a_type: str
    b_type: str
    negate_a: bool
    negate_b: bool
    a_major: str            # "K" | "MN" (transpose bit 15)
    b_major: str            # "K" | "MN" (transpose bit 16)
    max_shift: int
    scale_type: str | None
    a_sf_id: int
    b_sf_id: int
    k96: bool


def _bits(value: int, lsb: int, width: int) -> int:
    return (value >> lsb) & ((1 << width) - 1)


def decode_instr_desc(idesc: int, kind: str) -> InstrFields:
    """Decode a 32-bit instruction descriptor by the table of its kind; SpecError where PTX forbids."""
    spec = KINDS.get(kind)
    if spec is None:
        raise SpecError(f"unknown tcgen05.mma kind '{kind}'", hint=f"one of {', '.join(KINDS)}")
    if not 0 <= idesc < 1 << 32:
        raise SpecError(f"instruction descriptor {idesc:#x} is not a 32-bit value")
    raw = {name: _bits(idesc, lsb, width) for name, lsb, width in spec.idesc_fields}
    where = f"instruction descriptor {idesc:#010x} (.kind::{kind}, PTX Table {spec.idesc_table})"
    for name, value in raw.items():
        if name.startswith("reserved") and value:
            raise SpecError(f"{where}: reserved field {name} is {value}, must be 0")

    def element(field: str) -> str:
        name = spec.type_codes.get(raw[field])
        if name is None:
            raise SpecError(f"{where}: {field} code {raw[field]} is not defined for .kind::{kind}")
        return name

    a_type, b_type = element("a_type"), element("b_type")
    if spec.same_ab_type and a_type != b_type:
        raise SpecError(f"{where}: .kind::{kind} needs A and B of one type, got {a_type} and {b_type}")
    if spec.block_scaled:
        d_type = "f32"                                   # Tables 43/44 have no D field: f32
        scale_type = spec.scale_types.get(raw["scale_type"])
        if scale_type is None:
            raise SpecError(f"{where}: scale type code {raw['scale_type']} not allowed for .kind::{kind}")
        m = raw["m_shr7"] << 7
    else:
        d_type = spec.d_types.get(raw["d_type"])
        if d_type is None:
            raise SpecError(f"{where}: dtype code {raw['d_type']} not allowed for .kind::{kind}")
        if kind == "f16" and a_type == "bf16" and d_type == "f16":
            raise SpecError(f"{where}: bf16 inputs need an f32 D (PTX Table 39)")
        scale_type = None
        m = raw["m_shr4"] << 4
    if raw.get("saturate") and kind != "i8":
        raise SpecError(f"{where}: the saturate bit is only defined for .kind::i8")
    if not spec.negate_ok and (raw["negate_a"] or raw["negate_b"]):
        raise SpecError(f"{where}: negate A/B is not allowed for .kind::{kind} (PTX 9.7.16.10.1)")
    if not spec.transpose_ok and (raw["transpose_a"] or raw["transpose_b"]):
        raise SpecError(f"{where}: transposed (MN-major) A/B is not allowed for .kind::{kind} "
                        "(PTX 9.7.16.10.1, Table 44)")
    if kind in ("mxf4", "mxf4nvf4") and (raw["a_sf_id"] not in (0, 2) or raw["b_sf_id"] not in (0, 2)):
        raise SpecError(f"{where}: scale factor IDs must be 0 or 2 for .kind::{kind} (Table 44)")
    sparse = bool(raw["sparse"])
    k96 = bool(raw.get("k96", 0))
    if k96 and sparse:
        raise SpecError(f"{where}: K=96 (bit 31) exists only for dense MMAs (Table 44)")
    k = 96 if k96 else spec.k_dense * (2 if sparse else 1)
    return InstrFields(kind=kind, m=m, n=raw["n_shr3"] << 3, k=k, sparse=sparse,
                       selector=raw.get("sparse_selector", 0), saturate=bool(raw.get("saturate", 0)),
                       d_type=d_type, a_type=a_type, b_type=b_type, negate_a=bool(raw["negate_a"]),
                       negate_b=bool(raw["negate_b"]), a_major="MN" if raw["transpose_a"] else "K",
                       b_major="MN" if raw["transpose_b"] else "K", max_shift=raw.get("max_shift", 0),
                       scale_type=scale_type, a_sf_id=raw.get("a_sf_id", 0),
                       b_sf_id=raw.get("b_sf_id", 0), k96=k96)


def encode_instr_desc(kind: str, *, a_type: str, b_type: str, m: int, n: int, d_type: str = "f32",
                      sparse: bool = False, selector: int = 0, saturate: bool = False,
                      negate_a: bool = False, negate_b: bool = False, a_major: str = "K",
                      b_major: str = "K", scale_type: str | None = None, a_sf_id: int = 0,
                      b_sf_id: int = 0, k96: bool = False, max_shift: int = 0) -> int:
    """The model's own inverse of decode_instr_desc, driven by the same field tables (tests only)."""
    spec = KINDS[kind]
    type_code = {name: code for code, name in spec.type_codes.items()}
    values = {"sparse": int(sparse), "a_type": type_code[a_type], "b_type": type_code[b_type],
              "negate_a": int(negate_a), "negate_b": int(negate_b),
              "transpose_a": int(a_major == "MN"), "transpose_b": int(b_major == "MN"),
              "n_shr3": n >> 3}
    if spec.block_scaled:
        scale_code = {name: code for code, name in spec.scale_types.items()}
        values.update(m_shr7=m >> 7, scale_type=scale_code[scale_type or "ue8m0"],
                      a_sf_id=a_sf_id, b_sf_id=b_sf_id, k96=int(k96))
    else:
        values.update(m_shr4=m >> 4, sparse_selector=selector, saturate=int(saturate),
                      d_type={name: code for code, name in spec.d_types.items()}[d_type],
                      max_shift=max_shift)
    desc = 0
    for name, lsb, width in spec.idesc_fields:
        value = values.get(name, 0)
        if value >> width:
            raise SpecError(f"idesc field {name}={value} does not fit in {width} bits")
        desc |= value << lsb
    return desc


def _check_shape(f: InstrFields, spec: KindSpec, cta_group: int, ws: bool) -> None:
    if cta_group not in (1, 2):
        raise SpecError(f"cta_group must be 1 or 2, not {cta_group}")
    if ws and (cta_group != 1 or not spec.ws_ok):
        raise SpecError(f".ws exists only with .cta_group::1 and kinds f16/tf32/f8f6f4/i8 "
                        f"(got .kind::{spec.name}, cta_group::{cta_group}; PTX ISA 9.7.16.2.1, Table 39)")
    key = ("ws", 1) if ws else (spec.shape_class, cta_group)
    m_ok, n_ok = _SHAPES[key]
    if ws and f.sparse:
        n_ok = _WS_SPARSE_N
    if spec.block_scaled and cta_group == 2 and f.sparse:
        m_ok = frozenset({256})                          # Table 39: sparse mx kinds, 2 CTAs: M=256
    if f.m not in m_ok:
        raise SpecError(f"M={f.m} is not valid for .kind::{spec.name}{' .ws' if ws else ''} with "
                        f"cta_group::{cta_group} (PTX Table 39: M in {sorted(m_ok)})", field="shape.M")
    if f.n not in n_ok:
        raise SpecError(f"N={f.n} is not valid for .kind::{spec.name}{' .ws' if ws else ''} with "
                        f"cta_group::{cta_group} (PTX Table 39)", field="shape.N")
    if f.k96 and not (cta_group == 2 and f.m == 256):
        raise SpecError("K=96 needs cta_group::2 and M=256 (PTX Table 39)", field="shape.K")
    # 9.7.16.10.1: an 8-bit MN-major B needs N % 16 (1 CTA) / N % 32 (2 CTAs).
    if f.b_major == "MN" and f.b_type in ("e4m3", "e5m2", "s8", "u8") and f.n % (16 * cta_group):
        raise SpecError(f"a transposed 8-bit B needs N a multiple of {16 * cta_group} "
                        "(PTX 9.7.16.10.1)", field="shape.N")


# ---------------------------------------------------------------------------------------------
# Tensor-memory lanes (PTX ISA 9.7.16.10.5 data-path layouts) and sparse metadata (PTX ISA 9.7.16.10.8.4).
# ---------------------------------------------------------------------------------------------
def d_row_lanes(m: int, cta_group: int, *, ws: bool = False, lane_base: int = 0) -> np.ndarray:
    """TMEM lane of each of the M // cta_group rows one CTA holds (D, A-in-TMEM, metadata).

    M=128 (::1) and M=256 (::2, 128 rows per CTA): layouts D / A, lane = row. M=64 (::1, non-ws):
    layout F, half data path, lane = 32*(row >> 4) + (row & 15) + L0 with L0 in {0, 16}.
    Other layouts (.ws M=32/64, ::2 M=128) are not modelled.
    """
    if m // cta_group == 128:
        return np.arange(128)
    if m == 64 and cta_group == 1 and not ws:
        if lane_base not in (0, 16):
            raise SpecError(f"M=64 lane alignment must be 0 or 16, not {lane_base} (PTX ISA 9.7.16.10.5 data-path layouts)")
        row = np.arange(64)
        return 32 * (row >> 4) + (row & 15) + lane_base
    raise SpecError(f"the TMEM data-path layout for M={m}, cta_group::{cta_group}"
                    f"{', .ws' if ws else ''} is not modelled (PTX ISA 9.7.16.10.5 data-path layouts)")


def _meta_positions(layout: str, rows: int, chunks: int, selector: int):
    """(logical lane, column, bit) of the 4-bit code of chunk c of row m, for the M=128 rule."""
    m = np.arange(rows)[:, None]
    c = np.arange(chunks)[None, :]
    if layout == "16bit":
        # f16 / tf32: rows m and m+8 share a 32-bit cell; K halves j go 8 lanes apart; one column
        # per MMA, chosen by the selector (column parity, PTX ISA Table 44 sparsity selector, 9.7.16.10.8.4).
        j, n = c // 4, c % 4
        lane = 16 * (m >> 4) + (m & 7) + 8 * j
        bit = 16 * ((m >> 3) & 1) + 4 * n
        column = np.full_like(lane, selector)
    else:
        # 8-bit kinds and fp4 kinds: lane = row, 16 codes over two consecutive columns.
        lane = np.broadcast_to(m, (rows, chunks))
        column = np.broadcast_to(c >> 3, (rows, chunks))
        bit = np.broadcast_to(4 * (c & 7), (rows, chunks))
    return lane, column, bit


def _physical_lanes(logical: np.ndarray, m: int, cta_group: int, ws: bool, lane_base: int) -> np.ndarray:
    table = d_row_lanes(m, cta_group, ws=ws, lane_base=lane_base)
    # d_row_lanes maps row -> lane; the metadata rule produced a logical lane in the M=128 space,
    # which for M=64 is folded by the same half-data-path rule (PTX ISA 9.7.16.10.8.4 "M = 64").
    return table[logical]


def _check_meta_selector(spec: KindSpec, selector: int) -> None:
    if spec.meta_layout == "16bit" and selector not in (0, 1):
        raise SpecError(f"sparsity selector {selector}: only 0/1 (metadata column parity) has a "
                        "documented meaning for .kind::f16/.kind::tf32 (PTX ISA Table 44 sparsity selector, 9.7.16.10.8.4; the PTX ISA does not give it)",
                        field="sparsity.selector")
    if spec.meta_layout == "8bit" and selector != 0:
        raise SpecError(f"sparsity selector must be 0 for .kind::{spec.name} (PTX ISA 9.7.16.10.8.4)",
                        field="sparsity.selector")


def decode_sparse_metadata(tmem_meta, kind: str, m: int, *, selector: int = 0, cta_group: int = 1,
                           ws: bool = False, lane_base: int = 0) -> np.ndarray:
    """4-bit codes (rows x chunks) of one CTA's metadata from a TMEM image (uint32, lanes x columns).

    Column 0 of the image is the column named by [sp-meta-tmem] (even for f16/tf32).
    """
    spec = KINDS[kind]
    _check_meta_selector(spec, selector)
    g = GRANULARITIES[spec.granularity]
    chunks = spec.k_dense * 2 // g.chunk
    rows = m // cta_group
    logical, column, bit = _meta_positions(spec.meta_layout, rows, chunks, selector)
    lane = _physical_lanes(logical, m, cta_group, ws, lane_base)
    image = np.asarray(tmem_meta, dtype=np.uint64)
    if image.ndim != 2 or lane.max() >= image.shape[0] or column.max() >= image.shape[1]:
        raise SpecError(f"metadata TMEM image of shape {image.shape} does not cover lanes "
                        f"<= {int(lane.max())} and columns <= {int(column.max())}")
    return (image[lane, column] >> bit.astype(np.uint64)) & np.uint64(0xF)


def encode_sparse_metadata(codes: np.ndarray, kind: str, m: int, *, selector: int = 0,
                           cta_group: int = 1, ws: bool = False, lane_base: int = 0,
                           image: np.ndarray | None = None) -> np.ndarray:
    """Inverse of decode_sparse_metadata: write codes into a (128 x 2) uint32 TMEM image."""
    spec = KINDS[kind]
    _check_meta_selector(spec, selector)
    codes = np.asarray(codes, dtype=np.uint64)
    rows, chunks = codes.shape
    logical, column, bit = _meta_positions(spec.meta_layout, rows, chunks, selector)
    lane = _physical_lanes(logical, m, cta_group, ws, lane_base)
    out = np.zeros((128, 2), dtype=np.uint64) if image is None else np.asarray(image, dtype=np.uint64).copy()
    for lane_i, col_i, bit_i, code in zip(lane.ravel(), column.ravel(), bit.ravel(), codes.ravel()):
        out[lane_i, col_i] = (out[lane_i, col_i] & ~np.uint64(0xF << int(bit_i))) | (code << np.uint64(bit_i))
    return out.astype(np.uint32)


def _kept_positions(codes: np.ndarray, g: Granularity) -> np.ndarray:
    """(rows, chunks, kept) dense positions inside each chunk, validating every code."""
    codes = np.asarray(codes, dtype=np.int64)
    if g.name == "1:2":
        bad = ~np.isin(codes, list(_ONE_OF_TWO_CODES))
        if bad.any():
            raise SpecError(f"tf32 sparse metadata code {int(codes[bad][0]):#06b} is undefined "
                            "(valid: 0b0100, 0b1110; PTX 9.7.16.10.8.1)")
        return np.where(codes == 0b0100, 0, 1)[..., None]
    bad = ~np.isin(codes, list(_TWO_INDEX_CODES))
    if bad.any():
        raise SpecError(f"sparse metadata code {int(codes[bad][0]):#06b} is undefined (valid 2:4 "
                        "codes: 0b0100 0b1000 0b1100 0b1001 0b1101 0b1110; PTX 9.7.16.10.8.1)")
    first, second = codes & 3, codes >> 2
    if g.pair == 1:
        return np.stack([first, second], axis=-1)
    # 4:8: the indices name two-element pairs.
    return np.stack([2 * first, 2 * first + 1, 2 * second, 2 * second + 1], axis=-1)


def expand_sparse(compressed: np.ndarray, codes: np.ndarray, granularity: str) -> np.ndarray:
    """Dense rows x K from the stored rows x K/2 values and their per-chunk metadata codes."""
    g = GRANULARITIES[granularity]
    compressed = np.asarray(compressed)
    rows, half_k = compressed.shape
    chunks = half_k // g.kept
    positions = _kept_positions(np.asarray(codes)[:, :chunks], g)          # (rows, chunks, kept)
    dense = np.zeros((rows, chunks * g.chunk), dtype=compressed.dtype)
    columns = (np.arange(chunks)[None, :, None] * g.chunk + positions).reshape(rows, -1)
    np.put_along_axis(dense, columns, compressed.reshape(rows, -1), axis=1)
    return dense


def compress_sparse(dense: np.ndarray, granularity: str) -> tuple[np.ndarray, np.ndarray]:
    """(stored rows x K/2, codes rows x chunks) for a dense A that obeys the pattern."""
    g = GRANULARITIES[granularity]
    dense = np.asarray(dense)
    rows, k = dense.shape
    chunks = k // g.chunk
    blocks = dense.reshape(rows, chunks, g.chunk // g.pair, g.pair)
    nonzero_units = np.any(blocks != 0, axis=-1)                             # (rows, chunks, units)
    if np.any(nonzero_units.sum(axis=-1) > g.kept // g.pair):
        raise SpecError(f"A does not have {granularity} structured sparsity")
    # Keep the non-zero units, topped up with the lowest zero units, in increasing order.
    order = np.argsort(~nonzero_units, axis=-1, kind="stable")[..., : g.kept // g.pair]
    units = np.sort(order, axis=-1)
    if g.name == "1:2":
        codes = np.where(units[..., 0] == 0, 0b0100, 0b1110)
    else:
        codes = units[..., 0] | (units[..., 1] << 2)
    stored = np.take_along_axis(blocks, units[..., None], axis=2).reshape(rows, -1)
    return stored, codes.astype(np.uint64)


# ---------------------------------------------------------------------------------------------
# Zero-column mask (PTX 9.7.16.4.3, Table 45) and A from tensor memory.
# ---------------------------------------------------------------------------------------------
_ZCM_FIELDS = (("start_counts", 0, 32), ("first_spans", 32, 4), ("reserved_36", 36, 3),
               ("non_zero_mask", 39, 1), ("skip_span", 40, 8), ("use_span", 48, 8),
               ("column_shift", 56, 6), ("reserved_62", 62, 2))
_ZCM_SUBMASKS = {128: 1, 64: 2, 32: 4}       # sub-masks per M (9.7.16.4.3)


def zero_column_mask_bits(desc: int, m: int, n: int) -> tuple[np.ndarray, int]:
    """(N booleans, column shift): True = that column of B is replaced by zeros.

    Follows the seed's examples (PTX ISA Table 45 and its examples): bits 40-47 = (run of zeroed columns) - 1, bits
    48-55 = (run of used columns) - 1 (Table 45's descriptions have the two swapped). Sub-mask s
    covers columns [s*N/S, (s+1)*N/S); its bit i is term (sc_s + i) of the periodic sequence that
    starts with a zeroed run when fs_s = 1, a used run when fs_s = 0. (A start count longer than
    the first run continues into the period: the model's reading; the examples never need it.)
    """
    if not 0 <= desc < 1 << 64:
        raise SpecError(f"zero-column mask descriptor {desc:#x} is not a 64-bit value")
    raw = {name: _bits(desc, lsb, width) for name, lsb, width in _ZCM_FIELDS}
    for name in ("reserved_36", "reserved_62"):
        if raw[name]:
            raise SpecError(f"zero-column mask descriptor {desc:#018x}: reserved field {name} must be 0")
    if m not in _ZCM_SUBMASKS:
        raise SpecError(f"zero-column masks exist for M in {sorted(_ZCM_SUBMASKS)}, not {m} (9.7.16.4.3)")
    shift = raw["column_shift"]
    max_shift = 16 if m == 32 else 32
    if shift > max_shift:
        raise SpecError(f"zero-column mask column shift {shift} exceeds {max_shift} for M={m} (Table 45)")
    if not raw["non_zero_mask"]:
        return np.zeros(n, dtype=bool), shift
    zeroed, used = raw["skip_span"] + 1, raw["use_span"] + 1
    period = zeroed + used
    subs = _ZCM_SUBMASKS[m]
    width = n // subs
    out = np.zeros(n, dtype=bool)
    for s in range(subs):
        start = _bits(raw["start_counts"], 8 * s, 8)
        first_zeroed = bool(_bits(raw["first_spans"], s, 1))
        phase = (start + np.arange(width)) % period
        out[s * width:(s + 1) * width] = (phase < zeroed) if first_zeroed else (phase >= used)
    return out, shift


def _read_a_tmem(a_tmem, type_name: str, kind: str, lanes: np.ndarray, k: int) -> np.ndarray:
    """Raw codes (rows x k) of A held in tensor memory: row -> lane as D, K packed along columns."""
    container, per_word, value_lsb = tmem_element_slots(type_name, kind)
    value_bits = TYPES[type_name].bits
    image = np.asarray(a_tmem, dtype=np.uint64)
    kk = np.arange(k)
    column, shift = kk // per_word, (kk % per_word) * container + value_lsb
    if image.ndim != 2 or lanes.max() >= image.shape[0] or column.max() >= image.shape[1]:
        raise SpecError(f"A TMEM image of shape {image.shape} is too small")
    words = image[lanes[:, None], column[None, :]]
    return (words >> shift.astype(np.uint64)) & np.uint64((1 << value_bits) - 1)


def ashift_rows(a_tmem, m: int, cta_group: int, kind: str, a_type: str, k: int) -> np.ndarray:
    """One CTA's A image (uint lanes x columns, column 0 = [a-tmem]) after `.ashift`.

    PTX ISA 9.7.16.10.9.1 (tcgen05.mma, the .ashift qualifier): the rows of A in Tensor Memory are shifted
    down by one row, all but the last row; allowed only with M = 128 or 256. Read here the way
    tcgen05.shift (9.7.16.9.3) describes its own downward shift of every row but the last by one row:
    within the rows one CTA holds (row i in the lane of the
    data-path layout, `d_row_lanes`), row i moves to row i + 1 for every row but the last, whose old
    contents are overwritten; row 0 keeps its contents; only the columns holding this MMA's A (its k
    elements, `tmem_element_slots` per column) change. The ISA does not say when the shift happens
    relative to the product; this model applies it after the MMA has read A (the A read by the MMA is
    the unshifted one), so consecutive .ashift MMAs see A slide by one row each, as a convolution's
    activation-stationary loop needs. Not confirmed on silicon.
    """
    if m not in (128, 256):
        raise SpecError(f".ashift needs M = 128 or 256, not {m} (PTX 9.7.16.10.9.1)")
    lanes = d_row_lanes(m, cta_group)
    _, per_word, _ = tmem_element_slots(a_type, kind)
    cols = -(-k // per_word)
    image = np.array(a_tmem, copy=True)
    if image.ndim != 2 or lanes.max() >= image.shape[0] or cols > image.shape[1]:
        raise SpecError(f"A TMEM image of shape {image.shape} is too small")
    image[lanes[1:], :cols] = np.asarray(a_tmem)[lanes[:-1], :cols]
    return image


def _lane_mask(disable_output_lane, cta_group: int) -> np.ndarray:
    """(cta_group, 128) booleans, True = lane not written. Word w bit b = lane 32*w + b (PTX ISA 9.7.16.10.9 operands);
    with cta_group::2 words 0-3 belong to the first CTA of the pair and 4-7 to the second (assumption).
    """
    words = disable_output_lane
    if isinstance(words, int):
        words = [(words >> (32 * w)) & 0xFFFFFFFF for w in range(4 * cta_group)]
    words = [int(w) for w in words]
    if len(words) != 4 * cta_group:
        raise SpecError(f"disable-output-lane takes {4 * cta_group} 32-bit words with "
                        f"cta_group::{cta_group}, got {len(words)} (PTX ISA 9.7.16.10.9 operands)")
    bits = np.array([[(w >> b) & 1 for b in range(32)] for w in words], dtype=bool)
    return bits.reshape(cta_group, 128)


def _per_cta(value, cta_group: int, what: str) -> list:
    if cta_group == 1:
        return [value]
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SpecError(f"with cta_group::2 pass {what} as a pair (one per CTA of the pair)")
    return list(value)


def _scale_blocks(spec: KindSpec, f: InstrFields, scale_vec: str | None) -> int:
    vec = scale_vec or _SCALE_VEC_DEFAULT.get(spec.name)
    if vec is None:
        raise SpecError(f".kind::{spec.name} needs an explicit scale vector size (PTX ISA 9.7.16.10.9 operands)")
    blocks = _SCALE_VEC_BLOCKS.get((vec, spec.name))
    if blocks is None:
        raise SpecError(f"scale vector '{vec}' is not valid for .kind::{spec.name} (PTX Table 55)")
    if f.scale_type == "ue4m3" and vec not in _UE4M3_VECS:
        raise SpecError("UE4M3 scale factors need .scale_vec::4X / .block16 (PTX Table 55)")
    count = blocks[1] if f.k96 else blocks[0]
    if count is None:
        raise SpecError(f"K=96 needs .block16/.block32, not '{vec}' (PTX Table 54)")
    return count


# ---------------------------------------------------------------------------------------------
# The MMA.
# ---------------------------------------------------------------------------------------------
def mma(smem, a_desc, b_desc, idesc, kind, d=None, enable_input_d=False, scale_input_d=0,
        tmem_meta=None, zero_column_mask=None, scale_a=None, scale_b=None,
        disable_output_lane=None, cta_group=1, a_tmem=None, *, ws=False, scale_vec=None,
        lane_base=0, ashift=False) -> np.ndarray:
    """One `tcgen05.mma{.sp}{.ws}` on byte images; returns the new D (M x N, D's numpy type).

    smem          shared-memory image (bytes / uint8), byte 0 = address 0; a pair with cta_group=2
                  (each CTA holds M/2 rows of A and N/2 columns of B at the descriptors' addresses).
    a_desc/b_desc 64-bit shared-memory descriptors (a_desc ignored when a_tmem is given).
    idesc         32-bit instruction descriptor, decoded per `kind` (Tables 42-44).
    d             the accumulator's previous contents (M x N); read when enable_input_d, kept in
                  lanes that disable_output_lane masks (zeros when not given).
    scale_input_d D = A*B + D * 2**-scale_input_d (kind f16/tf32 only, 0..15).
    tmem_meta     sparse metadata TMEM image (uint32, lanes x columns; column 0 = [sp-meta-tmem]).
    zero_column_mask  64-bit descriptor (.ws only).
    scale_a/scale_b   block-scaled kinds: raw scale-factor codes, shapes M x S and S x N (Table 54).
    disable_output_lane  int bit mask or 4 (8) 32-bit words; bit i = TMEM lane i not written.
    a_tmem        A from tensor memory (uint32 lanes x columns; column 0 = [a-tmem]).
    ws            model the .ws variant (M = 32/64/128, zero-column mask allowed).
    scale_vec     "1X" | "2X" | "4X" | "block16" | "block32" for the block-scaled kinds.
    lane_base     L0 in {0, 16} for M = 64 (lane field of d-tmem / a-tmem / sp-meta-tmem).
    ashift        `.ashift` (A in TMEM, M = 128 or 256, not .ws, not block-scaled): after the product,
                  the rows of A in `a_tmem` (numpy arrays, written in place: they are Tensor Memory)
                  move down by one row (`ashift_rows`, PTX 9.7.16.10.9.1).
    """
    spec = KINDS.get(kind)
    if spec is None:
        raise SpecError(f"unknown tcgen05.mma kind '{kind}'", hint=f"one of {', '.join(KINDS)}")
    f = decode_instr_desc(idesc, kind)
    _check_shape(f, spec, cta_group, ws)
    m_cta, n_cta = f.m // cta_group, f.n // cta_group
    k_a = f.k // 2 if f.sparse else f.k

    if scale_input_d:
        if not spec.scale_input_d_ok:
            raise SpecError(f"scale-input-d is only for .kind::f16 and .kind::tf32, not .kind::{kind} "
                            "(PTX ISA 9.7.16.10.9 operands)")
        if not 0 <= scale_input_d <= 15:
            raise SpecError(f"scale-input-d must be in [0, 15], not {scale_input_d} (PTX ISA 9.7.16.10.9 operands)")
    if disable_output_lane is not None and (ws or spec.block_scaled):
        raise SpecError("disable-output-lane does not exist for .ws or block-scaled forms (PTX ISA 9.7.16.10.9 operands)")
    if zero_column_mask is not None and not ws:
        raise SpecError("a zero-column mask exists only for tcgen05.mma.ws (PTX 9.7.16.4.3)")
    if f.sparse and tmem_meta is None:
        raise SpecError("a sparse idesc (bit 2) needs the metadata TMEM image (tmem_meta)")
    if a_tmem is not None and f.a_major != "K":
        raise SpecError("A in tensor memory cannot be transposed (PTX ISA 9.7.16.10.9 operands)")
    if ashift:
        # 9.7.16.10.9.1: .ashift appears only in the syntax groups with [a-tmem] and without block scaling
        # or .ws; "Qualifier .ashift is only allowed with M = 128 or M = 256"
        if a_tmem is None or ws or spec.block_scaled:
            raise SpecError(".ashift needs A in tensor memory and a non-.ws, non-block-scaled MMA "
                            "(PTX 9.7.16.10.9.1)")
        if f.m not in (128, 256):
            raise SpecError(f".ashift needs M = 128 or 256, not {f.m} (PTX 9.7.16.10.9.1)")
    images = _per_cta(smem, cta_group, "smem")
    metas = _per_cta(tmem_meta, cta_group, "tmem_meta") if f.sparse else [None] * cta_group
    a_images = _per_cta(a_tmem, cta_group, "a_tmem") if a_tmem is not None else [None] * cta_group

    shift = 0
    zero_cols = np.zeros(f.n, dtype=bool)
    if zero_column_mask is not None:
        zero_cols, shift = zero_column_mask_bits(zero_column_mask, f.m, f.n)

    _check_swizzle_rules(spec, f, a_desc if a_tmem is None else None, b_desc)

    a_parts, b_parts = [], []
    for cta in range(cta_group):
        if a_images[cta] is not None:
            lanes = d_row_lanes(f.m, cta_group, ws=ws, lane_base=lane_base)
            a_codes = _read_a_tmem(a_images[cta], f.a_type, kind, lanes, k_a)
        else:
            a_codes = read_operand_bits(images[cta], a_desc, f.a_type, f.a_major, m_cta, k_a, kind=kind)
        a_vals = decode(a_codes, f.a_type)
        if f.sparse:
            codes = decode_sparse_metadata(metas[cta], kind, f.m, selector=f.selector,
                                           cta_group=cta_group, ws=ws, lane_base=lane_base)
            a_vals = expand_sparse(a_vals, codes, spec.granularity)
        a_parts.append(a_vals)
        b_rows = n_cta + shift
        # Read whole chunks / 8-row groups, then drop the columns beyond the shifted window.
        granule = smem_element_slots(f.b_type, kind)[1] if f.b_major == "MN" else 8
        b_rows = -(-b_rows // granule) * granule
        b_codes = read_operand_bits(images[cta], b_desc, f.b_type, f.b_major, b_rows, f.k, kind=kind)
        b_parts.append(decode(b_codes, f.b_type)[shift:shift + n_cta])
    a_full = np.concatenate(a_parts, axis=0)                 # M x K
    b_full = np.concatenate(b_parts, axis=0)                 # N x K
    b_full = np.where(zero_cols[:, None], 0, b_full)

    if spec.block_scaled:
        a_full, b_full = _apply_block_scales(spec, f, a_full, b_full, scale_a, scale_b, scale_vec)
    elif scale_a is not None or scale_b is not None:
        raise SpecError(f"scale factors are only for block-scaled kinds, not .kind::{kind}")

    if kind == "i8":
        product = a_full.astype(np.int64) @ b_full.astype(np.int64).T
    else:
        if f.negate_a:
            a_full = -a_full
        if f.negate_b:
            b_full = -b_full
        product = a_full.astype(np.float64) @ b_full.astype(np.float64).T

    out_np = {"f32": np.float32, "f16": np.float16, "s32": np.int32}[f.d_type]
    previous = (np.zeros((f.m, f.n), dtype=out_np) if d is None
                else np.asarray(d).astype(out_np, copy=False))
    if previous.shape != (f.m, f.n):
        raise SpecError(f"D has shape {previous.shape}, the idesc says {(f.m, f.n)}")
    if enable_input_d:
        if kind == "i8":
            total = product + previous.astype(np.int64)
        else:
            total = product + previous.astype(np.float64) * 2.0 ** -scale_input_d
    else:
        total = product
    result = round_to(total, f.d_type, saturate=f.saturate)

    if disable_output_lane is not None:
        masked = _lane_mask(disable_output_lane, cta_group)
        lanes = d_row_lanes(f.m, cta_group, ws=ws, lane_base=lane_base)
        keep_rows = np.concatenate([masked[cta][lanes] for cta in range(cta_group)])
        result = np.where(keep_rows[:, None], previous, result)
    if ashift:
        for image in a_images:
            if not isinstance(image, np.ndarray):
                raise SpecError("with ashift, pass a_tmem as numpy arrays: the shift writes them")
            image[...] = ashift_rows(image, f.m, cta_group, kind, f.a_type, k_a)
    return result


def _check_swizzle_rules(spec: KindSpec, f: InstrFields, a_desc, b_desc) -> None:
    """PTX 9.7.16.10.1: a transposed tf32 operand needs the 128B-with-32B-atoms swizzle, and only
    transposed tf32 may use that swizzle."""
    for name, desc, major, type_name in (("A", a_desc, f.a_major, f.a_type),
                                         ("B", b_desc, f.b_major, f.b_type)):
        if desc is None:
            continue
        mode = decode_smem_desc(desc).swizzle
        tf32_mn = type_name == "tf32" and major == "MN"
        if tf32_mn and mode.name != "128B_base32B":
            raise SpecError(f"a transposed (MN-major) tf32 {name} needs 128B swizzling with 32-byte "
                            "atomicity (PTX 9.7.16.10.1)")
        if mode.name == "128B_base32B" and not tf32_mn:
            raise SpecError(f"128B swizzling with 32-byte atomicity is only for transposed tf32 "
                            f"operands ({name} is {type_name}, {major}-major; PTX 9.7.16.10.1)")


def _apply_block_scales(spec, f, a_full, b_full, scale_a, scale_b, scale_vec):
    if scale_a is None or scale_b is None:
        raise SpecError(f".kind::{spec.name} needs scale_a and scale_b (PTX 9.7.16.10.7)")
    blocks = _scale_blocks(spec, f, scale_vec)
    scale_a = np.asarray(scale_a)
    scale_b = np.asarray(scale_b)
    if scale_a.shape != (f.m, blocks) or scale_b.shape != (blocks, f.n):
        raise SpecError(f"scale_A must be {f.m} x {blocks} and scale_B {blocks} x {f.n} "
                        f"(PTX Table 54), got {scale_a.shape} and {scale_b.shape}")
    # Each of the `blocks` scale factors covers K / blocks consecutive dense K elements.
    per_block = f.k // blocks
    sa = np.repeat(decode(scale_a, f.scale_type), per_block, axis=1)          # M x K
    sb = np.repeat(decode(scale_b, f.scale_type), per_block, axis=0).T        # N x K
    return a_full * sa, b_full * sb
