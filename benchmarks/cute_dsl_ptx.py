"""Compile CuTe DSL's persistent Blackwell dense GEMM example to PTX on a machine without a GPU, for
benchmarks/ptx_mix.py and docs/blackwell_comparison.md.

CuTe DSL is not a tilec dependency: run this with the interpreter of a separate virtual environment that
has `nvidia-cutlass-dsl` (the project keeps one, gitignored, at .cute-venv):

    python3 -m venv .cute-venv && .cute-venv/bin/pip install nvidia-cutlass-dsl==4.8.1
    .cute-venv/bin/python benchmarks/cute_dsl_ptx.py EXAMPLE.py --out DIR [--mma-tiler 256,256] [--cluster 2,1]

EXAMPLE.py is NVIDIA/cutlass/examples/python/CuTeDSL/cute/blackwell/kernel/dense_gemm/dense_gemm_persistent.py
(`PersistentDenseGemmKernel`, `compile_bmm`). The tensors are fake (cute.runtime.make_fake_tensor: dynamic
M, N, K, L; 16-byte aligned): f16 A (K-major), f16 B (K-major), f16 C (N-major), f32 accumulator, TMA store,
as in the configuration of ../shared/reference/blackwell-gemm-anchor.md. The environment asks the DSL for
sm_100a and to keep its PTX in DIR (CUTE_DSL_ARCH, CUTE_DSL_KEEP=ptx, CUTE_DSL_DUMP_DIR); the script prints
the PTX files it finds there and the DSL's version.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("example", help="dense_gemm_persistent.py of NVIDIA/cutlass")
    p.add_argument("--out", required=True, help="directory the DSL dumps its PTX into")
    p.add_argument("--mma-tiler", default="256,256", help="MMA tile M,N (default 256,256)")
    p.add_argument("--cluster", default="2,1", help="cluster shape M,N (default 2,1: a CTA pair)")
    p.add_argument("--one-cta", action="store_true", help="cta_group::1 MMAs (default: 2-CTA instructions)")
    p.add_argument("--max-active-clusters", type=int, default=74,
                   help="clusters the grid is capped at (default 74: 148 SMs of a B200 in CTA pairs)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    os.environ["CUTE_DSL_KEEP"] = "ptx"
    os.environ["CUTE_DSL_DUMP_DIR"] = os.path.abspath(args.out)

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    # the example is no module of this repository: import it by its module name from its own directory
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.example)))
    ex = importlib.import_module(os.path.splitext(os.path.basename(args.example))[0])

    tiler = tuple(int(x) for x in args.mma_tiler.split(","))
    cluster = tuple(int(x) for x in args.cluster.split(","))
    m, n, k, l = (cute.sym_int64(divisibility=8, symbol=s) for s in "MNKL")
    align = 16
    # bmm's conventions: a (l, m, k), b (l, k, n), c (l, m, n); K-major A and B, N-major C
    def stride():                       # a dynamic stride, a multiple of 8 elements (16 bytes of f16)
        return cute.sym_int64(divisibility=8)

    a = make_fake_tensor(cutlass.Float16, (l, m, k), (stride(), stride(), 1), assumed_align=align)
    b = make_fake_tensor(cutlass.Float16, (l, k, n), (stride(), 1, stride()), assumed_align=align)
    c = make_fake_tensor(cutlass.Float16, (l, m, n), (stride(), stride(), 1), assumed_align=align)
    start = time.perf_counter()
    ex.compile_bmm((4096, 4096, 4096, 1), a, b, c, cutlass.Float32, "k", "k", "n", tiler, cluster,
                   args.max_active_clusters, not args.one_cta, True)
    seconds = time.perf_counter() - start
    found = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.out) for f in fs if f.endswith(".ptx"))
    from importlib.metadata import version

    print(f"nvidia-cutlass-dsl {version('nvidia-cutlass-dsl')}, {os.environ['CUTE_DSL_ARCH']}, mma tiler "
          f"{tiler}, cluster {cluster}, {'1' if args.one_cta else '2'}-CTA MMA: compiled in {seconds:.2f} s")
    for f in found:
        print(f)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
