"""`tilec run`: a compiled tile on the GPU (compiler.runtime) with random data, checked against numpy and
ml-dtypes (`--check`) or timed (`--bench`), or on the CPU emulator (`--emulate`, compiler.emulator).

The random operands have few significant bits (the emulator's problems: compiler/emulator/sparse_host.py
and compiler/emulator/tcgen05.py), so every partial sum is exact and D is, in practice, bit for bit the
numpy reference; --check still allows the rounding of D's type (tolerance(): README 'tilec run').
Imported only by the `run` command: nothing here is on the CLI's start-up path.
"""
from __future__ import annotations

import math
import re
import sys

# unit of D's type, relative to sum_k |a||b| + |c| (the classic GEMM error bound's scale), and the fused
# epilogue's activation errors: compiler/emulator/sparse_host.py (the emulator's tolerance too)
from .emulator.sparse_host import TOLERANCE  # noqa: E402


class RunError(Exception):
    """A tile that cannot run here (exit 1; the message says why and what to do instead)."""


def parse_shape(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        from .usage import UsageError

        raise UsageError(f"--shape must be M,N,K (three positive integers), got '{text}'")
    m, n, k = (int(p) for p in parts)
    return m, n, k


def _granule(reqs: list[str], name: str) -> int:
    for r in reqs:
        match = re.fullmatch(rf"{name} % (\d+) == 0", r)
        if match:
            return int(match.group(1))
    return 1


def check_shape(result, tile: str, text: str, shape_text: str, m: int, n: int, k: int, bad: list[str]) -> None:
    """Refuse problem M x N x K that breaks what `tile`'s kernel takes (`bad`: its unmet `requires` /
    `limits`). A warp-specialised tcgen05 kernel's K unit comes from a statement of the tile (whole
    metadata chunks of `sparsity`, scale vectors of `block_scale`, packed elements of an operand's type):
    a located diagnostic there, saying why (tcgen05_ws_kernel.check_k); any other: a usage error."""
    from .usage import UsageError

    view = result.tiles[tile]
    if view.op("tilec.ws_plan") is not None:
        from .diagnostics import CompileError, Diagnostic, SpecError
        from .ptx.tcgen05_ws_kernel import check_k

        try:
            check_k(view, k)
        except SpecError as e:
            raise CompileError([Diagnostic(f"--shape {shape_text}: {e.message}", view.payload.loc(e.field), e.hint)],
                               text) from None
    raise UsageError(f"--shape {shape_text} breaks what tile {tile}'s kernel takes: {', '.join(bad)}")


def default_shape(abi: dict, loop_k: int) -> tuple[int, int, int]:
    """Two kernel tiles (CTA pairs) along M and N; K = the tile's loop K (tcgen05: the only K it takes),
    rounded up to the kernel's K step and at least 4 K steps for the pipelined kernels."""
    from .runtime import abi as rabi

    reqs = rabi.requires(abi)
    gm, gn, gk = (_granule(reqs, x) for x in "MNK")
    # a kernel that takes any M, N, K (no multiple-of requirement) still gets whole kernel tiles here
    gm = max(gm, abi.get("tile_m", 1) * (abi.get("cluster") or [1])[0])
    gn, gk = max(gn, abi.get("tile_n", 1)), max(gk, abi.get("tile_k", 1))
    if rabi.is_tcgen05(abi):
        return 2 * gm, 2 * gn, abi["k"]
    k = max(loop_k, 4 * gk if abi.get("kernel_kind") else 0)
    return 2 * gm, 2 * gn, -(-k // gk) * gk


def tolerance(d_type: str) -> float:
    return TOLERANCE.get(d_type, 2.0 ** -7)


def mismatches(d, ref, bound_scale, d_type: str) -> tuple[int, int]:
    """(elements outside the tolerance, elements not bit-identical) of D against the reference; a NaN
    (the poison of unwritten elements) is always outside."""
    import numpy as np

    a, r = np.asarray(d).astype(np.float64), np.asarray(ref).astype(np.float64)
    bad = ~(np.abs(a - r) <= tolerance(d_type) * bound_scale)
    same = np.ascontiguousarray(d).view(np.uint8).reshape(d.size, -1) == \
        np.ascontiguousarray(np.asarray(ref).astype(d.dtype)).view(np.uint8).reshape(d.size, -1)
    return int(bad.sum()), int((~same.all(-1)).sum())


# --------------------------------------------------------------------------------------------------
# the emulator
# --------------------------------------------------------------------------------------------------

def _problems(batch: int) -> str:
    return f" x {batch} problems" if batch != 1 else ""


def emulate_tile(result, tile: str, shape, seed: int, policy: str = "eager", batch: int = 1) -> tuple[bool, str]:
    """Run `tile` on the CPU emulator under scheduling `policy` (compiler.emulate's `mode`: eager,
    adversarial or random; `seed` draws the data and the policy's choices), `batch` problems in one launch."""
    from .emulator.api import emulate

    e = emulate(result, tile, shape=shape, seed=seed, mode=policy, batch=batch)
    m, n, k = e.shape
    how = "" if policy == "eager" else f", {policy} scheduling, seed {seed}"
    where = f"{tile}: {m} x {n} x {k}{_problems(batch)} on the CPU emulator ({e.engine}, {e.kernel} kernel{how})"
    if e.ok and "atol" in e.stats:
        return True, (f"{where}: D matches the numpy reference within the epilogue's tolerance ({e.d.size} "
                      "elements)")
    if e.ok:
        return True, f"{where}: D matches the numpy reference bit for bit ({e.d.size} elements)"
    return False, f"{where}: {e.mismatches} of {e.d.size} elements of D differ from the numpy reference"


# --------------------------------------------------------------------------------------------------
# the GPU
# --------------------------------------------------------------------------------------------------

def _array_library():
    try:
        import torch

        if torch.cuda.is_available():
            return "torch", torch
    except ImportError:
        pass
    try:
        import cupy

        return "cupy", cupy
    except ImportError:
        raise RunError("tilec run needs torch or cupy on the GPU to hold its arrays "
                       "(or run it on the CPU emulator: --emulate)") from None


class _Problem:
    """Host operands, device arguments and the reference of one random problem."""

    def __init__(self, args: tuple, kwargs: dict, ref, scale, d_type: str, out) -> None:
        self.args, self.kwargs, self.ref, self.scale, self.d_type, self.out = args, kwargs, ref, scale, d_type, out


class SparseHost:
    """The host side of one random mma.sp problem: operands, epilogue inputs, the numpy reference and its
    error scale. It depends on the tile's form, D type, epilogue and C, not on its schedule, so `tilec tune`
    makes it once for every candidate schedule of a tile."""

    def __init__(self, p, bias, scalars, ref, scale, d_type: str) -> None:
        self.p, self.bias, self.scalars, self.ref, self.scale, self.d_type = p, bias, scalars, ref, scale, d_type


def sparse_host(abi: dict, result, tile: str, m: int, n: int, k: int, seed: int) -> SparseHost:
    import numpy as np

    from .emulator.sparse_host import edge_problem, reference, sparse_problem
    from .isa.mma_sp.forms import SHAPE_M

    t = result.tiles[tile]
    form = t.facts["form"]
    d_type = t.payload.operands["D"].dtype
    names = {p["name"] for p in abi["params"]}
    rng = np.random.default_rng(seed)
    # shapes off the instruction grid (kernels taking any M, N, K: the runtime's packer pads A) get a problem
    # whose A is sparse in whole chunks of the padded K; block-scaled forms always take whole blocks
    whole = m % SHAPE_M == 0 and k % form.k == 0
    p = (sparse_problem if whole or form.block_scale is not None else edge_problem)(form, m, n, k, rng, "c" in names)
    if abi.get("metadata") == "static":
        from .emulator.api import _static_problem

        p = _static_problem(t, form, p, m, k)
    desc = abi.get("epilogue")
    if desc is not None:           # D = act(alpha*(A*B) + beta*C + bias): the ABI says what the kernel fuses
        from .emulator.sparse_host import epilogue_atol, epilogue_inputs, epilogue_reference

        bias, scalars = epilogue_inputs(desc, m, n, rng)
        ref, bound, pre = epilogue_reference(form, p, d_type, desc, bias, scalars)
        atol, tol = epilogue_atol(bound, pre, desc["act"], d_type, scalars.get("scale", 1.0)), tolerance(d_type)
        # mismatches() allows tolerance(d_type) * scale: an exact type (s32, tolerance 0) must match exactly,
        # whatever the scale (atol / 0 would be NaN, and every element would fail)
        scale = atol / tol if tol else np.zeros_like(np.asarray(atol, np.float64))
        return SparseHost(p, bias, {k: v for k, v in scalars.items() if desc[k] == "param"}, ref, scale, d_type)
    ref = reference(form, p, d_type)
    scale = np.abs(p.a.astype(np.float64)) @ np.abs(p.b.astype(np.float64))
    if p.sfa is not None:          # error bound of the scaled products
        from .emulator.sparse_host import scale_values

        blk = k // p.sfa.shape[1]
        scale = (np.abs(p.a.astype(np.float64)) * np.repeat(scale_values(form, p.sfa), blk, axis=1)) @ \
            (np.abs(p.b.astype(np.float64)) * np.repeat(scale_values(form, p.sfb).T, blk, axis=0))
    if p.c is not None:
        scale = scale + np.abs(p.c.astype(np.float64))
    return SparseHost(p, None, None, ref, scale, d_type)


def _rows_upload(host, library: str, element: str):
    """A host matrix on the device with rows a multiple of 16 bytes apart (the runtime's rule for B^T and C
    rows: TMA global strides are multiples of 16 bytes, cuTensorMapEncodeTiled), as the [:, :cols] slice of
    a pitched upload; a matrix whose rows are 16-byte multiples already goes as it is."""
    from .emulator.sparse_host import pitched
    from .runtime.kernel import aligned_row_elements, upload

    cols = host.shape[1]
    pitch = aligned_row_elements(cols, host.dtype.itemsize)
    if pitch == cols:
        return upload(host, library, element)
    return upload(pitched(host, pitch, 0), library, element)[:, :cols]


def _sparse_problem(kernel, result, tile: str, m: int, n: int, k: int, seed: int, lib,
                    host: SparseHost | None = None) -> _Problem:
    from .runtime.kernel import upload

    h = host or sparse_host(kernel.abi, result, tile, m, n, k, seed)
    p, form = h.p, result.tiles[tile].facts["form"]
    a = kernel.pack_a(p.a, library=lib.__name__)
    b = _rows_upload(p.bt, lib.__name__, form.b_type).T
    c = _rows_upload(p.c, lib.__name__, form.c_type) if p.c is not None else None
    if h.scalars is not None:      # the fused epilogue's parameters
        kwargs = dict(h.scalars)
        if h.bias is not None:
            kwargs["bias"] = upload(h.bias, lib.__name__, kernel.abi["buffers"]["bias"]["element"])
        return _Problem((a, b, c), kwargs, h.ref, h.scale, h.d_type, None)
    kwargs = {}
    if p.sfa is not None:          # block-scaled forms: the u8 scale bytes (PTX 9.7.14.3)
        kwargs = {"scale_a": upload(p.sfa, lib.__name__, form.block_scale.scale_type),
                  "scale_b": upload(p.sfb, lib.__name__, form.block_scale.scale_type)}
    return _Problem((a, b, c), kwargs, h.ref, h.scale, h.d_type, None)


def _tcgen05_problem(kernel, result, tile: str, m: int, n: int, k: int, seed: int, lib) -> _Problem:
    import numpy as np

    from .emulator.tcgen05 import host_problem, reference_d
    from .runtime import abi as rabi
    from .runtime.kernel import upload

    spec = result.tiles[tile].payload
    p = host_problem(result, tile, m_tiles=m // spec.m, n_tiles=n // spec.n, seed=seed)
    want = rabi.buffers(kernel.abi, m, n, k)
    # the emulator's arguments are the kernel's global-memory images: their bytes, typed as the ABI says
    dev = {name: upload(p.args[name], lib.__name__, want[name].element, want[name].shape)
           for name in want if name in p.args and name != "D"}
    kwargs = {kw: dev[name] for kw, name in (("scale_a", "SFA"), ("scale_b", "SFB"), ("metadata", "META"))
              if name in dev}
    ref = reference_d(p)
    scale = np.abs(p.a.astype(np.float64)) @ np.abs(p.b.astype(np.float64)).T
    return _Problem((dev["A"], dev["B"].T), kwargs, ref, scale, p.d_type, None)


def _ws_problem(kernel, result, tile: str, m: int, n: int, k: int, seed: int, lib, batch: int = 1) -> _Problem:
    """The warp-specialised tcgen05 kernel's problem: the emulator's (compiler/emulator/tcgen05.py ws_host),
    its buffers uploaded as the ABI types them (A [M][K], B [N][K] passed as its K x N transpose), a batch
    batch-first (A, B, C and the images each problem's after the previous one's; one bias for all)."""
    import numpy as np

    from .emulator.tcgen05 import _scaled_operands, ws_host
    from .runtime import abi as rabi
    from .runtime.kernel import upload

    h = ws_host(result, tile, kernel.abi, m, n, k, seed, batch)
    want = rabi.buffers(kernel.abi, m, n, k)
    lead = (batch,) if batch != 1 else ()
    dev = {name: upload(h.args[name], lib.__name__, want[name].element, (() if name == "bias" else lead)
                        + tuple(want[name].shape))
           for name in want if name in h.args and name != "D"}
    kwargs = {kw: dev[name] for kw, name in (("scale_a", "SFA"), ("scale_b", "SFB"), ("metadata", "META"),
                                             ("bias", "bias")) if name in dev}
    kwargs.update({key: h.args[key] for key in ("alpha", "beta") if key in h.args})
    if h.atol is not None:         # the epilogue's tolerance, as a multiple of D's unit
        scale = h.atol / tolerance(h.problem.d_type)
    else:
        scales = []
        for p in h.problems:
            a, b = _scaled_operands(p)
            scales.append(np.abs(a[:m]) @ np.abs(b[:n]).T)      # the operands are drawn for whole tiles
        scale = np.stack(scales) if batch != 1 else scales[0]
    bt = dev["B"]                  # B [batch][N][K]: each problem's K x N view
    b = bt.transpose(-2, -1) if lib.__name__ == "torch" else bt.swapaxes(-1, -2)
    args = (dev["A"], b) + ((dev["C"],) if "C" in dev else ())
    return _Problem(args, kwargs, h.ref, scale, h.problem.d_type, None)


def _host_d(d, lib, d_type: str):
    import numpy as np

    from .emulator.sparse_host import out_dtype

    if type(d).__module__.startswith("torch"):
        raw = d.contiguous().view(lib.uint8).cpu().numpy()
    else:
        raw = lib.asnumpy(d.view(lib.uint8))
    return raw.view(out_dtype(d_type)).reshape(d.shape)


def run_tile(result, tile: str, shape, *, check: bool, bench: bool, iters: int, warmup: int,
             seed: int, batch: int = 1, warm_ms: float = 0.0) -> tuple[bool, list[str]]:
    from .runtime import DeviceError, Kernel, load
    from .runtime import abi as rabi
    from .usage import UsageError

    kernel: Kernel = load(result, tile)
    m, n, k = shape or default_shape(kernel.abi, result.tiles[tile].payload.total_k)
    bad = rabi.unmet(kernel.abi, m, n, k, batch)
    if bad:
        raise UsageError(f"--shape {m},{n},{k}{f' --batch {batch}' if batch != 1 else ''} breaks what tile "
                         f"{tile}'s kernel takes: {', '.join(bad)}")
    ws = kernel.abi.get("kernel_kind") == "tcgen05_ws"
    if batch != 1 and not ws:
        raise UsageError(f"--batch {batch}: on a GPU, tilec run launches a batch of the warp-specialised tcgen05 "
                         f"kernel only (tile {tile} is not one; --emulate runs a batch of any kernel that takes one)")
    try:
        kernel.load()
    except DeviceError as e:
        raise RunError(str(e) if "emulate" in str(e) else f"{e} (or run it on the CPU emulator: --emulate)") \
            from None
    name, lib = _array_library()
    make = _tcgen05_problem if kernel.tcgen05 else _ws_problem if ws else _sparse_problem
    prob = make(kernel, result, tile, m, n, k, seed, lib, batch) if ws else make(kernel, result, tile, m, n, k,
                                                                                 seed, lib)
    lines, ok = [], True
    where = f"{tile}: {m} x {n} x {k}{_problems(batch)} on {kernel.device.name} (sm_{kernel.device.sm})"
    if check:
        d = kernel(*prob.args, **prob.kwargs)
        if name == "torch":
            lib.cuda.synchronize()
        else:
            lib.cuda.runtime.deviceSynchronize()
        host = _host_d(d, lib, prob.d_type)
        outside, inexact = mismatches(host, prob.ref, prob.scale, prob.d_type)
        tol = tolerance(prob.d_type)
        tol_text = "exact" if tol == 0 else f"2^{int(math.log2(tol))}·(|A||B|+|C|)"
        if outside:
            ok = False
            lines.append(f"{where}: CHECK FAILED: {outside} of {host.size} elements of D outside the {prob.d_type} "
                         f"tolerance ({tol_text}) of the numpy reference")
        else:
            lines.append(f"{where}: D matches numpy ({prob.d_type} tolerance {tol_text}; "
                         f"{host.size - inexact} of {host.size} elements bit-identical)")
    if bench:
        lines.append(f"{where}: {bench_line(kernel, prob, name, lib, iters, warmup, warm_ms, (m, n, k), batch)}")
    return ok, lines


def bench_line(kernel, prob, name: str, lib, iters: int, warmup: int, warm_ms: float, shape, problems: int) -> str:
    """Time the launch (_bench) and report it (bench_summary) with the `problems` of one launch (--batch),
    not the launches of a replay that _bench also returns."""
    times, _launches_per_replay, how = _bench(kernel, prob, name, lib, iters, warmup, warm_ms)
    if getattr(kernel, "programmatic", False):     # each launch may start as the one before ends
        how += " (programmatic dependent launch)"
    return bench_summary(times, how, warmup, warm_ms, shape, problems)


def bench_summary(times_us: list[float], how: str, warmup: int, warm_ms: float, shape, problems: int = 1) -> str:
    """`tilec run --bench`'s report of `_bench`'s times (us per launch, one per replay): the median and its
    TFLOP/s over the `problems` GEMMs of a launch (--batch; not the launches a replay holds, which the
    times are already divided by)."""
    m, n, k = shape
    med = sorted(times_us)[len(times_us) // 2]
    flops = 2.0 * m * n * k * problems / (med * 1e-6) / 1e12
    warmed = f" and {warm_ms:g} ms of untimed replays" if warm_ms else ""
    return (f"median {med:.1f} us per launch over {len(times_us)} replays of a {how} after {warmup} warm-up"
            f"{warmed} ({flops:.1f} TFLOP/s, dense-equivalent 2*M*N*K)")


def _bench(kernel, prob, name: str, lib, iters: int, warmup: int, warm_ms: float = 0.0) -> tuple[list[float], int, str]:
    """(us per launch of each timed replay, launches per replay, how): about `iters` launches in all, as CUDA
    graph replays (compiler/runtime/timing.py: single launches between events would time the host), after
    `warmup` launches and `warm_ms` of untimed replays (LaunchTimer.warm: the clock a steady run gets)."""
    from .runtime.timing import LaunchTimer

    d = kernel(*prob.args, **prob.kwargs)

    def launch():
        kernel(*prob.args, out=d, **prob.kwargs)

    for _ in range(warmup):
        launch()
    timer = LaunchTimer(name, lib)
    graph, batch, how = timer.capture(launch)
    try:
        timer.warm(launch, graph, batch, warm_ms)
        replays = max(3, round(iters / batch))
        return [timer.replay(launch, graph, batch) * 1e3 for _ in range(replays)], batch, how
    finally:
        del graph


def cmd_run(args) -> int:
    from .usage import UsageError
    from .usage import read_input as _read_input
    from .driver import compile_source

    if args.emulate and args.bench:
        raise UsageError("--bench times the GPU; the CPU emulator (--emulate) only checks")
    if args.iters <= 0 or args.warmup < 0:
        raise UsageError("--iters must be positive and --warmup not negative")
    if not 0 <= args.warm_ms < float("inf"):
        raise UsageError(f"--warm-ms must be a finite number of milliseconds, not negative, got {args.warm_ms:g}")
    if args.batch < 1:
        raise UsageError(f"--batch must be positive, got {args.batch}")
    shape = parse_shape(args.shape)
    text, name = _read_input(args.file)
    result = compile_source(text, name, arch=args.arch)
    tiles = list(result.tiles)
    if args.tile is not None:
        if args.tile not in tiles:
            raise UsageError(f"--tile {args.tile}: no such tile in {name} (tiles: {', '.join(tiles)})")
        tiles = [args.tile]
    check = args.check or not args.bench
    ok = True
    for tile in tiles:
        if shape is not None:                 # on the GPU and the emulator alike, before either starts
            from .runtime import abi as rabi

            bad = rabi.unmet(result.to_json()["tiles"][tile]["kernel"], *shape)
            if bad:
                check_shape(result, tile, text, args.shape, *shape, bad)
        if args.emulate:
            from .emulator.parse import EmulationError

            abi = result.to_json()["tiles"][tile]["kernel"]
            if args.batch != 1 and "batch" not in abi:
                raise UsageError(f"--batch {args.batch}: tile {tile}'s kernel takes no batch (the ABI has no "
                                 "`batch`: the sparse wgmma and pipelined mma.sp kernels and the warp-specialised "
                                 "tcgen05 kernel take one)")
            if shape is not None and args.batch != 1:
                from .runtime import abi as rabi

                bad = rabi.unmet(abi, *shape, args.batch)
                if bad:
                    raise UsageError(f"--shape {args.shape} --batch {args.batch} breaks what tile {tile}'s kernel "
                                     f"takes: {', '.join(bad)}")
            try:
                good, line = emulate_tile(result, tile, shape, args.seed, args.emulate, args.batch)
            except EmulationError as e:
                good, line = False, f"{tile}: the CPU emulator stopped: {e}"
            except MemoryError as e:        # numpy could not allocate the problem's host arrays
                sys.stderr.write(f"tilec: error: {tile}: the problem is too large for the CPU emulator on this "
                                 f"machine ({e}); emulate a smaller --shape\n")
                ok = False
                continue
            ok &= good
            sys.stdout.write(line + "\n")
            continue
        try:
            good, lines = run_tile(result, tile, shape, check=check, bench=args.bench, iters=args.iters,
                                   warmup=args.warmup, seed=args.seed, batch=args.batch, warm_ms=args.warm_ms)
        except RunError as e:
            sys.stderr.write(f"tilec: error: {tile}: {e}\n")
            return 1
        ok &= good
        sys.stdout.write("".join(line + "\n" for line in lines))
    return 0 if ok else 1
