"""Property: every tile tilec accepts assembles, and computes the GEMM it describes (issue 14).

Tiles come from the table-driven generators of tests/fuzz/generate.py (a kind with a Table 39 row, an
mma.sp form; perturbed), on a target drawn from the engine's family, sometimes with a `schedule` (so the
pipelined cp.async and the wgmma kernels are generated too). For every tile the compiler ACCEPTS:
- ptxas assembles its PTX for the tile's own target (the assembler's verdict: an accepted tile whose PTX
  ptxas rejects is a compiler bug: the tables let through what the instruction does not have), and
- on a small problem (one CTA tile per dimension, the tile's own K) the CPU emulator (compiler.emulate,
  one interpreter for every engine) runs the kernel and its D equals the numpy reference.
Rejected tiles are the fuzzers' business (tests/test_fuzz_quick.py): here they are only counted, and the
test insists that enough tiles are accepted for the property to mean something.

Default slice: 200 accepted tiles; `-m slow`: 5,000.
"""
from __future__ import annotations

import os
import functools
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

import compiler
from compiler.ptxas import find_ptxas
from tests.fuzz import generate as gen

TCGEN05_TARGETS = ("sm_100a", "sm_100f", "sm_103a", "sm_110a")
MMA_SP_TARGETS = ("sm_80", "sm_89", "sm_90", "sm_90a", "sm_120a")
# Schedules the generator cannot write (it knows statements, not GEMM geometry): CTA tile x warp grid x
# stages of the pipelined mma.sp kernel, and the wgmma kernel (sm_90a). Illegal pairings with a form are
# rejected by verify and simply not counted.
SCHEDULES = ("schedule cta=64x64x64 warps=2x2 stages=2;", "schedule cta=128x128x64 warps=2x2 stages=3;",
             "schedule cta=32x16x32 warps=1x1 stages=1;",
             "schedule cta=128x128x64 warps=4x1 stages=3 mma=wgmma;",
             "schedule cta=128x256x64 warps=8x1 stages=4 mma=wgmma cluster=2;")


@functools.lru_cache(maxsize=2)
def accepted_tiles(count: int, seed: int) -> tuple[tuple[tuple[str, str, object], ...], int]:
    """`count` (source, target, CompileResult) of accepted tiles, and how many were generated."""
    rng = random.Random(seed)
    chooser = gen.RandomChooser(rng)
    out, tried = [], 0
    while len(out) < count:
        tried += 1
        assert tried < 40 * count, f"only {len(out)} of {tried} generated tiles were accepted"
        tc = rng.random() < 0.5
        stmts = gen.tcgen05_tile(chooser) if tc else gen.mma_sp_tile(chooser)
        if rng.random() < 0.2:
            gen.perturb(chooser, stmts)
        target = rng.choice(TCGEN05_TARGETS if tc else MMA_SP_TARGETS)
        body = gen.render_tile(chooser, "t", stmts)
        if not tc and rng.random() < 0.35:
            # half of the schedules ask for the wgmma kernel: few forms and one target serve it, so an even
            # draw would leave it unreached in some runs
            want_wgmma = rng.random() < 0.5
            schedule = rng.choice([x for x in SCHEDULES if ("wgmma" in x) == want_wgmma])
            if "wgmma" in schedule:
                target = "sm_90a"              # the one target of wgmma.mma_async.sp
            body = body.replace("\n}", "\n  " + schedule + "\n}", 1)
        src = f"target {target};\n{body}"
        try:
            result = compiler.compile_source(src, f"gen{tried}.tile")
        except compiler.CompileError:
            continue
        out.append((src, target, result))
    return tuple(out), tried


def _arch(result) -> str:
    """The .target line of the PTX (a family or generic target is assembled as itself)."""
    for line in result.ptx.splitlines():
        if line.startswith(".target"):
            return line.split()[1].rstrip(",")
    raise AssertionError("no .target line")


def _ptxas(exe: str, ptx: str, arch: str) -> tuple[bool, str]:
    import subprocess

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        p = subprocess.run([exe, f"-arch={arch}", "-o", os.path.join(d, "k.cubin"), src],
                           capture_output=True, text=True)
    return p.returncode == 0, p.stdout + p.stderr


def check_property(count: int, seed: int, ptxas: str) -> None:
    tiles, tried = accepted_tiles(count, seed)
    engines = {r.tiles["t"].attrs["engine"] for _, _, r in tiles}
    assert engines == {"tcgen05", "mma.sp"}, engines
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda t: _ptxas(ptxas, t[2].ptx, _arch(t[2])), tiles))
    bad = [(src, out) for (src, _, _), (ok, out) in zip(tiles, verdicts) if not ok]
    assert not bad, f"{len(bad)} accepted tiles rejected by ptxas; first:\n{bad[0][0]}\n{bad[0][1][:2000]}"
    wrong = []
    for src, _, result in tiles:
        emu = compiler.emulate(result, "t", seed=seed)
        if not emu.ok:
            wrong.append((src, emu.mismatches))
    assert not wrong, f"{len(wrong)} accepted tiles compute the wrong D; first:\n{wrong[0][0]}\n{wrong[0][1]}"


def test_accepted_tiles_assemble_and_compute(ptxas):
    check_property(200, seed=14, ptxas=ptxas)


@pytest.mark.slow
def test_accepted_tiles_assemble_and_compute_5000(ptxas):
    check_property(5000, seed=1414, ptxas=ptxas)


def test_the_generator_reaches_every_kernel():
    """The accepted set exercises each kernel the emitters have: tcgen05, the one-instruction mma.sp
    kernel, the pipelined cp.async kernel and the wgmma kernel (a property over one kernel is weak)."""
    tiles, _ = accepted_tiles(200, seed=14)
    kernels = set()
    for _, _, r in tiles:
        text = r.ptx
        if "tcgen05.mma" in text:
            kernels.add("tcgen05")
        elif "wgmma.mma_async.sp" in text:
            kernels.add("wgmma")
        elif "cp.async" in text:
            kernels.add("pipelined")
        else:
            kernels.add("mma.sp")
    assert kernels == {"tcgen05", "wgmma", "pipelined", "mma.sp"}, kernels
