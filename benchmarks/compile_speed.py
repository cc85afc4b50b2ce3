"""Compile speed of tilec, measured against baselines in the same run (medians).

  cold CLI compile of one tile  vs  `python -c pass`  and  `python -c "import lark"`, and one
  `filecheck` process (the other cost of a lit RUN line); commands interleaved, medians
  in-process tiles per second (parse + full pipeline + PTX text)
  the whole lit suite (wall time), optional with --lit
  with --baseline TREE (a checkout of another revision, e.g. `git worktree add /tmp/base 422d16c`):
  that tree's cold `tilec compile` and in-process tiles/s, interleaved with this tree's in the same run
  (same interpreter, each tree's own code and examples/gemm_bf16.tile), and the ratios

Run:  python benchmarks/compile_speed.py [--runs 20] [--lit] [--baseline TREE]
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
    ap.add_argument("--baseline", metavar="TREE", type=Path,
                    help="a checkout of another revision: compare its cold compile and tiles/s with this tree's")
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
    if args.baseline is not None:
        compare(args.baseline.resolve(), args.runs, args.tiles)
    if args.lit:
        t = time.perf_counter()
        r = subprocess.run([py, "-c", "from lit.main import main; main()", "-q", str(ROOT / "tests" / "lit")], cwd=ROOT)
        print(f"lit suite: {time.perf_counter() - t:.2f} s wall (exit {r.returncode})")
    return 0


# One process per measurement, so that both trees are timed alike: the tree's package first on the path,
# the tree's own example, `n` compiles after one warm-up compile.
_IN_PROCESS = """
import sys, time
from compiler.driver import compile_source
text = open("examples/gemm_bf16.tile").read()
compile_source(text, "warm.tile")
n = int(sys.argv[1])
t = time.perf_counter()
for i in range(n):
    compile_source(text, "gemm_bf16.tile")
print(n / (time.perf_counter() - t))
"""


def compare(base: Path, runs: int, tiles: int) -> None:
    """Cold `tilec compile` and in-process tiles/s of the baseline tree and of this one, interleaved
    (one of each per round, so machine noise hits both alike), with the same interpreter."""
    if not (base / "compiler" / "driver.py").is_file():
        sys.exit(f"--baseline {base}: not a tilec checkout (no compiler/driver.py)")
    py = sys.executable
    trees = {"baseline": base, "this tree": ROOT}
    rev = {}
    for name, tree in trees.items():
        # Bytecode for every module, as an installed package has it (PYTHONDONTWRITEBYTECODE would
        # otherwise make every cold process of a fresh checkout compile its sources).
        subprocess.run([py, "-m", "compileall", "-q", str(tree / "compiler")], check=True, stdout=subprocess.DEVNULL)
        r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        rev[name] = r.stdout.strip() or "?"

    def run(tree: Path, cmd: list[str]) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(tree))
        return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)

    def cold(tree: Path) -> list[str]:
        return [py, "-m", "compiler", "compile", str(tree / "examples" / "gemm_bf16.tile"), "-o", os.devnull]

    for tree in trees.values():                  # parser tables cached, output checked once
        r = run(tree, cold(tree))
        if r.returncode:
            sys.exit(f"tilec compile failed in {tree}:\n{r.stderr}")
    cold_s: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(runs):
        for name, tree in trees.items():
            t = time.perf_counter()
            run(tree, cold(tree))
            cold_s[name].append(time.perf_counter() - t)
    rates: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(3):
        for name, tree in trees.items():
            r = run(tree, [py, "-c", _IN_PROCESS, str(tiles)])
            if r.returncode:
                sys.exit(f"in-process compile failed in {tree}:\n{r.stderr}")
            rates[name].append(float(r.stdout))
    cold_ms = {k: statistics.median(v) * 1e3 for k, v in cold_s.items()}
    rate = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\nbaseline {rev['baseline']} ({base}) vs this tree {rev['this tree']}, interleaved in one run "
          f"({runs} cold runs each, 3 in-process runs of {tiles} tiles each; medians)")
    print(f"{'what':36} {'baseline':>10} {'this tree':>10} {'ratio':>7}")
    print(f"{'tilec compile, cold process (ms)':36} {cold_ms['baseline']:10.1f} {cold_ms['this tree']:10.1f} "
          f"{cold_ms['this tree'] / cold_ms['baseline']:6.2f}x")
    print(f"{'in-process tiles/s':36} {rate['baseline']:10.0f} {rate['this tree']:10.0f} "
          f"{rate['this tree'] / rate['baseline']:6.2f}x")
    print("in-process tiles/s, each run:  baseline " + ", ".join(f"{x:.0f}" for x in rates["baseline"])
          + ";  this tree " + ", ".join(f"{x:.0f}" for x in rates["this tree"]))


if __name__ == "__main__":
    sys.exit(main())
