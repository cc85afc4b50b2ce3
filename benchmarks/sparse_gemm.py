"""2:4 sparse GEMMs compiled from the DSL tile files in examples/ and launched through compiler.runtime, on
an H100, against cuSPARSELt (with its algorithm search), cuBLAS dense and cuBLAS fp8 / int8 in one process
(issue 17's benchmark). The API-configured warp-level kernel's benchmark is benchmarks/sparse_gemm_sync.py.

    python3 benchmarks/sparse_gemm.py                      # every case (about a minute), table and JSON last
    python3 benchmarks/sparse_gemm.py --quick --budget 300 # 4096^3, 8192^3, 8192x256x8192 and s8
    python3 benchmarks/sparse_gemm.py --shapes 8192x16x8192,4096 --types f16,e4m3 --json out.json
    python3 benchmarks/sparse_gemm.py --list               # which example runs which case (no GPU)

Needs torch, numpy, ml_dtypes, NVIDIA's cuda-core / cuda-bindings (the runtime), lark (the DSL's parser:
the tiles are compiled here; tests/gpu/run_on_device.sh installs it from the wheelhouse) and, for the
clocks, pynvml. ptxas assembles the kernels where it is found (else the driver JIT-compiles them).

Cases: D[M,N] = A[M,K] B[K,N], A 2:4 sparse, for M=N=K in {2048, 4096, 8192}, 5120x13824x5120,
13824x5120x5120, 8192x{16,64,256}x8192 (decode) and 4096x128256x4096 (a vocabulary projection), with
f16 -> f16, bf16 -> bf16 and e4m3 -> bf16 (as torch._scaled_mm gives it); s8 -> s32 at 8192^3 (TOPS).

tilec: every tile of every examples/*.tile (rescanned at each start, so new examples join by themselves)
whose kernel takes a packed 2:4 A of the case's input type and computes D = A*B (no bias, scale or
activation; a C it reads is given as zeros), that this GPU can run (its target), whose ABI's `requires`
and `limits` the problem meets (compiler.runtime.abi.unmet), and whose file, where it says it is meant
for some shapes (a comment line `// benchmark shapes: N <= 256`), is meant for the case's: the split-K
decode tiles time N <= 256, the persistent one 4096 <= min(M, N). Each is checked, then timed. The
row's tile is the fastest of those that write the case's output type without C (like with like); only
where none can run, the fastest other one, its difference named ("f32 D, reads C"). A case no example
can run is a row "n/a (why)", with each tile's unmet condition in the JSON.

Peers: cuSPARSELt through torch (torch._cslt_compress / _cslt_sparse_mm), its algorithm chosen by
_cslt_sparse_mm_search and by timing every alg id up to torch.backends.cusparselt.get_max_alg_id(), with B
both as the transposed view of the N x K activations (column-major K x N) and as a contiguous K x N copy,
output in the case's output type; the fastest configuration is reported. Dense: torch.mm (f16 / bf16, both
B layouts), torch._scaled_mm (e4m3, B column-major as cuBLASLt requires, bf16 out, unit scales) with
use_fast_accum True and False, torch._int_mm (s8 -> s32, both B layouts). Like with like for fp8: an
e4m3 tile with `schedule ... promote=N` (two-level accumulation: examples/sparse_wgmma_e4m3_bf16.tile) is
timed as "tilec promoted" and compared with use_fast_accum=False, the fastest unpromoted one with
use_fast_accum=True (PAIRED; a pairing whose tilec side is missing is "-").

Operands: A random 2:4 (never-zero kept values) and B uniform, built on the GPU and packed into
compiler/sparse.py's layouts there (tests/gpu/harness/sparse_kernels.sparse_operands, checked against
sparse.compress for every type first); B stored as B^T (N x K, K contiguous) as the kernels read it.
Every launch reads an A (the weights) that the L2 does not hold, as in a model: where A is smaller than 3x the
L2, each contender's launches rotate through copies of its A (the packed one for tilec, the compressed one
for cuSPARSELt, the dense one for cuBLAS) that together are COLD_L2_FACTOR (3) x the L2; `--warm-l2` times
one A.

Correctness first: every contender (each tilec tile, each cuSPARSELt configuration, each dense peer) is
run once with D poisoned (NaN; s32: INT_MIN) and compared with the f32 torch product of the same
operands (relative Frobenius error; rounding to f16 / bf16 gives ~1e-4 / ~1e-3, a wrong kernel ~1); a
contender above the tolerance is reported as wrong and not timed. tilec's kernels launch as compiler.runtime
launches them: with programmatic dependent launch where their ABI allows it (each launch of a graph may start
while the one before it ends; the libraries' launches are their own); `--no-pdl` launches them plainly.
Timing: each contender captured into a
CUDA graph of enough launches for ~2 ms (host launch overhead excluded for all alike; eager launches
between CUDA events where a capture fails, said in the JSON), the median of replays; then `--rounds`
rounds of (the `--finalists` fastest tilec tiles of that screening, those within FINALIST_MARGIN of the
fastest, as many promoted ones, best cuSPARSELt, each dense peer) back to back, each round starting further
along that list and every other one running it backwards (round_order), the reported time the median round
(tilec, tilec promoted: the finalist with the lowest). A graph of a launch that cycles through n copies of its
A holds a multiple of n launches, so that every launch reads the copy after its predecessor's.
The card is power-capped and its clock follows the power drawn over the last tens of milliseconds: a single
screening replay meets it at whatever clock the contender before left, so the screening only shortlists,
and in the rounds each entry runs `--warm-ms` of untimed replays before its timed ones (without them, a
tile timed right after a light one, such as a decode tile at 8192^3, took up to 18 % less than the same
kernel later in the round). The SM clock after each entry's timed replays (median over the rounds; the
table gives tilec's and cuSPARSELt's) and the clock, power and temperature after the rounds are read
through NVML.
TFLOP/s (TOPS for s8) = 2*M*N*K / time: dense-equivalent, as for cuSPARSELt.

Output: progress lines, a Markdown table with the ratios tilec / best dense peer and tilec / cuSPARSELt,
and with --json FILE everything measured. Recorded runs: docs/measurements.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.gpu.harness.sparse_kernels import (abi_metadata, check_packer, gpu_state, rel_err,  # noqa: E402
                                              sm_clock_mhz, sparse_operands)

EXAMPLES = REPO / "examples"

# element type of D per input type: the output the dense libraries give (f16 / bf16 GEMM, _scaled_mm, _int_mm)
OUTPUT = {"f16": "f16", "bf16": "bf16", "e4m3": "bf16", "s8": "s32"}
CUBES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
LLM = [(5120, 13824, 5120), (13824, 5120, 5120)]
DECODE = [(8192, 16, 8192), (8192, 64, 8192), (8192, 256, 8192)]
VOCAB = [(4096, 128256, 4096)]
SHAPES = CUBES + LLM + DECODE + VOCAB
FLOAT_TYPES = ("f16", "bf16", "e4m3")
# relative Frobenius error a correct D stays below: f16 / bf16 rounding of D (2^-11 / 2^-8 relative per
# element, ~0.3x that as a norm) with f32 accumulation in another order (f32 D: that order alone, K terms
# of 2^-24 each at most); s32 sums are exact
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-4, "s32": 0.0}


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    a: str                          # input element type: f16, bf16, e4m3, s8

    @property
    def out(self) -> str:
        return OUTPUT[self.a]

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def ops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def cases(shapes, types) -> list[Case]:
    """Every (shape, float type) and s8 at 8192^3, in that order, restricted to `shapes` and `types`."""
    out = [Case(m, n, k, t) for (m, n, k) in shapes for t in types if t in FLOAT_TYPES]
    if "s8" in types and (8192, 8192, 8192) in shapes:
        out.append(Case(8192, 8192, 8192, "s8"))
    return out


QUICK_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 256, 8192)]


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'4096,8192x256x8192' -> [(4096, 4096, 4096), (8192, 256, 8192)] (one number: a cube)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        dims = [int(x) for x in item.lower().split("x")]
        if len(dims) == 1:
            dims *= 3
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"shape {item!r}: M x N x K or one size (a cube)")
        out.append(tuple(dims))
    return out


# --------------------------------------------------------------------------------------------------
# The tilec contenders: the examples' tiles, chosen per case from their ABIs
# --------------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """One tile of one example file, with its kernel's ABI (CompileResult.to_json()['tiles'][tile]['kernel'])."""
    file: str                       # path relative to the repository
    tile: str
    abi: dict
    result: object = None           # the CompileResult (None in tests)
    target: str = "sm_90a"
    shapes: str | None = None       # the file's `// benchmark shapes: COND` (an ABI condition on M, N, K)

    @property
    def name(self) -> str:
        return f"{Path(self.file).name}:{self.tile}" if Path(self.file).stem != self.tile else Path(self.file).name

    @property
    def a_type(self) -> str | None:
        return self.abi.get("buffers", {}).get("a_values", {}).get("element")

    @property
    def d_type(self) -> str | None:
        return self.abi.get("buffers", {}).get("d", {}).get("element")

    @property
    def reads_c(self) -> bool:
        return "c" in self.abi.get("buffers", {})

    @property
    def promoted(self) -> bool:
        """fp8 sums promoted into f32 every N K blocks (`schedule promote=N`; the ABI's "promote")."""
        return self.abi.get("promote") is not None

    def unlike(self, case: Case) -> str | None:
        """How the tile's product differs from the case's D = A*B in the case's output type (None: it is
        that product): another D type and / or a C it reads (given as zeros, so D = A*B all the same)."""
        parts = ([f"{self.d_type} D"] if self.d_type != case.out else []) + (["reads C"] if self.reads_c else [])
        return ", ".join(parts) or None


_TARGET = re.compile(r"^\s*target\s+(sm_\d+[af]?)\s*;", re.M)
# an example meant for some shapes only says so in a comment line, e.g. `// benchmark shapes: N <= 256`
# (one ABI condition on M, N, K: compiler.runtime.abi.eval_expr); its tiles time only the cases meeting it
_SHAPES = re.compile(r"^//\s*benchmark shapes:\s*(.+?)\s*$", re.M)


def not_plain(abi: dict) -> str | None:
    """Why the kernel does not compute D = A*B (+ C, given as zeros) on a packed 2:4 A (None: it does): it
    adds a bias, scales or applies an activation, or takes a scalar the benchmark would have to choose.
    Other parameters (a buffer a new schedule needs, say) are the runtime's to fill: a launch it cannot
    make is reported in that tile's row, not hidden here."""
    buffers = abi.get("buffers", {})
    if "a_values" not in buffers:
        return "no packed 2:4 A"
    ep = abi.get("epilogue") or {}
    if ep.get("bias", "none") != "none":
        return f"adds a bias ({ep['bias']})"
    if ep.get("act", "none") != "none":
        return f"applies {ep['act']}"
    if ep.get("alpha", 1.0) != 1.0 or ep.get("beta", 0.0) != 0.0:
        return f"scales (alpha {ep.get('alpha')}, beta {ep.get('beta')})"
    if ep.get("scale") not in (None, 1, 1.0, "none"):
        return f"scales D ({ep['scale']})"
    # a "bytes" parameter is the kernel's tensor maps, which the runtime encodes (not a scalar to choose)
    scalars = sorted(p["name"] for p in abi.get("params", []) if p.get("type") not in ("u64", "u32", "bytes"))
    if scalars:
        return f"takes {', '.join(scalars)}"
    return None


def discover(examples: Path = EXAMPLES, sm: int = 90) -> tuple[list[Candidate], dict[str, str]]:
    """Every tile of examples/*.tile that could time a case on a device of compute capability `sm`: plain
    D = A*B on a packed 2:4 A (see not_plain) whose target runs there. Returns (candidates, {file[:tile]:
    why left out}); a file that does not compile is left out with its first error line."""
    from compiler.driver import compile_file
    from compiler.runtime.kernel import target_runs_on

    found, skipped = [], {}
    for path in sorted(examples.glob("*.tile")):
        rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
        text = path.read_text(encoding="utf-8", errors="replace")
        stated = _TARGET.search(text)
        meant = _SHAPES.search(text)
        if stated and not target_runs_on(stated.group(1), sm):
            skipped[rel] = f"{stated.group(1)} code (the device is sm_{sm})"
            continue
        try:
            result = compile_file(str(path))
            data = result.to_json()
        except Exception as e:                       # report, keep going (a broken example is a finding)
            skipped[rel] = f"does not compile: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            continue
        for tile, info in data["tiles"].items():
            abi = info.get("kernel")
            key = f"{rel}:{tile}"
            target = (abi or {}).get("target") or data.get("target", "")
            if abi is None:
                skipped[key] = "no kernel"
            elif not target_runs_on(target, sm):
                skipped[key] = f"{target} code (the device is sm_{sm})"
            elif (why := not_plain(abi)) is not None:
                skipped[key] = why
            else:
                found.append(Candidate(rel, tile, abi, result, target, meant.group(1) if meant else None))
    return found, skipped


def select(candidates: list[Candidate], case: Case) -> tuple[list[Candidate], dict[str, str]]:
    """(the candidates that can run `case`, {name: why not} for those of its input type that cannot): the
    input type must be the case's and the problem must meet the kernel's requires and limits. Tiles that
    write the case's output type without reading C come first (see Candidate.unlike for the others)."""
    from compiler.runtime import abi as runtime_abi

    runnable, unmet = [], {}
    for c in sorted(candidates, key=lambda c: c.unlike(case) is not None):
        if c.a_type != case.a:
            continue
        bad = runtime_abi.unmet(c.abi, case.m, case.n, case.k)
        if not bad and c.shapes and not runtime_abi.eval_expr(c.shapes, {"M": case.m, "N": case.n, "K": case.k}):
            bad = [f"meant for {c.shapes}"]
        if bad:
            unmet[c.name] = ", ".join(bad)
        else:
            runnable.append(c)
    return runnable, unmet


def unavailable(case: Case, unmet: dict[str, str]) -> str:
    """The row text of a case no example can run."""
    if not unmet:
        return f"n/a (no example tile takes {case.a} as D = A*B)"
    return "n/a (" + "; ".join(f"{name}: {why}" for name, why in sorted(unmet.items())) + ")"


# --------------------------------------------------------------------------------------------------
# Correctness gate, then timing
# --------------------------------------------------------------------------------------------------

def gate(contenders: dict, check, measure, tolerance: float) -> dict[str, dict]:
    """Each contender (name -> anything `check` / `measure` take) is checked first: check(c) gives its
    relative error or raises; only one within `tolerance` is measured (measure(c) -> ms). Returns name ->
    {"rel_err", "ms"} or {"rel_err", "wrong": text} or {"error": text}."""
    out = {}
    for name, c in contenders.items():
        try:
            err = float(check(c))
        except Exception as e:                                          # report, keep going
            out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        if not err <= tolerance:                                        # NaN / inf too
            out[name] = {"rel_err": err, "wrong": f"wrong (rel err {err:.1e} > {tolerance:.0e})"}
            continue
        try:
            out[name] = {"rel_err": err, "ms": float(measure(c))}
        except Exception as e:                                          # report, keep going
            out[name] = {"rel_err": err, "error": f"timing: {type(e).__name__}: {e}"[:300]}
    return out


def fastest(results: dict[str, dict]) -> str | None:
    timed_ok = {name: r["ms"] for name, r in results.items() if "ms" in r and r["ms"] == r["ms"]}
    return min(timed_ok, key=timed_ok.get) if timed_ok else None


def tolerance(out: str) -> float:
    return TOLERANCE[out]


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

def rate(case: Case, ms) -> float:
    """TFLOP/s (TOPS for integers) of one launch of `ms` milliseconds; NaN without a time."""
    return case.ops / (ms * 1e-3) / 1e12 if ms and ms == ms else float("nan")


def _num(x: float) -> str:
    return "-" if x != x else f"{x:.0f}"


def _ratio(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


# dense peer -> the tilec entry of final_ms it is compared with (like with like; others: "tilec"): cuBLAS fp8
# without fast accumulation promotes its sums into f32, as a `promote=` tile does
PAIRED = {"cuBLAS fp8 no-fast acc": "tilec promoted"}
TILEC_ENTRIES = ("tilec", "tilec promoted")


def summarize(case: Case, row: dict) -> dict:
    """The ratios of one measured row (`row["final_ms"]`: tilec, tilec promoted, cusparselt, dense peers by
    name); each dense peer against its PAIRED tilec entry."""
    fin = row.get("final_ms", {})
    nan = float("nan")
    tilec = fin.get("tilec", nan)
    dense = {name: ms for name, ms in fin.items() if name not in (*TILEC_ENTRIES, "cusparselt")}
    best_dense = min(dense, key=dense.get) if dense else None
    out = {"tilec": rate(case, tilec), "cusparselt": rate(case, fin.get("cusparselt", nan)),
           "dense": {name: rate(case, ms) for name, ms in dense.items()}, "best_dense": best_dense}
    out["tilec_over_dense"] = (dense[best_dense] / tilec) if best_dense and tilec == tilec else nan
    out["tilec_over_cusparselt"] = fin.get("cusparselt", nan) / tilec if tilec == tilec else nan
    paired = {name: fin.get(PAIRED.get(name, "tilec"), nan) for name in dense}
    out["tilec_over_each_dense"] = {name: ms / paired[name] if paired[name] == paired[name] else nan
                                    for name, ms in dense.items()}
    out["tilec_promoted"] = rate(case, fin.get("tilec promoted", nan))
    return out


def markdown_table(rows: list[dict]) -> str:
    """One line per case: tilec (or why not), cuSPARSELt, the dense peers, the two ratios, clocks."""
    head = ("| M×N×K | in → D | tilec example | tilec | cuSPARSELt | dense peers | tilec / best dense "
            "| tilec / cuSPARSELt | rel err | SM clock, power |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for row in rows:
        case = row["case"]
        unit = " (TOPS)" if case.a == "s8" else ""
        s = summarize(case, row)
        if "unavailable" in row:
            tile = row["unavailable"]
        elif "tilec_wrong" in row:
            tile = row["tilec_wrong"]
        else:
            tile = row.get("tilec_tile", "-")
        if row.get("tilec_promoted_tile"):
            tile += f"; promoted: {row['tilec_promoted_tile']} {_num(s['tilec_promoted'])}"
        cs = _num(s["cusparselt"])
        if row.get("cusparselt_config"):
            cs += f" ({row['cusparselt_config']})"
        elif row.get("cusparselt_note"):
            cs = row["cusparselt_note"]
        peers = ", ".join(f"{name} {_num(v)}" for name, v in s["dense"].items()) or row.get("dense_note", "-")
        over = _ratio(s["tilec_over_dense"])
        if len(s["dense"]) > 1:         # e4m3: unpromoted against fast, promoted against no-fast accumulation
            over = " · ".join(f"{_ratio(r)} ({name}{', promoted' if name in PAIRED else ''})"
                              for name, r in s["tilec_over_each_dense"].items())
        err = row.get("tilec_rel_err")
        mhz = row.get("sm_mhz", {})
        clocks = row.get("clocks", "-")
        if "tilec" in mhz or "cusparselt" in mhz:   # the SM clock after each one's timed replays (median)
            clocks = (f"tilec {_num(mhz.get('tilec', float('nan')))} / cuSPARSELt "
                      f"{_num(mhz.get('cusparselt', float('nan')))} MHz; after: {clocks}")
        lines.append(f"| {case.label} | {case.a} → {case.out}{unit} | {tile} | {_num(s['tilec'])} "
                     f"| {cs} | {peers} | {over} | {_ratio(s['tilec_over_cusparselt'])} "
                     f"| {'-' if err is None else f'{err:.1e}'} | {clocks} |")
    return "\n".join(lines)


def jsonable(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        r = {k: v for k, v in row.items() if k != "case"}
        case = row["case"]
        r.update(M=case.m, N=case.n, K=case.k, a=case.a, d=case.out, summary=summarize(case, row))
        out.append(r)
    return _clean(out)


def _clean(x):
    """JSON-ready: NaN / inf as null, anything else unknown as its str."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if x is None or isinstance(x, (int, str, bool)):
        return x
    return str(x)


# --------------------------------------------------------------------------------------------------
# GPU side (torch, the runtime)
# --------------------------------------------------------------------------------------------------

class Timer:
    """Milliseconds per launch of a no-argument callable: compiler/runtime/timing.py's LaunchTimer (a CUDA
    graph of `batch` launches replayed between CUDA events, host launch cost out of the picture for every
    contender alike; back-to-back launches where a capture fails, the reason kept in `how`), with the
    finalists of a case captured once and replayed in every round.

    In the rounds each finalist first runs alone for `warm_ms` (replays not timed), then its timed replays:
    the card is power-capped, and its clock follows the power drawn over the last tens of milliseconds, so
    without it a finalist timed right after a light one (a decode tile at a large shape, a slow peer) ran at
    the clock that one left behind, in up to 18 % less time than the same kernel later in the round. `clock`
    (None: not read) gives the SM clock in MHz after each finalist's timed replays (`clocks`)."""

    def __init__(self, torch, target_ms: float = 3.0, replays: int = 5, warm_ms: float | None = None,
                 clock=None) -> None:
        from compiler.runtime.timing import LaunchTimer

        self.launches = LaunchTimer("torch", torch, target_ms=target_ms)
        self.replays = replays
        self.warm_ms = WARM_MS if warm_ms is None else warm_ms
        self.clock = clock
        self.kept: dict = {}            # key -> (graph or None, batch): the finalists of a case
        self.how: dict[str, str] = {}
        self.clocks: dict[str, list[int]] = {}

    def capture(self, key: str, fn):
        """A closure that reads the next of n copies of its A (`copies`, Ring) is captured a multiple of n
        times: each replay then cycles through every copy, and the launch after a replay reads the copy after
        the last one it read."""
        graph, batch, self.how[key] = self.launches.capture(fn, getattr(fn, "copies", 1))
        return graph, batch

    def replay(self, fn, g, batch: int, replays: int) -> float:
        return statistics.median(self.launches.replay(fn, g, batch) for _ in range(replays))

    def once(self, key: str, fn, replays: int = 3) -> float:
        """Capture, measure, let the graph go (a contender that may not reach the rounds)."""
        g, batch = self.capture(key, fn)
        try:
            return self.replay(fn, g, batch, replays)
        finally:
            del g

    def warm(self, fn, g, batch: int) -> None:
        """Replays, not timed, until `warm_ms` of them have run (the finalist's own power draw sets the clock)."""
        self.launches.warm(fn, g, batch, self.warm_ms)

    def keep(self, key: str, fn) -> float:
        """The finalists: captured once per case, warmed up and replayed in every round."""
        if key not in self.kept:
            self.kept[key] = self.capture(key, fn)
        self.warm(fn, *self.kept[key])
        ms = self.replay(fn, *self.kept[key], self.replays)
        mhz = self.clock() if self.clock else None
        if mhz is not None:
            self.clocks.setdefault(key, []).append(mhz)
        return ms

    def drop(self) -> None:
        self.kept.clear()
        self.how.clear()
        self.clocks.clear()


TORCH_TYPE = {"f16": "float16", "bf16": "bfloat16", "e4m3": "float8_e4m3fn", "s8": "int8", "s32": "int32",
              "f32": "float32"}


def poison(torch, d) -> None:
    if d.dtype.is_floating_point:
        d.fill_(float("nan"))
    else:
        d.fill_(torch.iinfo(d.dtype).min)


def packed_rows(c: Candidate, case: Case) -> tuple[int, int]:
    """Rows of the packed A values and 16-row metadata tiles `c`'s kernel reads for the case: more than M
    where its ABI pads A to whole CTA tiles (a 192-row tile, or CTA pairs, that M is no multiple of)."""
    from compiler.runtime import abi as rabi

    return (rabi.buffer_shape(c.abi, "a_values", case.m, case.k)[0],
            rabi.buffer_shape(c.abi, "a_metadata", case.m, case.k)[0])


def operands(torch, case: Case, seed: int, rows: int | None = None):
    """Dense 2:4 A (M x K), its packing for `rows` >= M rows (the padding rows random 2:4 too: legal
    metadata; a kernel reads them and never writes their D rows), B^T (N x K), the f32 reference A @ B."""
    dt = getattr(torch, TORCH_TYPE[case.a])
    dense, vals, meta = sparse_operands(torch, rows or case.m, case.k, dt, seed=seed)
    dense = dense[:case.m]
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    if dt.is_floating_point:
        bt = (torch.rand((case.n, case.k), device="cuda", generator=g) * 2 - 1).to(dt)
    else:
        bt = torch.randint(-8, 9, (case.n, case.k), device="cuda", generator=g).to(dt)
    ref = dense.float() @ bt.float().t()
    return dense, vals, meta, bt, ref


# Every launch of the timing reads an A (the sparse operand: a model's weights) that the L2 does not hold, as
# in a model, whose layers' weights go through the L2 one GEMM at a time: where A is smaller than
# COLD_L2_FACTOR x the L2, the launches rotate through copies of it that together are that large (--warm-l2:
# one A, which stays in the L2 from launch to launch as far as it fits). On the H200 (50 MB of L2) the e4m3
# decode cases' A (40 MB with its metadata) had been half in the L2 from the launch before.
COLD_L2_FACTOR = 3


class Ring:
    """Copies of an operand, handed out in turn: a CUDA graph captured from a closure that takes next()
    launches on copy 0, 1, .., n - 1, 0, .. (the capture records the launches in that order)."""

    def __init__(self, items) -> None:
        self.items, self.at = list(items), -1

    def next(self):
        self.at = (self.at + 1) % len(self.items)
        return self.items[self.at]

    def __len__(self) -> int:
        return len(self.items)


def l2_bytes(torch) -> int | None:
    """The device's L2 size (None where torch does not say)."""
    try:
        return int(torch.cuda.get_device_properties(0).L2_cache_size) or None
    except Exception:                                                  # a stand-in torch, an old one
        return None


def copies_for(nbytes: int, l2: int | None, warm_l2: bool = False) -> int:
    """How many copies of an A of `nbytes` the launches rotate through (COLD_L2_FACTOR)."""
    if warm_l2 or not l2 or not nbytes or nbytes >= COLD_L2_FACTOR * l2:
        return 1
    return math.ceil(COLD_L2_FACTOR * l2 / nbytes)


def ring_of(tensors, copies: int) -> Ring:
    """Ring of `copies` of a tuple of tensors (the first the tensors themselves, the others clones)."""
    return Ring([tensors] + [tuple(t.clone() for t in tensors) for _ in range(copies - 1)])


def cycling(fn, ring: Ring):
    """`fn` (a launch that reads ring.next()) marked with the ring's length, so that Timer captures it a
    multiple of that many times."""
    fn.copies = len(ring)
    return fn


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def tilec_contenders(torch, case: Case, chosen: list[Candidate], vals, meta, bt, d, copies: int = 1,
                     programmatic: bool = True) -> dict:
    """name -> launch closure of each chosen tile (the runtime's Kernel; packed A shared; a tile that reads
    C gets zeros in C's type, made once here, so that it computes D = A*B too and no launch allocates);
    with `copies` > 1 each launch reads the next of that many copies of the packed A (Ring).
    `programmatic`: the runtime's default, programmatic dependent launch where the kernel's ABI allows it
    (each launch may start while the one before it finishes); False: plain launches (`--no-pdl`)."""
    from compiler.runtime import Kernel, SparseA

    out, zeros = {}, {}
    layouts = {}                  # the metadata in each layout a chosen kernel's ABI names, made once here
    for c in chosen:
        kernel = getattr(c, "kernel", None)
        if kernel is None:
            kernel = c.kernel = Kernel(c.abi, c.target, ptx=c.result.ptx, tile=c.tile)
        kernel.programmatic = programmatic and bool(c.abi.get("programmatic_launch"))
        value_rows, meta_tiles = packed_rows(c, case)
        lanes = tuple(c.abi["buffers"].get("a_metadata", {}).get("lanes", ()))
        if lanes not in layouts:  # 32-lane (sparse_operands') or compact (the wgmma kernel, 16-bit A)
            packed = (vals, abi_metadata(c.abi, meta) if lanes else meta)
            layouts[lanes] = ring_of(packed, copies).items
        a = Ring(SparseA(v[:value_rows], m[:meta_tiles], case.a, case.m, case.k) for v, m in layouts[lanes])
        b, zero = bt.t(), None
        if c.reads_c:
            element = c.abi["buffers"]["c"]["element"]
            if element not in zeros:
                zeros[element] = torch.zeros((case.m, case.n), device="cuda", dtype=getattr(torch, TORCH_TYPE[element]))
            zero = zeros[element]
        out[c.name] = cycling(lambda kernel=kernel, a=a, b=b, zero=zero: kernel(a.next(), b, zero, out=d), a)
    return out


def cusparselt(torch, case: Case, dense, bt, note: list, max_algs: int, warm_l2: bool = False) -> dict:
    """name -> launch closure of every cuSPARSELt configuration worth timing: the searched alg id and
    every alg id below get_max_alg_id() (at most `max_algs` of them), for both B layouts; each is checked
    before the caller times it. Each launch reads the next copy of the compressed A (copies_for)."""
    try:
        a_c = torch._cslt_compress(dense)
    except Exception as e:                                             # report, keep going
        note.append(f"no cuSPARSELt: {type(e).__name__}: {str(e)[:160]}")
        return {}
    # out_dtype only where D's type is not A's (e4m3 -> bf16, s8 -> s32): f16 / bf16 give their own
    out_dtype = getattr(torch, TORCH_TYPE[case.out]) if case.out != case.a else None
    layouts = {"view": bt.t(), "contig": bt.t().contiguous()}
    max_alg = None
    try:
        max_alg = torch.backends.cusparselt.get_max_alg_id()
    except Exception:                                                  # older torch: the search alone
        pass
    algs: dict[str, set] = {}
    for tag, b in layouts.items():
        ids = set(range(min(int(max_alg), max_algs))) if isinstance(max_alg, int) and max_alg > 0 else set()
        try:
            found = torch._cslt_sparse_mm_search(a_c, b, out_dtype=out_dtype)
            ids.add(int(found[0] if isinstance(found, (tuple, list)) else found))
        except Exception as e:                                         # report, keep going
            note.append(f"search ({tag}): {type(e).__name__}: {str(e)[:120]}")
        algs[tag] = ids or {0}
    out = {}
    ring = ring_of((a_c,), copies_for(_nbytes(a_c), l2_bytes(torch), warm_l2))
    for tag, b in layouts.items():
        for alg in sorted(algs[tag]):
            out[f"alg {alg}, B {tag}"] = cycling(lambda b=b, alg=alg: torch._cslt_sparse_mm(
                ring.next()[0], b, out_dtype=out_dtype, alg_id=alg), ring)
    out["_keep"] = (ring, layouts)
    return out


def dense_peers(torch, case: Case, dense, bt, warm_l2: bool = False) -> dict[str, dict]:
    """peer name -> {layout tag: launch closure}: cuBLAS in the case's types; each launch reads the next copy
    of the dense A (copies_for)."""
    b_view = bt.t()
    a = ring_of((dense,), copies_for(_nbytes(dense), l2_bytes(torch), warm_l2))
    if case.a in ("f16", "bf16"):
        b_cont = b_view.contiguous()
        return {"cuBLAS": {"view": cycling(lambda: torch.mm(a.next()[0], b_view), a),
                           "contig": cycling(lambda: torch.mm(a.next()[0], b_cont), a)}}
    if case.a == "e4m3":
        one = torch.ones((), device="cuda", dtype=torch.float32)
        peers = {}
        for fast in (True, False):
            peers[f"cuBLAS fp8 {'fast' if fast else 'no-fast'} acc"] = {
                "view": cycling(lambda fast=fast: torch._scaled_mm(a.next()[0], b_view, scale_a=one, scale_b=one,
                                                                   out_dtype=torch.bfloat16, use_fast_accum=fast), a)}
        return peers
    b_cont = b_view.contiguous()
    return {"cuBLAS int8": {"view": cycling(lambda: torch._int_mm(a.next()[0], b_view), a),
                            "contig": cycling(lambda: torch._int_mm(a.next()[0], b_cont), a)}}


def checker(torch, ref, d=None):
    """check(fn): run once (into the poisoned D when given, else the returned tensor), relative error."""
    def check(fn):
        if d is not None:
            poison(torch, d)
        got = fn()
        torch.cuda.synchronize()
        return rel_err(torch, d if d is not None else got, ref)
    return check


FINALISTS = 3               # tilec tiles of a case (and promoted ones) that go from the screening to the rounds
# ... those screened within this factor of the fastest: a tile several times slower (a decode tile at 8192^3)
# cannot win the rounds, and it costs them time
FINALIST_MARGIN = 1.5
# each finalist's untimed replays before its timed ones in every round (Timer). Measured on the H200 (700 W
# cap; docs/measurements.md "Power-capped clocks and the rounds"): after idle or a light kernel, an e4m3
# 8192^3 kernel ran 18 % faster for the first ~40 ms, and settled after ~80 ms
WARM_MS = 150.0
FINALIST = "tilec finalist "  # their keys in the rounds (the winner's becomes "tilec")
PROMOTED_FINALIST = "tilec promoted finalist "      # (the winner's becomes "tilec promoted")


def shortlist(results: dict[str, dict], count: int, margin: float = FINALIST_MARGIN) -> list[str]:
    """The names `gate` timed, fastest first, at most `count` (at least one), each within `margin` times
    the fastest's screening."""
    timed = sorted((name for name, r in results.items() if "ms" in r and r["ms"] == r["ms"]),
                   key=lambda name: results[name]["ms"])
    return [name for name in timed[:max(1, count)] if results[name]["ms"] <= margin * results[timed[0]]["ms"]]


def settle(row: dict, entry: str, prefix: str, listed: str) -> str | None:
    """After the rounds: the finalist (keys `prefix` + name) with the lowest median becomes `entry` of
    final_ms / rounds_ms / timing / sm_mhz, every finalist's median goes to row[listed + "_ms"], and the others'
    rounds are dropped. Returns its name, or None where there were no such finalists."""
    medians = {key[len(prefix):]: row["final_ms"].pop(key) for key in list(row["final_ms"]) if key.startswith(prefix)}
    if not medians:
        return None
    row[listed + "_ms"] = medians
    best = min(medians, key=lambda name: (medians[name], row[listed].index(name)))
    row["final_ms"][entry] = medians[best]
    row["rounds_ms"][entry] = row["rounds_ms"].pop(prefix + best)
    row["timing"][entry] = row["timing"].pop(prefix + best)
    mhz = row.setdefault("sm_mhz", {})
    if prefix + best in mhz:
        mhz[entry] = mhz[prefix + best]
    for name in medians:
        row["rounds_ms"].pop(prefix + name, None)
        row["timing"].pop(prefix + name, None)
        mhz.pop(prefix + name, None)
    return best


def run_case(torch, case: Case, candidates: list[Candidate], args, timer: Timer) -> dict:
    row: dict = {"case": case}
    chosen, unmet = select(candidates, case)
    row["tilec_unmet"] = unmet
    rows = max([case.m] + [max(packed_rows(c, case)[0], 16 * packed_rows(c, case)[1]) for c in chosen])
    dense, vals, meta, bt, ref = operands(torch, case, seed=case.m + case.n + case.k, rows=-(-rows // 16) * 16)
    tol = tolerance(case.out)
    final: dict[str, object] = {}
    warm_l2 = getattr(args, "warm_l2", False)
    copies = copies_for(_nbytes(vals, meta) if vals is not None else 0, l2_bytes(torch), warm_l2)
    row["a_copies"] = copies
    row["tilec_launch"] = "plain" if getattr(args, "no_pdl", False) else "programmatic (PDL) where the ABI allows"
    # tilec: every runnable example, checked then timed; the fastest to the rounds
    if not chosen:
        row["unavailable"] = unavailable(case, unmet)
    else:
        res, runs = {}, {}
        for d_type in dict.fromkeys(c.d_type for c in chosen):      # one D per output type, poisoned per check
            group = [c for c in chosen if c.d_type == d_type]
            d = torch.empty((case.m, case.n), device="cuda", dtype=getattr(torch, TORCH_TYPE[d_type]))
            group_runs = tilec_contenders(torch, case, group, vals, meta, bt, d, copies,
                                          not getattr(args, "no_pdl", False))
            res.update(gate(group_runs, checker(torch, ref, d), lambda fn: timer.once("tilec", fn), tolerance(d_type)))
            runs.update(group_runs)
        row["tilec"] = res
        unlike = {c.name: c.unlike(case) for c in chosen}
        # the screening's fastest few go to the rounds, where the rest of the case runs interleaved with them:
        # one screening replay per tile meets the GPU at whatever clock its power state gives (the first
        # tiles screened run on a cooler card), so its order alone can name a tile that loses in the rounds
        count = getattr(args, "finalists", FINALISTS)
        promoted = {c.name for c in chosen if c.promoted}
        promoted_finalists = shortlist({name: r for name, r in res.items()
                                        if name in promoted and unlike[name] is None}, count)
        if promoted_finalists:             # like with like: PAIRED with cuBLAS fp8 without fast accumulation
            row["tilec_promoted_finalists"] = promoted_finalists
            for name in promoted_finalists:
                final[f"{PROMOTED_FINALIST}{name}"] = runs[name]
            res = {name: r for name, r in res.items() if name not in promoted}
        like = {name: r for name, r in res.items() if unlike[name] is None}
        finalists = shortlist(like if fastest(like) else res, count)
        if finalists:
            row["tilec_finalists"] = finalists
            for name in finalists:
                final[f"{FINALIST}{name}"] = runs[name]
        else:
            row["tilec_wrong"] = "; ".join(f"{name}: {r.get('wrong') or r.get('error')}" for name, r in res.items())
    # cuSPARSELt: every configuration checked, timed; the fastest to the rounds
    note: list[str] = []
    cs = cusparselt(torch, case, dense, bt, note, args.cslt_max_algs, warm_l2)
    keep = cs.pop("_keep", None)
    if cs:
        res = gate(cs, checker(torch, ref), lambda fn: timer.once("cusparselt", fn), tol)
        row["cusparselt"] = res
        best = fastest(res)
        if best:
            row["cusparselt_config"] = best
            final["cusparselt"] = cs[best]
        else:
            note.append("no configuration checked and timed")
    if note:
        row["cusparselt_note"] = "; ".join(note)[:300]
    # dense peers: each layout checked, timed; the faster layout to the rounds
    row["dense"] = {}
    for peer, layouts in dense_peers(torch, case, dense, bt, warm_l2).items():
        res = gate(layouts, checker(torch, ref), lambda fn: timer.once(peer, fn), tol)
        row["dense"][peer] = res
        best = fastest(res)
        if best:
            final[peer] = layouts[best]
    # rounds: the finalists back to back, so that clock and power drift hits them alike
    rounds: dict[str, list[float]] = {name: [] for name in final}
    for name in round_order(list(final), args.rounds):
        rounds[name].append(timer.keep(name, final[name]))
    row["rounds_ms"] = {name: sorted(v) for name, v in rounds.items()}
    row["final_ms"] = {name: statistics.median(v) for name, v in rounds.items() if v}
    row["timing"] = {key: timer.how.get(key) for key in final}
    row["sm_mhz"] = {key: statistics.median(v) for key, v in timer.clocks.items() if v}
    best = settle(row, "tilec", FINALIST, "tilec_finalists")
    if best:
        row["tilec_tile"] = best + (f" ({unlike[best]})" if unlike[best] else "")
        row["tilec_rel_err"] = row["tilec"][best]["rel_err"]
    best = settle(row, "tilec promoted", PROMOTED_FINALIST, "tilec_promoted_finalists")
    if best:
        row["tilec_promoted_tile"] = best
        row["tilec_promoted_rel_err"] = row["tilec"][best]["rel_err"]
    row["clocks"] = gpu_state()
    del keep
    timer.drop()
    return row


def round_order(names: list[str], rounds: int) -> list[str]:
    """The entries of every round in turn: round r starts at entry r * len / rounds, and odd rounds run
    backwards, so an entry follows different ones from round to round (a rotation alone keeps each entry's
    predecessor in every round but the one it opens)."""
    out = []
    for r in range(rounds):
        shift = r * len(names) // max(1, rounds)
        order = names[shift:] + names[:shift]
        out += order[::-1] if r % 2 else order
    return out


def _listed(c: Candidate, case: Case) -> str:
    how = c.unlike(case)
    return f"{c.name} ({how})" if how else c.name


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:             # its parent package is missing
        return False


def milliseconds(text: str) -> float:
    """--warm-ms: a finite, non-negative number (argparse's error and exit status 2 otherwise)."""
    try:
        ms = float(text)
    except ValueError:
        ms = float("nan")
    if not 0 <= ms < float("inf"):
        raise argparse.ArgumentTypeError(f"expected milliseconds >= 0, got {text!r}")
    return ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4096^3, 8192^3 and 8192x256x8192 (and s8 8192^3)")
    ap.add_argument("--shapes", help="comma-separated MxNxK or cube sizes (default: every shape)")
    ap.add_argument("--types", default="f16,bf16,e4m3,s8", help="input types (f16, bf16, e4m3, s8)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the final comparison")
    ap.add_argument("--finalists", type=int, default=FINALISTS,
                    help="tilec tiles per case that go from the screening (one replay each) to the rounds")
    ap.add_argument("--warm-ms", type=milliseconds, default=WARM_MS,
                    help="each finalist's untimed replays (ms) before its timed ones, in every round")
    ap.add_argument("--warm-l2", action="store_true",
                    help="one copy of A for all launches (default: copies that together are 3x the L2: cold weights)")
    ap.add_argument("--no-pdl", action="store_true",
                    help="launch tilec's kernels plainly (default: programmatic dependent launch where the kernel "
                         "allows it, as compiler.runtime does: a launch may start while the one before it ends)")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no further case starts")
    ap.add_argument("--cslt-max-algs", type=int, default=32, help="cuSPARSELt alg ids timed besides the searched one")
    ap.add_argument("--list", action="store_true", help="only say which example runs which case (no GPU)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    shapes = parse_shapes(args.shapes) if args.shapes else (QUICK_SHAPES if args.quick else SHAPES)
    todo = cases(shapes, [t.strip() for t in args.types.split(",")])
    t0 = time.time()
    needs = {"lark": "lark (the DSL's parser; tests/gpu/run_on_device.sh installs it from the .whl/ wheelhouse)"}
    if not args.list:
        needs.update({"torch": "torch",
                      "cuda.core": "cuda-core and cuda-bindings (compiler.runtime's launches: tilec[gpu])"})
    missing = [what for module, what in needs.items() if not _importable(module)]
    if missing:
        print("benchmarks/sparse_gemm.py needs " + "; ".join(missing), file=sys.stderr)
        return 2
    candidates, skipped = discover()
    print(f"examples: {len(candidates)} tiles time cases ({', '.join(c.name for c in candidates)}); "
          f"{len(skipped)} left out", flush=True)
    if args.list:
        for why in sorted(skipped.items()):
            print(f"  left out {why[0]}: {why[1]}")
        for case in todo:
            chosen, unmet = select(candidates, case)
            print(f"  {case.label} {case.a} -> {case.out}: "
                  f"{', '.join(_listed(c, case) for c in chosen) if chosen else unavailable(case, unmet)}")
        return 0

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    sm = dev.major * 10 + dev.minor
    if sm != 90:
        candidates, skipped = discover(sm=sm)
    print(f"device {dev.name}, {dev.multi_processor_count} SMs, torch {torch.__version__}; {gpu_state()}", flush=True)
    check_packer(torch, "cuda", ("f16", "bf16", "e4m3", "s8"))
    print("GPU packer == compiler.sparse.compress (f16, bf16, e4m3, s8)", flush=True)
    timer = Timer(torch, warm_ms=args.warm_ms, clock=sm_clock_mhz)
    rows, left = [], []
    for case in todo:
        if time.time() - t0 > args.budget:
            left.append(f"{case.label} {case.a}")
            continue
        try:
            row = run_case(torch, case, candidates, args, timer)
        except Exception as e:                                          # report, keep going
            row = {"case": case, "unavailable": f"failed: {type(e).__name__}: {str(e)[:200]}"}
            timer.drop()
        rows.append(row)
        s = summarize(case, row)
        what = row.get("tilec_tile") or row.get("unavailable") or row.get("tilec_wrong", "-")
        print(f"  {case.label} {case.a} -> {case.out}: tilec {what} "
              f"{_num(s['tilec'])}, cuSPARSELt {_num(s['cusparselt'])}, "
              + ", ".join(f"{k} {_num(v)}" for k, v in s["dense"].items())
              + f"; x{_ratio(s['tilec_over_dense'])} dense, x{_ratio(s['tilec_over_cusparselt'])} cuSPARSELt; "
              f"{row.get('clocks', '')} ({time.time() - t0:.0f} s)", flush=True)
        torch.cuda.empty_cache()
    print(f"\n{dev.name}, {time.time() - t0:.0f} s; TFLOP/s (s8: TOPS) = 2MNK / time, dense-equivalent; "
          f"median of {args.rounds} interleaved rounds, each the median of CUDA-graph replays\n")
    print(markdown_table(rows))
    if left:
        print(f"\nbudget of {args.budget:.0f} s spent; not started: {', '.join(left)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev.name, "torch": torch.__version__,
                                               "examples_left_out": skipped, "not_started": left,
                                               "rows": jsonable(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
