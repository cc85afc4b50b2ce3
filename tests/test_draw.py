"""`tilec draw`: the SVG cells are read back with xml.etree and checked against the layout functions the
compiler itself uses (compiler/layout.py, compiler/isa/tmem.py, compiler/descriptors/zero_column_mask.py)."""
from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from compiler import draw
from compiler.cli import main
from compiler.descriptors.smem import SmemDesc
from compiler.descriptors.zero_column_mask import ZeroColumnMask
from compiler.isa.tmem import LANES, data_path
from compiler.layout import CHUNK_BYTES, canonical_layout

NS = "{http://www.w3.org/2000/svg}"


def _cells(svg: str, cls: str = "cell") -> list[dict]:
    root = ET.fromstring(svg.encode())
    return [r.attrib for r in root.iter(f"{NS}rect") if r.get("class") == cls]


def _title(svg: str) -> str:
    return ET.fromstring(svg.encode()).find(f"{NS}title").text


# ---- shared-memory canonical layout -------------------------------------------------------------

SMEM_CASES = [
    ("f16", "K", "none", 16, 16),
    ("f16", "K", "128B", 16, 128),
    ("bf16", "MN", "64B", 64, 16),
    ("e4m3", "K", "32B", 8, 64),
    ("tf32", "MN", "128B_base32B", 64, 8),
    ("f16", "MN", "none", 16, 16),
]


@pytest.mark.parametrize("dtype,major,swizzle,mn,k", SMEM_CASES)
def test_smem_cells_sit_at_their_canonical_offsets(dtype, major, swizzle, mn, k):
    layout = canonical_layout(dtype, major, swizzle, mn, k)
    value = SmemDesc(0, layout.lbo, layout.sbo, swizzle).encode()
    svg = draw.draw_smem_desc(value, dtype, major, mn, k)
    cells = _cells(svg)
    width = layout.mode.width
    per = layout.elems_per_chunk
    assert len(cells) == layout.lines * layout.chunks_per_line
    covered = set()
    places = set()
    for c in cells:
        row, kk, offset = int(c["data-row"]), int(c["data-k"]), int(c["data-offset"])
        assert offset == layout.offset(row, kk)
        # the cell's place on the grid is its byte offset: memory row offset // width, column (offset % width) / 16
        assert int(c["x"]) == draw.MARGIN_X + (offset % width) // CHUNK_BYTES * draw.CELL_W
        assert int(c["y"]) == draw.TOP + 20 + offset // width * draw.CELL_H
        places.add((c["x"], c["y"]))
        for i in range(per):
            covered.add((row, kk + i) if major == "K" else (row + i, kk))
    assert len(places) == len(cells)                       # no two chunks drawn on one another
    assert covered == {(r, q) for r in range(mn) for q in range(k)}
    strides = {s.get("data-name"): int(s.get("data-bytes")) for s in
               ET.fromstring(svg.encode()).iter(f"{NS}line") if s.get("class") == "stride"}
    if layout.sbo < layout.size_bytes:
        assert strides["SBO"] == layout.sbo
    assert ("LBO" in strides) == (not (major == "K" and swizzle != "none") and layout.lbo < layout.size_bytes)
    assert f"{value:#018x}" in _title(svg)
    atoms = _cells(svg, "atom")
    assert len(atoms) == layout.size_bytes // layout.atom_bytes


def test_smem_128b_swizzle_permutes_chunk_columns():
    # Swizzle<3,4,3> (PTX ISA 9.7.16.3.3) on byte offsets: line 1, chunk 0 of a K-major 128B atom is at
    # 128 ^ ((128 >> 3) & 0x70) = 128 ^ 16 = 144: memory row 1, column (144 % 128) / 16 = 1.
    # Line 3, chunk 2: 3*128 + 32 = 416; 416 ^ ((416 >> 3) & 0x70) = 416 ^ 0x30 = 400: row 3, column 1.
    layout = canonical_layout("f16", "K", "128B", 16, 128)
    svg = draw.draw_smem_desc(SmemDesc(0, 16, layout.sbo, "128B").encode(), "f16", "K", 16, 128)
    by_elem = {(int(c["data-row"]), int(c["data-k"])): c for c in _cells(svg)}
    assert int(by_elem[(1, 0)]["data-offset"]) == 144
    assert int(by_elem[(1, 0)]["x"]) == draw.MARGIN_X + 1 * draw.CELL_W
    assert int(by_elem[(3, 16)]["data-offset"]) == 400
    assert int(by_elem[(3, 16)]["x"]) == draw.MARGIN_X + 1 * draw.CELL_W
    # K-major swizzled: SBO = 8 lines x 128 B = 1024 B between 8-row groups (PTX ISA 9.7.16.3.2)
    assert layout.sbo == 1024


def test_smem_default_geometry_and_mismatch_note():
    # 128B, f16 K-major default: two atoms each way = 16 rows x 2 * 128 B / 2 B = 128 K.
    value = SmemDesc(0, 16, 512, "128B").encode()
    svg = draw.draw_smem_desc(value)
    assert "16 x 128" in _title(svg)
    assert "canonical SBO is 1024 B; the descriptor says 512 B" in svg


# ---- TMEM accumulator -----------------------------------------------------------------------------

TMEM_CASES = [(128, 1, False, False, 64), (64, 1, False, False, 64), (64, 1, True, False, 64),
              (32, 1, True, False, 128), (128, 2, False, False, 128), (128, 2, False, True, 128),
              (256, 2, False, False, 256)]


@pytest.mark.parametrize("m,cta_group,ws,sparse,n", TMEM_CASES)
def test_tmem_lanes_match_data_path(m, cta_group, ws, sparse, n):
    dp = data_path(m, cta_group, sparse, ws)
    cells = _cells(draw.draw_tmem(m, n, cta_group, ws, sparse))
    assert sorted(int(c["data-lane"]) for c in cells) == list(range(LANES))
    for c in cells:
        lane = int(c["data-lane"])
        role = dp.lane_d_role(lane, n)
        if role is None:
            assert c.get("data-unused") == "1"
            continue
        row, col0 = int(c["data-row"]), int(c["data-col0"])
        assert (row, col0) == role
        assert int(c["data-columns"]) == dp.d_columns(n)
        assert dp.d_cell(row, col0, n) == (lane, 0)
        assert int(c["y"]) == draw.TOP + 20 + lane * draw.LANE_H


def test_tmem_half_layout_uses_lanes_0_15_of_each_group():
    # Layout F (M = 64, cta_group::1, PTX ISA 9.7.16.10.5): row i in lane 32*(i>>4) + (i&15), so lane 16 is
    # unused and lane 32 holds row 16 (32*(16>>4) + 0).
    cells = {int(c["data-lane"]): c for c in _cells(draw.draw_tmem(64, 64))}
    assert cells[16].get("data-unused") == "1"
    assert cells[32]["data-row"] == "16"


def test_idesc_draws_the_accumulator_of_its_shape():
    # 0x08400490, kind::f16: M >> 4 = 8 at bit 24 -> M = 128; N >> 3 = 32 at bit 17 -> N = 256 (Table 42).
    svg = draw.draw_idesc(0x08400490, "f16")
    assert "M = 128, N = 256" in _title(svg)
    assert svg == draw.draw_tmem(128, 256, source="idesc 0x08400490")


# ---- zero-column mask ----------------------------------------------------------------------------

@pytest.mark.parametrize("mask,m,n", [
    (ZeroColumnMask(skip_span=2, use_span=3), 128, 64),
    (ZeroColumnMask((0, 1, 2, 0), (0, 1, 0, 1), skip_span=2, use_span=3, shift=2), 32, 128),
    (ZeroColumnMask(nonzero=False, skip_span=5), 64, 32),
])
def test_zcm_columns_match_decode(mask, m, n):
    value = mask.encode()
    cells = _cells(draw.draw_zcm(value, m, n))
    decoded = ZeroColumnMask.decode(value)
    bits = decoded.column_mask(m, n)
    assert [int(c["data-column"]) for c in cells] == list(range(n))
    for c in cells:
        j = int(c["data-column"])
        assert int(c["data-zeroed"]) == (bits >> j) & 1
        assert int(c["data-b-column"]) == j + decoded.shift


def test_zcm_run_pattern():
    # skip span 2 -> runs of 3 zeroed columns, use span 3 -> runs of 4 used (PTX ISA 9.7.16.4.3 Example 2);
    # fs0 = 0, sc0 = 0: the pattern starts in a used run: columns 0-3 used, 4-6 zeroed, 7-10 used.
    cells = _cells(draw.draw_zcm(ZeroColumnMask(skip_span=2, use_span=3).encode(), 128, 16))
    assert [int(c["data-zeroed"]) for c in cells][:11] == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]


# ---- determinism and the command line --------------------------------------------------------------

def test_same_input_same_bytes(tmp_path):
    value = SmemDesc(0, 16, 1024, "128B").encode()
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    assert main(["draw", "smem-desc", hex(value), "-o", str(a)]) == 0
    assert main(["draw", "smem-desc", hex(value), "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes() == draw.draw_smem_desc(value).encode()
    assert draw.draw_tmem(64, 128, ws=True) == draw.draw_tmem(64, 128, ws=True)


def test_cli_exit_codes(capsys):
    assert main(["draw", "tmem", "--m", "64", "--ws"]) == 0
    assert capsys.readouterr().out.startswith("<?xml")
    # usage mistakes: 2
    assert main(["draw", "nope", "1"]) == 2
    assert main(["draw", "zcm"]) == 2
    assert main(["draw", "zcm", "x1"]) == 2
    assert main(["draw", "tmem", "5"]) == 2
    assert main(["draw", "smem-desc", hex(1 << 64)]) == 2
    assert main(["draw", "idesc", "0x08400490"]) == 2                      # needs --kind
    assert main(["draw", "zcm", "0", "--m", "48"]) == 2
    assert main(["draw", "tmem", "--m", "96"]) == 2                        # no data-path layout
    err = capsys.readouterr().err
    assert "tilec: error: draw zcm: --m 48" in err
    assert "no TMEM data-path layout for M=96" in err
    # bad descriptor values: 1, with explain's messages
    assert main(["draw", "smem-desc", "0x1"]) == 1
    err = capsys.readouterr().err
    assert "bits 46-48 must hold the fixed constant 0b001" in err
    assert main(["draw", "idesc", "0x08400498", "--kind", "f16"]) == 1
    assert "bits 3 (saturate): code 1 is not valid for kind::f16" in capsys.readouterr().err


def test_draw_is_off_the_start_up_path():
    code = ("import sys; from compiler.cli import main; main(['passes']); "
            "print('compiler.draw' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


# ---- sparse A of mma.sp ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,shape", [("f16", "m16n8k16"), ("f16", "m16n8k32"), ("tf32", "m16n8k8"),
                                          ("e4m3", "m16n8k64"), ("s4", "m16n8k128")])
def test_sparse_kept_elements_follow_their_nibbles(dtype, shape):
    import numpy as np

    from compiler.isa.mma_sp.forms import layout_for
    from compiler.sparse import random_sparse

    gran = layout_for(dtype, shape).granularity
    svg = draw.draw_sparse(dtype, shape, seed=3)
    cells = _cells(svg)
    nibbles = {(int(c["data-row"]), int(c["data-chunk"])): int(c["data-nibble"]) for c in _cells(svg, "nibble")}
    k = int(shape.split("k")[1])
    assert len(cells) == 16 * k and len(nibbles) == 16 * (k // gran.chunk)
    # A nibble is two 2-bit slot indices (PTX ISA 9.7.14.6.1); a group of `group` elements covers
    # slots_per_group = 4 * group / chunk slots, so slot s names group s // slots_per_group of the chunk
    # (2:4: the element itself; 4:8: pair s; 1:2 (tf32): 0b0100 -> element 0, 0b1110 -> element 1).
    spg = 4 * gran.group // gran.chunk
    expected = set()
    for (r, c), nib in nibbles.items():
        for slot in (nib & 3, nib >> 2):
            for e in range(gran.group):
                expected.add((r, c * gran.chunk + slot // spg * gran.group + e))
    drawn = {(int(c["data-row"]), int(c["data-k"])) for c in cells if c["data-kept"] == "1"}
    assert drawn == expected
    # ... and they are exactly the non-zeros of the A tile the picture was made from (same seed)
    a = random_sparse(np.random.default_rng(3), 16, k, dtype, shape)
    nonzero = np.asarray(a).astype(np.float64) != 0 if np.asarray(a).dtype.kind != "V" else None
    if nonzero is not None:
        assert {(int(r), int(q)) for r, q in np.argwhere(nonzero)} == drawn
    # stored order: row r's kept elements are numbered 0..K/2-1 in increasing K (compressed row order)
    for r in range(16):
        row = sorted((int(c["data-k"]), int(c["data-stored"])) for c in cells
                     if c["data-kept"] == "1" and int(c["data-row"]) == r)
        assert [s for _, s in row] == list(range(k // 2))


def test_sparse_cli_and_determinism(capsys):
    assert main(["draw", "sparse", "--dtype", "f16", "--shape", "m16n8k16", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out == draw.draw_sparse("f16", "m16n8k16", 1)
    assert main(["draw", "sparse", "--shape", "m16n8k99"]) == 2
    assert main(["draw", "sparse", "5"]) == 2


# ---- a tile file's operands ---------------------------------------------------------------------------

def _compiled(path):
    from compiler.driver import compile_source

    text = open(path).read()
    result = compile_source(text, path)
    (tile,) = list(result.module.ops("tilec.tile"))
    return text, result, tile


@pytest.mark.parametrize("path,operand", [("examples/gemm_bf16.tile", "A"), ("examples/tcgen05_2cta.tile", "B"),
                                          ("examples/tcgen05_sparse.tile", "A")])
def test_tile_operand_cells_match_the_tiles_layout(path, operand):
    from compiler.passes.derive import smem_layout

    text, result, tile = _compiled(path)
    lay_op = next(o for o in tile.ops("tilec.smem_layout") if o.sym == operand)
    layout = smem_layout(tile, lay_op)
    svg = draw.draw_tile(text, path, operand=operand)
    cells = _cells(svg)
    assert len(cells) == layout.lines * layout.chunks_per_line
    for c in cells:
        assert int(c["data-offset"]) == layout.offset(int(c["data-row"]), int(c["data-k"]))
    first = result.descriptors[tile.sym][f"{operand}_desc"][0]
    assert f"{first:#018x}" in svg


def test_tile_d_is_its_accumulator_and_bad_choices_are_usage_errors(capsys):
    text, _, _ = _compiled("examples/tcgen05_ws.tile")
    svg = draw.draw_tile(text, "examples/tcgen05_ws.tile", operand="D")
    # tcgen05_ws: M = 64, N = 128, .ws -> data-path layout E (PTX ISA 9.7.16.10.5, 2x2 folded)
    assert "M = 64, N = 128, cta_group::1, .ws: data-path layout E" in _title(svg)
    assert _cells(svg) == _cells(draw.draw_tmem(64, 128, ws=True))
    assert main(["draw", "tile", "examples/tcgen05_a_tmem.tile", "--operand", "A"]) == 2
    assert main(["draw", "tile", "examples/gemm_bf16.tile", "--tile", "nope"]) == 2
    assert main(["draw", "tile", "examples/gemm_bf16.tile", "--operand", "C"]) == 2
    assert main(["draw", "tile", "/nonexistent.tile"]) == 1
    assert main(["draw", "tile"]) == 2
    assert main(["draw", "tile", "examples/sparse_f16.tile"]) == 0
    assert "sparse A of mma.sp.m16n8k32 .f16" in capsys.readouterr().out
