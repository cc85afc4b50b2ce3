"""Parse speed of tilec's front end on big inputs (issue 14: the parser was quadratic).

  a list of 100,000 items   (one `disable_output_lane [...]` statement)
  a file of 10,000 tiles    (five statements each)

For each input: the syntax tree alone (compiler.frontend.parser.parse), the whole front end
(compiler.frontend.build.parse_spec, which reports the list-length / tile-count limit as a located
diagnostic after parsing everything), and a cold `tilec compile` process. In-process rows are the best
of --runs runs, as wall time and as this process's CPU time (the machines are shared: CPU time is
the steadier number). The goal is at most 1 s for each input.

Run:  python benchmarks/parse_speed.py [--runs 5] [--items 100000] [--tiles 10000]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.diagnostics import CompileError  # noqa: E402
from compiler.frontend.build import parse_spec  # noqa: E402
from compiler.frontend.parser import get_parser, parse  # noqa: E402


def list_file(n: int) -> str:
    items = ", ".join(str(i % 10) for i in range(n))
    return ("target sm_100a;\ntile t {\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n"
            f"  disable_output_lane [{items}];\n  D: f32 tmem;\n}}\n")


def tiles_file(n: int) -> str:
    return "target sm_100a;\n" + "".join(
        f"tile t{i} {{\n  engine tcgen05;\n  shape M=128 N=256 K=16;\n  loop K=64;\n  A: bf16 smem;\n}}\n"
        for i in range(n))


def best(fn, runs: int) -> tuple[float, float, str]:
    walls, cpus, outcome = [], [], ""
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        try:
            fn()
            outcome = "ok"
        except CompileError as e:
            outcome = e.diagnostics[0].message
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), outcome


def cold_cli(text: str, runs: int) -> float:
    script = os.path.join(os.path.dirname(sys.executable), "tilec")
    cmd = [script] if os.path.isfile(script) else [sys.executable, "-m", "compiler"]
    with tempfile.NamedTemporaryFile("w", suffix=".tile", delete=False) as f:
        f.write(text)
    try:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run([*cmd, "compile", f.name, "-o", os.devnull], capture_output=True, cwd=ROOT)
            times.append(time.perf_counter() - t)
        return min(times)
    finally:
        os.unlink(f.name)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--tiles", type=int, default=10_000)
    args = ap.parse_args()
    get_parser()                                   # tables loaded (or built) before timing
    inputs = {f"list of {args.items:,} items": list_file(args.items),
              f"{args.tiles:,} tiles": tiles_file(args.tiles)}
    print(f"{'input':24} {'bytes':>9} {'what':26} {'wall s':>7} {'cpu s':>7}  outcome")
    for name, text in inputs.items():
        size = f"{len(text.encode()):,}"
        wall, cpu, out = best(lambda: parse(text, "big.tile"), args.runs)
        print(f"{name:24} {size:>9} {'syntax tree (parse)':26} {wall:7.3f} {cpu:7.3f}  {out[:60]}")
        wall, cpu, out = best(lambda: parse_spec(text, "big.tile"), args.runs)
        print(f"{'':24} {'':>9} {'front end (parse_spec)':26} {wall:7.3f} {cpu:7.3f}  {out[:60]}")
        print(f"{'':24} {'':>9} {'cold tilec compile':26} {cold_cli(text, max(1, args.runs // 2)):7.3f} "
              f"{'':>7}  (process wall time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
