"""The legal schedules of a whole-GEMM mma.sp tile, and a cheap ranking of them for one problem size
(what `tilec tune` searches: compiler/tune.py).

The two whole-GEMM kernels are the pipelined warp-level mma.sp GEMM (compiler/ptx/sparse_gemm_kernel.py,
`schedule ... stages>=2`) and the sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py, `mma=wgmma`).
A tile keeps its kernel family (`mma`); the other schedule fields vary.

Candidates are the product of the rows of AXES: one row per `schedule` field (compiler/spec.py
ScheduleSpec), its candidate values a function of the tile's mma.sp form. A schedule field added to the
DSL becomes searchable by adding its row. The values come from the ISA facts: the N of every
`wgmma.mma_async.sp` shape (compiler/isa/wgmma.py, PTX 9.7.15.6.3 .shape), CTA K as 1, 2 or 4 wgmma
k-steps (which fixes the 32/64/128-byte swizzle of the ring's rows: sparse_wgmma_kernel.Region), the
m16n8 instruction shape of warp-level mma.sp (9.7.14.6) for the warp tiles.

Legality is the kernels' own, with no copy of any rule here: each candidate becomes the configuration
that kernel-selection builds for it (emission._select_mma_sp with the candidate schedule) and must pass
that kernel's check_config (accumulator registers, TMA box, ring stages against the target's shared
memory per block, cluster halves, ...). What check_config cannot see (verify's rules, the MMA unrolling
budget of compiler/passes/limits.py, the sizes the kernel takes) the real compile of each candidate
tried decides (compiler/tune.py).

The ranking (estimate_cycles) is a deliberately small throughput model used only to order the search:
whole waves of CTAs over the SMs, per K block the slowest of tensor-core work, operand bytes into
shared memory (plus a fixed cost per block: its barrier round), shared-memory traffic (the warp-level kernel's fragment reads; the wgmma kernel's operand
reads and the copy engine's writes), and the copy latency the ring's stages do not hide (stream-K: the
data-parallel tiles' whole waves, then each CTA its equal share of the other tiles' K blocks, plus the
partial tiles' workspace round trip). Its constants are round
figures for a Hopper SM, not measurements (but BLOCK_LOAD_CYCLES, derived from two measured pairs of
tiles); the timings of `tilec tune` decide. `ranked` shows one ring
depth per tile shape first where the depths' estimates tie.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields, replace
from typing import Any

from ..bits import is_pow2
from ..diagnostics import SpecError
from ..isa.mma_sp.forms import SHAPE_M, SHAPE_N
from ..isa.wgmma import WG_THREADS, WGMMA_M, WGMMA_SP_FORMS
from ..passes.limits import MAX_SCHEDULE_STAGES
from ..spec import SPLIT_K_STREAM, ScheduleSpec
from .sparse_wgmma_kernel import MAX_CONSUMERS

WHOLE_GEMM_KERNELS = ("sparse_gemm", "sparse_wgmma")


@dataclass(frozen=True)
class Axis:
    """One `schedule` field and its candidate values for a tile of mma.sp form `form`."""
    field: str
    values: Callable[[Any], Sequence[Any]]


def _powers_between(lo: int, hi: int) -> tuple[int, ...]:
    """The powers of two in [lo, hi]."""
    return tuple(v for v in range(lo, hi + 1) if is_pow2(v))


STAGES = tuple(range(2, 9))      # the warp-level cp.async pipeline takes 2..8 stages (its check_config)
# the wgmma TMA ring takes 2..MAX_SCHEDULE_STAGES (16): past 8 the search steps by 2 (a decode tile's depth
# is bounded by shared memory first; 9..16 in steps of 1 would add 8 rows for a few percent of difference)
WGMMA_STAGES = STAGES + tuple(range(10, MAX_SCHEDULE_STAGES + 1, 2))
MAX_CTA_MN = 256                 # the search's bound on CTA M and N (the wgmma kernel's TMA box bound too)

AXES: dict[str, tuple[Axis, ...]] = {
    # wgmma: 4, 8 or 12 consumer warps (1 to 3 warpgroups: sparse_wgmma_kernel.MAX_CONSUMERS) of 64 or 128
    # rows each (CTA M 64, 128, 192 or 256; the registers each takes, setmaxnreg's split included, are
    # check_config's); N any wgmma .shape N; K 1, 2 or 4 k-steps; CTA pairs sharing B (cluster=2) or not.
    "sparse_wgmma": (
        Axis("warps_m", lambda form: tuple(4 * c for c in range(1, MAX_CONSUMERS + 1))),
        Axis("warps_n", lambda form: (1,)),
        Axis("cta_m", lambda form: (WGMMA_M, 2 * WGMMA_M, 3 * WGMMA_M, 4 * WGMMA_M)),
        Axis("cta_n", lambda form: WGMMA_SP_FORMS[form.a_type].n_values),
        Axis("cta_k", lambda form: tuple(form.k * s for s in (1, 2, 4))),
        Axis("stages", lambda form: WGMMA_STAGES),
        Axis("cluster", lambda form: (1, 2)),
        Axis("persistent", lambda form: ("none", "static")),
        Axis("split_k", lambda form: (1, 2, 4, 8, SPLIT_K_STREAM)),
    ),
    # warp-level mma.sp: power-of-two warp grids and CTA tiles (multiples of the m16n8 instruction
    # tile times the warps, check_config), K 1, 2, 4 or 8 k-steps.
    "sparse_gemm": (
        Axis("warps_m", lambda form: _powers_between(1, 16)),
        Axis("warps_n", lambda form: _powers_between(1, 16)),
        Axis("cta_m", lambda form: _powers_between(SHAPE_M, MAX_CTA_MN)),
        Axis("cta_n", lambda form: _powers_between(SHAPE_N, MAX_CTA_MN)),
        Axis("cta_k", lambda form: tuple(form.k * s for s in (1, 2, 4, 8))),
        Axis("stages", lambda form: STAGES),
    ),
}


# ScheduleSpec fields a kernel's search keeps as the tile writes them, and why.
_KEPT = {"mma": "the kernel family is the tile's choice",
         "raster": "the L2 order of tiles: the estimate cannot tell rasters apart",
         "promote": "fp8 accumulation every N K blocks is an accuracy choice, not a speed one",
         "accumulators": "TMEM accumulators of tcgen05 tiles; an mma.sp kernel accumulates in registers"}
NOT_SEARCHED: dict[str, dict[str, str]] = {
    "sparse_wgmma": _KEPT,
    "sparse_gemm": {**_KEPT, "cluster": "CTA pairs exist for mma=wgmma only",
                    "persistent": "persistent CTAs exist for mma=wgmma only",
                    "split_k": "split-K exists for mma=wgmma only"},
}


def axes(kernel: str) -> tuple[Axis, ...]:
    """AXES[kernel] less the rows of fields this ScheduleSpec does not have (yet): a row may be added with
    the field's branch still in flight."""
    names = {f.name for f in fields(ScheduleSpec)}
    return tuple(a for a in AXES[kernel] if a.field in names)


def _checker(kernel: str) -> Callable[[Any], Any]:
    if kernel == "sparse_wgmma":
        from .sparse_wgmma_kernel import check_config
    else:
        from .sparse_gemm_kernel import check_config
    return check_config


@dataclass(frozen=True)
class Candidate:
    schedule: ScheduleSpec
    config: Any                       # the kernel's configuration dataclass


def schedule_words(s: ScheduleSpec) -> str:
    """The `schedule` statement's arguments as the DSL writes them (compiler/spec_printer.py)."""
    from ..spec_printer import schedule_statement

    return schedule_statement(s).removeprefix("schedule ").removesuffix(";")


def tile_kernel(view, module) -> str | None:
    """The whole-GEMM kernel a compiled tile uses ("sparse_gemm" | "sparse_wgmma"), or None."""
    op = view.ir.op("tilec.kernel")
    kernel = op.attrs.get("kernel") if op is not None else None
    return kernel if kernel in WHOLE_GEMM_KERNELS else None


def legal_schedules(view, module) -> list[Candidate]:
    """Every schedule of the product of AXES[kernel] that keeps the tile on its kernel and passes the
    kernel's check_config, in a fixed order (the product's). `view`: the tile of a compiled module
    (CompileResult.tiles[name]); its own schedule is among them when it is in the product."""
    from .emission import _select_mma_sp

    kernel = tile_kernel(view, module)
    if kernel is None:
        return []
    form, base = view.facts["form"], view.payload.schedule
    rows = axes(kernel)
    check = _checker(kernel)
    out: list[Candidate] = []
    # A schedule refused at some ring depth is refused at every deeper one: what the kernel selection and
    # check_config refuse besides the ring (registers, TMA box, cluster halves, ...) does not depend on the
    # stages, and the ring's shared memory only grows with them (the persistent kernel's D region shrinks to
    # what fits, down to none). The product visits each schedule's depths in ascending order (stages is an
    # outer axis to cluster, persistent and split_k), so the first refusal ends that schedule's search; a
    # slow test compares this with the full product.
    refused_from: dict[tuple, int] = {}         # the schedule but its stages -> the least depth refused
    for values in itertools.product(*(a.values(form) for a in rows)):
        words = dict(zip((a.field for a in rows), values))
        if not _plausible(kernel, words, form):
            continue
        rest = tuple((f, v) for f, v in words.items() if f != "stages")
        if words["stages"] >= refused_from.get(rest, words["stages"] + 1):
            continue
        schedule = replace(base, **words)
        try:
            chosen, config = _select_mma_sp(view, module, schedule)
            if chosen != kernel:
                continue
            check(config)
        except SpecError:
            refused_from[rest] = words["stages"]
            continue
        out.append(Candidate(schedule, config))
    return out


def _plausible(kernel: str, w: dict, form) -> bool:
    """Cheap necessary conditions that spare check_config most of the product (each is implied by a
    check_config rule: a CTA dimension that is a whole number of instruction tiles per warp, at most
    1024 threads; check_config still decides)."""
    if kernel == "sparse_gemm":
        return (w["cta_m"] % (SHAPE_M * w["warps_m"]) == 0 and w["cta_n"] % (SHAPE_N * w["warps_n"]) == 0
                and w["warps_m"] * w["warps_n"] <= 32)
    # each consumer warpgroup (4 warps) takes 1 or 2 m64 blocks of rows; stream-K CTAs are persistent whatever
    # persistent= says: one candidate (persistent=none), not two
    return w["warps_m"] % 4 == 0 and w["cta_m"] in (WGMMA_M * w["warps_m"] // 4, 2 * WGMMA_M * w["warps_m"] // 4) \
        and not (w.get("split_k") == SPLIT_K_STREAM and w.get("persistent") == "static")


# ---- ranking -----------------------------------------------------------------------------------------

SMEM_PER_SM = 233472           # bytes of shared memory an sm_90 SM holds (228 KB)
THREADS_PER_SM = 2048
TENSOR_FLOPS_PER_CYCLE = 8192  # dense-equivalent 16-bit 2:4 flops per SM and cycle (twice dense's 4096)
L2_BYTES_PER_CYCLE = 32        # operand bytes an SM receives per cycle (L2 bandwidth shared by all SMs)
SMEM_BYTES_PER_CYCLE = 128     # shared-memory bytes an SM reads or writes per cycle (ldmatrix, wgmma, TMA)
COPY_LATENCY = 1000            # cycles from a K block's copy to its data in shared memory
ISSUE_CYCLES = 32              # least cycles of one MMA instruction (small N does not fill the pipe)
# cycles each K block adds to its loads, whatever its size: the producer's round (empty-barrier wait,
# expect_tx, one TMA per operand) and the consumers' release. Derived from two pairs of tiles that differ only
# in the K block, both bound by reading A: e4m3 8192x256x8192, 128 x 128 CTA pairs, 64 blocks of 128 took
# 27.6 us and 32 blocks of 256 25.5 us (H200 at ~1.5 GHz: 2.1 us / 32 blocks = ~100 cycles a block); f16 at
# the same shape, 128 blocks of 64 51 us and 64 of 128 46 us (H100 at ~1.75 GHz: ~135 cycles)
BLOCK_LOAD_CYCLES = 100


def estimate_cycles(kernel: str, config, form, m: int, n: int, k: int, sms: int) -> float:
    """Estimated cycles of an M x N x K problem on `sms` SMs (module docstring): lower ranks first."""
    c = config
    a_bits = form.layout.storage_bits
    rate = TENSOR_FLOPS_PER_CYCLE * 16 // a_bits
    cluster = getattr(c, "cluster_m", 1)
    split = getattr(c, "split_k", 1)            # K slices, one CTA each (or stream-K, below)
    stream = split == SPLIT_K_STREAM
    split = 1 if stream else split
    tiles = -(-m // c.cta_m) * -(-n // c.cta_n) * split
    per_sm = max(1, min(SMEM_PER_SM // max(1, c.smem_bytes), THREADS_PER_SM // c.threads))
    if kernel == "sparse_wgmma":    # its .maxnreg hands one CTA the whole register file (ABI max_ctas_per_sm)
        per_sm = 1
    waves = -(-tiles // (sms * per_sm))
    k_blocks = -(-k // (c.cta_k * split))
    flops = 2 * c.cta_m * c.cta_n * c.cta_k
    if kernel == "sparse_wgmma":
        instrs = c.consumers * c.m_blocks * c.ksteps
        mma = max(flops / rate, instrs * ISSUE_CYCLES / c.consumers)
        # every wgmma reads its B (cta_n rows) and its 64 rows of A from shared memory, and the copy engine
        # writes the block's A, B and metadata there: at the 2:4 rate B alone nearly fills the port, so the
        # tile shape sets how far below it the MMAs run (sparse_wgmma_kernel's A/B_STEP_ROW_BYTES: a k-step's
        # bytes of one row)
        from .sparse_wgmma_kernel import A_STEP_ROW_BYTES, B_STEP_ROW_BYTES

        smem_read = (instrs * (c.cta_n * B_STEP_ROW_BYTES + WGMMA_M * A_STEP_ROW_BYTES) + c.stage_tx_bytes) / \
            SMEM_BYTES_PER_CYCLE
    else:
        instrs = c.warps_m * c.warps_n * c.tiles_m * c.tiles_n * c.ksteps
        mma = max(flops / rate, instrs * ISSUE_CYCLES / 4 / min(4, c.warps_m * c.warps_n))
        # ldmatrix: each warp reads its A rows (half of K, compressed) and B columns per block
        smem_read = c.warps_m * c.warps_n * (c.warp_m * c.cta_k // 2 + c.warp_n * c.cta_k) * a_bits / 8 / \
            SMEM_BYTES_PER_CYCLE
    loaded = (c.cta_m * c.cta_k // 2 + c.cta_n * c.cta_k // cluster) * a_bits / 8
    # the bytes of the SM's CTAs queue for its share of L2; their barrier rounds overlap (a latency each)
    load = per_sm * loaded / L2_BYTES_PER_CYCLE + BLOCK_LOAD_CYCLES
    block = max(per_sm * mma, load, per_sm * smem_read, COPY_LATENCY / (c.stages - 1))
    # split-K: every slice writes its f32/s32 partial tile, the last one reads them all back
    reduce = 2 * c.cta_m * c.cta_n * 4 * per_sm / L2_BYTES_PER_CYCLE if split > 1 else 0.0
    if stream:     # the data-parallel tiles in whole waves, then every CTA an equal share of the other tiles'
        ctas = min(tiles * k_blocks, sms * per_sm)      # K blocks; a tile split between CTAs costs its partials'
        dp = (max(tiles // ctas, 1) - 1) * ctas          # round trip (at most 2 per CTA): sparse_wgmma_kernel's
        work = (tiles - dp) * k_blocks                   # stream_split
        share = -(-work // ctas)
        split_tiles = work % ctas or share % k_blocks
        partials = 2 * 2 * c.cta_m * c.cta_n * 4 * per_sm / L2_BYTES_PER_CYCLE if split_tiles else 0.0
        return (dp // ctas * k_blocks + share) * block + partials + COPY_LATENCY
    if getattr(c, "persistent", False):        # a CTA fills its ring once and walks its tiles
        return waves * (k_blocks * block + reduce) + COPY_LATENCY
    return waves * (k_blocks * block + reduce + COPY_LATENCY)


def ranked(candidates: Sequence[Candidate], view, m: int, n: int, k: int, sms: int) -> list[Candidate]:
    """`candidates` best-estimated first. Among schedules that differ only in `stages` and have the same
    estimate (the ring deep enough to hide the copy latency, where the model sees no difference), one ranks
    and the others go after every other candidate, so that a search of the first few tries that many tile
    shapes, not one shape at several depths. The one ranked: the depth that leaves the persistent kernel's D
    staged in the fewest column blocks (sparse_wgmma_kernel's d_col_blocks; stored from the fragments is
    worst), then the deepest. Measured on an H200 (docs/measurements.md): a fourth stage gave 256 x 176 2-10 %
    over three, while a fifth, which cuts D's staging into 4 or 8 column blocks or leaves D unstaged, lost
    2-13 %. Ties: that order, then enumeration order."""
    kernel = tile_kernel(view, None)
    form = view.facts["form"]
    scored = [(estimate_cycles(kernel, c.config, form, m, n, k, sms), i, c) for i, c in enumerate(candidates)]
    def group(est: float, c: Candidate) -> tuple:          # (the schedule but its stages, the estimate)
        return astuple(replace(c.schedule, stages=0)), est

    def preference(c: Candidate) -> tuple:                  # lower first within a group
        return _d_staging_blocks(c.config), -c.schedule.stages

    best: dict[tuple, tuple] = {}
    for est, _, c in scored:
        key = group(est, c)
        best[key] = min(best.get(key, preference(c)), preference(c))
    shadowed = lambda est, c: preference(c) != best[group(est, c)]   # noqa: E731
    return [c for _, _, c in sorted(scored, key=lambda t: (shadowed(t[0], t[2]), t[0], preference(t[2]), t[1]))]


def _d_staging_blocks(config) -> float:
    """The column blocks a persistent wgmma kernel stages D's rows in (1: whole rows; inf: D stored from
    the fragments); 1 for kernels without that choice."""
    if not getattr(config, "persistent", False) or not hasattr(config, "staged_d"):
        return 1
    return config.d_col_blocks if config.staged_d else float("inf")


def search_order(view, module, m: int, n: int, k: int, sms: int) -> list[Candidate]:
    """The order `tilec tune` tries: the tile's own schedule first (the baseline the others are measured
    against), then the other legal schedules best-estimated first."""
    legal = legal_schedules(view, module)
    own = [c for c in legal if c.schedule == view.payload.schedule]
    return own + [c for c in ranked(legal, view, m, n, k, sms) if c.schedule != view.payload.schedule]
