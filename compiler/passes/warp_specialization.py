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
  walked along M first (`raster = "m"`: consecutive CTAs share one B tile in L2).
- a CTA pair (cta_group::2, cluster=2): the leader's full barrier expects both CTAs' bytes, acc_empty counts
  the epilogue warps of both CTAs (`cluster` = 2).
The dynamic shared memory asked for is the ring plus barriers plus 1024 bytes of alignment slack (the
kernel rounds the window's base up to 1024); it must fit the target's per-CTA limit.

`ws_plan(tile)` rebuilds the plan from the printed op, for the emitter and for the resource-plan pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from ..ir import Op
from ..isa.epilogue_outputs import DEFAULT_BIAS_TYPE
from . import Pass, PassContext
from .derive import required, tile_spec

THREADS = 192
EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP = 4
TMA_WARP = 5
# sparse metadata / scale factors: 4 staging warps write each K block's TMEM columns (warp w reaches lanes
# 32*(w%4).., PTX 9.7.16.8.3: warps 6-9 cover the four lane quarters)
STAGING_WARPS = (6, 7, 8, 9)
SLOT_ALIGN = 1024            # the 128-byte swizzle repeat: every region on it has base offset 0
MBARRIER_BYTES = 8           # an mbarrier object is a .b64 in shared memory (9.7.13.15.1)
TMEM_SLOT_BYTES = 4          # tcgen05.alloc writes the 32-bit TMEM address (9.7.16.7.1)
TMEM_COLUMNS = 512           # columns of a CTA's Tensor Memory (9.7.16.1)
MAX_STAGES = 8


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
    staging_warps: tuple[int, ...] = ()   # tiles with per-K-block TMEM operands (metadata, scale factors)
    staged: int | None = None  # offset of staged[0] (count 4: each staging warp arrives once per block), then
                               # staged_empty[S] (count 1: the MMA warp's commit frees the slot's columns)
    tmem_stage: int | None = None         # first TMEM column of slot 0's staged operands
    tmem_stage_columns: int = 0           # columns per slot (slot s at tmem_stage + s * tmem_stage_columns)
    stage_regions: tuple[int, ...] = ()   # metadata, SFA, SFB column offsets within a slot's columns
    scheduler: str = "static"
    raster: str = "m"
    why: str | None = None     # why one accumulator

    def barrier_counts(self) -> dict[str, int]:
        """Arrivals per phase: the leader's MMA commits multicast to both CTAs' empty and acc_full barriers;
        every epilogue warp of the pair arrives on the leader's acc_empty."""
        counts = {"full": 1, "empty": 1, "acc_full": 1, "acc_empty": len(self.epilogue_warps) * self.cluster}
        if self.staging_warps:
            counts["staged"] = len(self.staging_warps)
            counts["staged_empty"] = 1          # the MMA warp's second commit per K block
        return counts


_INT_FIELDS = ("threads", "mma_warp", "tma_warp", "stages", "k_block", "stage_bytes", "tx_bytes", "full", "empty",
               "acc_full", "acc_empty", "tmem_slot", "accumulators", "acc_columns", "tmem_columns", "smem_bytes",
               "cluster")


def ws_plan(tile: Op) -> WsPlan:
    op = required(tile, "tilec.ws_plan", "warp-specialization")
    a = op.attrs
    return WsPlan(epilogue_warps=tuple(a["epilogue_warps"]), scheduler=a["scheduler"], raster=a["raster"],
                  why=a.get("why"), staging_warps=tuple(a.get("staging_warps", ())), staged=a.get("staged"),
                  tmem_stage=a.get("tmem_stage"), tmem_stage_columns=a.get("tmem_stage_columns", 0),
                  stage_regions=tuple(a.get("stage_regions", ())), **{f: a[f] for f in _INT_FIELDS})


def check_tcgen05_schedule(spec, kind: str, target: str) -> None:
    """What a `schedule` on a tcgen05 tile may say (raises a SpecError on the field to blame). The
    warp-specialised kernel serves dense tiles with A and B in shared memory, K-major, cta_group::1 so far."""
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
    # persistent / raster / split_k (the wgmma kernel's schedule words): this kernel is always static persistent
    # and walks its tiles along M; getattr keeps the check valid whichever schedule fields the spec has
    if "schedule.persistent" in locs and getattr(sc, "persistent", "static") != "static":
        raise SpecError(f"persistent={sc.persistent}: the warp-specialised tcgen05 kernel is static persistent "
                        "(grid = the SM count); cluster launch control is not lowered yet", "schedule.persistent",
                        "write persistent=static or leave persistent= out")
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
        (spec.sparsity is not None and (spec.cta_group != 1 or spec.sparsity.metadata != "runtime"),
         "sparse A with static metadata or a CTA pair", "sparsity"),
        (spec.block_scale is not None and spec.sparsity is not None, "sparse block-scaled A", "block_scale"),
        (spec.block_scale is not None and spec.cta_group != 1, "block scaling with a CTA pair", "block_scale"),
        (spec.ws, ".ws", "engine"),
        (spec.collector is not None, "collector usage", "engine"),
        (spec.ashift, ".ashift", "engine"),
        (spec.operands["A"].space != "smem", "A in tensor memory", "A.space"),
        (spec.zero_columns is not None, "a zero-column mask", "zero_columns"),
        (spec.disable_output_lane is not None, "disable-output-lane", "disable_output_lane"),
        (spec.scale_input_d is not None, "scale-input-d", "scale_input_d"),
        (spec.m != 128 * spec.cta_group, f"M = {spec.m} with cta_group::{spec.cta_group} (the epilogue warps read "
         "the 128 lanes of data-path layouts D / A)", "shape.M"),
    ) if cond]
    if unsupported:
        _, what, field = unsupported[0]
        raise SpecError(f"the warp-specialised tcgen05 kernel serves dense tiles with A and B in "
                        f"shared memory so far, not {what}", field, "drop the schedule to get the single-stage kernel")
    if spec.epilogue is not None:
        # the epilogue's arithmetic is f32 on the accumulators; D declares the TMEM accumulator, so the output
        # is f32 too (a narrower output type would need the accumulator type apart from D's)
        if spec.operands["D"].dtype != "f32":
            raise SpecError(f"the tcgen05 epilogue works on f32 accumulators and stores them as D's type; D is "
                            f"{spec.operands['D'].dtype}", "D.dtype", "write 'D: f32 tmem;'")
        if spec.epilogue.acc not in (None, "f32"):
            raise SpecError(f"acc={spec.epilogue.acc}: the tcgen05 accumulator is D's type, f32", "epilogue.acc",
                            "leave acc= out")
        if spec.epilogue.scale is not None:
            raise SpecError("scale= is the quantisation scale of a narrow D (s8, e4m3); the tcgen05 epilogue stores "
                            "f32", "epilogue.scale", "fold the factor into alpha=, or drop scale=")
        if spec.epilogue.bias_type not in (None, DEFAULT_BIAS_TYPE):
            raise SpecError(f"bias_type={spec.epilogue.bias_type}: the tcgen05 epilogue reads an f32 bias",
                            "epilogue.bias_type", "drop bias_type= (f32)")
    for name in ("A", "B"):
        if (spec.operands[name].major or "K") != "K":
            raise SpecError(f"operand {name}: the TMA producer loads K-major operands (one box per 128-byte "
                            "swizzle atom) so far", f"{name}.major", "write major=K")
        if spec.operands[name].swizzle == "none":
            raise SpecError(f"operand {name}: TMA writes a swizzled K-major layout; swizzle=none has 8x16-byte core "
                            "matrices no 2-D box produces", f"{name}.swizzle", "write swizzle=auto or drop swizzle=")


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
        stage_bytes = _align(max(lay["offset"] + lay["size"] for lay in layouts.values()), SLOT_ALIGN)
        # the leader's full barrier counts the bytes of both CTAs of a pair (their copies complete on it)
        tx = sum(lay["size"] for lay in layouts.values()) * spec.cta_group
        tp = tile.op("tilec.tmem_plan").attrs
        d_columns = tp["d_columns"]
        # the per-K-block TMEM operands of layout-selection's plan (metadata, SFA, SFB after D), one copy per
        # ring slot: the staging warps fill slot s while the MMAs read the others
        regions = [(tp[name], tp[f"{name}_columns"]) for name in ("meta", "sfa", "sfb") if tp.get(name) is not None]
        first = min((r for r, _ in regions), default=0)
        slot_columns = _align(max((r + c for r, c in regions), default=first) - first, 8)
        staged_columns = sc.stages * slot_columns
        fits_two = 2 * d_columns + staged_columns <= TMEM_COLUMNS
        why = None
        extra = f" + {sc.stages} x {slot_columns} staged columns" if regions else ""
        if sc.accumulators == 2 and not fits_two:
            raise SpecError(f"two accumulators need 2 x {d_columns} TMEM columns{extra}, more than the "
                            f"{TMEM_COLUMNS} of a CTA (PTX 9.7.16.1)", "schedule.accumulators", "write accumulators=1")
        accumulators = sc.accumulators or (2 if fits_two else 1)
        if accumulators == 1:
            why = ("written accumulators=1" if sc.accumulators == 1 else
                   f"2 x {d_columns} D columns{extra} exceed the {TMEM_COLUMNS} TMEM columns")
        if d_columns + staged_columns > TMEM_COLUMNS:
            raise SpecError(f"{d_columns} D columns + {sc.stages} x {slot_columns} staged columns exceed the "
                            f"{TMEM_COLUMNS} TMEM columns (PTX 9.7.16.1)", "schedule.stages", "use fewer stages")
        used = accumulators * d_columns + staged_columns
        cols = 32
        while cols < used:
            cols *= 2
        ring = sc.stages * stage_bytes
        full = ring
        empty = full + sc.stages * MBARRIER_BYTES
        acc_full = empty + sc.stages * MBARRIER_BYTES
        acc_empty = acc_full + accumulators * MBARRIER_BYTES
        slot = acc_empty + accumulators * MBARRIER_BYTES
        staged = None
        if regions:                   # staged[S] (full) and staged_empty[S]: the TMEM slots' own ring
            staged, slot = slot, slot + 2 * sc.stages * MBARRIER_BYTES
        smem = slot + TMEM_SLOT_BYTES + SLOT_ALIGN
        if smem > smem_limit:
            raise SpecError(f"{sc.stages} stages of {stage_bytes} bytes need {smem} bytes of shared memory with "
                            f"their barriers, more than the {smem_limit} a CTA may have on this target",
                            "schedule.stages", f"use stages={max(1, (smem_limit - (smem - ring)) // stage_bytes)}"
                            " or less, or a smaller cta K")
        attrs = {"threads": THREADS + 32 * len(STAGING_WARPS) * bool(regions),
                 "epilogue_warps": list(EPILOGUE_WARPS), "mma_warp": MMA_WARP,
                 "tma_warp": TMA_WARP, "stages": sc.stages, "k_block": sc.cta_k, "stage_bytes": stage_bytes,
                 "tx_bytes": tx, "full": full, "empty": empty, "acc_full": acc_full, "acc_empty": acc_empty,
                 "tmem_slot": slot, "accumulators": accumulators, "acc_columns": d_columns, "tmem_columns": cols,
                 "smem_bytes": smem, "cluster": spec.cta_group, "scheduler": "static", "raster": "m"}
        if why is not None:
            attrs["why"] = why
        if regions:
            attrs.update({"staging_warps": list(STAGING_WARPS), "staged": staged,
                          "tmem_stage": accumulators * d_columns, "tmem_stage_columns": slot_columns,
                          "stage_regions": [r - first for r, _ in regions]})
        tile.body.append(Op("tilec.ws_plan", None, attrs, loc=tile.locs.get("schedule", tile.loc)))
