"""Host cost of one launch, µs (median): compiler.runtime's Kernel call (argument checks, packing, launch)
against cupy.RawModule(...).get_function(...) launching the same cubin in the same process, and the floor
of cuda.core's launch with prepared arguments. The kernel is examples/sparse_f16.tile at its smallest
problem (one warp, 16 x 8 x 32), so the GPU never holds the host back; each launch is timed alone
(perf_counter_ns), in batches with a synchronisation between them (not timed).

Run on a GPU machine:  python3 benchmarks/launch_overhead.py [--launches 5000]
Writes launch_overhead.json under $OUT when set.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(call, launches: int, sync, batch: int = 250) -> float:
    """Median µs of `call()` over `launches` calls (after a warm-up)."""
    for _ in range(100):
        call()
    sync()
    samples = []
    clock = time.perf_counter_ns
    while len(samples) < launches:
        for _ in range(batch):
            t0 = clock()
            call()
            samples.append(clock() - t0)
        sync()
    return statistics.median(samples) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=5000)
    args = ap.parse_args()
    import cupy as cp
    import numpy as np

    from compiler.emulator.sparse_host import sparse_problem
    from compiler.runtime import load
    from compiler.runtime.kernel import upload

    kernel = load(str(ROOT / "examples" / "sparse_f16.tile")).load()
    from compiler.driver import compile_file

    form = compile_file(str(ROOT / "examples" / "sparse_f16.tile")).tiles[kernel.tile].facts["form"]
    m, n, k = 16, 8, 32
    p = sparse_problem(form, m, n, k, np.random.default_rng(0), True)
    a = kernel.pack_a(p.a, library="cupy")
    b = upload(p.bt, "cupy", form.b_type).T
    c = upload(p.c, "cupy", form.c_type)
    d = cp.empty((m, n), dtype=cp.float32)
    sync = cp.cuda.runtime.deviceSynchronize
    rows = {}
    rows["tilec runtime: kernel(A, B, C, out=D) from cupy"] = timed(lambda: kernel(a, b, c, out=d), args.launches, sync)

    # cupy.RawModule on the very cubin the runtime loaded
    assert kernel.image is not None, "no ptxas here: the runtime JIT-compiled PTX, no cubin to share"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.image)
        fn = cp.RawModule(path=path).get_function(kernel.entry)
    grid, _, block, smem = kernel.launch_dims(m, n, k)
    cargs = (a.values, a.metadata, b, c, d, np.uint32(m), np.uint32(n), np.uint32(k))
    rows["cupy RawModule.get_function(...)(grid, block, args)"] = timed(
        lambda: fn(grid, block, cargs, shared_mem=smem), args.launches, sync)

    from cuda.core import LEGACY_DEFAULT_STREAM, LaunchConfig, launch

    config = LaunchConfig(grid=grid, block=block, shmem_size=smem)
    ptrs = [ctypes.c_uint64(x) for x in (a.values.data.ptr, a.metadata.data.ptr, b.data.ptr, c.data.ptr, d.data.ptr)]
    raw = (*ptrs, ctypes.c_uint32(m), ctypes.c_uint32(n), ctypes.c_uint32(k))
    rows["cuda.core launch(stream, config, kernel, *prepared args)"] = timed(
        lambda: launch(LEGACY_DEFAULT_STREAM, config, kernel._fn, *raw), args.launches, sync)

    try:
        import torch

        if torch.cuda.is_available():
            ta = kernel.pack_a(p.a, library="torch")
            tb = upload(p.bt, "torch", form.b_type).T
            tc = upload(p.c, "torch", form.c_type)
            td = torch.empty((m, n), device="cuda")
            rows["tilec runtime: kernel(A, B, C, out=D) from torch"] = timed(
                lambda: kernel(ta, tb, tc, out=td), args.launches, torch.cuda.synchronize)
    except ImportError:
        pass
    # the result is still right after all of this
    sync()
    ref = (p.a.astype(np.float64) @ p.b.astype(np.float64) + p.c).astype(np.float32)
    assert np.array_equal(cp.asnumpy(d), ref), "D differs from numpy"

    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"launch overhead on {name}, median of {args.launches} launches (µs per launch, host side):")
    for what, us in rows.items():
        print(f"  {us:8.2f}  {what}")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "launch_overhead.json"), "w") as f:
            json.dump({"device": name, "launches": args.launches, "median_us": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
