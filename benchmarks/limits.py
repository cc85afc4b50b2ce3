"""Time and peak memory of tilec on the largest inputs its limits allow (issue 14, README "Limits").

Each row runs in a fresh child process (imports and the parser tables loaded before timing) and reports
  wall s / cpu s   of the stage, best of --runs children;
  peak RSS         the child's resource.getrusage(RUSAGE_SELF).ru_maxrss at the end (the interpreter and
                   tilec's imports included: the `baseline` row is a child that compiles nothing);
  tracemalloc      the peak of Python allocations during the stage (a separate child: tracing slows it).
Stages: `front end` = compiler.driver.parse_source (text -> the IR module: parse and build, every limit of
the front end checked); `to PTX` = compiler.compile_source (every pass, PTX text written).

Inputs (built here from the examples, so they follow the examples):
  4 MiB of 4096-item lists   tiles each carrying one list of MAX_LIST_ITEMS items, up to MAX_INPUT_BYTES
  4096 tcgen05 tiles, 4 MiB  MAX_TILES renamed copies of examples/gemm_bf16.tile, padded with comments to
                             MAX_INPUT_BYTES
  4096 mma.sp tiles          MAX_TILES copies of examples/sparse_f16.tile (one-instruction-tile kernel)
  largest schedule           examples/sparse_gemm_f16.tile with the schedule that writes the most PTX of a
                             grid of schedules verify accepts (searched here; the MMA budget of
                             compiler/passes/limits.py is what stops it); and --many-largest copies of it
                             in one file (the budget is per kernel: a file may hold MAX_TILES of them)
  100,000 list items, 10,000 tiles   the issue's original inputs, refused at the list / tile limit after
                             parsing everything (benchmarks/parse_speed.py times them in more detail)

Run:  python benchmarks/limits.py [--runs 3] [--many-largest 512] [--no-search]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the schedule grid searched for the largest kernel (CTA tile x warp grid x stages x C/D type x kernel)
GRID = dict(cta_m=(64, 128, 256, 512), cta_n=(64, 128, 256, 512), cta_k=(32, 64, 128, 256),
            warps=((1, 1), (2, 2), (2, 4), (4, 2), (4, 1), (8, 1)), stages=(1, 2, 3, 4, 8),
            cd=("f32", "f16"), mma=("", " mma=wgmma"))


def _example(name: str) -> str:
    return (ROOT / "examples" / f"{name}.tile").read_text(encoding="utf-8")


def _tiles_of(example: str, count: int, pad_to: int | None = None) -> str:
    """`count` renamed copies of the example's tile after its header lines; with `pad_to`, comment lines
    spread over the tiles bring the file to exactly that many bytes."""
    text = _example(example)
    start = re.search(r"^tile (\w+) \{", text, re.M)
    head, body, name = text[:start.start()], text[start.start():].rstrip("\n") + "\n", start.group(1)
    tiles = [body.replace(name, f"{name}_{i}") for i in range(count)]
    if pad_to is not None:
        spare = pad_to - len(head.encode()) - sum(len(t.encode()) for t in tiles)
        assert spare >= 0, f"{count} tiles of {example} exceed {pad_to} bytes"
        per = spare // count
        tiles = [t + ("//" + "x" * (per - 3) + "\n" if per >= 3 else "") for t in tiles]
        rest = pad_to - len(head.encode()) - sum(len(t.encode()) for t in tiles)
        tiles[-1] += "/" * rest
    return head + "".join(tiles)


def _lists(max_bytes: int, items: int) -> str:
    """Tiles each with one `disable_output_lane [...]` of `items` items, as many as fit `max_bytes`."""
    head = "target sm_100a;\n"
    values = ", ".join(str(i % 10) for i in range(items))
    out, size, i = [head], len(head), 0
    while True:
        tile = (f"tile t{i} {{\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n  A: bf16 smem;\n  B: bf16 smem;\n"
                f"  D: f32 tmem;\n  disable_output_lane [{values}];\n}}\n")
        if size + len(tile) > max_bytes:
            return "".join(out)
        out.append(tile)
        size += len(tile)
        i += 1


def with_schedule(schedule: str, cd: str) -> str:
    text = re.sub(r"^  schedule [^;\n]*;", f"  schedule {schedule};", _example("sparse_gemm_f16"), flags=re.M)
    return text.replace("C: f32", f"C: {cd}").replace("D: f32", f"D: {cd}")


def largest_schedule() -> tuple[str, str, int, int]:
    """(schedule, C/D type, MMA instructions, PTX bytes) of the accepted schedule of GRID writing the most PTX."""
    from compiler import CompileError, compile_source

    best = None
    for cm, cn, ck, (wm, wn), st, cd, mma in itertools.product(*GRID.values()):
        schedule = f"cta={cm}x{cn}x{ck} warps={wm}x{wn} stages={st}{mma}"
        try:
            ptx = compile_source(with_schedule(schedule, cd), "s.tile").ptx
        except CompileError:
            continue
        if best is None or len(ptx) > best[3]:
            mmas = len(re.findall(r"^\s*(?:mma\.sp|wgmma\.mma_async)", ptx, re.M))
            best = (schedule, cd, mmas, len(ptx))
    assert best is not None
    return best


def make_input(case: str, arg: str) -> str:
    from compiler.frontend import build, parser, source

    if case == "baseline":
        return _example("sparse_f16")
    if case == "lists":
        return _lists(source.MAX_INPUT_BYTES, parser.MAX_LIST_ITEMS)
    if case == "tcgen05":
        return _tiles_of("gemm_bf16", build.MAX_TILES, pad_to=source.MAX_INPUT_BYTES)
    if case == "mma_sp":
        return _tiles_of("sparse_f16", build.MAX_TILES)
    if case == "largest":                       # arg: "schedule|cd|copies"
        schedule, cd, copies = arg.split("|")
        text = with_schedule(schedule, cd)
        start = re.search(r"^tile (\w+) \{", text, re.M)
        head, body, name = text[:start.start()], text[start.start():], start.group(1)
        return head + "".join(body.replace(name, f"{name}_{i}") for i in range(int(copies)))
    if case == "items100k":
        return "target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n" \
               f"  disable_output_lane [{', '.join(str(i % 10) for i in range(100_000))}];\n}}\n"
    if case == "tiles10k":
        return "target sm_100a;\n" + "".join(
            f"tile t{i} {{\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n  loop K=64;\n  A: bf16 smem;\n}}\n"
            for i in range(10_000))
    raise ValueError(case)


def child(case: str, arg: str, stage: str, trace: bool) -> dict:
    """One measurement, in this (fresh) process."""
    import resource
    import tracemalloc

    from compiler.diagnostics import CompileError
    from compiler.driver import compile_source, parse_source
    from compiler.frontend.parser import get_parser

    get_parser()
    text = make_input(case, arg)
    run = (lambda: parse_source(text, "big.tile")) if stage == "front" else (lambda: compile_source(text, "big.tile"))
    if trace:
        tracemalloc.start()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        out = run()
        outcome = f"PTX {len(out.ptx):,} bytes, {out.ptx.count(chr(10)):,} lines" if stage == "ptx" else "ok"
    except CompileError as e:
        outcome = f"{len(e.diagnostics)} error(s): {e.diagnostics[0].message}"
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    traced = tracemalloc.get_traced_memory()[1] if trace else None
    return {"bytes": len(text.encode()), "wall": wall, "cpu": cpu, "traced": traced,
            "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "outcome": outcome}


def measure(case: str, arg: str, stage: str, runs: int) -> dict:
    def one(trace: bool) -> dict:
        p = subprocess.run([sys.executable, __file__, "--child", case, arg, stage, "trace" if trace else "time"],
                           capture_output=True, text=True, cwd=ROOT)
        if p.returncode:
            raise SystemExit(f"child {case} {stage} failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])

    timed = [one(False) for _ in range(runs)]
    best = min(timed, key=lambda r: r["wall"])
    best["cpu"] = min(r["cpu"] for r in timed)
    best["rss_kib"] = max(r["rss_kib"] for r in timed)
    best["traced"] = one(True)["traced"]
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--many-largest", type=int, default=512, help="copies of the largest kernel in one file")
    ap.add_argument("--no-search", action="store_true", help="skip the schedule search (no 'largest' rows)")
    ap.add_argument("--child", nargs=4, metavar=("CASE", "ARG", "STAGE", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        case, arg, stage, mode = args.child
        print(json.dumps(child(case, arg, stage, mode == "trace")))
        return 0
    rows = [("baseline (examples/sparse_f16.tile)", "baseline", "", ("front", "ptx")),
            ("4 MiB of 4096-item lists", "lists", "", ("front", "ptx")),
            ("4096 tcgen05 tiles, 4 MiB", "tcgen05", "", ("front", "ptx")),
            ("4096 mma.sp tiles", "mma_sp", "", ("front", "ptx"))]
    if not args.no_search:
        t = time.perf_counter()
        schedule, cd, mmas, size = largest_schedule()
        n = sum(1 for _ in itertools.product(*GRID.values()))
        print(f"largest kernel of {n} schedules ({time.perf_counter() - t:.0f} s): `schedule {schedule};` with "
              f"{cd} C/D: {mmas} MMA instructions, {size:,} bytes of PTX\n")
        rows += [(f"largest schedule ({mmas} MMAs)", "largest", f"{schedule}|{cd}|1", ("front", "ptx")),
                 (f"{args.many_largest} x largest schedule", "largest", f"{schedule}|{cd}|{args.many_largest}",
                  ("front", "ptx"))]
    rows += [("100,000 list items", "items100k", "", ("front",)), ("10,000 tiles", "tiles10k", "", ("front",))]
    print(f"{'input':36} {'bytes':>10} {'stage':9} {'wall s':>7} {'cpu s':>7} {'peak RSS':>9} {'tracemalloc':>11}  outcome")
    for title, case, arg, stages in rows:
        for stage in stages:
            r = measure(case, arg, stage, args.runs)
            print(f"{title:36} {r['bytes']:>10,} {'front end' if stage == 'front' else 'to PTX':9} {r['wall']:7.2f} "
                  f"{r['cpu']:7.2f} {r['rss_kib'] / 1024:6.0f} MiB {r['traced'] / 2**20:7.1f} MiB  {r['outcome'][:70]}",
                  flush=True)
            title = ""
    return 0


if __name__ == "__main__":
    sys.exit(main())
