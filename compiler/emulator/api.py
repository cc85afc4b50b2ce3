"""`emulate(result, tile, shape=...)`: run any compiled tile's kernel on the CPU emulator against numpy.

One entry point for every engine (what `tilec run --emulate` calls):
  * tcgen05 kernels (compiler/ptx/tcgen05_kernel.py): compiler/emulator/tcgen05.py's machine, the problem
    and reference of `host_problem` / `reference_d` (scale factors, sparsity, masks included);
  * warp-level mma.sp kernels (the one-instruction-tile kernel of compiler/ptx/mma_sp_kernel.py and the
    pipelined cp.async kernel of compiler/ptx/sparse_gemm_kernel.py) and the TMA + wgmma.sp kernel
    (compiler/ptx/sparse_wgmma_kernel.py): the warp machine (compiler/emulator/warp.py) on a random
    structured-sparse problem (compiler/emulator/sparse_host.py).
Inputs have few significant bits, so a correct kernel reproduces the reference bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .parse import EmulationError

if TYPE_CHECKING:
    from ..driver import CompileResult


@dataclass
class Emulation:
    """What one emulated run gave: D from the kernel, the numpy reference, and machine statistics."""
    tile: str
    engine: str
    kernel: str                        # "tcgen05", "mma_sp", "sparse_gemm" or "sparse_wgmma"
    shape: tuple[int, int, int]        # problem M, N, K
    d: np.ndarray
    reference: np.ndarray
    stats: dict = field(default_factory=dict)
    batch: int = 1                     # sparse wgmma: problems in the batch (d, reference: batch x M x N)

    @property
    def mismatches(self) -> int:
        """Elements whose bytes differ from the reference's; with a fused epilogue (whose activations the
        hardware approximates: compiler/emulator/sparse_host.py ACT_ERROR), elements outside its tolerance
        `stats["atol"]`."""
        if "atol" in self.stats:
            diff = np.abs(self.d.astype(np.float64) - np.asarray(self.reference).astype(np.float64))
            return int(np.count_nonzero(~(diff <= self.stats["atol"])))
        a = np.ascontiguousarray(self.d)
        b = np.ascontiguousarray(self.reference).astype(a.dtype)
        size = a.dtype.itemsize
        return int(np.count_nonzero((a.view(np.uint8) != b.view(np.uint8)).reshape(-1, size).any(-1)))

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def emulate(result: CompileResult, tile: str | None = None, *, shape: tuple[int, int, int] | None = None, seed: int = 0,
            order: str = "forward", mode: str = "eager", ptx: str | None = None, batch: int = 1) -> Emulation:
    """Run tile `tile` (default: the only / first tile) of a CompileResult on the CPU emulator.

    Builds random inputs in the kernel's ABI for a problem of `shape` = (M, N, K) (default: one CTA tile,
    K = the tile's loop K), runs the emitted PTX and returns an `Emulation` with D and the numpy reference
    (`.ok` when they agree bit for bit). M and N must be multiples of the kernel's tile, except for the
    sparse wgmma kernel, which takes any M, N, K >= 1 (B, C and D then have padded, poisoned rows whose
    padding must stay untouched); the tcgen05 kernel's K is fixed at the tile's loop K, the other mma.sp
    kernels take any multiple of their K step. `batch` (sparse wgmma only): that many problems in one
    launch (grid y), each operand's batches apart by a stride that is not their packed size.
    `seed` draws the inputs and the scheduler's choices; `order` ("forward", "reverse", "random") is the
    warp order of the warp machine and `mode` when its asynchronous copies and wgmma groups complete
    ("eager", "lazy", "late_mma"; see compiler/emulator/warp.py), or one of its scheduling policies
    ("adversarial": every asynchronous operation completes as late as possible and warps interleave a few
    instructions at a time in a seeded random order; "random": the same interleaving with completions at
    random points). tcgen05 kernels take "eager" or a policy. Raises EmulationError when the kernel
    breaks a rule the emulator checks, or for a shape the kernel cannot take. `ptx` runs that module
    text instead of `result.ptx` with the tile's ABI (a hand-edited kernel).
    """
    if tile is None:
        if not result.tiles:
            raise EmulationError("the compile result has no tiles")
        tile = next(iter(result.tiles))
    if tile not in result.tiles:
        raise EmulationError(f"no tile '{tile}' (tiles: {', '.join(result.tiles)})")
    t = result.tiles[tile]
    engine = t.attrs["engine"]
    text = result.ptx if ptx is None else ptx
    if engine == "tcgen05":
        return _tcgen05(result, text, tile, shape, seed, mode, batch)
    if batch != 1 and (engine != "mma.sp" or "batch" not in result.to_json()["tiles"][tile]["kernel"]):
        raise EmulationError(f"batch = {batch}: only the sparse wgmma kernel, the pipelined mma.sp kernel (not "
                             "block-scaled) and the dense warp-specialised tcgen05 kernel take a batch")
    if engine == "mma.sp":
        return _mma_sp(result, text, tile, shape, seed, order, mode, batch)
    raise EmulationError(f"engine {engine} has no emulator")


def _tiles(shape, tm: int, tn: int, what: str) -> tuple[int, int]:
    m, n = shape[0], shape[1]
    if m <= 0 or n <= 0 or m % tm or n % tn:
        raise EmulationError(f"shape M = {m}, N = {n}: the {what} kernel needs multiples of {tm} x {tn}")
    return m // tm, n // tn


def _tcgen05(result, text: str, tile: str, shape, seed: int, mode: str, batch: int = 1) -> Emulation:
    from .tcgen05 import host_problem, reference_d, run_kernel

    spec = result.tiles[tile].payload
    if result.tiles[tile].op("tilec.ws_plan") is not None:
        return _tcgen05_ws(result, text, tile, shape, seed, mode, batch)
    if batch != 1:
        raise EmulationError(f"batch = {batch}: the single-stage tcgen05 kernel takes no batch (add a schedule)")
    k = spec.total_k
    m_tiles = n_tiles = 1
    if shape is not None:
        m_tiles, n_tiles = _tiles(shape, spec.m, spec.n, "tcgen05")
        if shape[2] != k:
            raise EmulationError(f"shape K = {shape[2]}: the tcgen05 kernel's K is the tile's loop K = {k}")
    problem = host_problem(result, tile, m_tiles=m_tiles, n_tiles=n_tiles, seed=seed)
    if mode not in ("eager", "adversarial", "random"):
        raise EmulationError(f"mode {mode}: the tcgen05 machine takes eager, adversarial or random")
    machine = run_kernel(text, problem.args, problem.grid, problem.entry, policy=None if mode == "eager" else mode,
                         seed=seed)
    d = machine.gmem.array("D").view(np.dtype(reference_d(problem).dtype)).reshape(
        problem.args["m_total"], problem.args["n_total"])
    return Emulation(tile, "tcgen05", "tcgen05", (spec.m * m_tiles, spec.n * n_tiles, k), d, reference_d(problem),
                     machine.stats)


def _tcgen05_ws(result, text: str, tile: str, shape, seed: int, mode: str, batch: int = 1) -> Emulation:
    """The persistent warp-specialised tcgen05 kernel (default shape: 2 x 3 tiles and two K blocks), on a
    third as many CTAs as tiles (at least one), so that each CTA loops over three tiles or more and its ring
    and both accumulators wrap; scheduled by cluster launch control, its grid has a CTA (pair) per tile of
    which half run at once (run_ws_problem). Dense tiles take any M, N, K >= 1 and a batch (the ABI's `requires` is
    empty); sparse and block-scaled ones any M, N, batch and K of whole metadata chunks / scale vectors (their
    `requires`: a partial last K block's images padded past K)."""
    from ..runtime.abi import unmet
    from .tcgen05 import run_ws_problem

    abi = result.to_json()["tiles"][tile]["kernel"]
    tm, tn, tk = abi["tile_m"], abi["tile_n"], abi["tile_k"]
    if shape is None:
        shape = (2 * tm, 3 * tn, 2 * tk)
    m, n, k = shape
    if min(m, n, k, batch) <= 0:
        raise EmulationError(f"shape {m} x {n} x {k}, batch {batch}: each must be at least 1")
    bad = unmet(abi, m, n, k, batch)
    if bad:
        raise EmulationError(f"shape {m} x {n} x {k}, batch {batch}: the warp-specialised tcgen05 kernel needs "
                             + ", ".join(bad))
    if mode not in ("eager", "adversarial", "random"):
        raise EmulationError(f"mode {mode}: the tcgen05 machine takes eager, adversarial or random")
    tiles = -(-m // tm) * -(-n // tn) * batch
    # static: a third as many CTAs as tiles; cluster launch control: a CTA (pair) per tile in the grid, half
    # as many running at once, so that running ones cancel waiting ones and take their tiles
    per = 2 if abi.get("persistent") == "clc" else 3
    out, ref, machine = run_ws_problem(result, tile, text, abi, m, n, k,
                                       ctas=abi.get("cluster", [1])[0] * max(1, tiles // per), seed=seed,
                                       policy=None if mode == "eager" else mode, batch=batch)
    return Emulation(tile, "tcgen05", "tcgen05_ws", (m, n, k), out, ref, machine.stats, batch)


def _mma_sp(result, text: str, tile: str, shape, seed: int, order: str, mode: str, batch: int = 1) -> Emulation:
    from .sparse_host import WGMMA_MODES, policy_of, run_sparse_gemm, sparse_problem

    t = result.tiles[tile]
    spec = t.payload
    form = t.facts["form"]
    abi = result.to_json()["tiles"][tile]["kernel"]
    kind = abi.get("kernel_kind") or "mma_sp"
    tm, tn, tk = abi["tile_m"], abi["tile_n"], abi["tile_k"]
    if shape is None:
        shape = (tm * (2 if abi.get("cluster", [1])[0] == 2 else 1), tn, spec.total_k if kind == "mma_sp" else tk)
    m, n, k = shape
    name = abi["entry"]
    threads = abi["block"][0]
    params = {p["name"] for p in abi["params"]}
    out_type = spec.operands["D"].dtype
    accumulate_c = "c" in params
    if kind == "sparse_wgmma":            # any M, N, K >= 1 (partial edge tiles, a K tail)
        if min(m, n, k, batch) <= 0:
            raise EmulationError(f"shape {m} x {n} x {k}, batch {batch}: each must be at least 1")
        return _wgmma(text, tile, abi, form, (m, n, k), seed, order, mode, out_type, accumulate_c, batch)
    if kind == "sparse_gemm" and "sfa" not in params:     # any M, N, K >= 1 its ABI's `requires` allows
        # (block-scaled forms take whole tiles: the problem below, with its scale factors)
        return _sparse_gemm(text, tile, abi, form, (m, n, k), seed, order, mode, out_type, accumulate_c, batch)
    m_tiles, n_tiles = _tiles(shape, tm, tn, kind)
    if k <= 0 or k % tk:
        raise EmulationError(f"shape K = {k}: the {kind} kernel needs a multiple of {tk}")
    if mode not in WGMMA_MODES:
        raise EmulationError(f"mode {mode} (modes: {', '.join(WGMMA_MODES)})")
    land = WGMMA_MODES[mode][0]
    rng = np.random.default_rng(seed)
    problem = sparse_problem(form, m, n, k, rng, accumulate_c)
    if abi.get("metadata") == "static":
        problem = _static_problem(t, form, problem, m, k)
    if kind == "sparse_gemm":
        tiles = m_tiles * n_tiles
        grid = (min(tiles, 3) if abi.get("persistent") else tiles, 1)
    else:
        grid = (n_tiles, m_tiles)
    d, ref, stats = run_sparse_gemm(text, name, form, grid, threads, abi.get("dynamic_smem_bytes", 0), m, n,
                                    k, out_type, accumulate_c, land=land, order=order, problem=problem, rng=rng,
                                    runtime_metadata="a_metadata" in params, policy=policy_of(mode),
                                    epilogue=abi.get("epilogue"))
    return Emulation(tile, "mma.sp", kind, (m, n, k), d, ref, stats)


def _static_problem(t, form, problem, m: int, k: int):
    """Static metadata: A must be sparse the way the kernel's embedded table says
    (compiler.isa.mma_sp.metadata.static_metadata: 16-row tile mt, k-step ks use entry [mt % pm][ks % pk])."""
    from .. import sparse

    table = np.asarray(t.facts["static_metadata"], np.uint32)
    pm, pk = table.shape[:2]
    steps = k // form.layout.k
    meta = np.stack([np.stack([table[mt % pm, ks % pk] for ks in range(steps)]) for mt in range(m // 16)])
    problem.meta = np.ascontiguousarray(meta)
    problem.a = sparse.decompress(problem.values, problem.meta, form.a_type, form.shape)
    return problem


class _KernelShim:
    """The two things run_sparse_wgmma reads from an emitted kernel, from the compile result's ABI."""

    def __init__(self, text: str, abi: dict):
        self.text, self.abi = text, abi

    def grid(self, m: int, n: int, k: int, batch: int = 1, multiprocessors: int | None = None):
        from ..runtime import abi as abi_mod

        return abi_mod.grid_blocks(self.abi, m, n, k, multiprocessors, batch)


def _sparse_gemm(text, tile, abi, form, shape, seed, order, mode, out_type, accumulate_c, batch=1) -> Emulation:
    """The pipelined cp.async kernel on any M x N x K (B, C, D in padded, poisoned rows; a persistent kernel
    on 3 CTAs per batch)."""
    from ..ptx.sparse_gemm_kernel import SparseGemmPTX
    from ..runtime import abi as abi_mod
    from .sparse_host import WGMMA_MODES, run_sparse_gemm_edges

    m, n, k = shape
    if min(m, n, k, batch) <= 0:
        raise EmulationError(f"shape {m} x {n} x {k}, batch {batch}: each must be at least 1")
    bad = abi_mod.unmet(abi, m, n, k, batch)
    if bad:
        raise EmulationError(f"shape {m} x {n} x {k}: the sparse_gemm kernel needs {', '.join(bad)}")
    if mode not in WGMMA_MODES:
        raise EmulationError(f"mode {mode} (modes: {', '.join(WGMMA_MODES)})")
    kern = SparseGemmPTX(abi["entry"], text, None, abi["target"], abi)
    d, ref, stats = run_sparse_gemm_edges(kern, form, m, n, k, out_type, accumulate_c, mode=mode, order=order,
                                          seed=seed, batch=batch)
    return Emulation(tile, "mma.sp", "sparse_gemm", shape, d, ref, stats, batch)


def _wgmma(text, tile, abi, form, shape, seed, order, mode, out_type, accumulate_c, batch=1) -> Emulation:
    from .sparse_host import run_sparse_wgmma

    m, n, k = shape
    kern = _KernelShim(text, abi)
    d, ref, stats = run_sparse_wgmma(kern, abi["entry"], form, abi["cluster"][0], abi["block"][0],
                                     abi["dynamic_smem_bytes"], m, n, k, out_type, accumulate_c, mode=mode,
                                     order=order, seed=seed, batch=batch)
    return Emulation(tile, "mma.sp", "sparse_wgmma", shape, d, ref, stats, batch)
