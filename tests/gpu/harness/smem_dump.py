"""Prove tilec's tcgen05 global->shared copy code, canonical layouts and descriptors on a Hopper GPU.

No Blackwell GPU is available, but the *data movement* half of a tcgen05 kernel is ordinary PTX. The
smem-dump variant of the tcgen05 kernel (compiler/ptx/tcgen05_kernel.py, option variant="smem-dump")
is the same kernel for `.target sm_90a` with every tcgen05 instruction left out; after each K stage's
copy all threads write the CTA's whole shared buffer to the global parameter S at
((blockIdx.y * gridDim.x + blockIdx.x) * n_stages + stage) * smem_bytes. This script:

  prepare   (host, needs tilec + ptxas) compiles a sweep of tiles (every swizzle x major x element
            width, several M/N, K staged in several passes, cta_group::2) with that variant and writes,
            into one folder: the PTX, the ptxas-assembled sm_90a cubins, the launch geometry, the
            materialized descriptors and random global inputs (raw bytes: the device needs no
            ml_dtypes).
  device    (GPU, needs only numpy + cupy) launches every dump kernel on a 2x2 (or larger) grid and
            saves every CTA's every stage image.
  check     (host, needs tilec + compiler.sim) verifies each image three ways:
              (a) through the independent reference model (compiler.sim reads the image through the
                  tile's REAL descriptors: Table 40 decode + 9.7.16.3.3 canonical layout + swizzle,
                  never importing compiler.layout): every element read equals the global input
                  element of that CTA's M/N offset and that stage's K range;
              (b) compiler.sim.tcgen05.mma over all K steps of all stages equals a numpy matmul of the
                  global inputs (integers exactly, floats within the per-MMA rounding of D);
              (c) byte for byte, each operand region equals a CPU emulation of compiler/layout.py's
                  copy map applied to the global inputs (padding zeros included) -- this separates a
                  copy-code bug (c fails) from a layout/descriptor disagreement (c passes, a fails).
  emulate   (host) writes the CPU emulation in the device's output format: `check` on it is the
            host-only half of the flow (tests/test_smem_dump_host.py).
  all       prepare + device + check on one machine.

The GPU test is tests/gpu/test_smem_dump.py (quick sweep; the full sweep under `-m "gpu and slow"`).
By hand, from the repository root:
  python3 -m tests.gpu.harness.smem_dump prepare --data .smemdump [--quick]
  python3 -m tests.gpu.harness.smem_dump device  --data .smemdump --out OUTDIR
  python3 -m tests.gpu.harness.smem_dump check   --data .smemdump --dumps OUTDIR [--json report.json]

Only numpy and the standard library are imported at module level (the device path imports cupy, the
host paths import tilec lazily), so `device` runs where tilec's dependencies (lark, ml_dtypes) are not
installed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]      # tests/gpu/harness/ -> the repository root
MODULE = "tests.gpu.harness.smem_dump"          # what device workers run (`python -m MODULE device-worker`)
MANIFEST = "manifest.json"
INPUTS = "inputs.npz"
STATUS = "device.json"
DUMP_PREFIX = "dumps"
# Returned files are limited to 16 MiB each (device README); stay well under it.
DUMP_FILE_BYTES = 14 << 20
THREADS = 128                      # the tcgen05 kernel's block (tcgen05_kernel.THREADS; ABI "block")
S_SENTINEL = 0xA5                  # S is filled with this before the launch: the dump must overwrite all
D_SENTINEL = 0x5A                  # D must stay untouched (the dump variant has no epilogue)
WORKER_CUDA_ERROR = 3              # exit status of a device worker whose CUDA context is unusable
# Source files whose behaviour the dumps prove; their hashes go into the manifest.
PROVEN_SOURCES = ("compiler/ptx/tcgen05_kernel.py", "compiler/layout.py",
                  "compiler/passes/layout_selection.py", "compiler/passes/descriptor_materialization.py",
                  "compiler/descriptors/smem.py", "compiler/descriptors/instr.py")


# ==================================================================================================
# The sweep (pure data; no tilec import needed to build it)
# ==================================================================================================

@dataclass(frozen=True)
class Width:
    """One element-width row of the sweep: the kind and the A/B/D types that exercise it."""
    label: str
    kind: str
    a_type: str
    b_type: str
    d_type: str
    container_bits: int          # bits per element in shared memory (compiler/layout.py docstring)
    transposable: bool           # MN-major allowed (PTX 9.7.16.10.1: sub-byte types are K-major only)
    scale: str | None = None     # block_scale statement (mx kinds, PTX 9.7.16.10.7)


# PTX 9.7.16.10.1 (Table 49 rows), 9.7.16.10.4.4 (padded fp4/fp6 under f8f6f4: 16 values per 16-byte
# chunk, so 8-bit address arithmetic) and 9.7.16.10.4.6 (packed fp4 under mxf4: 32 values per chunk).
WIDTHS: dict[str, Width] = {w.label: w for w in (
    Width("tf32", "tf32", "tf32", "tf32", "f32", 32, True),
    Width("f16", "f16", "f16", "f16", "f32", 16, True),
    Width("bf16", "f16", "bf16", "bf16", "f32", 16, True),
    Width("e4m3", "f8f6f4", "e4m3", "e4m3", "f32", 8, True),
    Width("s8", "i8", "s8", "s8", "s32", 8, True),
    Width("e3m2-padded", "f8f6f4", "e3m2", "e3m2", "f32", 8, False),
    Width("e2m1-padded", "f8f6f4", "e2m1", "e2m1", "f32", 8, False),
    Width("e2m1-packed", "mxf4", "e2m1", "e2m1", "f32", 4, False, scale="vec=32"),
)}

# Swizzle modes per major (compiler/layout.py SWIZZLES; PTX 9.7.16.3.3). 128B_base32B exists only for
# MN-major tf32, which may be transposed with nothing else (PTX 9.7.16.10.1).
_PLAIN_SWIZZLES = ("none", "32B", "64B", "128B")
STAGE_K_BYTES = 256               # K bytes per stage in the sweep: two 128-byte swizzle rows, so every
#                                   K-major mode has >= 2 atoms along K (exercises the K-atom stride)
N_CYCLE = (64, 32, 128, 16, 256, 48)
GRID = (2, 2)                     # tiles along (N, M): every CTA has a distinct m0 and n0


def operand_options(dtype: str, transposable: bool) -> list[tuple[str, str]]:
    """(major, swizzle) pairs an operand of `dtype` can take."""
    opts = [("K", s) for s in _PLAIN_SWIZZLES]
    if transposable:
        opts += [("MN", "128B_base32B")] if dtype == "tf32" else [("MN", s) for s in _PLAIN_SWIZZLES]
    return opts


@dataclass(frozen=True)
class DumpTile:
    """One tile of the sweep; `dsl()` is the tilec source compiled for it."""
    name: str
    group: str                    # sweep | stages | cta2 | mixed | grid | sparse
    kind: str
    a_type: str
    b_type: str
    d_type: str
    m: int
    n: int
    loop_k: int
    a_major: str
    a_swizzle: str
    b_major: str
    b_swizzle: str
    cta_group: int = 1
    grid: tuple[int, int] = GRID  # (tiles along N, tiles along M)
    scale: str | None = None
    sparsity: str | None = None   # e.g. "2:4" (A stored compressed, PTX 9.7.16.10.8)

    @property
    def m_total(self) -> int:
        return self.m * self.grid[1]

    @property
    def n_total(self) -> int:
        return self.n * self.grid[0]

    def dsl(self) -> str:
        from compiler.isa.tcgen05_kinds import mma_k

        lines = [f"engine tcgen05 cta_group={self.cta_group} kind={self.kind};",
                 f"shape M={self.m} N={self.n} K={mma_k(self.kind, self.sparsity is not None)};",
                 f"loop K={self.loop_k};"]
        if self.sparsity:
            lines.append(f"sparsity {self.sparsity} metadata=runtime;")
        lines += [f"A: {self.a_type} smem major={self.a_major} swizzle={self.a_swizzle};",
                  f"B: {self.b_type} smem major={self.b_major} swizzle={self.b_swizzle};",
                  f"D: {self.d_type} tmem;"]
        if self.scale:
            lines += ["SFA: ue8m0 tmem;", "SFB: ue8m0 tmem;", f"block_scale {self.scale};"]
        body = "\n  ".join(lines)
        return f"target sm_100a;\ntile {self.name} {{\n  {body}\n}}\n"


def _k_elems(width: Width, k_bytes: int) -> int:
    return k_bytes * 8 // width.container_bits


def _fits_mn(extent: int, width: Width, major: str, swizzle: str) -> bool:
    """Can an MN extent hold whole atoms of an MN-major layout (PTX 9.7.16.3.3: the contiguous extent
    is a whole number of swizzle rows)? K-major operands have no such constraint on MN."""
    if major == "K":
        return True
    row = {"none": 16, "32B": 32, "64B": 64, "128B": 128, "128B_base32B": 128}[swizzle]
    return extent * width.container_bits // 8 % row == 0


def _sizes(width: Width, a: tuple[str, str], b: tuple[str, str], index: int) -> list[tuple[int, int]]:
    """(M, N) candidates for a tile, preferred first; `prepare` keeps the first tilec accepts."""
    ms = (128, 64) if index % 2 == 0 else (64, 128)
    ns = N_CYCLE[index % len(N_CYCLE):] + N_CYCLE[:index % len(N_CYCLE)] + (256,)
    out = []
    for m in ms:
        if not _fits_mn(m, width, *a):
            continue
        for n in ns:
            if _fits_mn(n, width, *b) and (m, n) not in out:
                out.append((m, n))
    return out


def _name(*parts) -> str:
    return "_".join(str(p) for p in parts).replace("-", "_").replace("128B_base32B", "b32")


def candidate_tiles(quick: bool = False) -> list[list[DumpTile]]:
    """The sweep, as lists of alternatives (same intent, different M/N): prepare keeps the first that
    compiles. Coverage: per width, every (major, swizzle) option of A and of B appears at least twice,
    and each of K/K, K/MN, MN/K, MN/MN occurs where the types may be transposed."""
    groups: list[list[DumpTile]] = []
    for width in WIDTHS.values():
        opts_a = operand_options(width.a_type, width.transposable)
        opts_b = operand_options(width.b_type, width.transposable)
        n = len(opts_a)
        # pairs (i, i) and (i, i + 3): all four major combinations once n >= 5 (module docstring)
        pairs = list(dict.fromkeys([(opts_a[i], opts_b[i % len(opts_b)]) for i in range(n)]
                                   + [(opts_a[i], opts_b[(i + 3) % len(opts_b)]) for i in range(n)]))
        if quick:
            pairs = pairs[::3]
        k = _k_elems(width, STAGE_K_BYTES)
        for index, (a, b) in enumerate(pairs):
            alts = [DumpTile(_name(width.label, "A", *a, "B", *b), "sweep", width.kind, width.a_type, width.b_type,
                             width.d_type, m, nn, k, a[0], a[1], b[0], b[1], scale=width.scale)
                    for m, nn in _sizes(width, a, b, index)]
            groups.append(alts)
        # K staged in several passes (loop K > stage K): A + B at 512 K bytes exceed the 96 KiB stage
        # budget (layout_selection.STAGE_BUDGET), so K is streamed in 2 stages of 256 bytes.
        a, b = opts_a[-1], opts_b[1]
        groups.append([DumpTile(_name(width.label, "stages", *a, *b), "stages", width.kind, width.a_type,
                                width.b_type, width.d_type, 128, 128, 2 * k, a[0], a[1], b[0], b[1],
                                scale=width.scale)])
    if quick:
        return groups
    f16, e4m3, tf32, s8 = WIDTHS["f16"], WIDTHS["e4m3"], WIDTHS["tf32"], WIDTHS["s8"]
    extra = [
        # four stages (M=N=64, loop K = 1024 f16 = 2048 B: 256 KiB of A+B -> stages of 512 B)
        DumpTile("f16_stages4_MN_128B_K_64B", "stages", "f16", "f16", "f16", "f32", 64, 64, 1024,
                 "MN", "128B", "K", "64B"),
        # cta_group::2: each CTA of a pair holds M/2 rows of A and N/2 rows of B (9.7.16.10.9.1)
        DumpTile("cta2_f16_K_128B_MN_64B", "cta2", "f16", "f16", "f16", "f32", 256, 128,
                 _k_elems(f16, STAGE_K_BYTES), "K", "128B", "MN", "64B", cta_group=2),
        DumpTile("cta2_bf16_MN_32B_K_none", "cta2", "f16", "bf16", "bf16", "f32", 128, 64,
                 _k_elems(f16, STAGE_K_BYTES), "MN", "32B", "K", "none", cta_group=2),
        DumpTile("cta2_e4m3_MN_128B_K_32B", "cta2", "f8f6f4", "e4m3", "e4m3", "f32", 256, 256,
                 _k_elems(e4m3, STAGE_K_BYTES), "MN", "128B", "K", "32B", cta_group=2),
        DumpTile("cta2_tf32_MN_b32_K_64B", "cta2", "tf32", "tf32", "tf32", "f32", 256, 64,
                 _k_elems(tf32, STAGE_K_BYTES), "MN", "128B_base32B", "K", "64B", cta_group=2),
        DumpTile("cta2_s8_K_64B_MN_128B_stages", "cta2", "i8", "s8", "u8", "s32", 256, 256,
                 2 * _k_elems(s8, STAGE_K_BYTES), "K", "64B", "MN", "128B", cta_group=2),
        # mixed widths inside one kind (f8f6f4: any pair of its types, 9.7.16.10.4.4)
        DumpTile("mixed_e4m3_e2m1", "mixed", "f8f6f4", "e4m3", "e2m1", "f32", 128, 64, 256,
                 "MN", "64B", "K", "128B"),
        DumpTile("mixed_e2m3_e5m2", "mixed", "f8f6f4", "e2m3", "e5m2", "f32", 64, 128, 256,
                 "K", "32B", "MN", "128B"),
        DumpTile("mixed_u8_s8", "mixed", "i8", "u8", "s8", "s32", 128, 32, 256, "MN", "none", "MN", "32B"),
        # a non-square grid: 3 tiles along N, 2 along M
        DumpTile("grid3x2_bf16_MN_64B_MN_128B", "grid", "f16", "bf16", "bf16", "f32", 128, 64, 128,
                 "MN", "64B", "MN", "128B", grid=(3, 2)),
        # sparse A: only the kept half of K is stored and copied (PTX 9.7.16.10.8)
        DumpTile("sparse_f16_K_64B_MN_128B", "sparse", "f16", "f16", "f16", "f32", 128, 64, 128,
                 "K", "64B", "MN", "128B", sparsity="2:4"),
        DumpTile("sparse_e4m3_MN_128B_K_64B", "sparse", "f8f6f4", "e4m3", "e4m3", "f32", 128, 128, 256,
                 "MN", "128B", "K", "64B", sparsity="2:4"),
    ]
    return groups + [[t] for t in extra]


# ==================================================================================================
# Global input data: element codes, packed at their value width (PTX 5.5.1.1.1)
# ==================================================================================================

def pack_rows(codes: np.ndarray, bits: int) -> np.ndarray:
    """Rows of element codes -> bytes, each row a little-endian bit stream of `bits`-wide values
    (element j at bits [j*bits, (j+1)*bits) of its row; fp4: element 0 in the low nibble)."""
    codes = np.asarray(codes, dtype=np.uint64)
    rows, cols = codes.shape
    if cols * bits % 8:
        raise ValueError(f"a row of {cols} {bits}-bit values is not a whole number of bytes")
    stream = ((codes[:, :, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(stream.reshape(rows, cols * bits), axis=1, bitorder="little")


def unpack_rows(data: np.ndarray, cols: int, bits: int) -> np.ndarray:
    """Inverse of pack_rows: bytes [rows][cols*bits/8] -> codes [rows][cols] (uint64)."""
    data = np.asarray(data, dtype=np.uint8)
    stream = np.unpackbits(data, axis=1, bitorder="little")[:, :cols * bits].reshape(data.shape[0], cols, bits)
    return (stream.astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(axis=2, dtype=np.uint64)


def tile_seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _element_codes(dtype: str, rng: np.random.Generator, shape) -> np.ndarray:
    """Random finite values of `dtype`, as codes. tf32 additionally gets random low 13 bits: the MMA
    ignores them (PTX 5.2.3: >= 10 mantissa bits; compiler.sim truncates), so check (a) and (c) see
    every byte vary while check (b) is unaffected."""
    from compiler.sim import numerics

    limit = 4.0 if dtype in ("e4m3", "e5m2") else None
    codes = numerics.encode(numerics.representable(dtype, rng, shape, limit=limit), dtype)
    if dtype == "tf32":
        codes |= rng.integers(0, 1 << 13, size=shape).astype(np.uint64)
    return codes


def make_inputs(tile: DumpTile) -> dict[str, np.ndarray]:
    """Logical codes: A [m_total][K_stored], B [n_total][K] (both K-contiguous), and for sparse tiles the
    4-bit metadata codes [m_total][K/4] (PTX 9.7.16.10.8.1 increasing index pairs)."""
    rng = np.random.default_rng(tile_seed(tile.name))
    k_a = tile.loop_k // 2 if tile.sparsity else tile.loop_k
    out = {"A": _element_codes(tile.a_type, rng, (tile.m_total, k_a)),
           "B": _element_codes(tile.b_type, rng, (tile.n_total, tile.loop_k))}
    if tile.sparsity:
        g = sparse_granularity(tile.kind)
        # PTX 9.7.16.10.8.1: 1:2 codes 0b0100 / 0b1110; 2:4 and 4:8 increasing index pairs
        legal = (0b0100, 0b1110) if g.name == "1:2" else (0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110)
        out["META"] = rng.choice(np.array(legal, dtype=np.uint64), size=(tile.m_total, tile.loop_k // g.chunk))
    return out


def sparse_granularity(kind: str):
    """The kind's structured-sparsity pattern (compiler.sim: PTX 9.7.16.10.8.1)."""
    from compiler.sim.tcgen05 import GRANULARITIES, KINDS

    return GRANULARITIES[KINDS[kind].granularity]


def global_bytes(codes: np.ndarray, major: str, bits: int) -> np.ndarray:
    """The operand's global array as the kernel ABI lays it out: [MN][K] row-major when K-major,
    [K][MN] when MN-major, values packed at their width; flattened to bytes."""
    rows = codes if major == "K" else codes.T
    return pack_rows(rows, bits).ravel()


# ==================================================================================================
# prepare (host)
# ==================================================================================================

def _eval_dim(expr, m_total: int, n_total: int) -> int:
    """Evaluate an ABI grid expression such as '2 * n_total / 128' (names: m_total, n_total)."""
    if isinstance(expr, int):
        return expr
    tokens = str(expr).replace("m_total", str(m_total)).replace("n_total", str(n_total)).split()
    value, op = None, None
    for tok in tokens:
        if tok in ("*", "/"):
            op = tok
            continue
        x = int(tok)
        if value is None:
            value = x
        elif op == "*":
            value *= x
        else:
            if value % x:
                raise ValueError(f"grid expression {expr!r} is not whole")
            value //= x
    return int(value)


def compile_tile(tile: DumpTile):
    """(CompileResult, tile op, ABI dict) of the smem-dump variant of one tile."""
    import compiler

    result = compiler.compile_source(tile.dsl(), filename=f"<{tile.name}>", options={"variant": "smem-dump"})
    op = result.tiles[tile.name]
    abi = result.to_json()["tiles"][tile.name]["kernel"]
    return result, op, abi


def _tile_record(tile: DumpTile, result, op, abi) -> dict:
    from compiler.isa.tcgen05_kinds import mma_k

    idesc_op = op.op("tilec.instr_desc")
    step_values = idesc_op.attrs.get("step_values")
    steps = abi["k_block"] // mma_k(tile.kind, tile.sparsity is not None)
    idescs = [int(v) for v in step_values] if step_values else [int(idesc_op.attrs["value"])] * steps
    descs = result.descriptors[tile.name]
    grid = [_eval_dim(g, tile.m_total, tile.n_total) for g in abi["grid"]]
    return {
        "tile": asdict(tile), "dsl": tile.dsl(), "entry": abi["entry"],
        "grid": grid, "block": abi["block"], "params": [(p["name"], p["type"]) for p in abi["params"]],
        "m_total": tile.m_total, "n_total": tile.n_total,
        "smem_bytes": abi["smem_dump"]["smem_bytes"], "n_stages": abi["smem_dump"]["n_stages"],
        "k_block": abi["k_block"], "regions": abi["smem_dump"]["regions"],
        "idesc": [hex(v) for v in idescs],
        "A_desc": [hex(v) for v in descs["A_desc"]], "B_desc": [hex(v) for v in descs["B_desc"]],
    }


def source_hashes() -> dict[str, str]:
    out = {}
    for rel in PROVEN_SOURCES:
        p = REPO / rel
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.exists() else "missing"
    return out


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:                  # no git / not a checkout
        return "unknown"


def prepare(data: Path, quick: bool = False, assemble: bool = True, log=print,
            names: set[str] | None = None) -> dict:
    """Compile the sweep into `data` (manifest.json, inputs.npz, <tile>.ptx / .cubin). Returns the
    manifest. Alternatives tilec rejects are skipped silently when another of the same intent compiles;
    an intent with no compiling alternative is listed under "rejected" with tilec's message. `names`
    keeps only those intents (by tile name) of the full sweep."""
    import compiler
    from compiler.ptxas import find_ptxas

    data.mkdir(parents=True, exist_ok=True)
    ptxas = find_ptxas() if assemble else None
    tiles, rejected, arrays = [], [], {}
    for alts in candidate_tiles(quick):
        if names is not None and alts[0].name not in names:
            continue
        errors = []
        for tile in alts:
            try:
                result, op, abi = compile_tile(tile)
            except (compiler.CompileError, compiler.SpecError) as e:
                msgs = [d.message for d in getattr(e, "diagnostics", [])] or [str(e)]
                errors.append(f"M={tile.m} N={tile.n}: {'; '.join(msgs)}")
                continue
            except Exception as e:     # a crash inside tilec is a finding too: record, keep going
                errors.append(f"M={tile.m} N={tile.n}: internal error {type(e).__name__}: {e}")
                continue
            rec = _tile_record(tile, result, op, abi)
            (data / f"{tile.name}.ptx").write_text(result.ptx)
            rec["ptx"] = f"{tile.name}.ptx"
            if ptxas:
                cubin = data / f"{tile.name}.cubin"
                proc = subprocess.run([ptxas, f"-arch={abi['target']}", "-o", str(cubin), str(data / rec["ptx"])],
                                      capture_output=True, text=True)
                if proc.returncode == 0:
                    rec["cubin"] = cubin.name
                else:
                    rec["ptxas_error"] = (proc.stdout + proc.stderr).strip()[:2000]
            codes = make_inputs(tile)
            for op_name, major, dtype in (("A", tile.a_major, tile.a_type), ("B", tile.b_major, tile.b_type)):
                bits = _type_bits(dtype)
                arrays[f"{tile.name}.{op_name}"] = global_bytes(codes[op_name], major, bits)
            if "META" in codes:
                # [m_total][K / (8*4)] u32 words, code i of a word in bits 4i+3..4i (kernel ABI "META");
                # the dump kernel never reads it, but the parameter exists
                words = codes["META"].reshape(tile.m_total, -1, 8)
                packed = (words << (4 * np.arange(8, dtype=np.uint64))).sum(axis=2, dtype=np.uint64)
                arrays[f"{tile.name}.META"] = packed.astype(np.uint32).view(np.uint8).ravel()
            tiles.append(rec)
            break
        else:
            rejected.append({"intent": alts[0].name if alts else "?", "errors": errors})
    np.savez(data / INPUTS, **arrays)
    manifest = {"git_head": _git_head(), "sources": source_hashes(), "quick": quick,
                "ptxas": ptxas, "tiles": tiles, "rejected": rejected}
    (data / MANIFEST).write_text(json.dumps(manifest, indent=1))
    log(f"prepare: {len(tiles)} tiles, {len(rejected)} intents rejected by tilec, "
        f"{sum('cubin' in t for t in tiles)} assembled by ptxas, inputs "
        f"{sum(a.nbytes for a in arrays.values()) / 2**20:.1f} MiB, dumps will be "
        f"{sum(_dump_bytes(t) for t in tiles) / 2**20:.1f} MiB")
    for r in rejected:
        log(f"  rejected {r['intent']}: {r['errors'][0] if r['errors'] else ''}")
    return manifest


def _type_bits(dtype: str) -> int:
    from compiler.isa.types import TYPES

    return TYPES[dtype].bits


def _n_ctas(rec: dict) -> int:
    return rec["grid"][0] * rec["grid"][1] * rec["grid"][2]


def _dump_bytes(rec: dict) -> int:
    return _n_ctas(rec) * rec["n_stages"] * rec["smem_bytes"]


# ==================================================================================================
# device (numpy + cupy only)
# ==================================================================================================

def _load_kernel(cp, data: Path, rec: dict):
    """The entry from the ptxas-assembled cubin, else from the PTX (driver JIT)."""
    errors = []
    for key in ("cubin", "ptx"):
        if key not in rec:
            continue
        try:
            return cp.RawModule(path=str(data / rec[key])).get_function(rec["entry"]), key
        except Exception as e:        # noqa: BLE001 - report and try the other form
            errors.append(f"{key}: {type(e).__name__}: {e}")
    raise RuntimeError("; ".join(errors) or "no PTX or cubin recorded")


def run_tile(cp, data: Path, rec: dict, inputs) -> tuple[np.ndarray, dict]:
    """Launch one dump kernel; (images [ctas][stages][smem_bytes] uint8, status dict)."""
    fn, loaded = _load_kernel(cp, data, rec)
    name = rec["entry"]
    buffers = {}
    for pname, ptype in rec["params"]:
        if ptype != "u64":
            continue
        key = f"{name}.{pname}"
        if key in inputs:
            buffers[pname] = cp.asarray(inputs[key])
        elif pname == "S":
            buffers[pname] = cp.full(_dump_bytes(rec), S_SENTINEL, dtype=cp.uint8)
        else:                         # D, SFA, SFB: never touched by the dump variant
            buffers[pname] = cp.full(rec["m_total"] * rec["n_total"] * 4 + 16, D_SENTINEL, dtype=cp.uint8)
    scalars = {"m_total": np.uint32(rec["m_total"]), "n_total": np.uint32(rec["n_total"])}
    args = tuple(buffers[p] if t == "u64" else scalars[p] for p, t in rec["params"])
    start = time.perf_counter()
    fn(tuple(rec["grid"]), tuple(rec["block"]), args)
    cp.cuda.Device().synchronize()
    elapsed = time.perf_counter() - start
    images = cp.asnumpy(buffers["S"]).reshape(_n_ctas(rec), rec["n_stages"], rec["smem_bytes"])
    untouched = all(bool((buffers[p] == D_SENTINEL).all()) for p in buffers if p in ("D", "SFA", "SFB"))
    chunks = images.reshape(-1, 16)
    unwritten = int((chunks == S_SENTINEL).all(axis=1).sum())
    status = {"status": "ok", "loaded": loaded, "launch_ms": round(elapsed * 1e3, 3),
              "d_untouched": untouched, "unwritten_chunks": unwritten}
    try:                               # the driver's view of the kernel's static shared memory
        status["static_smem"] = int(fn.shared_size_bytes)
    except Exception:                  # noqa: BLE001 - informational only
        pass
    return images, status


def _cuda_fatal(exc: Exception) -> bool:
    """Errors after which the CUDA context is unusable (illegal address, launch failure, ...)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("ILLEGAL", "LAUNCH_FAILED", "MISALIGNED", "UNKNOWN", "HARDWARE",
                                   "cudaErrorIllegal", "cudaErrorLaunch", "cudaErrorMisaligned"))


def device_worker(data: Path, tmp: Path, start: int) -> int:
    """Run tiles start.. in this process; each result goes to tmp/<tile>.npy + a line in tmp/status.jsonl.
    Exits WORKER_CUDA_ERROR after a fatal CUDA error so that the parent restarts past that tile."""
    import cupy as cp

    manifest = json.loads((data / MANIFEST).read_text())
    inputs = np.load(data / INPUTS)
    with open(tmp / "status.jsonl", "a") as log:
        for index in range(start, len(manifest["tiles"])):
            rec = manifest["tiles"][index]
            try:
                images, status = run_tile(cp, data, rec, inputs)
                np.save(tmp / f"{rec['entry']}.npy", images)
            except Exception as e:     # noqa: BLE001 - every failure is a result
                status = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000]}
                if _cuda_fatal(e):
                    log.write(json.dumps({"index": index, "tile": rec["entry"], **status}) + "\n")
                    return WORKER_CUDA_ERROR
            log.write(json.dumps({"index": index, "tile": rec["entry"], **status}) + "\n")
            log.flush()
    return 0


def worker_environment() -> dict:
    """subprocess.run arguments under which `python -m <this module>` imports this very file: run from
    the repository root with the root first on PYTHONPATH (the package `tests` is not installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return {"cwd": str(REPO), "env": env}


def run_device(data: Path, out: Path, isolate: bool = True, log=print) -> dict:
    """Every tile of the manifest on the GPU; writes out/dumps_<i>.npz (<= DUMP_FILE_BYTES each) and
    out/device.json. With `isolate`, tiles run in worker processes restarted after a fatal CUDA error."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((data / MANIFEST).read_text())
    count = len(manifest["tiles"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "status.jsonl").touch()
        start = 0
        while start < count:
            if isolate:
                rc = subprocess.run([sys.executable, "-m", MODULE, "device-worker", "--data", str(data),
                                     "--tmp", str(tmp), "--start", str(start)], **worker_environment()).returncode
            else:
                rc = device_worker(data, tmp, start)
            lines = [json.loads(x) for x in (tmp / "status.jsonl").read_text().splitlines() if x.strip()]
            done = max((x["index"] for x in lines), default=-1) + 1
            if rc not in (0, WORKER_CUDA_ERROR) and done == start:
                # the worker died without recording the tile it was on: record it, move past it
                with open(tmp / "status.jsonl", "a") as f:
                    f.write(json.dumps({"index": start, "tile": manifest["tiles"][start]["entry"],
                                        "status": "error", "error": f"worker exited with {rc}"}) + "\n")
                done = start + 1
            start = done
        statuses = {x["tile"]: x for x in (json.loads(s) for s in (tmp / "status.jsonl").read_text().splitlines())}
        files, current, size = [], {}, 0
        for rec in manifest["tiles"]:
            path = tmp / f"{rec['entry']}.npy"
            if not path.exists():
                continue
            arr = np.load(path)
            if current and size + arr.nbytes > DUMP_FILE_BYTES:
                files.append(current)
                current, size = {}, 0
            current[rec["entry"]] = arr
            size += arr.nbytes
        if current:
            files.append(current)
        names = []
        for i, arrays in enumerate(files):
            name = f"{DUMP_PREFIX}_{i}.npz"
            np.savez_compressed(out / name, **arrays)
            names.append(name)
    device = {}
    try:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        device = {"name": props["name"].decode(), "cc": cp.cuda.Device().compute_capability,
                  "cupy": cp.__version__, "driver": cp.cuda.runtime.driverGetVersion()}
    except Exception as e:             # noqa: BLE001
        device = {"error": str(e)}
    report = {"device": device, "files": names, "seconds": round(time.perf_counter() - t0, 2),
              "git_head": manifest.get("git_head"), "sources": manifest.get("sources"), "tiles": statuses}
    (out / STATUS).write_text(json.dumps(report, indent=1))
    ok = sum(s["status"] == "ok" for s in statuses.values())
    log(f"device: {device.get('name', '?')} sm_{device.get('cc', '?')}: {ok}/{count} tiles dumped in "
        f"{report['seconds']} s -> {', '.join(names)}")
    for s in statuses.values():
        if s["status"] != "ok":
            log(f"  {s['tile']}: {s['error']}")
    return report


def load_dumps(dumps: Path) -> dict[str, np.ndarray]:
    out = {}
    for path in sorted(dumps.glob(f"{DUMP_PREFIX}_*.npz")):
        with np.load(path) as z:
            out.update({k: z[k] for k in z.files})
    return out


# ==================================================================================================
# emulate (host): compiler/layout.py's copy map applied to the global inputs
# ==================================================================================================

@dataclass(frozen=True)
class CtaView:
    """Which rows of A and B one CTA copies (tcgen05_kernel prologue; ABI launch row)."""
    index: int                    # blockIdx.y * gridDim.x + blockIdx.x (the S offset's block index)
    a_row0: int
    b_row0: int
    rank: int                     # rank in its CTA pair (cta_group::2), else 0
    d_row0: int                   # the MMA unit's D block (the pair's, for cta_group::2)
    d_col0: int


def cta_views(rec: dict) -> list[CtaView]:
    t = rec["tile"]
    gx, gy = rec["grid"][0], rec["grid"][1]
    views = []
    for by in range(gy):
        for bx in range(gx):
            if t["cta_group"] == 2:
                # a pair is a cluster along x: rank = ctaid.x & 1, N tile = ctaid.x >> 1; each CTA holds
                # M/2 rows of A and N/2 rows of B (9.7.16.10.9.1 cta_group::2)
                rank, ntile = bx & 1, bx >> 1
                views.append(CtaView(by * gx + bx, by * t["m"] + rank * t["m"] // 2,
                                     ntile * t["n"] + rank * t["n"] // 2, rank, by * t["m"], ntile * t["n"]))
            else:
                views.append(CtaView(by * gx + bx, by * t["m"], bx * t["n"], 0, by * t["m"], bx * t["n"]))
    return views


def tile_layouts(rec: dict) -> dict:
    """Recompile the tile on the host: {"A"/"B": (CanonicalLayout, region offset)}. Fails if the
    descriptors differ from the manifest's (the code changed between prepare and check)."""
    tile = DumpTile(**{**rec["tile"], "grid": tuple(rec["tile"]["grid"])})
    result, op, _ = compile_tile(tile)
    descs = result.descriptors[tile.name]
    for key in ("A_desc", "B_desc"):
        if [hex(v) for v in descs[key]] != rec[key]:
            raise AssertionError(f"{tile.name}: {key} changed since prepare ({rec[key]} -> "
                                 f"{[hex(v) for v in descs[key]]}); run prepare again")
    return {o.sym: (o.facts["layout"], int(o.attrs["offset"])) for o in op.ops("tilec.smem_layout")}


def ptx_unchanged(rec: dict, data: Path) -> bool:
    """Does today's tilec emit the same dump kernel as the one that ran? (Then the dumps prove today's
    copy code, not only the commit recorded in the manifest.)"""
    tile = DumpTile(**{**rec["tile"], "grid": tuple(rec["tile"]["grid"])})
    result, _, _ = compile_tile(tile)
    return result.ptx == (data / rec["ptx"]).read_text()


def copy_path(ptx: str) -> list[str]:
    """Everything a tcgen05 kernel's global->shared copies depend on: the prologue (thread and tile
    coordinates, parameter loads, the buffer address; the smem-dump variant's extra S parameter load is
    dropped), the K-stage loop header and the copy code itself (first `// copy` comment to the last
    `copy_*_done` label). Registers and labels are renamed in order of first use, so two kernels compare
    equal when they run the same instructions over the same dataflow, whatever else they contain."""
    import re

    lines = [x.strip() for x in ptx.splitlines()]
    try:
        body = lines.index("{") + 1
        sbase = next(i for i, x in enumerate(lines) if re.fullmatch(r"mov\.u32 %r\d+, \w+_smem;", x))
        stage = next(i for i, x in enumerate(lines) if re.fullmatch(r"\$L_k_stage_\d+:", x))
        first = next(i for i, x in enumerate(lines) if x.startswith("// copy "))
        last = max(i for i, x in enumerate(lines) if re.fullmatch(r"\$L_copy_\w+_done_\d+:", x))
    except (ValueError, StopIteration):
        return []
    prologue = [x for x in lines[body:sbase + 1] if x and not x.startswith((".reg", ".shared", "//"))]
    s_load = [x for x in prologue if "_param_S]" in x]
    if s_load:
        reg = s_load[0].split()[1].rstrip(",")
        prologue = [x for x in prologue if x != s_load[0] and not x.endswith(f", {reg};")]
    names: dict[str, str] = {}

    def rename(m):
        return names.setdefault(m.group(0), f"{m.group(1)}#{len(names)}")

    token = re.compile(r"(%rd|%r|%p|%h|\$L_\w+?_)\d+")
    return [token.sub(rename, x) for x in prologue + lines[stage - 2:stage + 1] + lines[first:last + 1]]


def copy_code_is_the_kernels(rec: dict) -> bool:
    """Is the dump kernel's copy code the copy code of the real sm_100a kernel of the same tile? (The
    smem-dump variant only leaves tcgen05 out; this checks that nothing in the copies differs.)"""
    import compiler

    tile = DumpTile(**{**rec["tile"], "grid": tuple(rec["tile"]["grid"])})
    real = compiler.compile_source(tile.dsl(), filename=f"<{tile.name}>").ptx
    path = copy_path(real)
    return bool(path) and path == copy_path((Path(rec["_data"]) / rec["ptx"]).read_text())


def emulate_region(lay, offset: int, gbytes: np.ndarray, major: str, rows_total: int, row0: int,
                   stage: int, k_total_stored: int, image: np.ndarray) -> None:
    """Write one operand's stage into `image` as the copy map says: 16-byte chunk (line, chunk) at
    region offset + copy_map().byte_offset(line, chunk), holding `data_bytes_per_chunk` bytes of the
    global array followed by zero padding (.b4x16_p64 / .b6x16_p32, PTX 9.7.16.10.4.4)."""
    cm = lay.copy_map()
    line = np.arange(cm.lines, dtype=np.int64)[:, None]
    chunk = np.arange(cm.chunks_per_line, dtype=np.int64)[None, :]
    coords = {"line": line, "chunk": chunk}
    unswizzled = sum(t.apply(coords[t.coord]) for t in cm.terms)
    dest = offset + cm.swizzle(unswizzled)                      # (lines, chunks) byte offsets
    vbits, nbytes = lay.elem_bits, lay.data_bytes_per_chunk
    if major == "K":
        # element (row0 + line, stage*k + chunk*T) of [rows_total][K] (packed rows)
        pitch = k_total_stored * vbits // 8
        src = (row0 + line) * pitch + stage * (lay.k * vbits // 8) + chunk * nbytes
    else:
        # element (stage*k + line, row0 + chunk*T) of [K][rows_total]
        pitch = rows_total * vbits // 8
        src = (stage * lay.k + line) * pitch + row0 * vbits // 8 + chunk * nbytes
    payload = np.zeros(dest.shape + (16,), dtype=np.uint8)
    payload[..., :nbytes] = gbytes[src[..., None] + np.arange(nbytes)]
    image[dest[..., None] + np.arange(16)] = payload


def emulate_images(rec: dict, inputs, layouts: dict | None = None) -> np.ndarray:
    """The images the device should dump: [ctas][stages][smem_bytes], bytes outside A/B regions 0."""
    layouts = layouts or tile_layouts(rec)
    t = rec["tile"]
    k_a = t["loop_k"] // 2 if t["sparsity"] else t["loop_k"]
    images = np.zeros((_n_ctas(rec), rec["n_stages"], rec["smem_bytes"]), dtype=np.uint8)
    for view in cta_views(rec):
        for stage in range(rec["n_stages"]):
            for name, (lay, offset) in layouts.items():
                rows_total, row0, k_stored = ((rec["m_total"], view.a_row0, k_a) if name == "A"
                                              else (rec["n_total"], view.b_row0, t["loop_k"]))
                emulate_region(lay, offset, inputs[f"{rec['entry']}.{name}"], lay.major, rows_total, row0,
                               stage, k_stored, images[view.index, stage])
    return images


def emulate(data: Path, out: Path, log=print) -> None:
    """Write the CPU emulation as device output (dumps_*.npz + device.json)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((data / MANIFEST).read_text())
    inputs = np.load(data / INPUTS)
    arrays = {rec["entry"]: emulate_images(rec, inputs) for rec in manifest["tiles"]}
    np.savez_compressed(out / f"{DUMP_PREFIX}_0.npz", **arrays)
    statuses = {rec["entry"]: {"tile": rec["entry"], "status": "ok", "loaded": "emulation",
                               "d_untouched": True, "unwritten_chunks": 0} for rec in manifest["tiles"]}
    (out / STATUS).write_text(json.dumps({"device": {"name": "CPU emulation of compiler/layout.py copy_map"},
                                          "files": [f"{DUMP_PREFIX}_0.npz"], "tiles": statuses}, indent=1))
    log(f"emulate: {len(arrays)} tiles")


# ==================================================================================================
# check (host): the reference model reads the dumped images through the real descriptors
# ==================================================================================================

@dataclass
class Tally:
    tiles: set = field(default_factory=set)
    images: int = 0
    elements: int = 0
    mismatches: int = 0

    def as_dict(self) -> dict:
        return {"tiles": len(self.tiles), "images": self.images, "elements": self.elements,
                "mismatches": self.mismatches}


@dataclass
class Report:
    operands: dict = field(default_factory=dict)        # (operand, width, major, swizzle) -> Tally
    mma: list = field(default_factory=list)             # per tile: D elements, max error, ok
    bytes_compared: int = 0
    byte_mismatches: int = 0
    failures: list = field(default_factory=list)        # human-readable findings
    device_errors: list = field(default_factory=list)
    tiles_checked: int = 0
    ptx_changed: list = field(default_factory=list)     # tiles whose dump kernel tilec now emits differently
    copy_differs: list = field(default_factory=list)    # tiles whose sm_100a kernel copies differently

    @property
    def ok(self) -> bool:
        return not self.failures and not self.device_errors and self.tiles_checked > 0

    def to_json(self) -> dict:
        return {"ok": self.ok, "tiles_checked": self.tiles_checked,
                "operands": {" ".join(k): v.as_dict() for k, v in sorted(self.operands.items())},
                "mma": self.mma, "bytes_compared": self.bytes_compared, "byte_mismatches": self.byte_mismatches,
                "failures": self.failures, "device_errors": self.device_errors, "ptx_changed": self.ptx_changed,
                "copy_differs": self.copy_differs}


def width_label(dtype: str, kind: str) -> str:
    """Operand width as the report groups it (sub-byte types by their smem storage)."""
    bits = _type_bits(dtype)
    if bits == 4:
        return f"{dtype}-{'packed' if kind in ('mxf4', 'mxf4nvf4') else 'padded'}"
    if bits == 6:
        return f"{dtype}-padded"
    return dtype


def _locate(rec, name, lay, offset, desc, view, stage, step, bad, got, want, k_step, image) -> str:
    """Where a mismatching element is: the model's address (through the descriptor), compiler.layout's
    address, and where in the image the expected code's chunk really sits."""
    from compiler.sim.smem import element_addresses

    t = rec["tile"]
    dtype, kind = (t["a_type"] if name == "A" else t["b_type"]), t["kind"]
    r, c = (int(bad[0][0]), int(bad[1][0]))
    chunk_addr, slot = element_addresses(desc, dtype, lay.major, lay.mn, k_step, kind=kind)
    k_in_stage = step * k_step + c
    layout_byte = offset + lay.bit_offset(r, k_in_stage) // 8
    return (f"{rec['entry']} {name} CTA {view.index} stage {stage} K step {step}: {len(bad[0])} elements "
            f"differ; first at (row {r}, k {k_in_stage} of the stage): model read {int(got[r, c]):#x} "
            f"from chunk {int(chunk_addr[r, c])} slot {int(slot[r, c])}, input is {int(want[r, c]):#x}, "
            f"compiler.layout places it at byte {layout_byte}")


def check_tile(rec: dict, images: np.ndarray, inputs, report: Report, layouts: dict | None = None) -> None:
    """Checks (a), (b), (c) of the module docstring for one tile's dumped images."""
    from compiler.diagnostics import SpecError
    from compiler.sim import numerics
    from compiler.sim.smem import read_operand_bits
    from compiler.sim.tcgen05 import encode_sparse_metadata, expand_sparse, mma
    from compiler.isa.tcgen05_kinds import mma_k

    t = rec["tile"]
    name = rec["entry"]
    kind, sparse = t["kind"], t["sparsity"] is not None
    layouts = layouts or tile_layouts(rec)
    expected_shape = (_n_ctas(rec), rec["n_stages"], rec["smem_bytes"])
    if images.shape != expected_shape:
        report.failures.append(f"{name}: dump has shape {images.shape}, expected {expected_shape}")
        return
    report.tiles_checked += 1
    step_k = mma_k(kind, sparse)
    k_a_step = step_k // 2 if sparse else step_k
    steps = rec["k_block"] // step_k
    a_desc = [int(x, 16) for x in rec["A_desc"]]
    b_desc = [int(x, 16) for x in rec["B_desc"]]
    idescs = [int(x, 16) for x in rec["idesc"]]
    k_a_total = t["loop_k"] // 2 if sparse else t["loop_k"]
    codes = {
        "A": unpack_rows(inputs[f"{name}.A"].reshape(-1 if t["a_major"] == "K" else k_a_total,
                                                     (k_a_total if t["a_major"] == "K" else rec["m_total"])
                                                     * _type_bits(t["a_type"]) // 8),
                         k_a_total if t["a_major"] == "K" else rec["m_total"], _type_bits(t["a_type"])),
        "B": unpack_rows(inputs[f"{name}.B"].reshape(-1 if t["b_major"] == "K" else t["loop_k"],
                                                     (t["loop_k"] if t["b_major"] == "K" else rec["n_total"])
                                                     * _type_bits(t["b_type"]) // 8),
                         t["loop_k"] if t["b_major"] == "K" else rec["n_total"], _type_bits(t["b_type"])),
    }
    if t["a_major"] == "MN":
        codes["A"] = codes["A"].T
    if t["b_major"] == "MN":
        codes["B"] = codes["B"].T
    logical = make_inputs(DumpTile(**{**t, "grid": tuple(t["grid"])}))
    for op_name in ("A", "B"):
        if not np.array_equal(codes[op_name], logical[op_name]):
            report.failures.append(f"{name}: stored global {op_name} does not unpack to the seeded codes")
            return
    emulated = emulate_images(rec, inputs, layouts)

    # (a) + (c): every CTA, every stage
    views = cta_views(rec)
    for view in views:
        for stage in range(rec["n_stages"]):
            image = images[view.index, stage]
            for op_name, (lay, offset) in layouts.items():
                region = slice(offset, offset + lay.size_bytes)
                diff = np.flatnonzero(image[region] != emulated[view.index, stage, region])
                report.bytes_compared += lay.size_bytes
                if diff.size:
                    report.byte_mismatches += int(diff.size)
                    report.failures.append(f"{name} {op_name} CTA {view.index} stage {stage}: {diff.size} bytes "
                                           f"differ from the copy-map emulation, first at region byte "
                                           f"{int(diff[0])} (copy code vs compiler/layout.py copy_map)")
                dtype = t["a_type"] if op_name == "A" else t["b_type"]
                key = ("A" if op_name == "A" else "B", width_label(dtype, kind), lay.major, lay.swizzle)
                tally = report.operands.setdefault(key, Tally())
                tally.tiles.add(name)
                tally.images += 1
                row0 = view.a_row0 if op_name == "A" else view.b_row0
                k_step = k_a_step if op_name == "A" else step_k
                descs = a_desc if op_name == "A" else b_desc
                for step in range(steps):
                    k0 = stage * lay.k + step * k_step
                    want = codes[op_name][row0:row0 + lay.mn, k0:k0 + k_step]
                    tally.elements += want.size
                    try:
                        got = read_operand_bits(image, descs[step], dtype, lay.major, lay.mn, k_step, kind=kind)
                    except SpecError as e:        # e.g. the descriptor reaches past the buffer
                        tally.mismatches += want.size
                        report.failures.append(f"{name} {op_name} CTA {view.index} stage {stage} K step {step}: "
                                               f"the model cannot read it: {e.message}")
                        continue
                    bad = np.nonzero(got != want)
                    if bad[0].size:
                        tally.mismatches += int(bad[0].size)
                        report.failures.append(_locate(rec, op_name, lay, offset, descs[step], view, stage, step,
                                                       bad, got, want, k_step, image))

    # (b): the MMA sequence of every CTA (pair) against numpy
    rng = np.random.default_rng(tile_seed(name) + 1)
    scaled = t["scale"] is not None
    n_blocks = 2 if scaled else 0          # .block32 with K = 64: 2 scale factors per MMA (Table 54)
    total_mmas = t["loop_k"] // step_k
    if scaled:
        # random ue8m0 scales in 2^-3..2^3 (the dump kernel never reads them; they only keep (b) honest)
        sfa = rng.integers(124, 131, size=(rec["m_total"], total_mmas * n_blocks)).astype(np.uint64)
        sfb = rng.integers(124, 131, size=(rec["n_total"], total_mmas * n_blocks)).astype(np.uint64)
    a_vals = numerics.decode(codes["A"], t["a_type"])
    if sparse:
        a_vals = expand_sparse(a_vals, logical["META"], sparse_granularity(kind).name)
    b_vals = numerics.decode(codes["B"], t["b_type"])
    pair = t["cta_group"]
    worst = 0.0
    ok = True
    d_elems = 0
    for unit in range(0, len(views), pair):
        members = sorted(views[unit:unit + pair], key=lambda v: v.rank)
        head = members[0]
        rows = slice(head.d_row0, head.d_row0 + t["m"])
        cols = slice(head.d_col0, head.d_col0 + t["n"])
        d = None
        for stage in range(rec["n_stages"]):
            imgs = [images[v.index, stage] for v in members]
            for step in range(steps):
                mma_index = stage * steps + step
                extra = {}
                if scaled:
                    blk = slice(mma_index * n_blocks, (mma_index + 1) * n_blocks)
                    extra.update(scale_a=sfa[rows, blk], scale_b=sfb[cols, blk].T, scale_vec="block32")
                if sparse:
                    selector = idescs[step] & 0x3        # Table 42 bits 0-1: sparsity selector
                    chunk = sparse_granularity(kind).chunk      # dense K per 4-bit code
                    kc = slice(mma_index * step_k // chunk, (mma_index + 1) * step_k // chunk)
                    metas = [encode_sparse_metadata(logical["META"][v.a_row0:v.a_row0 + t["m"] // pair, kc], kind,
                                                    t["m"], selector=selector, cta_group=pair) for v in members]
                    extra["tmem_meta"] = metas[0] if pair == 1 else metas
                try:
                    d = mma(imgs[0] if pair == 1 else imgs, a_desc[step], b_desc[step], idescs[step], kind,
                            d=d, enable_input_d=mma_index > 0, cta_group=pair, **extra)
                except SpecError as e:
                    d, why = None, e.message
                    break
            if d is None:
                break
        if d is None:
            ok = False
            report.failures.append(f"{name}: the model cannot run the MMAs of CTA {head.index}: {why}")
            continue
        a_blk = a_vals[rows].astype(np.float64)
        b_blk = b_vals[cols].astype(np.float64)
        if scaled:
            a_blk = a_blk * np.repeat(numerics.decode(sfa[rows], "ue8m0"), 32, axis=1)
            b_blk = b_blk * np.repeat(numerics.decode(sfb[cols], "ue8m0"), 32, axis=1)
        d_elems += d.size
        if kind == "i8":
            ref = a_blk.astype(np.int64) @ b_blk.astype(np.int64).T
            err = np.abs(d.astype(np.int64) - ref)
            unit_ok = not err.any()
            worst = max(worst, float(err.max()))
        else:
            ref = a_blk @ b_blk.T
            # D is rounded to f32 after each MMA: |error| <= (MMAs + 1) * 2^-23 * sum |a||b|
            bound = (total_mmas + 1) * 2.0 ** -23 * (np.abs(a_blk) @ np.abs(b_blk).T) + 1e-30
            err = np.abs(d.astype(np.float64) - ref)
            unit_ok = bool((err <= bound).all())
            worst = max(worst, float((err / bound).max()))
        if not unit_ok:
            ok = False
            report.failures.append(f"{name}: MMA over CTA {head.index}'s images differs from numpy "
                                   f"(D rows {rows.start}.., cols {cols.start}..; worst "
                                   f"{'abs error' if kind == 'i8' else 'error / bound'} {worst:.3g})")
    report.mma.append({"tile": name, "d_elements": d_elems, "mmas_per_unit": total_mmas,
                       "worst": worst, "ok": ok})


def check(data: Path, dumps: Path, log=print) -> Report:
    manifest = json.loads((data / MANIFEST).read_text())
    inputs = np.load(data / INPUTS)
    status = json.loads((dumps / STATUS).read_text()) if (dumps / STATUS).exists() else {"tiles": {}}
    images = load_dumps(dumps)
    report = Report()
    if manifest.get("sources") != source_hashes():
        log("note: compiler sources differ from those the dumps were prepared with "
            "(descriptors are re-checked per tile)")
    for rec in manifest["tiles"]:
        name = rec["entry"]
        st = status["tiles"].get(name, {"status": "missing"})
        if st.get("status") != "ok" or name not in images:
            report.device_errors.append(f"{name}: {st.get('status')}: {st.get('error', 'no dump')}")
            continue
        if not st.get("d_untouched", True):
            report.failures.append(f"{name}: the dump kernel wrote D/SFA/SFB")
        if st.get("unwritten_chunks"):
            report.failures.append(f"{name}: {st['unwritten_chunks']} 16-byte chunks of S still hold the "
                                   "sentinel (the dump did not cover smem_bytes)")
        try:
            check_tile(rec, images[name], inputs, report)
            if not ptx_unchanged(rec, data):
                report.ptx_changed.append(name)
            if not copy_code_is_the_kernels({**rec, "_data": str(data)}):
                report.copy_differs.append(name)
        except Exception as e:          # noqa: BLE001 - a crash in the check is a finding, keep going
            report.failures.append(f"{name}: check raised {type(e).__name__}: {e}")
    print_report(report, manifest, status, log)
    return report


def print_report(report: Report, manifest: dict, status: dict, log=print) -> None:
    dev = status.get("device", {})
    log(f"check: {report.tiles_checked} tiles from {dev.get('name', '?')}, "
        f"{len(manifest.get('rejected', []))} sweep intents rejected by tilec")
    log(f"{'op':2} {'width':12} {'major':5} {'swizzle':13} {'tiles':>5} {'images':>6} {'elements':>10} {'bad':>5}")
    total = Tally()
    for (op, width, major, swz), tally in sorted(report.operands.items()):
        log(f"{op:2} {width:12} {major:5} {swz:13} {len(tally.tiles):5} {tally.images:6} {tally.elements:10} "
            f"{tally.mismatches:5}")
        total.images += tally.images
        total.elements += tally.elements
        total.mismatches += tally.mismatches
    log(f"total: {total.images} operand images (CTA x stage x operand), {total.elements} elements read through "
        f"the descriptors, {total.mismatches} mismatches; {report.bytes_compared} region bytes vs emulation, "
        f"{report.byte_mismatches} differ")
    d = sum(x["d_elements"] for x in report.mma)
    log(f"mma: {sum(x['ok'] for x in report.mma)}/{len(report.mma)} tiles, {d} D elements match numpy")
    log(f"ptx: {report.tiles_checked - len(report.ptx_changed)}/{report.tiles_checked} dump kernels are what "
        f"today's tilec emits" + (f" (changed: {', '.join(report.ptx_changed[:5])}...)" if report.ptx_changed else ""))
    log(f"copy code: {report.tiles_checked - len(report.copy_differs)}/{report.tiles_checked} dump kernels copy "
        f"exactly as the sm_100a kernel of the same tile" +
        (f" (differ: {', '.join(report.copy_differs[:5])}...)" if report.copy_differs else ""))
    for f in report.failures[:40]:
        log(f"FAIL {f}")
    for e in report.device_errors:
        log(f"DEVICE {e}")
    log("RESULT: " + ("PASS" if report.ok else "FAIL"))


# ==================================================================================================
# CLI
# ==================================================================================================

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", type=Path, default=REPO / ".smemdump")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-ptxas", action="store_true")
    d = sub.add_parser("device")
    d.add_argument("--data", type=Path, default=REPO / ".smemdump")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--in-process", action="store_true")
    w = sub.add_parser("device-worker")
    w.add_argument("--data", type=Path, required=True)
    w.add_argument("--tmp", type=Path, required=True)
    w.add_argument("--start", type=int, default=0)
    c = sub.add_parser("check")
    c.add_argument("--data", type=Path, default=REPO / ".smemdump")
    c.add_argument("--dumps", type=Path, required=True)
    c.add_argument("--json", type=Path)
    e = sub.add_parser("emulate")
    e.add_argument("--data", type=Path, default=REPO / ".smemdump")
    e.add_argument("--out", type=Path, required=True)
    a = sub.add_parser("all")
    a.add_argument("--data", type=Path, default=REPO / ".smemdump")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(args.data, args.quick, assemble=not args.no_ptxas)
        return 0
    if args.cmd == "device":
        status = run_device(args.data, args.out, isolate=not args.in_process)
        return 0 if all(s["status"] == "ok" for s in status["tiles"].values()) else 1
    if args.cmd == "device-worker":
        return device_worker(args.data, args.tmp, args.start)
    if args.cmd == "emulate":
        emulate(args.data, args.out)
        return 0
    if args.cmd == "all":
        prepare(args.data, args.quick)
        run_device(args.data, args.out)
        args.dumps, args.json = args.out, args.out / "check.json"
    report = check(args.data, args.dumps)
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
