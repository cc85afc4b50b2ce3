"""Host-side structured-sparse data for warp-level `mma.sp`: compress / decompress and operand packing.

Global-memory layouts read by the kernels of compiler/ptx/mma_sp_kernel.py (all little-endian, C order):

Compressed A values (`compress(...)[0]`), for an M x K dense A (M % 16 == 0, K % shape_k == 0):
    row-major M x K/2 array of the kept elements; row r holds, chunk by chunk in increasing K, the kept
    elements of each chunk in increasing K order (2:4: 2 of every 4; 1:2: 1 of every 2; 4:8: two aligned
    pairs of every 8). Element storage by A type and shape (PTX ISA 9.7.14.6.3 register contents):
      f16, bf16, e4m3, e5m2, s8, u8    their own 16-/8-bit encoding (numpy / ml_dtypes dtype)
      tf32                             float32 (the hardware ignores the low 13 mantissa bits)
      e3m2, e2m3, e2m1 at m16n8k64     one byte each (`.kind::f8f6f4`/`.kind::mxf8f6f4` 8-bit container):
                                       e2m1 in bits 5:2, e3m2/e2m3 in bits 5:0, other bits zero
      s4, u4, e2m1 at m16n8k128        packed two per byte, even K index in the low nibble (uint8 array of
                                       M x K/4)
    Row stride = K/2 elements = K * storage_bits / 16 bytes. Each 32-bit word of a row is exactly one
    A register of mma.sp (compiler/isa/mma_sp/fragments.py).

Metadata (`compress(...)[1]`): uint32 array [M/16][K/shape_k][32]: for every 16-row tile mt and k-step
    ks the 32 per-lane `e` words of that mma.sp, lane-contiguous (one coalesced 128-byte load per warp).
    Word bits 4n+3..4n describe the (row, chunk) given by fragments.metadata_slot (PTX ISA 9.7.14.6.2 (metadata fragments)); a
    nibble is two 2-bit slot indices (9.7.14.6.1). Every lane is filled, ignoring the sparsity
    selector, so the same buffer is right for every legal selector. All nibbles have increasing
    indices, so the buffer is valid for both `.sp` and `.sp::ordered_metadata`. (decompress also
    accepts the decreasing pairs plain `.sp` allows: the j-th stored value of a chunk belongs to the
    j-th index of its nibble, as measured on an H100 by tests/gpu/harness/mma_sp_hw.py.)

Compact metadata (`compress(..., compact=True)[1]`, `compact_metadata(words, ...)`): uint32
    [M/16][K/shape_k][16], word j = the word of lane 4*(j//2) + j%2 (threads 0 and 1 of each quad; 64 B
    per tile and k-step). Exact where every lane's word equals that of lane ^ 2
    (fragments.compact_metadata_exact, derived from metadata_slot: one or two threads of a quad supply
    the metadata, e.g. f16/bf16 m16n8k32 and tf32 m16n8k16; not 8-bit A at k64, where all four do). Lane l
    reads word fragments.compact_metadata_word(l) = 2*(l//4) + l%2. The sparse wgmma kernel takes this
    layout for 16- and 32-bit A (its ABI's a_metadata `lanes`); every other kernel the 32-lane one.

B (`pack_b`): for K x N dense B, the N x K array B^T (row n = column n of B, K contiguous), each element
    stored like A (same container/packing rule); each 32-bit word is one B register.
C and D: row-major M x N arrays of the C/D type (f32, f16 or s32).

numpy and ml_dtypes are imported here; this module is for host data only (not on the compile path).
"""
from __future__ import annotations

import math

import numpy as np

from .diagnostics import SpecError
from .isa.mma_sp.forms import CONTAINER_SHIFT, SHAPE_M, SparseLayout, layout_for
from .isa.mma_sp.fragments import (COMPACT_METADATA_LANES, compact_metadata_exact, compact_metadata_word,
                                   metadata_slot)
from .isa.types import TYPES


_NUMPY_NATIVE = ("float16", "float32", "int8", "uint8", "int32")


def _np_dtype(dtype: str) -> np.dtype:
    name = TYPES[dtype].np_name
    if name in _NUMPY_NATIVE:
        return np.dtype(name)
    import ml_dtypes          # bfloat16, fp8/fp6/fp4 and int4 host types
    return np.dtype(getattr(ml_dtypes, name))


def to_elements(x, dtype: str) -> np.ndarray:
    """`x` converted to the host dtype of element type `dtype` (integers range-checked; floats rounded
    by the usual numpy / ml_dtypes conversion)."""
    x = np.asarray(x)
    target = _np_dtype(dtype)
    if x.dtype == target:
        return x
    t = TYPES[dtype]
    if t.is_int:
        lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.signed else (0, (1 << t.bits) - 1)
        wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype.kind == "V" else x.astype(np.int64)
        if np.any(wide != np.round(wide)) or np.any(wide < lo) or np.any(wide > hi):
            raise SpecError(f"values do not fit {dtype} (range {lo}..{hi}, integers only)", field="A.dtype")
        return wide.astype(np.int64).astype(target)
    if x.dtype.kind in "fiuV":           # V: ml_dtypes' types (bfloat16, the fp8 / fp6 / fp4 ones)
        # a finite value at or past the largest finite one plus half its ulp overflows (round to nearest): the
        # conversion would make it inf, NaN (e4m3 has no inf) or the largest value (the fp4 / fp6 types
        # saturate). Refused, not rounded.
        import ml_dtypes

        info = ml_dtypes.finfo(target)
        top = float(info.max)
        limit = top + 2.0 ** (math.floor(math.log2(top)) - int(info.nmant) - 1)
        wide = x.astype(np.float64)
        bad = np.isfinite(wide) & (np.abs(wide) >= limit)
        if np.any(bad):
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise SpecError(f"value {float(wide[at])!r} at {at} overflows {dtype} (largest finite {top!r})",
                            field="A.dtype")
    return x.astype(np.float32).astype(target) if x.dtype.kind not in "fV" else x.astype(target)


def _nonzero(x: np.ndarray, dtype: str) -> np.ndarray:
    wide = x.astype(np.int64) if TYPES[dtype].is_int else x.astype(np.float32)
    return wide != 0          # NaN counts as non-zero


# --------------------------------------------------------------------------------------------------
# element storage (containers, packing)
# --------------------------------------------------------------------------------------------------

def encode_storage(x: np.ndarray, dtype: str, layout: SparseLayout) -> np.ndarray:
    """Element array -> the array whose bytes are the global-memory image (see module docstring)."""
    bits = TYPES[dtype].bits
    if layout.storage_bits == 4:
        nib = x.view(np.uint8) & 0xF
        return (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
    if layout.storage_bits == 8 and bits < 8:
        mask = (1 << bits) - 1
        return ((x.view(np.uint8) & mask) << CONTAINER_SHIFT[dtype]).astype(np.uint8)
    return x


def decode_storage(s: np.ndarray, dtype: str, layout: SparseLayout) -> np.ndarray:
    """Inverse of encode_storage."""
    bits = TYPES[dtype].bits
    target = _np_dtype(dtype)
    s = np.asarray(s)
    if layout.storage_bits == 4:
        lo, hi = s & 0xF, s >> 4
        out = np.empty(s.shape[:-1] + (2 * s.shape[-1],), np.uint8)
        out[..., 0::2], out[..., 1::2] = lo, hi
        return out.view(target)
    if layout.storage_bits == 8 and bits < 8:
        return ((s.astype(np.uint8) >> CONTAINER_SHIFT[dtype]) & ((1 << bits) - 1)).astype(np.uint8).view(target)
    return s.astype(target, copy=False)


# --------------------------------------------------------------------------------------------------
# metadata words
# --------------------------------------------------------------------------------------------------

def _slot_maps(layout: SparseLayout) -> tuple[np.ndarray, np.ndarray]:
    rows = np.array([[metadata_slot(layout, lane, n)[0] for n in range(8)] for lane in range(32)])
    chunks = np.array([[metadata_slot(layout, lane, n)[1] for n in range(8)] for lane in range(32)])
    return rows, chunks


def pack_metadata_words(nibbles: np.ndarray, layout: SparseLayout) -> np.ndarray:
    """nibbles[M][K/chunk] -> uint32 [M/16][K/shape_k][32] (vectorised metadata.pack_metadata)."""
    m, nch = nibbles.shape
    cpk = layout.chunks_per_row
    tiles = nibbles.reshape(m // SHAPE_M, SHAPE_M, nch // cpk, cpk).transpose(0, 2, 1, 3)
    rows, chunks = _slot_maps(layout)
    picked = tiles[:, :, rows, chunks].astype(np.uint32)             # [MT][KS][32][8]
    words = np.bitwise_or.reduce(picked << (4 * np.arange(8, dtype=np.uint32)), axis=-1)
    # C order is the buffer layout: the reduction over a transposed view need not produce it
    return np.ascontiguousarray(words, dtype=np.uint32)


def unpack_metadata_words(words: np.ndarray, layout: SparseLayout) -> np.ndarray:
    """uint32 [M/16][K/shape_k][32] -> nibbles[M][K/chunk]; raises if duplicate copies disagree."""
    words = np.asarray(words, dtype=np.uint32)
    mt, ks, _ = words.shape
    cpk = layout.chunks_per_row
    rows, chunks = _slot_maps(layout)
    nib = (words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF   # [MT][KS][32][8]
    tiles = np.full((mt, ks, SHAPE_M, cpk), -1, np.int64)
    for lane in range(32):
        for n in range(8):
            r, c = rows[lane, n], chunks[lane, n]
            prev = tiles[:, :, r, c]
            new = nib[:, :, lane, n].astype(np.int64)
            clash = (prev >= 0) & (prev != new)
            if clash.any():
                a, b = np.argwhere(clash)[0]
                raise SpecError(f"metadata words of tile ({a}, {b}) disagree about row {r}, chunk {c}",
                                field="sparsity.metadata")
            tiles[:, :, r, c] = new
    return tiles.transpose(0, 2, 1, 3).reshape(mt * SHAPE_M, ks * cpk)


def compact_metadata_exact_for(dtype: str, shape: str) -> bool:
    """Whether (dtype, shape)'s metadata has the compact layout (fragments.compact_metadata_exact)."""
    return compact_metadata_exact(layout_for(dtype, shape))


def compact_metadata(words, dtype: str, shape: str) -> np.ndarray:
    """32-lane metadata uint32 [..][32] -> the compact layout [..][16] (module docstring): the words of
    lanes COMPACT_METADATA_LANES. SpecError where the layout has no compact form or a dropped lane's word
    differs from the kept copy (the buffer is not compress's)."""
    layout = layout_for(dtype, shape)
    words = np.asarray(words, dtype=np.uint32)
    if not compact_metadata_exact(layout):
        raise SpecError(f"{dtype} {shape} metadata has no compact layout: all four threads of a quad supply "
                        "distinct words (PTX ISA 9.7.14.6.2)", field="sparsity.metadata")
    if words.shape[-1:] != (32,):
        raise SpecError(f"metadata of shape {words.shape}: the 32-lane layout ends in 32 words",
                        field="sparsity.metadata")
    kept = words[..., list(COMPACT_METADATA_LANES)]
    if not np.array_equal(expand_metadata(kept, dtype, shape), words):
        raise SpecError("metadata words of lanes l and l ^ 2 differ: not a buffer of compress's layout",
                        field="sparsity.metadata")
    return np.ascontiguousarray(kept)


def expand_metadata(words, dtype: str, shape: str) -> np.ndarray:
    """Compact metadata [..][16] -> the 32-lane layout [..][32]: lane l's word is compact word
    compact_metadata_word(l) (inverse of compact_metadata)."""
    words = np.asarray(words, dtype=np.uint32)
    if not compact_metadata_exact(layout_for(dtype, shape)) or words.shape[-1:] != (16,):
        raise SpecError(f"metadata of shape {words.shape} is not the compact layout of {dtype} {shape}",
                        field="sparsity.metadata")
    return np.ascontiguousarray(words[..., [compact_metadata_word(lane) for lane in range(32)]])


# --------------------------------------------------------------------------------------------------
# compress / decompress
# --------------------------------------------------------------------------------------------------

def _check_shape(m: int, k: int, layout: SparseLayout) -> None:
    if m % SHAPE_M:
        raise SpecError(f"M = {m} is not a multiple of {SHAPE_M}", field="shape.M")
    if k % layout.k:
        raise SpecError(f"K = {k} is not a multiple of the instruction K ({layout.k})", field="shape.K")


def compress(a, dtype: str, shape: str, selector: int = 0, *, compact: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
    """Dense M x K A -> (compressed values, metadata words) in the kernel's global layouts (`compact`:
    the 16-word metadata layout, module docstring).

    Raises SpecError naming the first (row, chunk) that is not sparse enough. A chunk with fewer
    non-zeros than kept slots keeps its non-zeros plus the lowest zero positions (always a legal,
    increasing nibble). `selector` is only validated: the metadata buffer serves every selector.
    """
    layout = layout_for(dtype, shape)
    if selector not in layout.selectors:
        raise SpecError(f"sparsity selector {selector!r} is undefined for {shape} with {dtype}",
                        field="sparsity.selector", hint="legal: " + ", ".join(map(str, layout.selectors)))
    x = to_elements(a, dtype)
    if x.ndim != 2:
        raise SpecError(f"A must be a 2-D array, got shape {x.shape}", field="A")
    m, k = x.shape
    _check_shape(m, k, layout)
    gran = layout.granularity
    nch = k // gran.chunk
    groups_nz = _nonzero(x, dtype).reshape(m, nch, gran.groups, gran.group).any(-1)   # [M][C][G]
    count = groups_nz.sum(-1)
    bad = np.argwhere(count > gran.keep)
    if len(bad):
        r, c = map(int, bad[0])
        unit = "non-zero elements" if gran.group == 1 else "two-wide sub-chunks with non-zeros"
        raise SpecError(
            f"A is not {gran.name} sparse: row {r}, chunk {c} (columns {c * gran.chunk}.."
            f"{(c + 1) * gran.chunk - 1}) has {int(count[r, c])} {unit}; at most {gran.keep} allowed",
            field="A", hint=gran.seed_text)
    # kept groups: the non-zero ones first, then the lowest zero ones; increasing order
    kept = np.sort(np.argsort(~groups_nz, axis=-1, kind="stable")[..., :gran.keep], axis=-1)
    slots = (kept[..., :, None] * gran.slots_per_group
             + np.arange(gran.slots_per_group)).reshape(m, nch, 2)
    nibbles = slots[..., 0] | (slots[..., 1] << 2)
    elem = (kept[..., :, None] * gran.group + np.arange(gran.group)).reshape(m, nch, gran.kept_elements)
    values = np.take_along_axis(x.reshape(m, nch, gran.chunk), elem, axis=-1).reshape(m, k // 2)
    meta = pack_metadata_words(nibbles, layout)
    return (np.ascontiguousarray(encode_storage(values, dtype, layout)),
            compact_metadata(meta, dtype, shape) if compact else meta)


def compress_padded(a, dtype: str, shape: str, k_values: int, meta_rows: int, meta_k: int,
                    selector: int = 0, *, value_rows: int | None = None, compact: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """compress() for an M x K A of any size, padded where the layouts need a granularity: A is padded
    with zeros to meta_rows x meta_k (meta_rows a multiple of 16, meta_k of the instruction K, both at
    least M and K) and compressed; the values keep `value_rows` rows (default M; at most meta_rows: the
    padding's zero rows) and k_values / 2 columns (k_values: K rounded up to the instruction K), the
    metadata every 16-row tile and k-step of the padding. All-zero chunks get the lowest legal nibble
    (compress), so every metadata word a kernel reads past the edge of A is legal and selects zeros (PTX
    ISA 9.7.14.6.1: 0b0000 is invalid)."""
    x = to_elements(a, dtype)
    if x.ndim != 2:
        raise SpecError(f"A must be a 2-D array, got shape {x.shape}", field="A")
    m, k = x.shape
    rows = m if value_rows is None else value_rows
    if meta_rows < m or meta_k < k or k_values < k or k_values > meta_k or not m <= rows <= meta_rows:
        raise SpecError(f"padding {meta_rows} x {meta_k} (values {rows} x {k_values}) does not cover A ({m} x {k})",
                        field="A")
    full = np.zeros((meta_rows, meta_k), x.dtype)
    full[:m, :k] = x
    values, meta = compress(full, dtype, shape, selector, compact=compact)
    cols = values.shape[1] * k_values // meta_k
    return np.ascontiguousarray(values[:rows, :cols]), meta


def decompress(values, metadata, dtype: str, shape: str) -> np.ndarray:
    """Inverse of compress: (values, metadata words, 32-lane or compact) -> dense M x K array of the
    element dtype."""
    from .isa.mma_sp.metadata import nibble_problem
    layout = layout_for(dtype, shape)
    if np.shape(metadata)[-1:] == (16,):
        metadata = expand_metadata(metadata, dtype, shape)
    gran = layout.granularity
    x = decode_storage(values, dtype, layout)
    m, half = x.shape
    k = 2 * half
    _check_shape(m, k, layout)
    nib = unpack_metadata_words(metadata, layout)
    if nib.shape != (m, k // gran.chunk):
        raise SpecError(f"metadata covers {nib.shape[0]} rows x {nib.shape[1]} chunks, values need "
                        f"{m} x {k // gran.chunk}", field="sparsity.metadata")
    for code in np.unique(nib):
        why = nibble_problem(layout, int(code), ordered=False)
        if why:
            r, c = map(int, np.argwhere(nib == code)[0])
            raise SpecError(f"metadata of row {r}, chunk {c}: {why}", field="sparsity.metadata")
    # the j-th stored value of a chunk belongs to the j-th index of its nibble (for the increasing
    # codes compress writes this is K order; decreasing plain-.sp codes are taken the same way)
    return scatter_kept(x, nib, gran)



def scatter_kept(x, nib, gran):
    """The dense M x K rows of compressed values `x` (M x K/2) placed by their chunks' metadata nibbles
    `nib` (M x chunks): the j-th stored value of a chunk goes to the j-th index its nibble names
    (PTX ISA 9.7.14.6.1). No validation: callers that need it check the nibbles first."""
    import numpy as np

    m, k = x.shape[0], nib.shape[1] * gran.chunk
    spg = gran.slots_per_group
    groups = np.stack([nib & 3, nib >> 2], -1)[..., ::spg] // spg
    elem = (groups[..., :, None] * gran.group + np.arange(gran.group)).reshape(m, -1, gran.kept_elements)
    dense = np.zeros((m, k // gran.chunk, gran.chunk), x.dtype)
    np.put_along_axis(dense, elem, x.reshape(m, -1, gran.kept_elements), axis=-1)
    return dense.reshape(m, k)

# --------------------------------------------------------------------------------------------------
# dense operands
# --------------------------------------------------------------------------------------------------

def pack_b(b, dtype: str, shape: str) -> np.ndarray:
    """K x N dense B -> N x K storage image (B^T, K contiguous) in the kernel's layout."""
    layout = layout_for(dtype, shape)       # every B type is also an A type of the same shape
    x = to_elements(b, dtype)
    if x.ndim != 2 or x.shape[0] % layout.k:
        raise SpecError(f"B must be K x N with K a multiple of {layout.k}, got {x.shape}", field="B")
    return np.ascontiguousarray(encode_storage(np.ascontiguousarray(x.T), dtype, layout))


def unpack_b(storage, dtype: str, shape: str) -> np.ndarray:
    """Inverse of pack_b: N x K storage -> K x N elements."""
    layout = layout_for(dtype, shape)
    return np.ascontiguousarray(decode_storage(storage, dtype, layout).T)


def random_sparse(rng: np.random.Generator, m: int, k: int, dtype: str, shape: str,
                  density: float = 1.0) -> np.ndarray:
    """A random dense M x K matrix that is sparse as (dtype, shape) requires: every chunk keeps a random
    legal set of positions, each kept value non-zero with probability `density` (for tests/benchmarks)."""
    layout = layout_for(dtype, shape)
    gran = layout.granularity
    nch = k // gran.chunk
    vals = random_values(rng, (m, k), dtype)
    order = np.argsort(rng.random((m, nch, gran.groups)), axis=-1)[..., :gran.keep]
    keep = np.zeros((m, nch, gran.groups), bool)
    np.put_along_axis(keep, order, True, axis=-1)
    keep &= rng.random(keep.shape) < density
    mask = np.repeat(keep, gran.group, axis=-1).reshape(m, k)
    return np.where(mask, vals, np.zeros((), vals.dtype)).astype(vals.dtype)


def random_values(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Random non-zero values exactly representable in `dtype` (small magnitudes for floats)."""
    t = TYPES[dtype]
    if t.is_int:
        lo, hi = (-(1 << (t.bits - 1)), (1 << (t.bits - 1))) if t.signed else (0, 1 << t.bits)
        v = rng.integers(lo, hi, size=shape)
        v = np.where(v == 0, 1, v)
        return v.astype(_np_dtype(dtype))
    # floats: sign * (1 + m/4) * 2^e, 2-bit mantissa, e in -1..1, is exact in every float format used
    # here except e2m1 (1 mantissa bit, smallest normal 1): there m in {0, 2} and e in 0..1
    mant = rng.integers(0, 4, size=shape)
    exp = rng.integers(-1, 2, size=shape)
    if t.bits == 4:
        mant &= 2
        exp = rng.integers(0, 2, size=shape)
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (sign * (1 + mant / 4) * np.exp2(exp)).astype(np.float32).astype(_np_dtype(dtype))


# --------------------------------------------------------------------------------------------------
# block scale factors (SFA / SFB of the block-scaled kinds: PTX ISA 9.7.14.3)
# --------------------------------------------------------------------------------------------------

def decode_scales(codes, scale_type: str) -> np.ndarray:
    """Scale bytes -> float64 values (compiler/isa/mma_sp/block_scale.decode_scale, byte by byte)."""
    from .isa.mma_sp.block_scale import decode_scale

    table = np.array([decode_scale(x, scale_type) for x in range(256)])
    return table[np.asarray(codes, np.uint8)]


def encode_scales(values, scale_type: str) -> np.ndarray:
    """Exact scale values -> their bytes (uint8, the SFA / SFB image). `.ue8m0` takes powers of two
    2^-127 .. 2^127, `.ue4m3` the non-negative finite e4m3 values; anything else is a SpecError (scales
    are never rounded here: quantize_block_scaled chooses representable ones)."""
    v = np.asarray(values, np.float64)
    table = decode_scales(np.arange(256), scale_type)
    ok = np.isfinite(table)
    codes = np.zeros(v.shape, np.uint8)
    for code in np.flatnonzero(ok)[::-1]:          # ue4m3 0x00 and 0x80 are both 0: keep the unsigned one
        codes[v == table[code]] = code
    bad = ~np.isin(v, table[ok])
    if bad.any():
        x = v[bad].flat[0]
        raise SpecError(f"scale {x!r} is not a .{scale_type} value "
                        + ("(powers of two 2^-127 .. 2^127)" if scale_type == "ue8m0"
                           else "(non-negative finite e4m3 values)"), field="scale_type")
    return codes


def quantize_block_scaled(x, dtype: str, scale_type: str, block: int, *, k_axis: int = 1
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Block-scaled quantization of a dense operand along K: returns (elements in `dtype`, x's shape;
    scale bytes uint8 [rows][K / block], the ABI's SFA / SFB layout: rows are M for A (k_axis=1, M x K)
    and N for B (k_axis=0, K x N)). Per block of `block` consecutive K (the kernel ABI's K/blk says
    which: compiler/isa/mma_sp/block_scale.block_elements):
      .ue8m0 (MX): scale = 2^(floor(log2(amax)) - emax), emax the exponent of dtype's largest finite value
                   (OCP Microscaling Formats v1.0, 6.3), clamped to 2^-127 .. 2^127;
      .ue4m3 (NVFP4): scale = amax / (dtype's largest finite value), rounded to the nearest ue4m3;
    an all-zero block gets scale 1. Elements are x / scale rounded to nearest even in dtype, saturated to
    its largest finite magnitude. Zeros stay zeros, so a structured-sparse A stays sparse."""
    import ml_dtypes

    x = np.asarray(x, np.float64)
    if x.ndim != 2 or k_axis not in (0, 1):
        raise SpecError(f"quantize a 2-D operand along axis 0 or 1, got shape {x.shape} axis {k_axis}")
    rows_k = x if k_axis == 1 else x.T                                    # rows x K
    rows, k = rows_k.shape
    if block < 1 or k % block:
        raise SpecError(f"K = {k} is not a multiple of the scale block {block}", field="shape.K")
    target = _np_dtype(dtype)
    top = float(ml_dtypes.finfo(target).max)
    amax = np.abs(rows_k).reshape(rows, k // block, block).max(axis=-1)
    with np.errstate(divide="ignore"):
        if scale_type == "ue8m0":
            emax = np.floor(np.log2(top))
            e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax, 0)
            scales = np.exp2(np.clip(e, -127, 127))
        elif scale_type == "ue4m3":
            ideal = np.where(amax > 0, amax / top, 1.0)
            scales = np.clip(ideal, 0, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
            scales = np.where(scales > 0, scales, 2.0 ** -9)                # the smallest ue4m3 (0x01)
        else:
            raise SpecError(f"not a scale type: {scale_type}", field="scale_type")
    q = np.clip(rows_k / np.repeat(scales, block, axis=1), -top, top).astype(np.float32).astype(target)
    return (q if k_axis == 1 else np.ascontiguousarray(q.T)), encode_scales(scales, scale_type)
