"""Dense tcgen05 kernels: a grid of tiles (kinds x types x majors x swizzles x M x N) checked three ways.

1. Legality: the compiler accepts a grid point exactly when an independent restatement of the PTX rules
   below does (Table 39 shapes and types, 9.7.16.10.1 transpose rules and Table 50, the canonical-layout
   atom widths of 9.7.16.3.3).
2. Descriptors: for every accepted point, the instruction descriptor and every per-K-step shared-memory
   descriptor equal values derived here from the PTX tables (Table 42; 9.7.16.3.1-3 strides; 9.7.16.4.1
   field layout), written independently of compiler/layout.py.
3. Assembly: a covering subset (every types x majors x swizzle combination once, M and N rotating, with
   negate / saturate / scale-input-d / .ws variants) and every example in examples/ are assembled by
   ptxas (CUDA 13.0) for their target, several kernels per PTX module to keep ptxas runs few.
"""
from __future__ import annotations

import itertools
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler import CompileError, compile_file, compile_source
from compiler.ptxas import assemble

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------------
# Independent restatement of the PTX rules (the oracle)

# Table 42 type codes (atype/btype bits 7-9 / 10-12; dtype bits 4-5).
AB_CODE = {"f16": 0, "bf16": 1, "tf32": 2, "e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5,
           "u8": 0, "s8": 1}
D_CODE = {"f16": 0, "f32": 1, "s32": 2}
# Shared-memory bits per element: 4- and 6-bit f8f6f4 values are stored padded, 16 per 16-byte chunk
# (9.7.16.10.4.4), so they address like 8-bit types.
SMEM_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "e2m3": 8, "e3m2": 8, "e2m1": 8,
             "s8": 8, "u8": 8}
SUB_BYTE = {"e2m3", "e3m2", "e2m1"}
EIGHT_BIT = {"e4m3", "e5m2", "s8", "u8"}
# Table 39: K of one dense MMA per kind.
KIND_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32}
# 9.7.16.4.1 (Table 40) swizzle codes, bits 61-63.
SWIZZLE_CODE = {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}
# 9.7.16.3.3 atoms: bytes along the contiguous dimension, and lines per atom (CUTLASS: 4 K rows of
# 128 B for the 32-byte-atomicity mode).
ATOM_WIDTH = {"none": 16, "32B": 32, "64B": 64, "128B": 128, "128B_base32B": 128}
ATOM_LINES = {"none": 8, "32B": 8, "64B": 8, "128B": 8, "128B_base32B": 4}
# Where the kernel may place a tile: on its swizzle pattern's repeat, so the descriptor's base offset is 0
# (9.7.16.4.1: 1024 B for 128B, 512 B for 64B, 256 B for 32B); a core matrix (128 B) without swizzle; and
# 1024 B for 128B_base32B, whose boundary the PTX text does not give (the PTX ISA does not give it).
PLACEMENT = {"none": 128, "32B": 256, "64B": 512, "128B": 1024, "128B_base32B": 1024}
STAGE_BUDGET = 96 * 1024


def kind_of(a_type: str) -> str:
    return {"f16": "f16", "bf16": "f16", "tf32": "tf32", "s8": "i8", "u8": "i8"}.get(a_type, "f8f6f4")


def loop_k(kind: str) -> int:
    """A loop K of 256 bytes per row: two 128-byte atoms, so every swizzle width divides it."""
    return {"f16": 128, "tf32": 64, "f8f6f4": 256, "i8": 256}[kind]


def legal(a: str, b: str, d: str, majors: tuple[str, str], swizzles: tuple[str, str], m: int, n: int) -> bool:
    kind = kind_of(a)
    if m not in (64, 128):                                       # Table 39, cta_group::1
        return False
    if kind == "i8":                                             # Table 39: 8, 16, 24, 32, 48..256 step 16
        if not (n in (8, 16, 24, 32) or (48 <= n <= 256 and n % 16 == 0)):
            return False
    elif not (8 <= n <= 256 and n % 8 == 0):
        return False
    for t, major, swz, mn in ((a, majors[0], swizzles[0], m), (b, majors[1], swizzles[1], n)):
        if major == "MN" and t in SUB_BYTE:                      # 9.7.16.10.1: f4/f6 are never transposed
            return False
        if (t == "tf32" and major == "MN") != (swz == "128B_base32B"):   # 9.7.16.10.1 / Table 49 notes
            return False
        contiguous = loop_k(kind) if major == "K" else mn
        if contiguous * SMEM_BITS[t] // 8 % ATOM_WIDTH[swz]:     # 9.7.16.3.3: whole atoms along a line
            return False
    if majors[1] == "MN" and b in EIGHT_BIT and n % 16:          # Table 50, cta_group::1
        return False
    return True


def expected_idesc(a, b, d, majors, m, n, negate=(False, False), saturate=False) -> int:
    """Table 42 (kinds tf32, f16, f8f6f4, i8)."""
    return (saturate << 3 | D_CODE[d] << 4 | AB_CODE[a] << 7 | AB_CODE[b] << 10 | negate[0] << 13
            | negate[1] << 14 | (majors[0] == "MN") << 15 | (majors[1] == "MN") << 16 | (n >> 3) << 17
            | (m >> 4) << 24)


def operand_descriptors(t: str, major: str, swz: str, mn: int, k: int, mma_k: int, base: int) -> list[int]:
    """Per-K-step descriptors of an mn x k operand stored MN-atoms-first (the layout the kernel copies).

    K-major (((8,m),(T,2k)) of 9.7.16.3.3): 8-row groups are one atom apart, SBO = atom bytes; without
    swizzle LBO = the distance of the next 16 B of K = (mn / 8) core matrices; swizzled LBO is unused
    ("assumed 1" = 16 B). MN-major: atoms of ATOM_LINES K rows; swizzled LBO = the next atom along MN,
    SBO = the next group of K rows; without swizzle the roles swap (9.7.16.3.1 / 9.7.16.3.2).
    """
    width, lines = ATOM_WIDTH[swz], ATOM_LINES[swz]
    atom = width * lines
    if major == "K":
        lbo, sbo = ((mn // 8) * 128, 128) if swz == "none" else (16, atom)
        k_atom_stride = (mn // 8) * atom                          # the next `width` bytes of K
        starts = []
        for step in range(k // mma_k):
            kb = step * mma_k * SMEM_BITS[t] // 8
            starts.append(base + kb // width * k_atom_stride + kb % width)
    else:
        k_group_stride = (mn * SMEM_BITS[t] // 8 // width) * atom
        lbo, sbo = (k_group_stride, 128) if swz == "none" else (atom, k_group_stride)
        starts = [base + step * mma_k // lines * k_group_stride for step in range(k // mma_k)]
    # 9.7.16.4.1: start >> 4 at bit 0, LBO >> 4 at 16, SBO >> 4 at 32, the fixed 0b001 at 46, swizzle at 61.
    return [(s >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46 | SWIZZLE_CODE[swz] << 61 for s in starts]


def expected_descriptors(a, b, majors, swizzles, m, n, k_total) -> tuple[list[int], list[int]]:
    kind = kind_of(a)
    mma_k = KIND_K[kind]
    size = lambda t, mn, k: mn * k * SMEM_BITS[t] // 8
    k_block = k_total                     # halve K per stage until A + B fit the stage budget
    while size(a, m, k_block) + size(b, n, k_block) > STAGE_BUDGET:
        k_block //= 2
    align_b = PLACEMENT[swizzles[1]]             # B follows A in the buffer, on its own boundary
    b_base = -(-size(a, m, k_block) // align_b) * align_b
    return (operand_descriptors(a, majors[0], swizzles[0], m, k_block, mma_k, 0),
            operand_descriptors(b, majors[1], swizzles[1], n, k_block, mma_k, b_base))


# ---------------------------------------------------------------------------------------------------
# The grid

TYPE_SETS = [  # (A, B, D), Table 39
    ("f16", "f16", "f32"), ("f16", "f16", "f16"), ("bf16", "bf16", "f32"), ("tf32", "tf32", "f32"),
    ("e4m3", "e4m3", "f32"), ("e5m2", "e4m3", "f16"), ("e2m1", "e2m1", "f32"), ("e3m2", "e2m3", "f32"),
    ("s8", "s8", "s32"), ("u8", "s8", "s32"),
]
MAJOR_PAIRS = [("K", "K"), ("MN", "MN"), ("K", "MN"), ("MN", "K")]
SWIZZLES = ["none", "32B", "64B", "128B", "128B_base32B"]
MS = [64, 128]
NS = [8, 24, 48, 128, 256]


def operand_swizzles(swz: str, majors: tuple[str, str]) -> tuple[str, str]:
    """One swizzle per grid point; 128B_base32B exists only MN-major, so a K-major partner takes 128B."""
    return tuple("128B" if swz == "128B_base32B" and major == "K" else swz for major in majors)


def tile_text(name: str, a, b, d, majors, swizzles, m, n, extra: str = "", engine: str = "tcgen05") -> str:
    kind = kind_of(a)
    return (f"tile {name} {{\n  engine {engine};\n  shape M={m} N={n} K={KIND_K[kind]};\n"
            f"  loop K={loop_k(kind)};\n{extra}"
            f"  A: {a} smem major={majors[0]} swizzle={swizzles[0]};\n"
            f"  B: {b} smem major={majors[1]} swizzle={swizzles[1]};\n  D: {d} tmem;\n}}\n")


GRID = [(types, majors, swz, m, n) for types, majors, swz, m, n
        in itertools.product(TYPE_SETS, MAJOR_PAIRS, SWIZZLES, MS, NS)]


def test_grid_legality_and_descriptors_match_the_ptx_rules():
    accepted = rejected = 0
    mismatches = []
    for types, majors, swz, m, n in GRID:
        a, b, d = types
        swizzles = operand_swizzles(swz, majors)
        src = "target sm_100a;\n" + tile_text("t", a, b, d, majors, swizzles, m, n)
        want = legal(a, b, d, majors, swizzles, m, n)
        try:
            result = compile_source(src, "grid.tile", passes=["verify", "layout-selection",
                                                              "descriptor-materialization"])
        except CompileError as e:
            rejected += 1
            assert e.diagnostics and e.diagnostics[0].loc is not None, e.render()
            if want:
                mismatches.append(f"rejected but legal: {types} {majors} {swizzles} M={m} N={n}: "
                                  f"{e.diagnostics[0].message}")
            continue
        accepted += 1
        if not want:
            mismatches.append(f"accepted but illegal: {types} {majors} {swizzles} M={m} N={n}")
            continue
        got = result.descriptors["t"]
        exp_a, exp_b = expected_descriptors(a, b, majors, swizzles, m, n, loop_k(kind_of(a)))
        exp = {"idesc": expected_idesc(a, b, d, majors, m, n), "A_desc": exp_a, "B_desc": exp_b}
        if got != exp:
            mismatches.append(f"descriptors of {types} {majors} {swizzles} M={m} N={n}: got "
                              f"{ {k: [hex(x) for x in v] if isinstance(v, list) else hex(v) for k, v in got.items()} }")
    assert not mismatches, "\n".join(mismatches[:20]) + f"\n({len(mismatches)} in all)"
    # The grid must exercise both sides of the rules, every swizzle and both majors.
    assert accepted > 300 and rejected > 300, (accepted, rejected)


def _covering_set() -> list[tuple[str, str]]:
    """(tile name, tile text): each legal types x majors x swizzle combination once, M/N rotating, with
    a per-kind option every third tile (negate: not i8, Table 49; saturate: i8 only, Table 42 bit 3;
    scale-input-d: f16/tf32 only, 9.7.16.10.9.1)."""
    options = {"f16": "  scale_input_d 2;\n", "tf32": "  negate A B;\n", "f8f6f4": "  negate B;\n",
               "i8": "  saturate;\n"}
    shapes = list(itertools.product(MS, NS))
    out, rotation = [], 0
    for types, majors, swz in itertools.product(TYPE_SETS, MAJOR_PAIRS, SWIZZLES):
        a, b, d = types
        swizzles = operand_swizzles(swz, majors)
        for i in range(len(shapes)):
            m, n = shapes[(rotation + i) % len(shapes)]
            if legal(a, b, d, majors, swizzles, m, n):
                rotation += 1
                extra = options[kind_of(a)] if len(out) % 3 == 0 else ""
                name = f"k{len(out)}"
                out.append((name, tile_text(name, a, b, d, majors, swizzles, m, n, extra)))
                break
    # .ws (weight stationary) tiles: M = 128, N in {64, 128, 256} (Table 39 .ws rows).
    for i, (types, n) in enumerate(zip([TYPE_SETS[0], TYPE_SETS[3], TYPE_SETS[4], TYPE_SETS[8]], (64, 128, 256, 64))):
        name = f"ws{i}"
        out.append((name, tile_text(name, *types, ("K", "K"), ("32B", "32B"), 128, n, engine="tcgen05 ws")))
    return out


COVERING = _covering_set()
BATCH = 24


def _batches():
    return [COVERING[i:i + BATCH] for i in range(0, len(COVERING), BATCH)]


def test_covering_set_spans_the_grid():
    kinds = {kind_of(re.search(r"A: (\w+)", text).group(1)) for _, text in COVERING}
    swizzles = set(re.findall(r"swizzle=(\w+)", "".join(text for _, text in COVERING)))
    ms = set(re.findall(r"M=(\d+)", "".join(text for _, text in COVERING)))
    assert kinds == {"f16", "tf32", "f8f6f4", "i8"}
    assert swizzles == set(SWIZZLES)
    assert ms == {"64", "128"}
    assert len(COVERING) > 60


def test_covering_set_assembles_with_ptxas(ptxas):
    """All covering-set kernels, BATCH per PTX module, assembled for sm_100a (which kind::i8 needs)."""
    modules = []
    for batch in _batches():
        src = "target sm_100a;\n" + "\n".join(text for _, text in batch)
        result = compile_source(src, "covering.tile")
        entries = re.findall(r"^\.visible \.entry (\w+)\(", result.ptx, re.M)
        assert entries == [name for name, _ in batch]
        modules.append(result.ptx)
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda ptx: assemble(ptx, "sm_100a", ptxas), modules))
    failed = [v.output[:2000] for v in verdicts if not v.ok]
    assert not failed, "\n".join(failed)


EXAMPLES = sorted((ROOT / "examples").glob("*.tile"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_assembles(path, ptxas):
    result = compile_file(path)
    target = re.search(r"^\.target (\S+)", result.ptx, re.M).group(1)
    verdict = assemble(result.ptx, target, ptxas)
    assert verdict.ok, verdict.output


def test_examples_exist():
    assert {"gemm_bf16.tile", "gemm_f16.tile"} <= {p.name for p in EXAMPLES}


def test_oracle_reproduces_ptx_figure_examples():
    """The oracle's stride rules against the worked examples of 9.7.16.3.3 (LBO/SBO columns)."""
    def strides(t, major, swz, mn):
        v = operand_descriptors(t, major, swz, mn, 16, 16, 0)[0]
        return ((v >> 16) & 0x3FFF) << 4, ((v >> 32) & 0x3FFF) << 4
    # Figure 190: MN-major, no swizzle, bf16, ((8,1,2),(8,2)): LBO = 128*2 B, SBO = 64*2 B (m = 2: MN = 16).
    assert strides("bf16", "MN", "none", 16) == (256, 128)
    # Figure 191: MN-major 32B bf16 ((8,2,2),(8,2)): LBO = 128*2 B, SBO = 256*2 B (MN = 32).
    assert strides("bf16", "MN", "32B", 32) == (256, 512)
    # Figure 192: MN-major 64B bf16 ((8,4,2),(8,2)): LBO = 256*2 B, SBO = 512*2 B (MN = 64).
    assert strides("bf16", "MN", "64B", 64) == (512, 1024)
    # Figure 189: K-major 32B tf32 ((8,2),(4,4)): SBO = 64*4 B, LBO "1 (assumed)" = 16 B (MN = 16).
    v = operand_descriptors("tf32", "K", "32B", 16, 8, 8, 0)[0]
    assert (((v >> 16) & 0x3FFF) << 4, ((v >> 32) & 0x3FFF) << 4) == (16, 256)
    # Figure 188: K-major, no swizzle, tf32 ((8,2),(4,4)):((4,32),(1,64)): LBO = 64*4 B, SBO = 32*4 B.
    v = operand_descriptors("tf32", "K", "none", 16, 8, 8, 0)[0]
    assert (((v >> 16) & 0x3FFF) << 4, ((v >> 32) & 0x3FFF) << 4) == (256, 128)
