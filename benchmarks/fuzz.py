"""Fuzz the whole tilec pipeline: generated tiles and mutated corpus files, in-process and via the CLI.

    python benchmarks/fuzz.py --count 100000 [--seed 0] [--jobs 2] [--cli-every 25] [--no-save]

Inputs come from tests/fuzz (generate.source: tiles from the grammar and the legality tables;
mutate.mutated_corpus_file: token/byte mutations of examples/ and tests/lit/). Each input runs through
compiler.driver.compile_source (a tenth of them with --arch/--ptx-version/--variant overrides as
the CLI passes them); every `--cli-every`-th input also runs through compiler.cli.main on a
file (every fourth of those with damaged UTF-8). The only acceptable outcomes are PTX, or located
diagnostics inside the file (tests/fuzz/harness.py). Each distinct crash is minimized (same crash
signature) and saved under tests/regressions/crashers/ as a regression input; the exit status is 1
when any crash was found.

Input i is drawn from random.Random(f"{seed}:{chunk}") in fixed chunks, so a run is reproducible
whatever the number of jobs.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))      # the `fuzz` package (before this script's own directory)

from fuzz import generate, harness, mutate  # noqa: E402
from fuzz.crashers import save_crasher  # noqa: E402
from fuzz.minimize import minimize  # noqa: E402

CHUNK = 500
OVERRIDE_SHARE = 0.1     # a tenth of the in-process inputs run with --arch / --ptx-version / --variant overrides
ORIGINS = ("generated",) * 5 + ("mutated",) * 4 + ("generated+mutated",)

_WORKDIR: str | None = None


def _init_worker(max_mem_gb: float) -> None:
    global _WORKDIR
    limit = int(max_mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))   # a runaway allocation is a MemoryError
    _WORKDIR = tempfile.mkdtemp(prefix="tilec-fuzz-")


def make_input(c: generate.Chooser, index: int) -> tuple[str, str]:
    origin = ORIGINS[index % len(ORIGINS)]
    if origin == "generated":
        return origin, generate.source(c)
    if origin == "mutated":
        return origin, mutate.mutated_corpus_file(c)
    return origin, mutate.mutate(c, generate.source(c))


def compile_overrides(c: generate.Chooser) -> dict:
    """What the CLI's --arch / --ptx-version / --variant pass to compile_source."""
    from compiler.isa.targets import TARGETS

    pick = c.randint(0, 3)
    if pick == 0:
        return {"arch": c.choice(tuple(TARGETS))}
    if pick == 1:
        return {"ptx_version": c.choice(((7, 0), (8, 5), (8, 6), (8, 7), (8, 8), (9, 0), (9, 1)))}
    if pick == 2:
        return {"options": {"variant": "smem-dump"}}
    return {"arch": c.choice(("sm_90a", "sm_100a")), "options": {"variant": "smem-dump"}}


def run_chunk(job: tuple[int, int, int, int, float]) -> dict:
    seed, chunk, count, cli_every, timeout = job
    c = generate.RandomChooser(random.Random(f"{seed}:{chunk}"))
    counts: collections.Counter = collections.Counter()
    crashes: dict[str, tuple] = {}
    start = chunk * CHUNK

    def record(index, origin, via, data, outcome, overrides=None):
        counts[(origin, via, outcome.status)] += 1
        if outcome.crashed:
            size = len(data)
            best = crashes.get(outcome.signature)
            if best is None or (size, index) < (best[0], best[1]):
                crashes[outcome.signature] = (size, index, data, outcome, via, origin, overrides or {})
            counts[("sig", outcome.signature)] += 1

    for index in range(start, start + count):
        origin, text = make_input(c, index)
        if c.chance(OVERRIDE_SHARE):
            overrides = compile_overrides(c)
            record(index, origin, "api+options", text, harness.check_source(text, timeout=timeout, **overrides),
                   overrides)
        else:
            record(index, origin, "api", text, harness.check_source(text, timeout=timeout))
        if cli_every and index % cli_every == 0:
            data: str | bytes = text
            if (index // cli_every) % 4 == 3:
                data = mutate.mutate_bytes(c, text)
            record(index, origin, "cli", data, harness.check_cli(data, _WORKDIR, timeout=timeout))
    return {"counts": counts, "crashes": crashes}


def _shrink(data, outcome, via: str, timeout: float, overrides: dict):
    if isinstance(data, bytes):
        return data                      # damaged encodings are kept byte-exact

    def keeps(text: str) -> bool:
        if via == "cli":
            return harness.check_cli(text, timeout=timeout).signature == outcome.signature
        return harness.check_source(text, timeout=timeout, **overrides).signature == outcome.signature

    return minimize(data, keeps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=100_000, help="in-process inputs (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--cli-every", type=int, default=25, help="also run every N-th input through the CLI (0: never)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds before an input counts as a hang")
    p.add_argument("--max-mem-gb", type=float, default=3.0, help="address-space limit per worker")
    p.add_argument("--no-save", action="store_true", help="do not write crashers to tests/regressions/crashers")
    args = p.parse_args(argv)

    chunks = [(args.seed, i, min(CHUNK, args.count - i * CHUNK), args.cli_every, args.timeout)
              for i in range(-(-args.count // CHUNK))]
    counts: collections.Counter = collections.Counter()
    crashes: dict[str, tuple] = {}
    t0 = time.perf_counter()
    done = 0
    with multiprocessing.Pool(args.jobs, initializer=_init_worker, initargs=(args.max_mem_gb,)) as pool:
        for result in pool.imap_unordered(run_chunk, chunks):
            counts.update(result["counts"])
            for sig, entry in result["crashes"].items():
                if sig not in crashes or entry[:2] < crashes[sig][:2]:
                    crashes[sig] = entry
            done += 1
            if done % max(1, len(chunks) // 10) == 0:
                n = sum(v for k, v in counts.items() if k[0] != "sig" and k[1].startswith("api"))
                print(f"  {n} inputs, {len(crashes)} distinct crashes, {time.perf_counter() - t0:.0f} s", flush=True)
    elapsed = time.perf_counter() - t0

    api = sum(v for k, v in counts.items() if k[0] != "sig" and k[1].startswith("api"))
    cli = sum(v for k, v in counts.items() if k[0] != "sig" and k[1] == "cli")
    print(f"tilec fuzz: seed {args.seed}, {api} inputs in-process + {cli} through the CLI "
          f"in {elapsed:.1f} s ({api / elapsed:.0f} inputs/s, {args.jobs} jobs)")
    for via in ("api", "api+options", "cli"):
        for origin in sorted(set(ORIGINS)):
            row = {s: counts[(origin, via, s)] for s in ("ok", "error", "crash")}
            if any(row.values()):
                print(f"  {via:11} {origin:18} ok {row['ok']:6}  error {row['error']:6}  crash {row['crash']:5}")
    if not crashes:
        print("no crashes")
        return 0
    print(f"{len(crashes)} distinct crashes:")
    for sig in sorted(crashes):
        size, index, data, outcome, via, origin, overrides = crashes[sig]
        small = _shrink(data, outcome, via, args.timeout, overrides)
        where = ""
        if not args.no_save:
            where = " -> " + str(save_crasher(small, outcome, via, overrides).relative_to(ROOT))
        print(f"- [{counts[('sig', sig)]}x] {sig} (input {index}, {origin}, via {via} {overrides or ''}){where}")
        shown = small if isinstance(small, str) else repr(small[:300])
        print("    " + "\n    ".join(shown[:600].splitlines()))
        print("    " + "\n    ".join(outcome.detail.strip().splitlines()[-3:]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
