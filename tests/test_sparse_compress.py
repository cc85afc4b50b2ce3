"""Host compressor (compiler/sparse.py): round trips on every type, the global layouts the kernel reads,
and a register-level model of how mma.sp consumes them.

References: seed 9.7.14.6.1 (granularities, kept positions, nibble encoding), PTX ISA 9.7.14.6.3 (8-bit
containers for f6/f4 under .kind::f8f6f4: e2m1 in bits 5:2, e3m2/e2m3 in bits 5:0; packed e2m1 for
mxf4), PTX ISA 9.7.14.6.2 (fragments and metadata words).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import sparse
from compiler.diagnostics import SpecError
from compiler.isa.mma_sp.forms import FORM_ROWS, layout_for
from compiler.isa.mma_sp.fragments import a_element, a_register_word, metadata_slot, metadata_suppliers
from compiler.isa.mma_sp.metadata import kept_elements, pack_metadata

# every (A type, shape) with its own layout
TYPE_SHAPES = sorted({(a, r.shape) for r in FORM_ROWS for a in r.a_types},
                     key=lambda p: (p[1], p[0]))
IDS = [f"{a}-{s}" for a, s in TYPE_SHAPES]


def as_f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


def any_bits(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Arbitrary encodings of `dtype` (all bit patterns incl. subnormals and -0), NaN/inf replaced by 1."""
    from compiler.isa.types import TYPES
    bits = TYPES[dtype].bits
    if bits >= 16:
        raw = rng.integers(0, 1 << bits, size=shape, dtype=np.uint64).astype(
            {16: np.uint16, 32: np.uint32}[bits])
        x = raw.view(sparse._np_dtype(dtype))
    else:
        x = (rng.integers(0, 1 << bits, size=shape).astype(np.uint8)).view(sparse._np_dtype(dtype))
    if TYPES[dtype].is_float:
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(x.astype(np.float64))
        x = np.where(bad, np.ones((), x.dtype), x).astype(x.dtype)
    return x


def sparse_any_bits(rng, m, k, dtype, shape):
    """Arbitrary values, zeroed outside a random legal kept set per chunk, some chunks fully zero."""
    gran = layout_for(dtype, shape).granularity
    vals = any_bits(rng, (m, k), dtype)
    keep = sparse.random_sparse(rng, m, k, dtype, shape, density=0.7)
    mask = sparse._nonzero(keep, dtype)
    dead = rng.random((m, k // gran.chunk)) < 0.1
    mask &= ~np.repeat(dead, gran.chunk, axis=1)
    return np.where(mask, vals, np.zeros((), vals.dtype)).astype(vals.dtype)


@pytest.mark.parametrize("dtype,shape", TYPE_SHAPES, ids=IDS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), mt=st.integers(1, 3), ks=st.integers(1, 3))
def test_round_trip(dtype, shape, seed, mt, ks):
    rng = np.random.default_rng(seed)
    lay = layout_for(dtype, shape)
    a = sparse_any_bits(rng, 16 * mt, lay.k * ks, dtype, shape)
    values, meta = sparse.compress(a, dtype, shape)
    assert values.flags.c_contiguous and meta.flags.c_contiguous
    assert meta.shape == (mt, ks, 32) and meta.dtype == np.uint32
    # A is M x K/2 elements of storage_bits each (module docstring)
    assert values.nbytes == 16 * mt * lay.k * ks // 2 * lay.storage_bits // 8
    back = sparse.decompress(values, meta, dtype, shape)
    assert back.dtype == a.dtype and back.shape == a.shape
    np.testing.assert_array_equal(as_f64(back), as_f64(a))


@pytest.mark.parametrize("dtype,shape", TYPE_SHAPES, ids=IDS)
def test_metadata_buffer_is_per_tile_pack_metadata(dtype, shape):
    rng = np.random.default_rng(3)
    lay = layout_for(dtype, shape)
    a = sparse.random_sparse(rng, 32, 2 * lay.k, dtype, shape, density=0.6)
    _, meta = sparse.compress(a, dtype, shape)
    gran = lay.granularity
    for mt in range(2):
        for ks in range(2):
            nib = []
            for r in range(16):
                row = []
                for c in range(lay.chunks_per_row):
                    col0 = ks * lay.k + c * gran.chunk
                    nz = tuple(int(e) for e in np.nonzero(sparse._nonzero(a[16 * mt + r, col0:col0 + gran.chunk],
                                                                            dtype))[0])
                    # compress keeps the non-zero groups, then the lowest zero ones
                    groups = sorted({e // gran.group for e in nz})
                    groups += [g for g in range(gran.groups) if g not in groups][:gran.keep - len(groups)]
                    kept = [g * gran.group + e for g in sorted(groups) for e in range(gran.group)]
                    row.append(_code(lay, kept))
                nib.append(row)
            assert list(meta[mt, ks]) == pack_metadata(lay, nib)


def _code(lay, kept):
    from compiler.isa.mma_sp.metadata import encode_kept
    return encode_kept(lay, kept)


@pytest.mark.parametrize("dtype,shape", TYPE_SHAPES, ids=IDS)
def test_register_level_model(dtype, shape):
    """What one mma.sp sees: lane registers fetched as the kernel does (fragments.a_register_word on the
    C-order values buffer; the metadata word at [mt][ks][lane]); the hardware takes each (row, chunk)
    nibble from the lane the selector names (PTX ISA 9.7.14.6.2 (metadata fragments)) and places the lane's kept elements
    (PTX ISA 9.7.14.6.2 (A fragments)) at the nibble's positions. The rebuilt dense tile must be A's tile, for every selector."""
    rng = np.random.default_rng(11)
    lay = layout_for(dtype, shape)
    gran = lay.granularity
    a = sparse.random_sparse(rng, 32, 2 * lay.k, dtype, shape, density=0.8)
    values, meta = sparse.compress(a, dtype, shape)
    elems = sparse.decode_storage(values, dtype, lay)                  # M x K/2 compressed elements
    epr = lay.elems_per_reg
    for sel in lay.selectors:
        supplier = {}
        for lane in range(32):
            if lane & 3 in metadata_suppliers(lay, sel):
                for n in range(8):
                    supplier[metadata_slot(lay, lane, n)] = (lane, n)
        for mt in range(2):
            for ks in range(2):
                words = meta[mt, ks]
                tile = np.zeros((16, lay.k), elems.dtype)
                for lane in range(32):
                    for j in range(lay.a_regs):
                        row, word = a_register_word(lane, j)
                        for e in range(epr):
                            i = j * epr + e
                            r, chunk, kept = a_element(lay, lane, i)
                            assert r == row
                            value = elems[16 * mt + row, ks * lay.k // 2 + word * epr + e]
                            s_lane, n = supplier[r, chunk]
                            code = (int(words[s_lane]) >> (4 * n)) & 0xF
                            tile[r, chunk * gran.chunk + kept_elements(lay, code)[kept]] = value
                np.testing.assert_array_equal(
                    as_f64(tile), as_f64(a[16 * mt:16 * mt + 16, ks * lay.k:(ks + 1) * lay.k]))


def test_chunk_with_few_non_zeros_uses_lowest_free_positions():
    a = np.zeros((16, 16), np.float16)
    a[0, 3] = 1.0            # chunk 0 of row 0: only element 3 -> keep (0, 3) = 0b1100
    a[0, 5] = 2.0            # chunk 1: only element 1 -> keep (0, 1) = 0b0100
    values, meta = sparse.compress(a, "f16", "m16n8k16")
    lay = layout_for("f16", "m16n8k16")
    # lane 0 nibbles 0..3 = row 0, chunks 0..3 (PTX ISA 9.7.14.6.2 (metadata fragments), one-thread form)
    assert int(meta[0, 0, 0]) & 0xFFFF == 0b0100_0100_0100_1100
    assert list(values[0, :4]) == [0.0, 1.0, 0.0, 2.0]
    assert lay.granularity.name == "2:4"


@pytest.mark.parametrize("dtype,shape,cols,message", [
    ("f16", "m16n8k16", (4, 5, 7), "row 2, chunk 1 (columns 4..7) has 3 non-zero elements"),
    ("tf32", "m16n8k8", (2, 3), "row 2, chunk 1 (columns 2..3) has 2 non-zero elements"),
    # 4:8: elements 0, 2, 4 lie in three different pairs
    ("s4", "m16n8k64", (8, 10, 12), "row 2, chunk 1 (columns 8..15) has 3 two-wide sub-chunks"),
])
def test_not_sparse_names_row_and_chunk(dtype, shape, cols, message):
    a = np.zeros((16, 2 * layout_for(dtype, shape).k), np.float32)
    a[2, list(cols)] = 1
    with pytest.raises(SpecError) as e:
        sparse.compress(a, dtype, shape)
    assert message in e.value.message and e.value.field == "A"


def test_pairwise_two_elements_in_two_pairs_is_legal():
    # 4:8 keeps whole pairs: elements 0 and 2 are in pairs 0 and 1 -> kept pairs (0, 1) = 0b0100
    a = np.zeros((16, 64), np.int8)
    a[0, 0] = 3
    a[0, 2] = -2
    values, meta = sparse.compress(a, "s4", "m16n8k64")
    lay = layout_for("s4", "m16n8k64")
    lane, n = next((ln, nn) for ln in range(32) for nn in range(8) if metadata_slot(lay, ln, nn) == (0, 0))
    assert (int(meta[0, 0, lane]) >> (4 * n)) & 0xF == 0b0100
    # packed two per byte, even index low: elements (3, 0) -> 0x03, (-2, 0) -> 0x0E (-2 = 0b1110)
    assert list(values[0, :2]) == [0x03, 0x0E]


def test_container_bits():
    # kind::f8f6f4 container (PTX ISA 9.7.14.6.3): e2m1 1.0 = 0b0_01_0 -> bits 5:2 -> 0b001000 = 0x08;
    # e3m2 1.0 = 0b0_011_00 (bias 3) in bits 5:0 -> 0x0C; e2m3 -1.0 = 0b1_01_000 -> 0x28
    for dtype, value, byte in (("e2m1", 1.0, 0x08), ("e3m2", 1.0, 0x0C), ("e2m3", -1.0, 0x28)):
        a = np.zeros((16, 64), np.float32)
        a[0, 0] = value
        values, _ = sparse.compress(a, dtype, "m16n8k64")
        assert values.dtype == np.uint8 and values.shape == (16, 32)
        assert values[0, 0] == byte
    # mxf4 packs e2m1 two per byte: 1.0 (0x2) at even index, -6.0 (0xF) at odd index -> 0xF2
    a = np.zeros((16, 128), np.float32)
    a[0, 0], a[0, 1] = 1.0, -6.0
    values, _ = sparse.compress(a, "e2m1", "m16n8k128")
    assert values.shape == (16, 32) and values[0, 0] == 0xF2


@pytest.mark.parametrize("dtype,shape", TYPE_SHAPES, ids=IDS)
def test_pack_b_round_trip(dtype, shape):
    rng = np.random.default_rng(5)
    lay = layout_for(dtype, shape)
    b = sparse.random_values(rng, (2 * lay.k, 16), dtype)
    stored = sparse.pack_b(b, dtype, shape)
    # N x K storage: 16 rows of 2k elements
    assert stored.nbytes == 16 * 2 * lay.k * lay.storage_bits // 8 and stored.shape[0] == 16
    np.testing.assert_array_equal(as_f64(sparse.unpack_b(stored, dtype, shape)), as_f64(b))
    if lay.storage_bits >= 8 and stored.dtype == b.dtype:
        np.testing.assert_array_equal(as_f64(stored[3]), as_f64(b[:, 3]))    # row n = column n of B


def test_input_checks():
    with pytest.raises(SpecError, match="range -8..7"):
        sparse.compress(np.full((16, 64), 9), "s4", "m16n8k64")
    with pytest.raises(SpecError, match="integers only"):
        sparse.compress(np.full((16, 64), 0.5), "s8", "m16n8k64")
    with pytest.raises(SpecError) as e:
        sparse.compress(np.zeros((8, 16)), "f16", "m16n8k16")
    assert e.value.field == "shape.M"
    with pytest.raises(SpecError) as e:
        sparse.compress(np.zeros((16, 24)), "f16", "m16n8k16")
    assert e.value.field == "shape.K"
    with pytest.raises(SpecError) as e:
        sparse.compress(np.zeros((16, 32)), "f16", "m16n8k32", selector=2)
    assert e.value.field == "sparsity.selector"
    with pytest.raises(SpecError) as e:
        sparse.compress(np.zeros((16, 16)), "f16", "m16n8k64")
    assert e.value.field == "shape"


def test_decompress_rejects_invalid_metadata():
    values, meta = sparse.compress(np.zeros((16, 16), np.float16), "f16", "m16n8k16")
    meta = meta.copy()
    meta[0, 0, :] = 0                     # 0b0000 is undefined (seed 9.7.14.6.1)
    with pytest.raises(SpecError, match="undefined"):
        sparse.decompress(values, meta, "f16", "m16n8k16")


@pytest.mark.parametrize("dtype,shape", [("f16", "m16n8k32"), ("tf32", "m16n8k16"), ("s8", "m16n8k64")])
def test_compress_padded_covers_any_size_with_legal_metadata(dtype, shape):
    """compress_padded (the wgmma kernel's packer, issue 17): an A of any M x K keeps M rows of values
    and K rounded up to the instruction K; the metadata covers the whole padding (tiles past M, k-steps
    past K) and every one of its nibbles is a meaningful one (PTX ISA 9.7.14.6.1: 0b0000 is not), so a
    kernel reading it past the edge of A selects zeros by a legal pattern."""
    from compiler.isa.mma_sp.metadata import nibble_problem

    lay = layout_for(dtype, shape)
    rng = np.random.default_rng(7)
    m, k = 37, lay.k + 5                       # 3 tiles of 16 rows (the last partial), 2 k-steps (one partial)
    chunk = lay.granularity.chunk
    a = sparse.random_sparse(rng, m, -(-k // chunk) * chunk, dtype, shape)[:, :k]
    values, meta = sparse.compress_padded(a, dtype, shape, 2 * lay.k, 64, 4 * lay.k)
    assert values.shape[0] == m and meta.shape == (64 // 16, 4, 32)
    dense = sparse.decompress(np.concatenate([values, np.zeros((64 - m, values.shape[1]), values.dtype)]),
                              meta[:, :2], dtype, shape)
    got = sparse.to_elements(dense, dtype)[:m, :k]
    assert np.array_equal(as_f64(got), as_f64(sparse.to_elements(a, dtype)))
    assert not as_f64(sparse.to_elements(dense, dtype)[:, k:]).any() and not as_f64(dense[m:]).any()
    nibbles = sparse.unpack_metadata_words(meta, lay)
    assert all(nibble_problem(lay, int(c)) is None for c in np.unique(nibbles))
    with pytest.raises(SpecError):                          # padding smaller than A
        sparse.compress_padded(a, dtype, shape, 2 * lay.k, 16, 4 * lay.k)
