"""The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py) on an H100, checked against torch and timed
against the warp-level mma.sp kernel (compiler/ptx/sparse_gemm_kernel.py), cuSPARSELt (torch
semi-structured sparsity) and dense cuBLAS in the same process.

    python3 benchmarks/sparse_wgmma.py                  # every shape, every schedule in CONFIGS, table last
    python3 benchmarks/sparse_wgmma.py --quick          # 4096^3 and 8192^3 only
    python3 benchmarks/sparse_wgmma.py --sass FILE      # also ptxas -v + SASS opcode counts of the first config

Needs torch, cupy and numpy (the device image has them), not the DSL parser. Operands, timing and the
baselines are those of benchmarks/sparse_gemm_sync.py (imported from it, not copied; the operand packer
is tests/gpu/harness/sparse_kernels.py's): A random 2:4 f16 with
non-zero kept values, compressed on the GPU into compiler/sparse.py's layouts (checked against
sparse.compress first); B stored as B^T (N x K); D = A*B in f16, f32 accumulation. The three tensor maps
are encoded by the driver (sparse_wgmma_kernel.encode_tensor_maps). Every kernel output is compared with
an fp32 torch product (relative Frobenius error, D poisoned with NaN first) before it is timed; a kernel
that does not match is not timed. Final numbers: `--rounds` interleaved rounds of (best wgmma schedule,
best mma.sp schedule, cuSPARSELt, cuBLAS), each round the median of its launches (CUDA events), reported
as the median round, with the SM clock and power read through NVML. TFLOP/s = 2*M*N*K / time
(dense-equivalent, as for cuSPARSELt).

Recorded runs: docs/measurements.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import sparse_gemm_sync as SG                                             # noqa: E402
from compiler.isa.mma_sp.forms import find_form                                          # noqa: E402
from compiler.ptx.sparse_wgmma_kernel import (SparseWgmmaConfig, emit_sparse_wgmma,   # noqa: E402
                                              encode_tensor_maps)
from tests.gpu.harness.sparse_kernels import (SPARSE_WGMMA_SCHEDULES, abi_metadata,  # noqa: E402
                                              launch_by_value)

# schedules tried per shape (tests/gpu/test_sparse_wgmma_gpu.py checks each of them for correctness); c2: CTA
# pairs along M sharing B (TMA multicast): per CTA and K block 8 + 16 + 1 KB (f16: compact metadata) from L2
# instead of 41
CONFIGS = SPARSE_WGMMA_SCHEDULES
MMA_SP_CONFIGS = ("128x256x64_s3",)                  # the warp-level kernel's best (sparse_gemm_sync.py)
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 28672), (2048, 2048, 2048), (4096, 11008, 4096),
          (11008, 4096, 4096), (28672, 8192, 8192)]
QUICK = SHAPES[:2]
F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")


def build(cp, tmp: str, key: str):
    kern = emit_sparse_wgmma(SparseWgmmaConfig(f"swg_{key}", F16, accumulate_c=False, d_type="f16", **CONFIGS[key]))
    path = os.path.join(tmp, f"{kern.name}.ptx")
    Path(path).write_text(kern.text)
    fn = cp.RawModule(path=path).get_function(kern.name)
    fn.max_dynamic_shared_size_bytes = kern.smem_bytes
    return kern, fn, path


def wgmma_launcher(torch, np, kern, fn, m, n, k, vals, meta, bt, d):
    """A no-argument launch of `kern`: its tensor maps encoded now and passed by value (the kernel's `tensor_maps`
    parameter is their 384 bytes: sparse_kernels.launch_by_value), the metadata in the layout its ABI names
    (compact for f16), made once here and kept alive in the closure."""
    import cupy as cp

    meta = abi_metadata(kern.abi, meta)
    maps = encode_tensor_maps(kern.abi, m, n, k, {"a_values": vals.data_ptr(), "a_metadata": meta.data_ptr(),
                                                  "b": bt.data_ptr()})
    args = (maps, np.uint64(d.data_ptr()), np.uint32(m), np.uint32(n), np.uint32(k),
            np.uint32(n), np.uint64(m * n))         # ldd: D contiguous; batch stride (one problem)
    assert [p["name"] for p in kern.abi["params"]] == ["tensor_maps", "d", "M", "N", "K", "ldd", "batch_stride_d"]
    grid, block, smem = kern.grid(m, n, k), kern.block, kern.smem_bytes

    def run():
        launch_by_value(cp, fn, grid, block, args, smem)
    run.keep = meta                      # the metadata the tensor maps point to lives as long as the launcher
    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--sass", metavar="FILE")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no further shape starts")
    args = ap.parse_args()

    import cupy as cp
    import numpy as np
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    SG.SMS = dev.multi_processor_count
    print(f"device {dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}, cupy {cp.__version__}; "
          f"{SG.gpu_state()}", flush=True)
    tmp = tempfile.mkdtemp()
    t0 = time.time()
    SG.check_packer(torch, SG.DEVICE)
    print("GPU packer == compiler.sparse.compress (f16, bf16)", flush=True)
    kernels, mma_sp = {}, {}
    for table, key, make in ([(kernels, key, build) for key in args.configs.split(",")]
                             + [(mma_sp, key, SG.build) for key in MMA_SP_CONFIGS]):
        try:                            # a kernel the driver does not load is reported, the rest still run
            table[key] = make(cp, tmp, key) if make is build else make(cp, tmp, key, "f16", "f16", False)
        except Exception as e:
            print(f"  {key}: not built: {type(e).__name__}: {e}"[:300], flush=True)
    keys = list(kernels)
    if args.sass and keys and MMA_SP_CONFIGS[0] in mma_sp:
        for path in (kernels[keys[0]][2], mma_sp[MMA_SP_CONFIGS[0]][2]):
            try:
                SG.dump_sass(path, args.sass if path == kernels[keys[0]][2] else args.sass + ".mma_sp", tmp)
            except Exception as e:                                         # report, keep going
                print("no SASS dump:", e, flush=True)

    results = []
    for (m, n, k) in (QUICK if args.quick else SHAPES):
        if time.time() - t0 > args.budget:
            print(f"  budget of {args.budget:.0f} s spent: {m}x{n}x{k} and later shapes skipped", flush=True)
            break
        flop = 2.0 * m * n * k
        tf = lambda ms: flop / (ms * 1e-3) / 1e12                          # noqa: E731
        dense, vals, meta, = SG.sparse_operands(torch, m, k, torch.float16, seed=m + n + k)
        bt = (torch.rand((n, k), device=SG.DEVICE, dtype=torch.float32) * 2 - 1).to(torch.float16)
        ref = dense.float() @ bt.float().t()
        d = torch.empty((m, n), device=SG.DEVICE, dtype=torch.float16)
        row = {"M": m, "N": n, "K": k, "wgmma": {}, "mma_sp": {}}
        runs = {}
        for family, table in (("wgmma", kernels), ("mma_sp", mma_sp)):
            for key, (kern, fn, _) in table.items():
                try:
                    run = (wgmma_launcher(torch, np, kern, fn, m, n, k, vals, meta, bt, d) if family == "wgmma"
                           else SG.launcher(np, kern, fn, m, n, k, vals, meta, bt, d))
                    d.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                    err = SG.rel_err(torch, d, ref)
                except Exception as e:                                      # report, keep going
                    print(f"  {m}x{n}x{k} {family} {key}: {type(e).__name__}: {e}"[:300], flush=True)
                    row[family][key] = {"error": f"{type(e).__name__}: {e}"[:300]}
                    continue
                ms = SG.timed(torch, run, args.iters) if err < 1e-2 else float("nan")
                row[family][key] = {"ms": ms, "tflops": tf(ms), "rel_err": err}
                runs[family, key] = run
                print(f"  {m}x{n}x{k} {family} {key}: rel err {err:.2e}, {ms:.3f} ms, {tf(ms):.0f} TFLOP/s", flush=True)
        del ref
        b_view, b_cont = bt.t(), bt.t().contiguous()
        base = {}
        a_sp = None
        try:
            from torch.sparse import to_sparse_semi_structured
            a_sp = to_sparse_semi_structured(dense)
            base["backend"] = type(a_sp).__name__
            for tag, b in (("view", b_view), ("contig", b_cont)):
                base[f"cusparselt_{tag}"] = SG.timed(torch, lambda b=b: torch.mm(a_sp, b), args.iters)
        except Exception as e:                                             # report, keep going
            base["cusparselt_error"] = f"{type(e).__name__}: {e}"[:200]
        for tag, b in (("view", b_view), ("contig", b_cont)):
            base[f"cublas_{tag}"] = SG.timed(torch, lambda b=b, a=dense: torch.mm(a, b), args.iters)

        def best(family):
            ok = {key: v["ms"] for key, v in row[family].items() if "ms" in v and v["ms"] == v["ms"]}
            return min(ok, key=ok.get) if ok else None
        contenders = {}
        for family in ("wgmma", "mma_sp"):
            key = best(family)
            if key:
                contenders[family] = runs[family, key]
                row[f"best_{family}"] = key
        cs_tag = min((x for x in ("cusparselt_view", "cusparselt_contig") if x in base), key=base.get, default=None)
        if cs_tag:
            b = b_view if cs_tag.endswith("view") else b_cont
            contenders["cusparselt"] = lambda b=b: torch.mm(a_sp, b)
        b = b_view if base["cublas_view"] <= base["cublas_contig"] else b_cont
        contenders["cublas"] = lambda b=b, a=dense: torch.mm(a, b)
        rounds = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, fn_ in contenders.items():
                rounds[name].append(SG.timed(torch, fn_, max(5, args.iters // 3), warmup=2))
        row["interleaved_ms"] = {name: sorted(v) for name, v in rounds.items()}
        row["final_ms"] = {name: statistics.median(v) for name, v in rounds.items()}
        row["clocks"] = SG.gpu_state()
        row["baselines_ms"] = base
        fin = row["final_ms"]
        print(f"  {m}x{n}x{k} final ({args.rounds} interleaved rounds, {base.get('backend', base.get('cusparselt_error'))}): "
              + ", ".join(f"{name} {tf(ms):.0f}" for name, ms in fin.items()) + f" TFLOP/s; {row['clocks']}", flush=True)
        results.append(row)
        del dense, vals, meta, bt, b_cont, d, contenders, runs
        a_sp = None
        torch.cuda.empty_cache()

    nan = float("nan")
    print(f"\n(total {time.time() - t0:.0f} s)  TFLOP/s = 2MNK/time, dense-equivalent; final = median of "
          f"{args.rounds} interleaved rounds")
    print(f"{'M x N x K':>18} {'wgmma sched':>18} {'wgmma':>6} {'mma.sp':>7} {'cuSPLt':>7} {'cuBLAS':>7} "
          f"{'/cuSPLt':>8} {'/mma.sp':>8} {'rel err':>8}  clocks")
    for r in results:
        m, n, k = r["M"], r["N"], r["K"]
        f = 2.0 * m * n * k / 1e9
        fin = r["final_ms"]
        w, s, cs, cb = (fin.get(x, nan) for x in ("wgmma", "mma_sp", "cusparselt", "cublas"))
        key = r.get("best_wgmma", "-")
        err = r["wgmma"].get(key, {}).get("rel_err", nan)
        print(f"{f'{m}x{n}x{k}':>18} {key:>18} {f / w:6.0f} {f / s:7.0f} {f / cs:7.0f} {f / cb:7.0f} {cs / w:8.2f} "
              f"{s / w:8.2f} {err:8.1e}  {r['clocks']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev.name, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
