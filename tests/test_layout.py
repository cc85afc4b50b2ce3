"""Canonical smem layouts (PTX ISA 9.7.16.3) and per-K-step descriptors (9.7.16.4.1).

The five worked examples of the seed (Figures 188-192, ../shared/seeds/ptx-smem-descriptor-strides.txt)
are checked against the exact CuTe layouts the seed prints, evaluated here by a small CuTe-layout
interpreter. The seed's strides are in elements; the Swizzle<B,4,3> functor acts on byte offsets
(bits 4.. XOR bits 7.., the 16-byte-chunk swizzle of 9.7.16.4.1), so the byte offset of a coordinate is
swz(layout(coord) * element_bytes).
"""
import itertools
import math

import pytest

from compiler.descriptors import SmemDesc
from compiler.diagnostics import SpecError
from compiler.isa.swizzle import SWIZZLE_MODES as SWIZZLES
from compiler.layout import canonical_layout, choose_swizzle, container_bits_for, smem_descriptors, swizzle_bytes

FIXED = 1 << 46


def cute_eval(shape, stride, coord):
    """CuTe layout function: a 1-D coordinate split colexicographically over a (nested) shape."""
    if isinstance(shape, int):
        return coord * stride
    total = 0
    for sub_shape, sub_stride in zip(shape, stride):
        size = math.prod(_flatten(sub_shape))
        total += cute_eval(sub_shape, sub_stride, coord % size)
        coord //= size
    return total


def _flatten(shape):
    return [shape] if isinstance(shape, int) else [x for s in shape for x in _flatten(s)]


def figure_offsets(swizzle, shape, stride, elem_bytes, mn, k):
    """Byte offset per (mn, k) of the seed's exact layout Swizzle o (MN-mode, K-mode)."""
    return {(r, c): swizzle_bytes(elem_bytes * (cute_eval(shape[0], stride[0], r) + cute_eval(shape[1], stride[1], c)),
                                  swizzle)
            for r in range(mn) for c in range(k)}


def layout_offsets(layout):
    return {(r, c): layout.offset(r, c) for r in range(layout.mn) for c in range(layout.k)}


# ---- the five worked examples of PTX 9.7.16.3.3 ----------------------------------------------------

def test_figure_188_k_major_no_swizzle_tf32():
    # Exact layout Swizzle<0,4,3> o ((8,2),(4,4)):((4,32),(1,64)); T = 4, m = 2, k = 2 -> a 16 x 16 tile
    layout = canonical_layout("tf32", "K", "none", 16, 16)
    assert layout_offsets(layout) == figure_offsets("none", ((8, 2), (4, 4)), ((4, 32), (1, 64)), 4, 16, 16)
    # Table: LBO = 64 * sizeof(tf32) = 256 B -> 256 >> 4 = 16; SBO = 32 * 4 = 128 B -> 8
    assert (layout.lbo, layout.sbo) == (256, 128)
    desc = SmemDesc.decode(smem_descriptors("tf32", "K", "none", 16, 16, 8)[0])
    assert (desc.lbo >> 4, desc.sbo >> 4) == (16, 8)


def test_figure_189_k_major_32b_swizzle_tf32():
    # Exact layout Swizzle<1,4,3> o ((8,2),(4,4)):((8,64),(1,4)); T = 4, m = 2, k = 2.
    # Seed erratum: with K-mode (4,4):(1,4) the K extent is 16 tf32 = 64 B but a 32B-swizzle line holds
    # 32 B (row stride 8 elements), so the printed layout maps (row 1, k 0) and (row 0, k 8) to the same
    # element 8: it is not a layout of a 16 x 16 tile. It is exact for the first swizzle atom along K
    # (k < 8 = 2T, i.e. "2k" with k = 1, the per-MMA form CUTLASS documents: ((8,m),(T,2)):((2T,SBO),(1,T))).
    printed = figure_offsets("32B", ((8, 2), (4, 4)), ((8, 64), (1, 4)), 4, 16, 16)
    assert printed[(1, 0)] == printed[(0, 8)]                        # the collision
    layout = canonical_layout("tf32", "K", "32B", 16, 16)
    ours = layout_offsets(layout)
    assert {key: v for key, v in ours.items() if key[1] < 8} == {key: v for key, v in printed.items() if key[1] < 8}
    assert len(set(ours.values())) == 16 * 16                        # ours stays injective over the tile
    # Table: SBO = 64 * sizeof(tf32) = 256 B -> 16; LBO "NA", encoded 1 (assumed)
    assert layout.sbo == 256
    desc = smem_descriptors("tf32", "K", "32B", 16, 16, 8)[0]
    assert ((desc >> 16) & 0x3FFF, (desc >> 32) & 0x3FFF) == (1, 16)


def test_figure_190_mn_major_no_swizzle_bf16():
    # Exact layout Swizzle<0,4,3> o ((8,1,2),(8,2)):((1,8,64),(8,128)); T = 8, m = 2, k = 2 -> 16 x 16
    layout = canonical_layout("bf16", "MN", "none", 16, 16)
    assert layout_offsets(layout) == figure_offsets("none", ((8, 1, 2), (8, 2)), ((1, 8, 64), (8, 128)), 2, 16, 16)
    # Table: LBO = 128 * sizeof(bf16) = 256 B -> 16; SBO = 64 * 2 = 128 B -> 8
    assert (layout.lbo, layout.sbo) == (256, 128)
    desc = SmemDesc.decode(smem_descriptors("bf16", "MN", "none", 16, 16, 16)[0])
    assert (desc.lbo >> 4, desc.sbo >> 4) == (16, 8)


def test_figure_191_mn_major_32b_swizzle_bf16():
    # Exact layout Swizzle<1,4,3> o ((8,2,2),(8,2)):((1,8,128),(16,256)); T = 8, m = 2, k = 2 -> 32 x 16
    layout = canonical_layout("bf16", "MN", "32B", 32, 16)
    assert layout_offsets(layout) == figure_offsets("32B", ((8, 2, 2), (8, 2)), ((1, 8, 128), (16, 256)), 2, 32, 16)
    # Table: LBO = 128 * 2 = 256 B -> 16; SBO = 256 * 2 = 512 B -> 32
    assert (layout.lbo, layout.sbo) == (256, 512)
    desc = SmemDesc.decode(smem_descriptors("bf16", "MN", "32B", 32, 16, 16)[0])
    assert (desc.lbo >> 4, desc.sbo >> 4, desc.swizzle) == (16, 32, "32B")


def test_figure_192_mn_major_64b_swizzle_bf16():
    # Exact layout Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)); T = 8, m = 2, k = 2 -> 64 x 16
    layout = canonical_layout("bf16", "MN", "64B", 64, 16)
    assert layout_offsets(layout) == figure_offsets("64B", ((8, 4, 2), (8, 2)), ((1, 8, 256), (32, 512)), 2, 64, 16)
    # Table: LBO = 256 * 2 = 512 B -> 32; SBO = 512 * 2 = 1024 B -> 64
    assert (layout.lbo, layout.sbo) == (512, 1024)
    desc = SmemDesc.decode(smem_descriptors("bf16", "MN", "64B", 64, 16, 16)[0])
    assert (desc.lbo >> 4, desc.sbo >> 4, desc.swizzle) == (32, 64, "64B")


# ---- every swizzle x major x storage width ---------------------------------------------------------

# (dtype, container bits): packed fp4, padded fp4 (.b4x16_p64), padded fp6 (.b6x16_p32), 8, 16, 32 bit
STORAGES = [("e2m1", 4), ("e2m1", 8), ("e2m3", 8), ("e4m3", 8), ("f16", 16), ("tf32", 32)]
CASES = [(dtype, cbits, major, swz) for (dtype, cbits), major, swz
         in itertools.product(STORAGES, ("K", "MN"), SWIZZLES) if major in SWIZZLES[swz].majors]


def three_by_three(dtype, cbits, major, swz):
    """A tile of 3 atoms along each dimension (odd counts catch swapped strides)."""
    mode = SWIZZLES[swz]
    contiguous = 3 * mode.width * 8 // cbits
    lines = 3 * mode.atom_rows
    mn, k = (lines, contiguous) if major == "K" else (contiguous, lines)
    return canonical_layout(dtype, major, swz, mn, k, container_bits=cbits)


@pytest.mark.parametrize("dtype, cbits, major, swz", CASES)
def test_layout_is_a_bijection_into_the_tile(dtype, cbits, major, swz):
    layout = three_by_three(dtype, cbits, major, swz)
    bits = layout.elem_bits
    positions = [layout.bit_offset(r, c) for r in range(layout.mn) for c in range(layout.k)]
    assert len(set(positions)) == layout.mn * layout.k
    assert layout.size_bytes == layout.mn * layout.k * cbits // 8
    for p in positions:
        assert 0 <= p and p + bits <= layout.size_bytes * 8
        # values stay inside the data part of their chunk (padded formats: first 8 / 12 bytes)
        assert (p % 128) + bits <= layout.data_bytes_per_chunk * 8
    # elements never overlap: sorted bit positions are at least `bits` apart
    ordered = sorted(positions)
    assert all(b - a >= bits for a, b in zip(ordered, ordered[1:]))


@pytest.mark.parametrize("dtype, cbits, major, swz", CASES)
def test_copy_map_agrees_with_offset(dtype, cbits, major, swz):
    layout = three_by_three(dtype, cbits, major, swz)
    cmap = layout.copy_map()
    assert (cmap.contiguous, cmap.lines, cmap.chunks_per_line) == (major, layout.lines, layout.chunks_per_line)

    def chunk_offset(line, chunk):       # the formula of the CopyMap contract, written out independently
        coords = {"line": line, "chunk": chunk}
        x = 0
        for t in cmap.terms:
            v = coords[t.coord] >> t.shift
            x += (v & ((1 << t.width) - 1) if t.width is not None else v) * t.stride
        for t in cmap.terms:             # every divisor is a power of two: shifts and masks only
            assert t.stride >= 0 and t.shift >= 0
        return x ^ ((x >> cmap.swizzle_shift) & (((1 << cmap.swizzle_bits) - 1) << cmap.swizzle_base))

    if swz != "128B_base32B":            # the contract's Swizzle<B,4,3>
        assert (cmap.swizzle_base, cmap.swizzle_shift) == (4, 3)
        assert cmap.swizzle_bits == {"none": 0, "32B": 1, "64B": 2, "128B": 3}[swz]
    per_chunk = layout.elems_per_chunk
    for r in range(layout.mn):
        for c in range(layout.k):
            line, along = (r, c) if major == "K" else (c, r)
            chunk, index = divmod(along, per_chunk)
            assert chunk_offset(line, chunk) + index * layout.elem_bits // 8 == layout.offset(r, c)
    chunks = {chunk_offset(line, ch) for line in range(cmap.lines) for ch in range(cmap.chunks_per_line)}
    assert chunks == set(range(0, layout.size_bytes, 16))
    assert all(cmap.byte_offset(line, ch) == chunk_offset(line, ch)
               for line in range(cmap.lines) for ch in range(cmap.chunks_per_line))


@pytest.mark.parametrize("dtype, cbits, major, swz", CASES)
def test_atoms_repeat_along_mn_first(dtype, cbits, major, swz):
    layout = three_by_three(dtype, cbits, major, swz)
    atom = SWIZZLES[swz].atom_bytes
    if major == "K":     # the second atom holds the next group of MN rows
        assert layout.offset(SWIZZLES[swz].atom_rows, 0) == atom
    else:                # the second atom holds the next swizzle-width of MN columns
        assert layout.offset(layout.elems_per_chunk * SWIZZLES[swz].width // 16, 0) == atom


def test_padded_subbyte_positions():
    # .b4x16_p64: element j of a chunk at bits 4j of the chunk, bytes 8..15 padding;
    # .b6x16_p32: element j at bits 6j, bytes 12..15 padding (PTX 9.7.16.10.4.4, Figures 202/203)
    fp4 = canonical_layout("e2m1", "K", "none", 8, 32, container_bits=8)
    assert [fp4.bit_offset(0, j) for j in range(16)] == [4 * j for j in range(16)]
    assert fp4.data_bytes_per_chunk == 8 and fp4.elems_per_chunk == 16
    fp6 = canonical_layout("e2m3", "K", "none", 8, 32, container_bits=8)
    assert [fp6.bit_offset(0, j) for j in range(16)] == [6 * j for j in range(16)]
    assert fp6.offset(0, 5) == 30 // 8       # bits 30..35 start in byte 3
    assert fp6.data_bytes_per_chunk == 12
    packed = canonical_layout("e2m1", "K", "none", 8, 64, container_bits=4)
    assert packed.elems_per_chunk == 32 and packed.offset(0, 31) == 15 and packed.bit_offset(0, 1) == 4


@pytest.mark.parametrize("dtype, kind, expected", [
    ("e2m1", "f8f6f4", 8), ("e2m1", "mxf8f6f4", 8), ("e2m1", "mxf4", 4), ("e2m1", "mxf4nvf4", 4),
    ("e3m2", "f8f6f4", 8), ("e2m3", None, 8), ("e4m3", "f8f6f4", 8), ("f16", "f16", 16), ("tf32", "tf32", 32),
])
def test_container_bits_for(dtype, kind, expected):
    assert container_bits_for(dtype, kind) == expected


# ---- descriptors per K step ------------------------------------------------------------------------

def test_descriptors_f16_k_major_128b():
    # 128 x 64 f16, K-major, 128B: a line is 64 f16 = 128 B, an atom 8 x 128 B = 1024 B, atoms along M
    # first -> SBO = 1024 B (enc 64); LBO unused -> enc 1. MMA K = 16 f16 = 32 B: starts 0, 32, 64, 96 B
    # (enc 0, 2, 4, 6); swizzle code 2.
    values = smem_descriptors("f16", "K", "128B", 128, 64, 16)
    assert values == [s | (1 << 16) | (64 << 32) | FIXED | (2 << 61) for s in (0, 2, 4, 6)]


def test_descriptors_f16_k_major_no_swizzle():
    # 128 x 32 f16, K-major, none: core matrices 8 x 16 B, the 16 M groups adjacent (SBO = 128 B);
    # the 4 K chunks at LBO = 16 * 128 = 2048 B. Steps of 16 f16 = 2 chunks: starts 0 and 2 * 2048 B.
    values = smem_descriptors("f16", "K", "none", 128, 32, 16, base_address=0x1000)
    assert values == [((0x1000 + s) >> 4) | ((2048 >> 4) << 16) | ((128 >> 4) << 32) | FIXED for s in (0, 4096)]


def test_descriptors_bf16_mn_major_64b():
    # 64 x 32 bf16, MN-major, 64B: a line (K row) is 64 bf16 = 128 B = 2 atoms of 64 B; atom 8 x 64 B
    # = 512 B; LBO = MN atom stride 512 B (enc 32); SBO = 8-K-row group stride 2 * 512 = 1024 B (enc 64).
    # MMA K = 16 rows = 2 groups: starts 0 and 2048 B.
    values = smem_descriptors("bf16", "MN", "64B", 64, 32, 16)
    assert values == [(s >> 4) | (32 << 16) | (64 << 32) | FIXED | (4 << 61) for s in (0, 2048)]


def test_descriptors_tf32_mn_major_128b_base32b():
    # 32 x 16 tf32, MN-major, 128B_base32B (CUTLASS atom: 4 K rows x 128 B = 512 B): one MN atom,
    # LBO = 512 (enc 32), SBO = 4-row group stride 512 (enc 32); MMA K = 8 rows = 2 groups: 0, 1024 B.
    values = smem_descriptors("tf32", "MN", "128B_base32B", 32, 16, 8)
    assert values == [(s >> 4) | (32 << 16) | (32 << 32) | FIXED | (1 << 61) for s in (0, 1024)]


def test_base_offset_for_unaligned_swizzle_pattern():
    # PTX ISA 9.7.16.4.1, Table 40: base_offset = (pattern start >> 7) & 7 when not on the 1024-B repeat: 0x2080 -> 0x41 & 7 = 1
    desc = SmemDesc.decode(smem_descriptors("f16", "K", "128B", 8, 64, 16, base_address=0x2080)[0])
    assert (desc.base_offset, desc.start_address) == (1, 0x2080)
    assert SmemDesc.decode(smem_descriptors("f16", "K", "128B", 8, 64, 16, base_address=0x2400)[0]).base_offset == 0
    with pytest.raises(SpecError, match="128-byte aligned"):
        smem_descriptors("f16", "K", "128B", 8, 64, 16, base_address=0x2010)
    with pytest.raises(SpecError, match="16-byte aligned"):
        smem_descriptors("f16", "K", "none", 8, 64, 16, base_address=0x2008)


def test_absolute_lbo_mode_for_k48():
    # mxf4 K = 96 packed e2m1 = 48 B (PTX 9.7.16.3.1.2). 128 x 768 tile, K-major 128B: a line holds 128 B,
    # 3 K atoms each 16 * 1024 = 16384 B apart. Step j starts at byte 48j: j = 2 covers 96..143 and must
    # continue in the next atom, so LBO carries the absolute address of the next K atom.
    steps = [SmemDesc.decode(v) for v in
             smem_descriptors("e2m1", "K", "128B", 128, 768, 96, base_address=0x4000, lbo_mode="absolute",
                              container_bits=4)]
    assert len(steps) == 8
    assert [d.lbo_mode for d in steps] == ["absolute"] * 8
    # start = base + 48j within atom j*48 // 128, atom stride 16384
    assert [d.start_address - 0x4000 for d in steps] == [(48 * j) % 128 + (48 * j // 128) * 16384 for j in range(8)]
    assert [d.lbo - 0x4000 for d in steps] == [(48 * j // 128 + 1) * 16384 for j in range(8)]
    with pytest.raises(SpecError, match="cannot leave its atom") as err:   # relative: step 2 leaves its atom
        smem_descriptors("e2m1", "K", "128B", 128, 768, 96, container_bits=4)
    assert "absolute" in err.value.hint
    with pytest.raises(SpecError, match="absolute LBO mode is only"):
        smem_descriptors("f16", "K", "128B", 128, 64, 16, lbo_mode="absolute")
    with pytest.raises(SpecError, match="base offset 0"):
        smem_descriptors("e2m1", "K", "128B", 128, 768, 96, base_address=0x4080, lbo_mode="absolute",
                         container_bits=4)


def test_k_step_may_not_leave_a_k_major_swizzle_atom():
    # sparse f16 B: MMA K = 32 = 64 B > a 32B-swizzle line; swizzled K-major has no LBO (PTX 9.7.16.3.1)
    with pytest.raises(SpecError, match="bytes 0..63 of a 32-byte swizzle line") as err:
        smem_descriptors("f16", "K", "32B", 64, 64, 32)
    assert err.value.hint == "use a wider swizzle"
    assert len(smem_descriptors("f16", "K", "64B", 64, 64, 32)) == 2
    # swizzle="auto" in smem_descriptors knows the step: 96 B lines take 32B with 32 B steps, and
    # 192 B lines (96 f16) 64B with 64 B steps
    assert SmemDesc.decode(smem_descriptors("f16", "K", "auto", 64, 48, 16)[0]).swizzle == "32B"
    assert SmemDesc.decode(smem_descriptors("f16", "K", "auto", 64, 96, 32)[0]).swizzle == "64B"


# ---- choose_swizzle --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, major, mn, k, mma_k, expected", [
    ("f16", "K", 128, 64, None, "128B"),      # 128 B lines
    ("f16", "K", 128, 32, None, "64B"),
    ("f16", "K", 128, 16, None, "32B"),
    ("f16", "K", 128, 8, None, "none"),       # 16 B
    ("f16", "K", 128, 96, None, "64B"),       # 192 B: not a whole number of 128 B atoms
    ("f16", "K", 128, 48, 32, "none"),        # 96 B lines, 64 B steps: 32B would be crossed
    ("f16", "MN", 64, 16, None, "128B"),      # 64 f16 = 128 B along M
    ("tf32", "MN", 32, 16, None, "128B_base32B"),
    ("e2m1", "K", 128, 256, None, "128B"),    # packed: 256 * 4 bit = 128 B
])
def test_choose_swizzle(dtype, major, mn, k, mma_k, expected):
    assert choose_swizzle(dtype, major, mn, k, mma_k=mma_k) == expected
    if mma_k is None:
        assert canonical_layout(dtype, major, "auto", mn, k).swizzle == expected


def test_choose_swizzle_tf32_mn_major_needs_room():
    with pytest.raises(SpecError, match="128B_base32B"):
        choose_swizzle("tf32", "MN", 16, 16)


# ---- illegal layouts -------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, needle", [
    (("f16", "K", "128B", 128, 32), {}, "atom width"),            # 64 B lines under 128B swizzle
    (("f16", "K", "none", 12, 16), {}, "multiple of 8"),           # M not whole core matrices
    (("f16", "MN", "none", 16, 12), {}, "multiple of 8"),
    (("tf32", "K", "128B_base32B", 8, 32), {}, "no K-major"),
    (("f16", "K", "16B", 8, 16), {}, "unknown swizzle"),
    (("f16", "KM", "none", 8, 16), {}, "major"),
    (("e4m3", "K", "none", 8, 16), {"container_bits": 16}, "cannot be stored"),
    (("e2m3", "K", "none", 8, 64), {"container_bits": 6}, "cannot be stored"),
    (("bogus", "K", "none", 8, 16), {}, "unknown element type"),
    (("f16", "K", "none", 0, 16), {}, "positive"),
])
def test_illegal_layouts_raise(args, kwargs, needle):
    with pytest.raises(SpecError, match=needle):
        canonical_layout(*args, **kwargs)


def test_k_steps_must_divide_the_tile():
    with pytest.raises(SpecError, match="whole number of MMA K steps"):
        smem_descriptors("f16", "K", "none", 8, 48, 32)
    with pytest.raises(SpecError, match="multiple of 8 K rows|whole number of 8-row"):
        canonical_layout("f16", "MN", "none", 16, 16).descriptor(0, 4)


# ---- descriptors vs the PTX canonical-layout formulas, every swizzle x major x width ----------------

def hardware_bit_address(desc, dtype_bits, container_bits, major, row, kk):
    """Bit address the MMA reads for element (row, kk) of a K step, from the descriptor alone, per the
    PTX 9.7.16.3.3 canonical-layout table (strides converted to bytes; T = 128 / container bits):
      K-major none:      ((8,m),(T,2k)):((1T,SBO),(1,LBO))
      K-major swizzled:  ((8,m),(T,2k)):((W*T,SBO),(1,T))        W = swizzle bytes / 16
      MN-major none:     ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
      MN-major swizzled: ((T,W,m),(8,k)):((1,T,LBO),(W*T,SBO))   (128B_base32B: 4 K rows, CUTLASS)
    then the swizzle functor on the byte address (bases are aligned, so absolute = relative)."""
    mode = SWIZZLES[desc.swizzle]
    per_chunk = 128 // container_bits
    contiguous, line = (kk, row) if major == "K" else (row, kk)
    chunk, index = divmod(contiguous, per_chunk)
    rows = mode.atom_rows
    if major == "K":
        line_part = (line % 8) * mode.width + (line // 8) * desc.sbo
        chunk_part = chunk * (desc.lbo if desc.swizzle == "none" else 16)
    else:
        width = mode.width // 16
        chunk_part = (chunk % width) * 16 + (chunk // width) * (desc.sbo if desc.swizzle == "none" else desc.lbo)
        line_part = (line % rows) * mode.width + (line // rows) * (desc.lbo if desc.swizzle == "none" else desc.sbo)
    byte = swizzle_bytes(desc.start_address + line_part + chunk_part, desc.swizzle)
    return byte * 8 + index * dtype_bits


@pytest.mark.parametrize("dtype, cbits, major, swz", CASES)
def test_descriptors_address_the_layout(dtype, cbits, major, swz):
    mode = SWIZZLES[swz]
    contiguous = 384 * 8 // cbits                  # 384 B lines: a whole number of atoms and of 32 B steps
    lines = 3 * mode.atom_rows
    mn, k = (lines, contiguous) if major == "K" else (contiguous, lines)
    step = 32 * 8 // cbits if major == "K" else mode.atom_rows     # 32-byte K steps / one K-row group
    base = 0x2000                                  # 1024-B aligned: base offset 0
    layout = canonical_layout(dtype, major, swz, mn, k, container_bits=cbits)
    values = smem_descriptors(dtype, major, swz, mn, k, step, base_address=base, container_bits=cbits)
    assert len(values) == k // step
    for i, value in enumerate(values):
        desc = SmemDesc.decode(value)
        k0 = i * step
        assert (desc.swizzle, desc.base_offset, desc.sbo) == (swz, 0, layout.sbo)
        assert desc.lbo == layout.lbo == (16 if (major == "K" and swz != "none") else desc.lbo)
        assert desc.start_address == base + layout.offset(0, k0) == base + layout.k_step_start(k0)
        for r in range(mn):
            for kk in range(step):
                assert (hardware_bit_address(desc, layout.elem_bits, cbits, major, r, kk)
                        == base * 8 + layout.bit_offset(r, k0 + kk))
