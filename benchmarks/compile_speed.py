"""Compile speed of tilec, measured against baselines in the same run (medians).

  cold CLI compile of one tile  vs  `python -c pass`  and  `python -c "import lark"`, and one
  `filecheck` process (the other cost of a lit RUN line); commands interleaved, medians
  in-process tiles per second (parse + full pipeline + PTX text)
  the whole lit suite (wall time), optional with --lit

Run:  python benchmarks/compile_speed.py [--runs 20] [--lit]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gemm_bf16.tile"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tiles", type=int, default=300, help="tiles compiled in-process")
    ap.add_argument("--lit", action="store_true", help="also time the whole lit suite")
    args = ap.parse_args()
    py = sys.executable
    subprocess.run([py, "-m", "compiler", "compile", str(EXAMPLE), "-o", os.devnull], check=True)  # warm cache
    fc = os.path.join(os.path.dirname(py), "filecheck")
    check = ROOT / "tests" / "lit" / "tcgen05" / "gemm_bf16.tile"
    ptx = subprocess.run([py, "-m", "compiler", "compile", str(EXAMPLE)], check=True, capture_output=True).stdout
    script = os.path.join(os.path.dirname(py), "tilec")
    tilec = [script] if os.path.isfile(script) else [py, "-m", "compiler"]
    commands = {
        "python -c pass": ([py, "-c", "pass"], None),
        'python -c "import lark"': ([py, "-c", "import lark"], None),
        "tilec compile (cold process)": ([*tilec, "compile", str(EXAMPLE), "-o", os.devnull], None),
    }
    if os.path.exists(fc):
        commands["filecheck (one RUN line's check)"] = ([fc, str(check)], ptx)
    # Interleaved (one of each per round), so that machine noise hits every row alike.
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(args.runs):
        for name, (cmd, stdin) in commands.items():
            t = time.perf_counter()
            subprocess.run(cmd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
            times[name].append(time.perf_counter() - t)
    rows = [(name, statistics.median(ts)) for name, ts in times.items()]
    base = rows[0][1]
    lark = rows[1][1]
    print(f"{'what':36} {'median ms':>10} {'x python':>9} {'x import lark':>14}")
    for name, t in rows:
        print(f"{name:36} {t * 1e3:10.1f} {t / base:9.2f} {t / lark:14.2f}")

    sys.path.insert(0, str(ROOT))
    from compiler.driver import compile_source

    text = EXAMPLE.read_text()
    compile_source(text, "warm.tile")
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        for i in range(args.tiles // 5):
            compile_source(text, f"t{i}.tile")
        samples.append((args.tiles // 5) / (time.perf_counter() - t))
    print(f"in-process: {statistics.median(samples):.0f} tiles/s (median of 5 batches of {args.tiles // 5})")
    if args.lit:
        t = time.perf_counter()
        r = subprocess.run([py, "-c", "from lit.main import main; main()", "-q", str(ROOT / "tests" / "lit")], cwd=ROOT)
        print(f"lit suite: {time.perf_counter() - t:.2f} s wall (exit {r.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
