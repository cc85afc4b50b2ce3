"""Warp-level `mma.sp` (PTX ISA 9.7.14.6) on the 32 lanes' registers.

The lanes' registers are gathered into the operand tiles through the fragment maps of
compiler/isa/mma_sp/fragments.py (9.7.14.6.2: A register j = word t + 4*(j >> 1) of compressed row
g + 8*(j & 1); B register j = word t + 4*j of B^T row g; c_i at row g + 8*(i >> 1), column 2t + (i & 1)),
the metadata of the lanes the sparsity selector names (9.7.14.6.1) is put where compiler.sparse expects
every lane's word, and compiler.sparse decompresses A and decodes B. The warp's result is rounded once
to the D type. tests/test_sparse_gemm_kernel.py checks this against closed forms written from the ISA
figures without compiler/isa/mma_sp.
"""
from __future__ import annotations

import numpy as np

from .parse import EmulationError

_M32 = np.uint64(0xFFFFFFFF)


def _words_to_storage(words: np.ndarray, type_name: str, layout) -> np.ndarray:
    """uint32 words [rows][w] -> the storage array compiler.sparse reads (rows x elements)."""
    from .. import sparse
    from ..isa.types import TYPES

    raw = np.ascontiguousarray(words.astype(np.uint32)).view(np.uint8)
    if layout.storage_bits == 4 or (layout.storage_bits == 8 and TYPES[type_name].bits < 8):
        return raw
    return raw.view(sparse._np_dtype(type_name))


_MAPS: dict = {}


def _maps(lay):
    """Per-layout index arrays of the fragment maps (compiler/isa/mma_sp/fragments.py), computed once."""
    maps = _MAPS.get(lay)
    if maps is None:
        from ..isa.mma_sp.fragments import a_register_word, b_register_word, cd_element

        a = [np.array([a_register_word(lane, j) for lane in range(32)]).T for j in range(lay.a_regs)]
        b = [np.array([b_register_word(lane, j) for lane in range(32)]).T for j in range(lay.b_regs)]
        cd = [np.array([cd_element(lane, i) for lane in range(32)]).T for i in range(4)]
        from .. import sparse

        maps = _MAPS[lay] = (a, b, cd, sparse._slot_maps(lay))
    return maps


def _decompress(values: np.ndarray, meta: np.ndarray, form) -> np.ndarray:
    """compiler.sparse.decompress without its legality check: a kernel that reads garbage metadata gets
    garbage numbers (as from silicon, where undefined nibbles are undefined behaviour), not an error."""
    from .. import sparse

    lay = form.layout
    gran = lay.granularity
    x = sparse.decode_storage(values, form.a_type, lay)
    m, half = x.shape
    k = 2 * half
    # nibble n of lane l describes (row, chunk) = slot map [l, n] (9.7.14.6.1 / fragments.metadata_slot)
    rows, chunks = _maps(lay)[3]
    nib = np.zeros((m, k // gran.chunk), np.int64)
    nib[rows, chunks] = (meta.reshape(32, 1) >> (4 * np.arange(8, dtype=np.uint64))) & np.uint64(0xF)
    return sparse.scatter_kept(x, nib, gran)


def scale_matrices(form, sa: np.ndarray, sel_a: tuple[int, int], sb: np.ndarray, sel_b: tuple[int, int]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """scale_A (16 x vector) and scale_B^T (8 x vector) as float64, gathered from the lanes' scale-a-data /
    scale-b-data registers by {byte-id, thread-id} (PTX 9.7.14.3; compiler/isa/mma_sp/block_scale.py)."""
    from ..diagnostics import SpecError
    from ..isa.mma_sp.block_scale import SCALE_VECTOR, check_selectors, decode_scale, scale_a_lane, scale_b_lane, scale_byte

    bs = form.block_scale
    try:
        check_selectors(bs.scale_vec, sel_a[0], sel_a[1], sel_b[0], sel_b[1])
    except SpecError as e:
        raise EmulationError(f"{form.name}: {e.message}") from None
    vec = SCALE_VECTOR[bs.scale_vec]
    table = np.array([decode_scale(x, bs.scale_type) for x in range(256)])
    words_a, words_b = np.asarray(sa, np.uint64), np.asarray(sb, np.uint64)
    out = []
    for words, (byte_id, thread_id), lane_of, count in ((words_a, sel_a, scale_a_lane, 16),
                                                        (words_b, sel_b, scale_b_lane, 8)):
        m = np.empty((count, vec))
        for r in range(count):
            word = int(words[lane_of(r, thread_id)])
            for j in range(vec):
                m[r, j] = table[(word >> (8 * scale_byte(byte_id, j))) & 0xFF]
        out.append(m)
    return out[0], out[1]


def mma_sp_warp(form, a: list[np.ndarray], b: list[np.ndarray], c: list[np.ndarray], e: np.ndarray,
                selector: int, scales=None) -> list[np.ndarray]:
    """One warp's `mma.sp{::ordered_metadata}` of `form` (a compiler.isa.mma_sp Form): a, b, c are the
    operand registers (lists of 32-lane uint64 arrays), e the metadata register; returns D's registers.
    Block-scaled forms take `scales` = (scale-a-data, (byte-id-a, thread-id-a), scale-b-data, (..)):
    D = (A * scale_A)(B * scale_B) + C, every row of A / column of B cut into `vector` chunks of K
    (PTX 9.7.14.3, Table 35)."""
    from .. import sparse
    from ..isa.mma_sp.fragments import metadata_suppliers

    lay = form.layout
    k = lay.k
    if len(a) != lay.a_regs or len(b) != lay.b_regs:
        raise EmulationError(f"{form.name}: {len(a)} A / {len(b)} B registers, the form has "
                             f"{lay.a_regs} / {lay.b_regs} (9.7.14.6.2)")
    a_map, b_map, cd_map, _ = _maps(lay)
    a_tile = np.zeros((16, (k // 2) * lay.storage_bits // 32), np.uint64)
    for (rows, words), reg in zip(a_map, a):
        a_tile[rows, words] = reg
    b_tile = np.zeros((8, k * lay.storage_bits // 32), np.uint64)
    for (ns, words), reg in zip(b_map, b):
        b_tile[ns, words] = reg
    lanes = np.arange(32)
    sup = metadata_suppliers(lay, selector)
    t = lanes & 3
    src = (lanes & ~3) + np.asarray(sup)[t % len(sup)]
    meta = np.asarray(e, np.uint64)[src] & _M32
    dense_a = _decompress(_words_to_storage(a_tile, form.a_type, lay), meta, form)
    dense_b = sparse.unpack_b(_words_to_storage(b_tile, form.b_type, lay), form.b_type, lay.shape)
    integer = form.c_type == "s32"
    if form.a_type == "tf32":                 # the hardware ignores the low 13 mantissa bits
        av = (dense_a.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
        bv = (dense_b.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
    else:
        wide = np.int64 if integer else np.float64
        av, bv = dense_a.astype(wide), dense_b.astype(wide)
    if form.block_scale is not None:
        if scales is None:
            raise EmulationError(f"{form.name} needs its scale operands")
        sfa, sfb = scale_matrices(form, *scales)
        blk = k // sfa.shape[1]
        with np.errstate(all="ignore"):
            av = av * np.repeat(sfa, blk, axis=1)
            bv = bv * np.repeat(sfb.T, blk, axis=0)
    with np.errstate(all="ignore"):            # unwritten shared memory may decode to NaN / inf
        prod = av @ bv                        # 16 x 8
    out = []
    if form.c_type == "f16":                  # c/d: two f16 per register (9.7.14.6.2 accumulators)
        for r in range(len(c)):
            halves = []
            for h in range(2):
                row, col = cd_map[2 * r + h]
                cv = ((c[r] >> np.uint64(16 * h)) & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
                with np.errstate(all="ignore"):
                    halves.append((prod[row, col] + cv.astype(np.float64)).astype(np.float16).view(np.uint16))
            out.append(halves[0].astype(np.uint64) | (halves[1].astype(np.uint64) << np.uint64(16)))
        return out
    for i in range(len(c)):
        row, col = cd_map[i]
        if integer:
            cv = c[i].astype(np.uint32).view(np.int32).astype(np.int64)
            total = prod[row, col] + cv
            if form.satfinite:                # .satfinite clamps to the s32 range instead of wrapping
                total = np.clip(total, -2**31, 2**31 - 1)
            out.append((total & 0xFFFFFFFF).astype(np.uint64))
        else:
            cv = c[i].astype(np.uint32).view(np.float32).astype(np.float64)
            with np.errstate(all="ignore"):
                out.append((prod[row, col] + cv).astype(np.float32).view(np.uint32).astype(np.uint64))
    return out
