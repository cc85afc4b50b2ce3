"""The pipelined 2:4 sparse GEMM (compiler/ptx/sparse_gemm_kernel.py, warp-level mma.sp) on the GPU, configured
through its API (SparseGemmConfig, not the DSL), checked against torch and timed against cuSPARSELt (torch
semi-structured sparsity) and dense cuBLAS in the same process. (The DSL examples' benchmark, issue 17's,
is benchmarks/sparse_gemm.py.)

    python3 benchmarks/sparse_gemm_sync.py                 # every shape, every schedule in CONFIGS, table last
    python3 benchmarks/sparse_gemm_sync.py --quick         # 2048^3 and 4096^3 only
    python3 benchmarks/sparse_gemm_sync.py --ncu CONFIG    # one 4096^3 launch of CONFIG (for ncu -k regex:sgemm)

Needs torch, cupy and numpy (the device image has them); tilec's DSL parser (lark) is not needed:
kernels are built from compiler.ptx.sparse_gemm_kernel.SparseGemmConfig directly.

Problem: D[M,N] = A[M,K] @ B[K,N], A 2:4 sparse (f16 or bf16), f32 accumulation, D f16/bf16 (the
baselines' output type; `--with-c` also runs the f32 D = A*B + C kernel the DSL example compiles).
Operands: A is random with a random 2-of-4 pattern per chunk of 4 and non-zero kept values; compressed
on the GPU into compiler/sparse.py's layouts (checked against sparse.compress on a small matrix first).
B is stored as B^T (N x K, K contiguous: an activations tensor tokens x features); the baselines get
the same data both as that transposed view and as a contiguous K x N copy, and the faster is reported.

Correctness first: every kernel output is compared with an fp32 torch product of the same operands
(relative Frobenius error; f16 output rounding gives ~2e-4, a layout bug gives ~1); D is poisoned with
NaN before the run, so an unwritten element fails. Then timing: CUDA events around each launch after a
warm-up, median of `--iters` launches, for every schedule (to pick the best); then `--rounds` rounds
of (best schedule, cuSPARSELt, cuBLAS) back to back, each the median of its launches, reported as the
median round with the SM clock / power read through NVML. TFLOP/s = 2*M*N*K / time (dense-equivalent,
as for cuSPARSELt). Large shapes run into the H100's 700 W limit: read the clocks next to the numbers.

Recorded runs: docs/measurements.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from compiler.isa.mma_sp.forms import find_form                         # noqa: E402
from compiler.ptx.sparse_gemm_kernel import SparseGemmConfig, emit_sparse_gemm   # noqa: E402
from tests.gpu.harness.sparse_kernels import (SPARSE_GEMM_OTHER_FORMS, SPARSE_GEMM_OTHER_SCHEDULES,  # noqa: E402
                                              SPARSE_GEMM_SCHEDULES, check_packer, gpu_state, rel_err,
                                              sparse_operands)

# schedules tried per shape (tests/gpu/test_sparse_gemm_gpu.py checks each of them for correctness)
CONFIGS = SPARSE_GEMM_SCHEDULES
SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (4096, 11008, 4096), (11008, 4096, 4096), (8192, 8192, 28672), (28672, 8192, 8192)]
QUICK = SHAPES[:2]
DEVICE = "cuda"                 # where operands are built


def form_for(dtype: str):
    return find_form("m16n8k32", dtype, dtype, "f32", "f32")


def build(cp, tmp: str, key: str, dtype: str, out: str, with_c: bool):
    name = f"sgemm_{dtype}_{key}{'_c' if with_c else ''}"
    cfg = SparseGemmConfig(name, form_for(dtype), "sm_90a", accumulate_c=with_c, d_type=out, **CONFIGS[key])
    kern = emit_sparse_gemm(cfg)
    path = os.path.join(tmp, f"{name}.ptx")
    Path(path).write_text(kern.text)
    fn = cp.RawModule(path=path).get_function(name)
    fn.max_dynamic_shared_size_bytes = kern.smem_bytes
    return kern, fn, path


def timed(torch, fn, iters: int, warmup: int = 5) -> float:
    """Median milliseconds of `iters` launches, each between its own pair of CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in evs)


SMS = 132          # set from the device in main()


def launcher(np, kern, fn, m, n, k, a_vals, meta, bt, d, c=None):
    args = [np.uint64(a_vals.data_ptr()), np.uint64(meta.data_ptr()), np.uint64(bt.data_ptr())]
    if c is not None:
        args.append(np.uint64(c.data_ptr()))
    # M, N, K, Kp (K in whole K blocks: the ABI's `sizes`), ldb, [ldc,] ldd (contiguous), batch strides (one problem)
    args += [np.uint64(d.data_ptr()), np.uint32(m), np.uint32(n), np.uint32(k),
             np.uint32(-(-k // kern.abi["tile_k"]) * kern.abi["tile_k"]), np.uint32(k)]
    args += [np.uint32(n)] * (2 if c is not None else 1)
    args += [np.uint64(0)] * (5 if c is not None else 4)
    grid = kern.grid(m, n, k, SMS * kern.abi["max_ctas_per_sm"])
    block, smem = kern.block, kern.smem_bytes
    return lambda: fn(grid, block, tuple(args), shared_mem=smem)


def dump_sass(ptx_path: str, out: str, tmp: str) -> None:
    """ptxas -v + cuobjdump -sass of one kernel; prints the most frequent SASS opcodes."""
    cubin = os.path.join(tmp, "k.cubin")
    subprocess.run(["ptxas", "-v", "-arch=sm_90a", "-o", cubin, ptx_path], check=True)
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    Path(out).write_text(sass)
    ops: dict[str, int] = {}
    for ln in sass.splitlines():
        parts = ln.split("*/")
        if len(parts) > 1 and parts[1].strip() and parts[0].strip().startswith("/*"):
            words = parts[1].strip().rstrip(";").split()
            op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            ops[op.split(".")[0]] = ops.get(op.split(".")[0], 0) + 1
    print("SASS opcode counts:", dict(sorted(ops.items(), key=lambda x: -x[1])[:24]), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the final comparison")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--with-c", action="store_true", help="also the f32 D = A*B + C kernel at 4096^3")
    ap.add_argument("--ncu", metavar="CONFIG", help="only launch CONFIG three times at 4096^3 (profiling)")
    ap.add_argument("--sass", metavar="FILE", help="write the SASS of the first config here (ptxas + cuobjdump)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    import cupy as cp
    import numpy as np
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    global SMS
    SMS = dev.multi_processor_count
    print(f"device {dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}, cupy {cp.__version__}",
          flush=True)
    tmp = tempfile.mkdtemp()

    if args.ncu:
        m = n = k = 4096
        kern, fn, _ = build(cp, tmp, args.ncu, "f16", "f16", False)
        dense, vals, meta = sparse_operands(torch, m, k, torch.float16, 1)
        bt = torch.randn((n, k), device=DEVICE, dtype=torch.float16)
        d = torch.empty((m, n), device=DEVICE, dtype=torch.float16)
        run = launcher(np, kern, fn, m, n, k, vals, meta, bt, d)
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        return 0

    t0 = time.time()
    check_packer(torch, DEVICE)
    print("GPU packer == compiler.sparse.compress (f16, bf16)", flush=True)
    keys = args.configs.split(",")
    kernels = {key: build(cp, tmp, key, "f16", "f16", False) for key in keys}
    if args.sass:
        try:
            dump_sass(kernels[keys[0]][2], args.sass, tmp)
        except (OSError, subprocess.CalledProcessError) as e:
            print("no SASS dump:", e, flush=True)

    results = []
    shapes = QUICK if args.quick else SHAPES
    for (m, n, k) in shapes:
        flop = 2.0 * m * n * k
        tf = lambda ms: flop / (ms * 1e-3) / 1e12                          # noqa: E731
        dense, vals, meta = sparse_operands(torch, m, k, torch.float16, seed=m + n + k)
        bt = (torch.rand((n, k), device=DEVICE, dtype=torch.float32) * 2 - 1).to(torch.float16)
        ref = dense.float() @ bt.float().t()
        d = torch.empty((m, n), device=DEVICE, dtype=torch.float16)
        row = {"M": m, "N": n, "K": k, "ours": {}}
        for key, (kern, fn, _) in kernels.items():
            run = launcher(np, kern, fn, m, n, k, vals, meta, bt, d)
            d.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = rel_err(torch, d, ref)
            ms = timed(torch, run, args.iters) if err < 1e-2 else float("nan")
            row["ours"][key] = {"ms": ms, "tflops": tf(ms), "rel_err": err}
            print(f"  {m}x{n}x{k} {key}: rel err {err:.2e}, {ms:.3f} ms, {tf(ms):.0f} TFLOP/s", flush=True)
        del ref
        # baselines: cuSPARSELt (semi-structured A) and cuBLAS, B as the same transposed view or contiguous
        b_view, b_cont = bt.t(), bt.t().contiguous()
        base = {}
        a_sp = None
        try:
            from torch.sparse import to_sparse_semi_structured
            a_sp = to_sparse_semi_structured(dense)
            base["backend"] = type(a_sp).__name__
            for tag, b in (("view", b_view), ("contig", b_cont)):
                base[f"cusparselt_{tag}"] = timed(torch, lambda b=b: torch.mm(a_sp, b), args.iters)
            chk = torch.mm(a_sp, b_cont).float()
            base["cusparselt_rel_err"] = rel_err(torch, chk, dense.float() @ b_cont.float())
            del chk
        except Exception as e:                                             # report, keep going
            base["cusparselt_error"] = f"{type(e).__name__}: {e}"[:200]
        for tag, b in (("view", b_view), ("contig", b_cont)):
            base[f"cublas_{tag}"] = timed(torch, lambda b=b, a=dense: torch.mm(a, b), args.iters)
        best_key = min(row["ours"], key=lambda x: (row["ours"][x]["ms"] != row["ours"][x]["ms"],   # NaN last
                                                   row["ours"][x]["ms"]))
        # final numbers: rounds of (ours, cuSPARSELt, cuBLAS) back to back, so that clock and power drift
        # hits the three alike; each round is the median of its launches, the result the median round
        kern, fn, _ = kernels[best_key]
        contenders = {"ours": launcher(np, kern, fn, m, n, k, vals, meta, bt, d)}
        cs_tag = min((x for x in ("cusparselt_view", "cusparselt_contig") if x in base), key=base.get, default=None)
        if cs_tag:
            b = b_view if cs_tag.endswith("view") else b_cont
            contenders["cusparselt"] = lambda b=b: torch.mm(a_sp, b)
        b = b_view if base["cublas_view"] <= base["cublas_contig"] else b_cont
        contenders["cublas"] = lambda b=b, a=dense: torch.mm(a, b)
        rounds = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, fn_ in contenders.items():
                rounds[name].append(timed(torch, fn_, max(5, args.iters // 3), warmup=2))
        row["interleaved_ms"] = {name: sorted(v) for name, v in rounds.items()}
        row["final_ms"] = {name: statistics.median(v) for name, v in rounds.items()}
        row["clocks"] = gpu_state()
        row["baselines_ms"] = base
        row["best"] = best_key
        fin = row["final_ms"]
        print(f"  {m}x{n}x{k} final ({args.rounds} interleaved rounds, {base.get('backend', base.get('cusparselt_error'))}): "
              f"ours {best_key} {tf(fin['ours']):.0f}, cuSPARSELt {tf(fin.get('cusparselt', float('nan'))):.0f}, "
              f"cuBLAS {tf(fin['cublas']):.0f} TFLOP/s; {row['clocks']}", flush=True)
        results.append(row)
        del dense, vals, meta, bt, b_cont, d, contenders
        a_sp = None
        torch.cuda.empty_cache()

    print(f"\n(total {time.time() - t0:.0f} s)  TFLOP/s = 2MNK/time, dense-equivalent; median of {args.iters}")
    hdr = f"{'M x N x K':>20} {'best schedule':>22} {'ours':>6} {'cuSPLt':>7} {'cuBLAS':>7} {'/cuSPLt':>8} " \
          f"{'/cuBLAS':>8} {'spread':>7} {'rel err':>8}"
    print(hdr)
    for r in results:
        m, n, k = r["M"], r["N"], r["K"]
        f = 2.0 * m * n * k / 1e9
        fin = r["final_ms"]
        cs, cb, o = fin.get("cusparselt", float("nan")), fin["cublas"], fin["ours"]
        iv = r["interleaved_ms"]["ours"]
        spread = (iv[-1] - iv[0]) / o                 # slowest - fastest round, relative
        print(f"{f'{m}x{n}x{k}':>20} {r['best']:>22} {f / o:6.0f} {f / cs:7.0f} {f / cb:7.0f} {cs / o:8.2f} "
              f"{cb / o:8.2f} {spread:7.1%} {r['ours'][r['best']]['rel_err']:8.1e}")
    extra = []
    for what in ("bf16", "s8", "tf32", *(("f16+C",) if args.with_c else ())):
        try:
            extra.append(other_form(cp, np, torch, tmp, what, args.iters))
        except Exception as e:                                          # report, keep going
            extra.append({"what": what, "error": f"{type(e).__name__}: {e}"[:300]})
        print("  ", extra[-1], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev.name, "results": results, "extra": extra}, indent=1))
    return 0


OTHER_SIZE = 4096
# other forms at OTHER_SIZE^3: (form name, kernel input type, D type, config, with C)
OTHER = SPARSE_GEMM_OTHER_FORMS
CONFIGS_OTHER = SPARSE_GEMM_OTHER_SCHEDULES


def other_form(cp, np, torch, tmp: str, what: str, iters: int) -> dict:
    """One more form at 4096^3, operands from compiler.sparse (numpy) so every type takes the same
    path: correctness against a float64 torch product, then timing; a dense torch baseline."""
    from compiler import sparse
    shape, t, out, key, with_c = OTHER[what]
    m = n = k = OTHER_SIZE
    form = find_form(shape, t, t, "s32" if t == "s8" else "f32", "s32" if t == "s8" else "f32")
    name = f"sgemm_{what.replace('+', '_')}_{key}"
    cfg = SparseGemmConfig(name, form, "sm_90a", accumulate_c=with_c, d_type=out,
                           **{**CONFIGS, **CONFIGS_OTHER}[key])
    kern = emit_sparse_gemm(cfg)
    path = os.path.join(tmp, f"{name}.ptx")
    Path(path).write_text(kern.text)
    fn = cp.RawModule(path=path).get_function(name)
    fn.max_dynamic_shared_size_bytes = kern.smem_bytes
    rng = np.random.default_rng(5)
    a = sparse.random_sparse(rng, m, k, t, shape)
    b = sparse.random_values(rng, (k, n), t)
    vals, meta = sparse.compress(a, t, shape)
    bt = sparse.pack_b(b, t, shape)
    dev = lambda x: torch.from_numpy(np.ascontiguousarray(x).view(np.uint8)).to(DEVICE)   # noqa: E731
    d_t = {"s32": torch.int32, "f32": torch.float32, "bf16": torch.bfloat16}[out]
    d = torch.full((m, n), -7, device=DEVICE, dtype=d_t)
    ref = torch.from_numpy(a.astype(np.float64)).to(DEVICE) @ torch.from_numpy(b.astype(np.float64)).to(DEVICE)
    c = None
    if with_c:
        c = torch.randn((m, n), device=DEVICE)
        ref = ref + c.double()
    run = launcher(np, kern, fn, m, n, k, dev(vals), torch.from_numpy(meta.view(np.int32)).to(DEVICE),
                   dev(bt), d, c)
    run()
    torch.cuda.synchronize()
    err = float(torch.linalg.vector_norm(d.double() - ref) / torch.linalg.vector_norm(ref))
    ms = timed(torch, run, iters)
    res = {"what": what, "form": form.name, "config": key, "rel_err": err, "ms": ms,
           "tflops_or_tops": 2 * m * n * k / ms / 1e9}
    # dense baselines: int8 tensor cores (torch._int_mm) / tf32 cuBLAS / bf16 cuSPARSELt
    if t == "s8":
        a8, b8 = torch.from_numpy(a).to(DEVICE), torch.from_numpy(np.ascontiguousarray(b)).to(DEVICE)
        res["dense_int8_ms"] = timed(torch, lambda: torch._int_mm(a8, b8), iters)
    elif t == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        a32, b32 = torch.from_numpy(a).to(DEVICE), torch.from_numpy(b).to(DEVICE)
        res["dense_tf32_ms"] = timed(torch, lambda: torch.mm(a32, b32), iters)
        torch.backends.cuda.matmul.allow_tf32 = False
    elif t == "bf16":
        from torch.sparse import to_sparse_semi_structured
        ad = torch.from_numpy(a.astype(np.float32)).to(DEVICE).to(torch.bfloat16)
        bd = torch.from_numpy(b.astype(np.float32)).to(DEVICE).to(torch.bfloat16)
        a_sp = to_sparse_semi_structured(ad)
        res["cusparselt_ms"] = timed(torch, lambda: torch.mm(a_sp, bd), iters)
        res["cublas_ms"] = timed(torch, lambda: torch.mm(ad, bd), iters)
    return res


if __name__ == "__main__":
    sys.exit(main())
