"""`warp-specialization`: the structure of a scheduled tcgen05 GEMM, planned in the IR as `tilec.ws_plan`.

A tcgen05 tile with `schedule cta=MxNxK stages=S [accumulators=1|2]` is compiled into a persistent,
warp-specialised kernel (compiler/ptx/tcgen05_ws_kernel.py). This pass decides, and prints, everything
about its structure that is not an instruction:

- roles: warps 0-3 are the epilogue (warp w reads TMEM lanes 32w..32w+31, the only quarter a warp may
  access, PTX 9.7.16.8.3; warp 0 also allocates and frees TMEM), warp 4 issues the MMAs (one elected
  thread), warp 5 is the TMA producer; 192 threads;
- the smem ring: `stages` slots of one K block (`cta_k` of A and of B, the canonical layouts
  layout-selection chose, each region on the 1024-byte swizzle repeat), the transaction bytes a slot's
  TMA loads complete on its full barrier, then the mbarriers (full[S], empty[S], acc_full[A],
  acc_empty[A]; 8 bytes each, PTX 9.7.13.15.1) and the 4-byte slot tcgen05.alloc writes the TMEM address to;
- TMEM: `accumulators` D regions of `acc_columns` columns each (two where 2 x D fits in the 512 columns of
  a CTA, PTX 9.7.16.1, so the epilogue of tile i overlaps the MMAs of tile i+1; else one, and `why` says
  so), allocated as a power of two >= 32 (9.7.16.7.1);
- the mbarrier arrival counts: full 1 (the producer's arrive.expect_tx; the TMA bytes complete the
  transaction count, 9.7.13.15.2), empty 1 and acc_full 1 (a `tcgen05.commit ... mbarrier::arrive::one`,
  9.7.16.12.1), acc_empty 4 (one arrive per epilogue warp);
- the tile scheduler: static persistent (grid = the SM count; CTA b takes tiles b, b + grid, ...), tiles
  walked along M first (`raster = "m"`: consecutive CTAs share one B tile in L2); or, with
  `schedule ... persistent=clc`, cluster launch control (`scheduler = "clc"`, PTX 9.7.13.17-18): the grid is
  one CTA (pair) per tile, a CTA starts on its own tile (ctaid.x) and then takes the tiles of clusters it
  cancels before they launch. A seventh warp (`sched_warp`, 224 threads) issues the requests: per request it
  waits until slot s of a ring of `clc_stages` 16-byte responses (at `clc_response`) is free (clc_empty[s]),
  arms clc_full[s] (one arrival with expect_tx of 16 bytes; a pair's leader arms both CTAs') and issues
  `clusterlaunchcontrol.try_cancel` (a pair: `.multicast::cluster::all`, the answer lands in both CTAs),
  then reads the answer itself and stops after the first failure. Every role reads each answer from its
  own CTA's slot after waiting clc_full[s] and releases it on the (leader's) clc_empty[s]: the TMA warp,
  the MMA warp (the leader's only, in a pair) and each epilogue warp, one arrival per warp (clc_empty counts
  (1 + epilogue warps) x cluster + 1). Two slots: the producer, at most a tile or so ahead of the epilogue
  (the accumulators and the ring hold it back), rarely waits for an answer, and a CTA never holds more
  than two tiles it canceled while other CTAs may run dry.
- a CTA pair (cta_group::2, cluster=2): the leader's full barrier expects both CTAs' bytes, acc_empty counts
  the epilogue warps of both CTAs (`cluster` = 2).
- per-K-block TMEM operands (sparse metadata, block-scale factors SFA / SFB): each ring slot also holds the
  block's images of them (`cp_operands`, at `cp_smem` in the slot, `cp_bytes` each), which the TMA producer
  loads with A and B (TMA, 16-byte rows, completing on the slot's full barrier) and the MMA warp copies into the
  slot's own TMEM columns with `tcgen05.cp` (PTX 9.7.16.8.2) right before the block's MMAs: metadata with
  `.128x128b` (one 16-byte row per TMEM lane), scale factors with `.32x128b.warpx4` (32 rows copied to all
  four lane quarters, where PTX 9.7.16.10.7 wants every 32-row slice). A copy writes 4 columns, so each
  region is a multiple of 4 columns: an MMA's scale factors start a 4-column group (`sf_group_columns`).
  No thread touches them in registers.
- A in TMEM: each ring slot also holds the block's A, unswizzled (`a_smem`, `a_bytes`), which the MMA warp copies
  into the slot's TMEM columns (`a_region`, after META / SFA / SFB) with one `tcgen05.cp .128x256b` per MMA; the
  TMEM columns (accumulators + `stages` x the slot's columns) must fit the 512 of a CTA, else one accumulator
  (`why`), else a SpecError on the stages.
- `.ws`: the accumulator is the folded data path's N / groups columns (M = 32 / 64, PTX 9.7.16.10.5); a
  collector usage other than ::discard and a zero-column mask's column shift are refused (`check_ws_collector`,
  `check_ws_zero_columns`).
The dynamic shared memory asked for is the ring plus barriers plus 1024 bytes of alignment slack (the
kernel rounds the window's base up to 1024); it must fit the target's per-CTA limit.

`ws_plan(tile)` rebuilds the plan from the printed op, for the emitter and for the resource-plan pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..ir import Op
from ..isa.types import TYPES
from ..isa.tcgen05_forms import CP_GEOMETRY
from . import Pass, PassContext
from .derive import required, tile_spec

THREADS = 192
EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP = 4
TMA_WARP = 5
# tcgen05.cp (PTX 9.7.16.8.2) of the per-K-block TMEM operands: shape and multicast, and the bytes of one copy's
# shared-memory source (rows x 16 B: 128 lanes x 128 bits; 32 rows x 128 bits sent to the four lane quarters)
CP_FORMS = {"META": ("128x128b", None), "SFA": ("32x128b", "warpx4"), "SFB": ("32x128b", "warpx4")}
CP_COLUMNS = 4               # both shapes are 128 bits = 4 TMEM columns wide (isa CP_GEOMETRY)
CP_ALIGN = 128               # a TMA destination is 128-byte aligned (and a tcgen05.cp source 16-byte aligned)
SLOT_ALIGN = 1024            # the 128-byte swizzle repeat: every region on it has base offset 0
MBARRIER_BYTES = 8           # an mbarrier object is a .b64 in shared memory (9.7.13.15.1)
SCHED_WARP = 6               # persistent=clc: the warp that issues clusterlaunchcontrol.try_cancel
CLC_STAGES = 2               # persistent=clc: slots of the response ring (module docstring)
TMEM_SLOT_BYTES = 4          # tcgen05.alloc writes the 32-bit TMEM address (9.7.16.7.1)
TMEM_COLUMNS = 512           # columns of a CTA's Tensor Memory (9.7.16.1)
MAX_STAGES = 8
D_CHUNK_MAX = 32             # D columns per tcgen05.ld / staging chunk
# the TMA swizzle of a staged D row of this many bytes (its box's inner extent, PTX 5.5.6 swizzle modes)
D_SWIZZLE = {128: "128B", 64: "64B", 32: "32B"}


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class WsPlan:
    """The printed plan (module docstring); offsets are bytes from the 1024-aligned ring base."""
    threads: int
    epilogue_warps: tuple[int, ...]
    mma_warp: int
    tma_warp: int
    stages: int
    k_block: int
    stage_bytes: int
    tx_bytes: int
    full: int                  # offset of full[0]; empty[s] at empty + 8s, acc_full / acc_empty alike
    empty: int
    acc_full: int
    acc_empty: int
    tmem_slot: int
    accumulators: int
    acc_columns: int
    tmem_columns: int
    smem_bytes: int            # dynamic shared memory to request (incl. the alignment slack)
    cluster: int = 1           # 2: a CTA pair (cta_group::2); the leader (rank 0) issues the MMAs
    cp_operands: tuple[str, ...] = ()     # per-K-block TMEM operands copied by tcgen05.cp: META, SFA, SFB
    cp_smem: tuple[int, ...] = ()         # their images' offsets in a ring slot
    cp_bytes: tuple[int, ...] = ()        # their images' bytes per slot (what the producer copies)
    tmem_stage: int | None = None         # first TMEM column of slot 0's copied operands
    tmem_stage_columns: int = 0           # columns per slot (slot s at tmem_stage + s * tmem_stage_columns)
    stage_regions: tuple[int, ...] = ()   # metadata, SFA, SFB column offsets within a slot's columns
    sf_group_columns: tuple[int, ...] = ()   # SFA, SFB: columns per 4-byte group (one MMA's factors or less)
    # A in TMEM: each slot holds the block's A rows unswizzled (`a_smem`, `a_bytes`: one 16-byte K chunk of all
    # rows after another), which the MMA thread copies into the slot's TMEM columns at `a_region` (within the
    # slot's columns, after META / SFA / SFB) with tcgen05.cp .128x256b, one copy per MMA (`a_tmem_plan`)
    a_smem: int | None = None
    a_bytes: int = 0
    a_region: int | None = None
    scheduler: str = "static"
    raster: str = "m"
    why: str | None = None     # why one accumulator
    # the epilogue's D staging (registers -> smem -> TMA store): each epilogue warp owns `d_buffers` regions
    # of 32 rows x `d_chunk` columns of D's type (`d_stage_bytes` each, 1024-aligned, swizzled by `d_swizzle`),
    # warp w's buffer b at d_stage + (w * d_buffers + b) * d_stage_bytes
    d_stage: int = 0
    d_stage_bytes: int = 0
    d_buffers: int = 0
    d_chunk: int = 0
    d_swizzle: str = "none"
    # persistent=clc (scheduler "clc"): the scheduler warp and the response ring (responses of 16 bytes at
    # clc_response + 16 s, clc_full[s] at clc_full + 8 s, clc_empty[s] at clc_empty + 8 s)
    sched_warp: int | None = None
    clc_stages: int = 0
    clc_response: int = 0
    clc_full: int = 0
    clc_empty: int = 0

    @property
    def clc(self) -> bool:
        return self.scheduler == "clc"

    def barrier_counts(self) -> dict[str, int]:
        """Arrivals per phase: the leader's MMA commits multicast to both CTAs' empty and acc_full barriers;
        every epilogue warp of the pair arrives on the leader's acc_empty. clc_full: the scheduler's
        arrive.expect_tx (the 16 response bytes complete it); clc_empty: one arrival per reading warp, on the
        leader's barrier (module docstring)."""
        out = {"full": 1, "empty": 1, "acc_full": 1, "acc_empty": len(self.epilogue_warps) * self.cluster}
        if self.clc:
            out.update(clc_full=1, clc_empty=(1 + len(self.epilogue_warps)) * self.cluster + 1)
        return out


_INT_FIELDS = ("threads", "mma_warp", "tma_warp", "stages", "k_block", "stage_bytes", "tx_bytes", "full", "empty",
               "acc_full", "acc_empty", "tmem_slot", "accumulators", "acc_columns", "tmem_columns", "smem_bytes",
               "cluster")


_D_STAGE_FIELDS = ("d_stage", "d_stage_bytes", "d_buffers", "d_chunk", "d_swizzle")
_CLC_FIELDS = ("sched_warp", "clc_stages", "clc_response", "clc_full", "clc_empty")


def ws_plan(tile: Op) -> WsPlan:
    op = required(tile, "tilec.ws_plan", "warp-specialization")
    a = op.attrs
    return WsPlan(epilogue_warps=tuple(a["epilogue_warps"]), scheduler=a["scheduler"], raster=a["raster"],
                  **{f: a[f] for f in _D_STAGE_FIELDS + _CLC_FIELDS if f in a},
                  why=a.get("why"), cp_operands=tuple(a.get("cp_operands", ())), cp_smem=tuple(a.get("cp_smem", ())),
                  cp_bytes=tuple(a.get("cp_bytes", ())), tmem_stage=a.get("tmem_stage"),
                  tmem_stage_columns=a.get("tmem_stage_columns", 0), stage_regions=tuple(a.get("stage_regions", ())),
                  sf_group_columns=tuple(a.get("sf_group_columns", ())), a_smem=a.get("a_smem"),
                  a_bytes=a.get("a_bytes", 0), a_region=a.get("a_region"), **{f: a[f] for f in _INT_FIELDS})


def cp_columns(tile: Op, spec, k_block: int) -> list[tuple[str, int, int]]:
    """(operand, TMEM columns per ring slot, columns per 4-byte scale-factor group or 0) of each per-K-block
    TMEM operand of a scheduled tile, as tcgen05.cp writes them: the block's metadata words (one column
    each, per TMEM lane), rounded up to whole 4-column copies; each 4-byte group of a row's scale-factor
    stream (isa.tmem.ScaleLayout) in its own `slices` columns rounded up to 4 (SFA: 128 rows = 4 slices;
    SFB: N / 32), so a 4-column copy never writes the next group's columns."""
    from ..isa.tcgen05_kinds import mma_k
    from ..isa.tmem import metadata_format
    from .derive import mma_form, scale_layouts

    kind = tile.attrs["kind"]
    form = mma_form(tile)
    steps = k_block // mma_k(kind, spec.sparsity is not None, form.k96)
    out = []
    if spec.sparsity is not None:
        out.append(("META", _align(steps * metadata_format(kind).words_per_mma, CP_COLUMNS), 0))
    scales = scale_layouts(tile, spec, form)
    if scales is not None:
        stream = steps * scales[0].step_bytes
        if stream % 4:
            per = 4 // _gcd(4, scales[0].step_bytes)
            raise SpecError(f"a K block of {steps} MMAs holds {stream} scale-factor bytes per row, not whole 4-byte "
                            "groups: tcgen05.cp copies whole 32-bit TMEM columns, and each K block's factors start "
                            "a column", "schedule.cta", f"use a cta K that is a multiple of {per} MMAs")
        for name, lay in zip(("SFA", "SFB"), scales):
            if lay.halves != 1:
                raise SpecError("the 2x2 data path's SFB halves are not copied by tcgen05.cp here", "shape.M")
            group = _align(lay.slices, CP_COLUMNS)
            # an MMA whose factors run past their 32-bit word continues `slices` columns on (isa.tmem
            # ScaleLayout); the copies space groups `group` columns apart, so the two must agree
            if group != lay.slices and any(s * lay.step_bytes % 4 + lay.nsf > 4 for s in range(steps)):
                raise SpecError(f"{name}: an MMA's {lay.nsf} scale factors cross a 32-bit TMEM word, which "
                                f"continues {lay.slices} columns on, but tcgen05.cp writes groups of "
                                f"{CP_COLUMNS}", "shape.N" if name == "SFB" else "shape.M",
                                "use an N of a multiple of 128")
            out.append((name, stream // 4 * group, group))
    return out


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def check_tcgen05_schedule(spec, kind: str, target: str) -> None:
    """What a `schedule` on a tcgen05 tile may say (raises a SpecError on the field to blame). The
    warp-specialised kernel serves dense, 2:4 / 1:2 / 4:8 sparse (runtime metadata) and block-scaled tiles, and
    sparse block-scaled ones (META, SFA and SFB in every slot: `cp_columns`), cta_group::1 and ::2, `.ws` (dense and sparse, M = 32 / 64 / 128), B in shared memory and A in shared or
    Tensor Memory (`check_a_in_tmem`), K-major."""
    sc = spec.schedule
    locs = spec.locs
    if "schedule.warps" in locs:
        raise SpecError("warps= is fixed for tcgen05 schedules: 4 epilogue warps, one MMA warp, one TMA warp",
                        "schedule.warps", "drop warps=")
    if "schedule.mma" in locs or sc.mma != "sync":
        raise SpecError("mma= chooses the mma.sp instruction; a tcgen05 tile issues tcgen05.mma", "schedule.mma",
                        "drop mma=")
    if (sc.cta_m, sc.cta_n) != (spec.m, spec.n):
        raise SpecError(f"the CTA tile of a tcgen05 schedule is one MMA's M x N = {spec.m}x{spec.n}, not "
                        f"{sc.cta_m}x{sc.cta_n}", "schedule.cta",
                        f"write cta={spec.m}x{spec.n}x{max(sc.cta_k // spec.k, 1) * spec.k}")
    if sc.cta_k % spec.k:
        raise SpecError(f"schedule cta K = {sc.cta_k} is not a multiple of the MMA's K = {spec.k}", "schedule.cta")
    if not 1 <= sc.stages <= MAX_STAGES:
        raise SpecError(f"schedule stages = {sc.stages}; use 1..{MAX_STAGES}", "schedule.stages")
    if sc.cluster != spec.cta_group:
        raise SpecError(f"schedule cluster = {sc.cluster}: a tcgen05 tile's cluster is its CTA group "
                        f"(cta_group={spec.cta_group})", "schedule.cluster",
                        f"write cluster={spec.cta_group} or drop cluster=")
    # persistent / raster / split_k (the wgmma kernel's schedule words): this kernel is static persistent or
    # scheduled by cluster launch control, and walks its tiles along M; getattr keeps the check valid whichever
    # schedule fields the spec has
    persistent = getattr(sc, "persistent", "static")
    if "schedule.persistent" in locs and persistent not in ("static", "clc"):
        raise SpecError(f"persistent={persistent}: the warp-specialised tcgen05 kernel is persistent, static "
                        "(grid = the SM count) or by cluster launch control (grid = the tiles)",
                        "schedule.persistent", "write persistent=static or persistent=clc, or leave persistent= out")
    if persistent == "clc":
        from ..isa.clc import target_problem

        # a pair's answer must reach both CTAs: the multicast form (isa/clc.py)
        problem = target_problem(target, multicast=spec.cta_group == 2)
        if problem:
            raise SpecError(f"persistent=clc: {problem}", "schedule.persistent",
                            "write persistent=static, or target sm_100a" +
                            (" (or use cta_group=1)" if spec.cta_group == 2 else ""))
    for field, unset in (("raster", None), ("split_k", 1), ("promote", None)):
        if getattr(sc, field, unset) != unset:
            raise SpecError(f"schedule {field}= is not lowered for tcgen05 tiles (the warp-specialised kernel walks "
                            "whole-K tiles along M)", f"schedule.{field}", f"leave {field}= out")
    if sc.accumulators not in (None, 1, 2):
        raise SpecError(f"schedule accumulators = {sc.accumulators}; use 1 or 2", "schedule.accumulators")
    if spec.k_total is not None:
        raise SpecError("a scheduled tcgen05 kernel takes K at run time (a multiple of the schedule's cta K); "
                        "'loop' fixes it", "loop", "drop the loop statement")
    unsupported = [(cond, what, field) for cond, what, field in (
        (spec.sparsity is not None and spec.sparsity.metadata != "runtime", "sparse A with static metadata",
         "sparsity"),
        (spec.ashift, ".ashift", "engine"),
        (spec.disable_output_lane is not None, "disable-output-lane", "disable_output_lane"),
        (spec.scale_input_d is not None, "scale-input-d", "scale_input_d"),
        (spec.m != 128 * spec.cta_group and not spec.ws, f"M = {spec.m} with cta_group::{spec.cta_group} (the "
         "epilogue warps read the 128 lanes of data-path layouts D / A; .ws reads M = 32 / 64 too)", "shape.M"),
    ) if cond]
    check_ws_collector(spec)
    check_ws_zero_columns(spec)
    check_a_in_tmem(spec, kind)
    if unsupported:
        _, what, field = unsupported[0]
        raise SpecError(f"the warp-specialised tcgen05 kernel does not serve {what} yet", field,
                        "drop the schedule to get the single-stage kernel")
    for name in ("A", "B") if spec.operands["A"].space == "smem" else ("B",):
        if (spec.operands[name].major or "K") != "K":
            raise SpecError(f"operand {name}: the TMA producer loads K-major operands (one box per 128-byte "
                            "swizzle atom) so far", f"{name}.major", "write major=K")
        if spec.operands[name].swizzle == "none":
            raise SpecError(f"operand {name}: TMA writes a swizzled K-major layout; swizzle=none has 8x16-byte core "
                            "matrices no 2-D box produces", f"{name}.swizzle", "write swizzle=auto or drop swizzle=")


def check_ws_collector(spec) -> None:
    """The collector usage a scheduled tile may write: none or `::discard` (the ISA default, PTX
    9.7.16.10.9.1 .collector_usage). A `::fill` keeps an operand for a later `::use` / `::lastuse` of the
    same operand, but no two MMAs of the scheduled kernel read the same operand: within a tile every K step
    reads its own K slice of A and of B (the .ws buffers ::b0..::b3 hold B, 9.7.16.10.9.3), and consecutive
    tiles of a CTA are different (M, N) tiles. Holding B would pay off only for several M tiles of one N
    tile with the whole K in one MMA; the kernel's tile walk has no such reuse, so it issues none."""
    if spec.collector is None or spec.collector.endswith("::discard"):
        return
    raise SpecError(f"collector::{spec.collector}: the scheduled tcgen05 kernel never reads one operand twice (each "
                    "K step of a tile reads its own K slice of A and B, each tile its own rows), so there is "
                    "nothing to keep in a collector buffer", "engine.collector",
                    "drop collector= (the default, ::discard), or drop the schedule for the single-stage kernel")


# A in TMEM (tcgen05.mma [d-tmem], [a-tmem], b-desc, PTX 9.7.16.10.9.1): one tcgen05.cp (9.7.16.8.2) per MMA
# copies the MMA's 128 rows x 256 bits of A (isa.tmem.a_columns_per_mma: 8 columns, row i in lane i) from the
# slot; its source is a no-swizzle K-major canonical layout (9.7.16.4.1: 8-row x 16-byte core matrices, SBO =
# 128 bytes between 8-row groups), each 16-byte K chunk of the 128 rows one TMA box after another (LBO = the
# box's bytes between K-adjacent chunks)
A_CP_SHAPE = "128x256b"
A_CHUNK_BYTES = 16


def check_a_in_tmem(spec, kind: str) -> None:
    """What the scheduled kernel needs of A in Tensor Memory: the full data path (128 rows of a CTA in its 128
    lanes, layouts A / D of PTX 9.7.16.10.5: tcgen05.cp .128x256b writes row i to lane i; for the folded .ws
    M = 64 / 32 layouts E / G the PTX text does not say which lanes hold A's rows, so they are refused with
    why; the half-lane layout F is refused too), A stored at its own width (TMA copies bytes; the
    f8f6f4 kinds' 4- / 6-bit A takes a byte per value in TMEM, 9.7.16.10.4.3), dense A, no .ashift."""
    if spec.operands["A"].space != "tmem":
        return
    from ..isa.tmem import data_path
    from ..layout import container_bits_for

    a = spec.operands["A"].dtype
    refusal = None
    dp = data_path(spec.m, spec.cta_group, spec.sparsity is not None, spec.ws)
    if dp.organization == "folded":
        # .ws M = 64 / 32 (Layouts E / G): which TMEM lanes the MMA reads A's rows from is not in the PTX text
        # (README, "A in TMEM for .ws M = 64 / 32"): 9.7.16.10.5 gives the layouts as figures only (Figures 213,
        # 217 in PTX ISA 9.1), and tcgen05.cp .64x128b.warpx2::02_13 / ::01_23 (9.7.16.8.2) says only that the
        # 64 rows are multicast into warp pairs, each warp of a pair receiving half of them (not which half)
        form = f".ws M = {spec.m}" if spec.ws else f"M = {spec.m} with cta_group::{spec.cta_group}"
        refusal = (f"M = {spec.m}: A in TMEM is copied row i -> lane i (tcgen05.cp .128x256b), but {form} "
                   f"reads A through data-path Layout {dp.layout}, whose TMEM lanes for A's rows the PTX ISA does "
                   "not state in text", "shape.M",
                   f"use M = 128 (or 256 with cluster=2), or A in smem: PTX 9.7.16.10.5 draws Layout {dp.layout} "
                   "only as a figure, and tcgen05.cp .64x128b.warpx2::02_13 / ::01_23 / .32x128b.warpx4 (9.7.16.8.2) "
                   "say the rows are multicast into warp pairs (each warp receiving half, not which half) or all "
                   "four warps, not which lanes the MMA reads")
    elif dp.rows != 128:
        refusal = (f"M = {spec.m}: A in TMEM is copied row i -> lane i (tcgen05.cp .128x256b), but Layout "
                   f"{dp.layout} (PTX 9.7.16.10.5) uses half the data path's lanes", "shape.M",
                   "use M = 128 (or 256 with cluster=2), or A in smem")
    elif container_bits_for(a, kind) != TYPES[a].bits or TYPES[a].bits < 8:
        refusal = (f"A in TMEM as {a}: TMA copies bytes, and {a} is not stored at its own width in whole bytes",
                   "A.dtype", "use an 8-, 16- or 32-bit A, or A in smem")
    elif spec.sparsity is not None:
        refusal = ("sparse A in TMEM is not scheduled yet", "sparsity", "put A in smem")
    elif spec.ashift:
        refusal = (".ashift shifts A's rows in TMEM after each MMA; the scheduled kernel refills A per K block",
                   "engine.ashift", "drop ashift")
    if refusal:
        raise SpecError(*refusal)


def a_tmem_plan(spec, kind: str, k_block: int) -> tuple[int, int, int]:
    """(bytes of a slot's A, TMEM columns of a slot's A, MMAs per K block) of a scheduled tile with A in TMEM."""
    from ..isa.tcgen05_kinds import mma_k
    from ..isa.tmem import a_columns_per_mma

    rows = spec.m // spec.cta_group
    steps = k_block // mma_k(kind, False, False)
    return rows * k_block * TYPES[spec.operands["A"].dtype].bits // 8, steps * a_columns_per_mma(), steps


def check_ws_zero_columns(spec) -> None:
    """A zero-column mask's column shift (PTX 9.7.16.4.3, Table 45 bits 56-61) makes MMA column j read B row
    j + shift: `shift` rows past the tile's N rows of B, which the TMA producer does not load (the next
    region of the slot lies there). The mask itself is applied as written."""
    z = spec.zero_columns
    if z is None:
        return
    if z.value is not None:
        from ..descriptors.zero_column_mask import ZeroColumnMask

        shift, field = ZeroColumnMask.decode(z.value).shift, "zero_columns.mask"
    else:
        shift, field = z.shift, "zero_columns.shift"
    if shift:
        raise SpecError(f"a zero-column mask with column shift {shift}: MMA column j reads B row j + {shift}, past the "
                        f"{spec.n} rows of B the scheduled kernel loads per tile", field,
                        "drop the shift, or drop the schedule for the single-stage kernel")


class WarpSpecialization(Pass, name="warp-specialization", requires=("layouts",), provides=("roles",),
                         description="plan the roles, smem ring, barriers, TMEM accumulators and tile scheduler "
                                     "of scheduled tcgen05 tiles"):

    def apply(self, module, ctx: PassContext) -> None:
        from ..isa.targets import STATIC_SMEM_ARCH_SPECIFIC, TARGETS

        # dynamic shared memory: the SM's opt-in maximum per CTA, on every target of that SM (tcgen05 targets
        # all have one in the table)
        target = TARGETS.get(module.attrs["target"])
        limit = STATIC_SMEM_ARCH_SPECIFIC.get(target.sm, 0) if target else 0
        ctx.each_tile(module, lambda tile: self.tile(tile, limit), engine="tcgen05", having="tilec.schedule",
                      field="schedule")

    @staticmethod
    def tile(tile: Op, smem_limit: int) -> None:
        spec = tile_spec(tile)
        sc = spec.schedule
        layouts = {op.sym: op.attrs for op in tile.ops("tilec.smem_layout")}
        from .derive import smem_layout

        for name, lay in layouts.items():
            canonical = smem_layout(tile, tile.op("tilec.smem_layout", name), spec)
            if canonical.container_bits != canonical.elem_bits:
                raise SpecError(f"operand {name}: {canonical.dtype} is padded to {canonical.container_bits} bits in "
                                f"shared memory under kind::{tile.attrs['kind']} (PTX 9.7.16.10.4.4); the TMA "
                                "producer copies packed rows", f"{name}.dtype",
                                "use an 8-bit type, or kind::mxf4 / mxf4nvf4 for packed fp4")
            if lay["swizzle"] == "none":
                raise SpecError(f"operand {name}: layout-selection chose no swizzle for a {lay['k_block']}-deep K "
                                "block; TMA writes swizzled K-major rows only", "schedule.cta",
                                "use a cta K whose rows are 32, 64 or a multiple of 128 bytes")
        end = max(lay["offset"] + lay["size"] for lay in layouts.values())
        tx = sum(lay["size"] for lay in layouts.values())
        # the per-K-block TMEM operands (metadata, SFA, SFB): their images follow A and B in the slot, and
        # their columns (one set per ring slot: the MMAs of slot s read them while the next slot's are copied)
        # follow the accumulators
        copies = cp_columns(tile, spec, sc.cta_k)
        cp_smem, cp_bytes, regions = [], [], []
        first = 0
        for name, columns, _ in copies:
            rows, width = CP_GEOMETRY[CP_FORMS[name][0]]
            nbytes = columns // width * rows * width * 4
            end = _align(end, CP_ALIGN)
            cp_smem.append(end)
            cp_bytes.append(nbytes)
            regions.append(first)
            end += nbytes
            tx += nbytes
            first += columns
        a_smem = a_region = None
        a_bytes = a_columns = 0
        if spec.operands["A"].space == "tmem":      # A's staging after the images, its columns after theirs
            a_bytes, a_columns, _ = a_tmem_plan(spec, tile.attrs["kind"], sc.cta_k)
            a_smem = end = _align(end, CP_ALIGN)
            end += a_bytes
            tx += a_bytes
            a_region = first
            first += a_columns
        stage_bytes = _align(end, SLOT_ALIGN)
        # the leader's full barrier counts the bytes of both CTAs of a pair (their copies complete on it)
        tx *= spec.cta_group
        d_columns = tile.op("tilec.tmem_plan").attrs["d_columns"]
        slot_columns = _align(first, 8)
        staged_columns = sc.stages * slot_columns
        fits_two = 2 * d_columns + staged_columns <= TMEM_COLUMNS
        why = None
        what = " / ".join(["metadata / scale-factor"] * bool(regions) + ["A"] * bool(a_columns))
        extra = f" + {sc.stages} x {slot_columns} per-slot {what} columns" if what else ""
        if sc.accumulators == 2 and not fits_two:
            raise SpecError(f"two accumulators need 2 x {d_columns} TMEM columns{extra}, more than the "
                            f"{TMEM_COLUMNS} of a CTA (PTX 9.7.16.1)", "schedule.accumulators", "write accumulators=1")
        accumulators = sc.accumulators or (2 if fits_two else 1)
        if accumulators == 1:
            why = ("written accumulators=1" if sc.accumulators == 1 else
                   f"2 x {d_columns} D columns{extra} exceed the {TMEM_COLUMNS} TMEM columns")
        if d_columns + staged_columns > TMEM_COLUMNS:
            raise SpecError(f"{d_columns} D columns{extra} exceed the {TMEM_COLUMNS} TMEM columns (PTX 9.7.16.1)",
                            "schedule.stages", f"use stages={max(1, (TMEM_COLUMNS - d_columns) // slot_columns)} or "
                            "less, or a smaller cta K")
        used = accumulators * d_columns + staged_columns
        cols = 32
        while cols < used:
            cols *= 2
        ring = sc.stages * stage_bytes
        # D staging after the ring: per epilogue warp, 32 rows (its TMEM lanes) x d_chunk columns of D; a
        # 128-byte row at most (TMA swizzle atom: the 16-byte pieces of 8 consecutive rows land in 8 distinct
        # bank groups, so the warp's row-per-lane st.shared.v4 is conflict-free) and 32 columns at most
        # (32 accumulator registers per tcgen05.ld .32x32b.x32, 9.7.16.8.3)
        out_bytes = TYPES[spec.operands["D"].dtype].bits // 8
        chunk = min(D_CHUNK_MAX, 128 // out_bytes, d_columns)
        row_bytes = chunk * out_bytes
        d_swizzle = D_SWIZZLE.get(row_bytes, "none")
        d_stage_bytes = _align(32 * row_bytes, SLOT_ALIGN)
        warps = len(EPILOGUE_WARPS)
        clc = getattr(sc, "persistent", "static") == "clc"
        from ..isa.clc import RESPONSE_ALIGN, RESPONSE_BYTES

        # persistent=clc: the response ring after the TMEM slot (16-byte aligned responses, then their barriers)
        clc_bytes = RESPONSE_ALIGN + CLC_STAGES * (RESPONSE_BYTES + 2 * MBARRIER_BYTES) if clc else 0
        fixed = (2 * sc.stages * MBARRIER_BYTES + 2 * accumulators * MBARRIER_BYTES + TMEM_SLOT_BYTES + SLOT_ALIGN
                 + clc_bytes)
        # two staging buffers per warp (one drains through its TMA store while the next chunk is written)
        # where they fit, else one
        d_buffers = 2 if ring + 2 * warps * d_stage_bytes + fixed <= smem_limit else 1
        d_stage = ring
        ring += warps * d_buffers * d_stage_bytes
        full = ring
        empty = full + sc.stages * MBARRIER_BYTES
        acc_full = empty + sc.stages * MBARRIER_BYTES
        acc_empty = acc_full + accumulators * MBARRIER_BYTES
        slot = acc_empty + accumulators * MBARRIER_BYTES
        end = slot + TMEM_SLOT_BYTES
        clc_attrs = {}
        if clc:
            response = _align(end, RESPONSE_ALIGN)
            clc_full = response + CLC_STAGES * RESPONSE_BYTES
            clc_empty = clc_full + CLC_STAGES * MBARRIER_BYTES
            end = clc_empty + CLC_STAGES * MBARRIER_BYTES
            clc_attrs = {"sched_warp": SCHED_WARP, "clc_stages": CLC_STAGES, "clc_response": response,
                         "clc_full": clc_full, "clc_empty": clc_empty}
        smem = end + SLOT_ALIGN
        if smem > smem_limit:
            raise SpecError(f"{sc.stages} stages of {stage_bytes} bytes need {smem} bytes of shared memory with "
                            f"their barriers and the epilogue's D staging ({warps} x {d_stage_bytes}), more than "
                            f"the {smem_limit} a CTA may have on this target", "schedule.stages",
                            f"use stages={max(1, (smem_limit - (smem - sc.stages * stage_bytes)) // stage_bytes)}"
                            " or less, or a smaller cta K")
        attrs = {"threads": THREADS + 32 * bool(clc),
                 "epilogue_warps": list(EPILOGUE_WARPS), "mma_warp": MMA_WARP,
                 "tma_warp": TMA_WARP, "stages": sc.stages, "k_block": sc.cta_k, "stage_bytes": stage_bytes,
                 "tx_bytes": tx, "full": full, "empty": empty, "acc_full": acc_full, "acc_empty": acc_empty,
                 "tmem_slot": slot, "accumulators": accumulators, "acc_columns": d_columns, "tmem_columns": cols,
                 "smem_bytes": smem, "cluster": spec.cta_group, "scheduler": "clc" if clc else "static", "raster": "m",
                 "d_stage": d_stage, "d_stage_bytes": d_stage_bytes, "d_buffers": d_buffers, "d_chunk": chunk,
                 "d_swizzle": d_swizzle}
        attrs.update(clc_attrs)
        if why is not None:
            attrs["why"] = why
        if copies:
            attrs.update({"cp_operands": [name for name, _, _ in copies], "cp_smem": cp_smem, "cp_bytes": cp_bytes})
        if copies or a_columns:
            attrs.update({"tmem_stage": accumulators * d_columns, "tmem_stage_columns": slot_columns})
        if copies:
            attrs["stage_regions"] = regions
            groups = [g for name, _, g in copies if name != "META"]
            if groups:
                attrs["sf_group_columns"] = groups
        if a_columns:
            attrs.update({"a_smem": a_smem, "a_bytes": a_bytes, "a_region": a_region})
        tile.body.append(Op("tilec.ws_plan", None, attrs, loc=tile.locs.get("schedule", tile.loc)))
