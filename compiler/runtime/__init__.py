"""Running compiled tiles on the GPU, on NVIDIA's cuda-core / cuda-bindings (`pip install 'tilec[gpu]'`).

    from compiler.runtime import load
    kernel = load("examples/sparse_gemm_f16.tile")          # or a CompileResult; tile= picks one
    d = kernel(kernel.pack_a(a), bt.T)                      # D = A*B (+ C), asynchronous

`load` reads the kernel's ABI (CompileResult.to_json(): parameters, grid, block, cluster, dynamic shared
memory, requires); `Kernel.__call__` checks every argument (ArgumentError names it, with expected and
got), packs the parameters (tensor maps encoded by the driver), and launches on the caller's stream.
Modules are assembled by ptxas through a cache next to the parser's (compiler/runtime/cache.py), or
JIT-compiled by the driver where no ptxas is found. Every CUDA call goes through compiler/runtime/driver.py
(tests give it a recording stand-in). Nothing here is imported by the CLI's start-up.
"""
from __future__ import annotations

from .errors import ArgumentError, DeviceError, TilecRuntimeError
from .kernel import Kernel, SparseA, target_runs_on

__all__ = ["ArgumentError", "DeviceError", "Kernel", "SparseA", "TilecRuntimeError", "load", "target_runs_on"]


def load(source, tile: str | None = None, *, arch: str | None = None) -> Kernel:
    """The Kernel of one tile. `source`: a CompileResult, or the path of a .tile file (compiled here,
    `arch` overriding its target). `tile` names the tile (default: the file's only / first tile)."""
    from ..driver import CompileResult, compile_file

    result = source if isinstance(source, CompileResult) else compile_file(source, arch=arch)
    data = result.to_json()
    tiles = data["tiles"]
    if tile is None:
        tile = next(iter(tiles))
    if tile not in tiles:
        raise TilecRuntimeError(f"no tile '{tile}' (tiles: {', '.join(tiles)})")
    abi = tiles[tile]["kernel"]
    if abi is None or result.ptx is None:
        raise TilecRuntimeError(f"tile '{tile}' compiled to no kernel")
    return Kernel(abi, abi.get("target") or data["target"], ptx=result.ptx, tile=tile)
