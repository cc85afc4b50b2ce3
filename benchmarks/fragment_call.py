"""What a fragment call costs (issue 16): the same 2:4 sparse GEMM loop (D = A*B + C, A f16 2:4, B f16, f32 C/D;
one 16 x 8 tile per warp, K in calls of 64) calling tilec's mma.sp fragment out of line (`extern "C"`, linked
from `--emit func`: CALL/RET with 22 scalar arguments per call), inlined (the `--emit header` inline-asm
variant), and tilec's own kernel for the same tile (examples/sparse_f16.tile for sm_90a through
compiler.runtime).

Correctness first: every kernel's D on an exact problem (values with few significant bits, so every partial
sum is exact in f32) must equal numpy's bit for bit, at a small shape (every row) and at the timed shape
(256 sampled rows; there the three kernels' D must also be identical). Then timing on those operands:
CUDA events around each launch after a warm-up, the median of `--iters` launches per kernel, in `--rounds`
rounds (kernels interleaved); reported: the median round's times, the ratios out-of-line / inlined,
inlined / tilec kernel, out-of-line / tilec kernel, and the kernels' register counts (ptxas -v).

The fragment kernels read operands pre-packed in register order (tests/gpu/harness/fragment_gemm.py), tilec's
kernel reads compiler.sparse's layouts; the loop structure (one warp per 16 x 8 tile, K in order) is the same.

Run on an sm_90 GPU machine with nvcc and cupy:  python3 benchmarks/fragment_call.py [--m 4096 --n 4096 --k 4096]
Writes fragment_call.json under $OUT when set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(cp, launch, iters: int, warmup: int = 5) -> float:
    """Median ms of one launch (CUDA events around each)."""
    for _ in range(warmup):
        launch()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(iters)]
    for start, end in events:
        start.record()
        launch()
        end.record()
    events[-1][1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in events)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import cupy as cp
    import numpy as np

    from compiler.runtime import load
    from tests.gpu.harness import fragment_gemm as fg
    from tests.gpu.harness.nvcc_link import find_nvcc, gencode, run_nvcc, toolchain_problem

    nvcc = find_nvcc()
    problem = toolchain_problem(nvcc)
    if problem is not None:
        print(f"fragment_call: {problem}", file=sys.stderr)
        return 2
    f = fg.fragment()
    tmp = tempfile.mkdtemp(prefix="fragment_call.")
    cubin, _ = fg.build(nvcc, Path(tmp), f)
    registers = run_nvcc(nvcc, [*gencode(fg.TARGET), "-rdc=true", "-dc", "-Xptxas", "-v", "gemm.cu", "-o", "v.o"], tmp)
    mod = cp.RawModule(path=str(cubin))
    frag_kernels = {"out of line": mod.get_function("gemm_call"), "inlined": mod.get_function("gemm_inline")}
    own = load(str(fg.TILE), arch=fg.TARGET)
    try:
        own.load()                  # compiler.runtime needs cuda.core (pip install 'tilec[gpu]')
    except ImportError as e:
        print(f"fragment_call: tilec's own kernel cannot run here ({e}); timing the fragment kernels only",
              file=sys.stderr)
        own = None

    def launchers(p: fg.Problem):
        m, n, k = p.shape
        packed = {name: cp.asarray(v) for name, v in fg.pack(f, p).items()}
        grid, block, dims = fg.launch_dims(p, f)
        out = {}
        for label, kern in frag_kernels.items():
            d = cp.full(packed["c"].shape, np.nan, dtype=cp.float32)
            kargs = (packed["a"], packed["b"], packed["e"], packed["c"], d, *map(np.int32, dims))
            out[label] = (lambda kern=kern, kargs=kargs: kern(grid, block, kargs),
                          lambda d=d: fg.unpack_d(f, cp.asnumpy(d), m, n))
        if own is None:
            return out
        a = own.pack_a(p.a, library="cupy")
        b = cp.asarray(np.ascontiguousarray(p.b.T)).T           # B^T storage, K contiguous, as the kernel reads
        c = cp.asarray(p.c)
        d = cp.full((m, n), np.nan, dtype=cp.float32)
        out["tilec kernel"] = (lambda: own(a, b, c, out=d), lambda: cp.asnumpy(d))
        return out

    # correctness first: small, then the timed shape (the timed launches then reuse those operands)
    for shape in ((64, 64, 1024), (args.m, args.n, args.k)):
        p = fg.problem(*shape, seed=1, exact=True)
        # numpy on every row of the small shape, on 256 sampled rows of the large one (float64 is exact here)
        rows = np.arange(shape[0]) if shape[0] <= 256 else np.random.default_rng(0).choice(shape[0], 256, False)
        ref = (p.a[rows].astype(np.float64) @ p.b.astype(np.float64) + p.c[rows]).astype(np.float32)
        runs = launchers(p)
        results = {}
        for label, (launch, result) in runs.items():
            launch()
            cp.cuda.runtime.deviceSynchronize()
            results[label] = d = result()
            if not np.array_equal(d[rows], ref):
                print(f"fragment_call: {label} differs from numpy at {shape}: max |D - ref| = "
                      f"{float(np.nanmax(np.abs(d[rows] - ref)))}", file=sys.stderr)
                return 1
        first = next(iter(results.values()))
        if not all(np.array_equal(d, first) for d in results.values()):
            print(f"fragment_call: the kernels' D differ at {shape}", file=sys.stderr)
            return 1
        print(f"correct (bit for bit with numpy) at M,N,K = {shape}: {', '.join(runs)}")

    rounds = []
    for _ in range(args.rounds):
        rounds.append({label: timed(cp, launch, args.iters) for label, (launch, _) in runs.items()})
    mid = sorted(rounds, key=lambda r: r["inlined"])[len(rounds) // 2]
    ratios = {"out of line / inlined": mid["out of line"] / mid["inlined"]}
    if "tilec kernel" in mid:
        ratios["inlined / tilec kernel"] = mid["inlined"] / mid["tilec kernel"]
        ratios["out of line / tilec kernel"] = mid["out of line"] / mid["tilec kernel"]
    flops = 2 * args.m * args.n * args.k
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"fragment call on {name}, M,N,K = {args.m},{args.n},{args.k}; median of {args.iters} launches, "
          f"median of {args.rounds} rounds:")
    for label, ms in mid.items():
        print(f"  {ms:9.3f} ms  {flops / ms / 1e9:8.1f} TFLOP/s (dense-equivalent)  {label}")
    for label, r in ratios.items():
        print(f"  {r:6.3f}  {label}")
    regs = [ln.strip() for ln in registers.splitlines() if "Used" in ln or "Compiling entry" in ln or "Function properties" in ln]
    print("ptxas -v of the fragment kernels:\n  " + "\n  ".join(regs))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fragment_call.json"), "w") as fh:
            json.dump({"device": name, "shape": [args.m, args.n, args.k], "iters": args.iters,
                       "rounds": rounds, "median_round": mid, "ratios": ratios, "ptxas": regs}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
