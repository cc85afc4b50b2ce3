"""`tilec tune FILE --shape M,N,K`: search the legal schedules of a tile's whole-GEMM kernel on the GPU.

For each tile that uses a whole-GEMM kernel (the pipelined warp-level mma.sp GEMM or the sparse wgmma GEMM;
`--tile` picks one): the legal schedules (compiler/ptx/schedules.py: the kernel's own check_config over the
ISA's choices), the tile's own first (the baseline), then in the order of a cheap estimate. Each candidate
is compiled from FILE with its `schedule` statement replaced (compiler/tuning.py, the edit --write makes);
one that fails to compile or whose kernel does not take the shape (its ABI `requires`) is counted and
skipped. The others are launched through compiler.runtime on random data, their D compared with the numpy
reference (compiler/run.py, as `tilec run --check`), then timed (CUDA events, median of launches); one
that errs on the device or computes a wrong D is recorded with its status and never chosen. The search
stops after `--top` candidates have run, or once `--budget` seconds have passed.

The results go to a JSON file (`--out`, atomic): per candidate its schedule, status, median ms and
TFLOP/s (dense-equivalent 2*M*N*K), and per tile the chosen schedule with the key `compile --tuning`
checks (compiler/tuning.py); the device, shape and tilec version. `--write` puts the chosen schedule into
FILE's tile (atomically; every other byte kept).

The device is reached through a runner (make_runner): tests replace it with a fake that times and checks
without a GPU. Imported only by the `tune` command.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .usage import UsageError

WARMUP = 5
# untimed replays (ms) before each candidate's timed ones: the candidates are timed one after another, each
# after its compile has left the GPU idle, and a power-capped GPU runs the first ~40 ms after idle faster
# than it can sustain (compiler/runtime/timing.py LaunchTimer.warm), by more for a kernel that draws more
WARM_MS = 150.0
SEED = 0
ITERS = 30


class Measurement:
    """What the runner saw of one candidate: `outside` elements of D outside the reference's tolerance
    (of `total`), the launch times in ms, or `error` (it could not run)."""

    def __init__(self, outside: int = 0, total: int = 0, times_ms: list[float] | None = None,
                 error: str | None = None) -> None:
        self.outside, self.total, self.times_ms, self.error = outside, total, times_ms or [], error


class GpuRunner:
    """Runs candidates on GPU 0 through compiler.runtime (torch or cupy hold the arrays)."""

    def __init__(self) -> None:
        from .run import RunError, _array_library

        try:
            self.lib_name, self.lib = _array_library()
        except RunError:
            raise RunError("tilec tune needs a GPU, and torch or cupy to hold its arrays") from None
        if self.lib_name == "torch":
            props = self.lib.cuda.get_device_properties(0)
            self.device, self.sms = props.name, props.multi_processor_count
        else:
            props = self.lib.cuda.runtime.getDeviceProperties(0)
            self.device, self.sms = props["name"].decode(), props["multiProcessorCount"]
        self._hosts: dict[tuple, Any] = {}

    def measure(self, result, tile: str, shape: tuple[int, int, int], seed: int) -> Measurement:
        from .run import _bench, _host_d, _sparse_problem, mismatches, sparse_host
        from .runtime import TilecRuntimeError, load

        m, n, k = shape
        try:
            kernel = load(result, tile)
            kernel.load()
            key = (tile, shape, seed)
            if key not in self._hosts:       # the data and reference do not depend on the schedule
                self._hosts[key] = sparse_host(kernel.abi, result, tile, m, n, k, seed)
            prob = _sparse_problem(kernel, result, tile, m, n, k, seed, self.lib, self._hosts[key])
            d = kernel(*prob.args, **prob.kwargs)
            self._sync()
            host = _host_d(d, self.lib, prob.d_type)
            outside, _ = mismatches(host, prob.ref, prob.scale, prob.d_type)
            if outside:
                return Measurement(outside, host.size)
            times, _, _ = _bench(kernel, prob, self.lib_name, self.lib, ITERS, WARMUP, WARM_MS)
        except (TilecRuntimeError, RuntimeError, OSError) as e:
            return Measurement(error=f"{type(e).__name__}: {e}")
        return Measurement(0, host.size, [t / 1000 for t in times])

    def _sync(self) -> None:
        if self.lib_name == "torch":
            self.lib.cuda.synchronize()
        else:
            self.lib.cuda.runtime.deviceSynchronize()


def make_runner():
    """The device runner (tests substitute a fake)."""
    from .run import RunError

    try:
        return GpuRunner()
    except RunError:
        raise
    except Exception as e:         # no driver, no device: say so, as `tilec run` does
        raise RunError(f"no GPU to tune on ({type(e).__name__}: {e})") from None


# --------------------------------------------------------------------------------------------------
# progress on stderr
# --------------------------------------------------------------------------------------------------

class Progress:
    """A bar redrawn in place on a terminal; one line per candidate otherwise (logs, CI)."""

    WIDTH = 24

    def __init__(self, stream, tile: str, total: int) -> None:
        self.stream, self.tile, self.total, self.done = stream, tile, total, 0
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.best: float | None = None

    def step(self, words: str, status: str, ms: float | None) -> None:
        self.done += 1
        if ms is not None and status == "ok" and (self.best is None or ms < self.best):
            self.best = ms
        what = f"{status} {ms:.4f} ms" if ms is not None else status
        best = f"best {self.best:.4f} ms" if self.best is not None else "no result yet"
        if self.tty:
            filled = self.WIDTH * self.done // max(1, self.total)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            line = f"\r{self.tile} [{bar}] {self.done}/{self.total} {best} | {words}: {what}"
            self.stream.write(line[:200] + "\033[K")
        else:
            self.stream.write(f"tune {self.tile}: {self.done}/{self.total} {words}: {what} ({best})\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.done:
            self.stream.write("\n")
            self.stream.flush()


# --------------------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------------------

def _tiles(result, spec, text: str, wanted: str | None, name: str) -> list[str]:
    from .diagnostics import CompileError, Diagnostic
    from .ptx.schedules import tile_kernel

    tiles = result.tiles
    if wanted is not None and wanted not in tiles:
        raise UsageError(f"--tile {wanted}: no such tile in {name} (tiles: {', '.join(tiles)})")
    names = [wanted] if wanted is not None else list(tiles)
    eligible = [t for t in names if tile_kernel(tiles[t], result.module) is not None]
    if eligible:
        return eligible
    tile = next(t for t in spec.tiles if t.name == names[0])
    raise CompileError([Diagnostic(
        f"tile '{tile.name}' does not use a whole-GEMM kernel: tune searches the schedules of the pipelined "
        "mma.sp GEMM and the sparse wgmma GEMM" if wanted is not None or len(names) == 1 else
        f"no tile of {name} uses a whole-GEMM kernel (the pipelined mma.sp GEMM or the sparse wgmma GEMM)",
        tile.locs.get("schedule", tile.locs.get("tile")),
        "give the tile an mma.sp `schedule cta=MxNxK warps=WxH stages=S` (S >= 2, runtime metadata), "
        "optionally with mma=wgmma on sm_90a")], text)


def tune_tile(text: str, name: str, result, spec, tile: str, shape, runner, args, progress_stream,
              started: float) -> dict[str, Any]:
    """Search one tile; its record for the JSON file."""
    from .diagnostics import CompileError
    from .driver import compile_source
    from .ptx.schedules import search_order, schedule_words, tile_kernel
    from .runtime import abi as rabi
    from .tuning import tile_key, with_schedule

    m, n, k = shape
    view = result.tiles[tile]
    tspec = next(t for t in spec.tiles if t.name == tile)
    order = search_order(view, result.module, m, n, k, runner.sms)
    progress = Progress(progress_stream, tile, min(args.top, len(order)))
    tried: list[dict[str, Any]] = []
    counts = {"legal": len(order), "not_compiled": 0, "not_taking_shape": 0}
    ran = 0
    stopped = None
    for rank, cand in enumerate(order):
        if ran >= args.top:
            break
        if time.monotonic() - started > args.budget:
            stopped = f"budget of {args.budget:g} s spent"
            break
        words = schedule_words(cand.schedule)
        try:
            res = compile_source(with_schedule(text, tspec, cand.schedule), name)
        except CompileError:
            counts["not_compiled"] += 1
            continue
        abi = res.to_json()["tiles"][tile]["kernel"]
        if rabi.unmet(abi, m, n, k):
            counts["not_taking_shape"] += 1
            continue
        ran += 1
        got = runner.measure(res, tile, shape, SEED)
        entry: dict[str, Any] = {"rank": rank, "schedule": words}
        if got.error is not None:
            entry.update(status="error", detail=got.error)
        elif got.outside:
            entry.update(status="wrong", detail=f"{got.outside} of {got.total} elements of D outside the "
                                                 "tolerance of the numpy reference")
        elif not got.times_ms:
            entry.update(status="error", detail="no launch was timed")
        else:
            times = sorted(got.times_ms)
            med = times[len(times) // 2]
            entry.update(status="ok", median_ms=float(f"{med:.7g}"), tflops=round(2.0 * m * n * k / (med * 1e-3) / 1e12, 3),
                         launches=len(times))
        tried.append(entry)
        progress.step(words, entry["status"], entry.get("median_ms"))
    progress.close()
    ok = [e for e in tried if e["status"] == "ok"]
    best = min(ok, key=lambda e: (e["median_ms"], e["rank"])) if ok else None
    record: dict[str, Any] = {
        "key": tile_key(result.spec.target, tspec),
        "kernel": tile_kernel(view, result.module),
        "written": schedule_words(tspec.schedule),
        "chosen": best["schedule"] if best else None,
        "candidates": tried,
        "counts": counts,
    }
    if stopped:
        record["stopped"] = stopped
    return record


def cmd_tune(args) -> int:
    from . import __version__
    from .diagnostics import CompileError, Diagnostic
    from .driver import compile_source, parse_source
    from .run import RunError, parse_shape
    from .tuning import FORMAT, FORMAT_VERSION, apply_tuning
    from .usage import read_input

    shape = parse_shape(args.shape)
    if args.top < 1:
        raise UsageError(f"--top must be a positive number of candidates, got {args.top}")
    if not args.budget > 0:
        raise UsageError(f"--budget must be a positive number of seconds, got {args.budget:g}")
    if args.write and args.file == "-":
        raise UsageError("--write rewrites FILE: give a file, not stdin")
    if args.out not in (None, "-") and args.file != "-" and os.path.exists(args.out) and \
            os.path.exists(args.file) and os.path.samefile(args.out, args.file):
        raise UsageError(f"refusing to overwrite the input file '{args.out}'")
    if args.out not in (None, "-"):         # before the search, not after it: its results would be lost
        from .files import check_writable

        check_writable(args.out)
    text, name = read_input(args.file)
    from .ir import looks_like_ir

    if looks_like_ir(text):
        raise UsageError("tune takes a .tile file (DSL), not IR text")
    spec = parse_source(text, name)
    result = compile_source(text, name)
    tiles = _tiles(result, spec, text, args.tile, name)
    for t in tiles:
        tspec = next(s for s in spec.tiles if s.name == t)
        from .tuning import schedule_span

        if schedule_span(text, tspec) is None:     # whole-GEMM kernels come from a schedule: not reached
            raise CompileError([Diagnostic(f"tile '{t}' has no schedule statement", tspec.locs.get("tile"))], text)
    try:
        runner = make_runner()
    except RunError as e:
        sys.stderr.write(f"tilec: error: {e}\n")
        return 1
    started = time.monotonic()
    records = {t: tune_tile(text, name, result, spec, t, shape, runner, args, sys.stderr, started) for t in tiles}
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tilec": __version__,
        "device": runner.device, "sms": runner.sms,
        "file": os.path.basename(name), "shape": list(shape), "target": result.spec.target,
        "timing": {"warmup": WARMUP, "warm_ms": WARM_MS, "launches": ITERS, "statistic": "median",
                   "launch": "programmatic dependent launch where the kernel's ABI allows it (compiler.runtime's "
                             "default)",
                   "clock": "CUDA events around CUDA-graph replays (compiler/runtime/timing.py)"},
        "tiles": records,
    }
    from .files import OverwritesInput, write_output

    try:
        write_output(args.out, json.dumps(doc, indent=2, sort_keys=True) + "\n", args.file)
    except OverwritesInput as e:
        raise UsageError(str(e)) from None
    status = 0
    out = sys.stderr if args.out == "-" else sys.stdout      # the JSON itself may be stdout
    for t, rec in records.items():
        if rec["chosen"] is None:
            sys.stderr.write(f"tilec: error: {t}: no candidate ran correctly ({len(rec['candidates'])} tried); "
                             f"see {args.out}\n")
            status = 1
            continue
        best = next(e for e in rec["candidates"] if e["schedule"] == rec["chosen"])
        was = next((e for e in rec["candidates"] if e["schedule"] == rec["written"]), None)
        was_ms = f", {was['median_ms']:.4f} ms" if was is not None and "median_ms" in was else ""
        out.write(f"{t}: schedule {rec['chosen']}; {best['median_ms']:.4f} ms, {best['tflops']:.1f} TFLOP/s "
                         f"at {shape[0]}x{shape[1]}x{shape[2]} on {runner.device} (best of {len(rec['candidates'])} "
                         f"tried, {rec['counts']['legal']} legal; was {rec['written']}{was_ms})\n")
    if args.write and any(rec["chosen"] for rec in records.values()):
        chosen = {t: rec for t, rec in records.items() if rec["chosen"] is not None}
        new = apply_tuning(text, spec, {"tiles": chosen}, args.out)
        if new != text:
            write_output(args.file, new)
        out.write(f"{name}: schedule of {', '.join(chosen)} written\n")
    return status
