"""`resource-planning`: what each tile's kernel asks of one SM, printed as `tilec.resources` and checked
against the target before any PTX is written.

Per tile (after `kernel-selection`, from its `tilec.kernel` and the plans before it):
- shared memory: the ring (`stages` slots of `stage_bytes`; 1 slot for kernels that stage through one
  buffer) and everything a CTA declares or asks for (`smem_bytes`: ring, mbarriers, alignment slack, the
  TMEM-address slot), static or dynamic (`smem_space`), checked against `smem_limit` by
  compiler/passes/resources.check_shared_memory, the one home of that check (a located diagnostic on the
  schedule's stages, or on the shape for the single-stage tcgen05 kernel);
- Tensor Memory columns allocated (tcgen05; PTX ISA 9.7.16.7.1: a power of two in 32..512);
- registers per warp role: warps, the per-thread budget the kernel declares (`.maxnreg`; else 255, the
  per-thread maximum) and the live data registers (accumulators and fragments: compiler/passes/limits.py
  counts them for the mma.sp kernels; a lower bound, address registers come on top);
- mbarriers, and CTAs resident per SM (compiler/passes/resources.ctas_per_sm);
- what compiler/perf_model.py needs for the analytic bound: the MMA (kind, and the dense K of one
  instruction, which sets its rate) and sparsity, the D tile one
  CTA computes, the K block per stage, the bytes copied to shared memory per K block, whether the copies
  overlap the MMAs and whether CTAs are persistent.

It lives beside `kernel-selection` (compiler/ptx/, like it) because it reads the kernels' configurations
(`kernel_config`: the dataclasses of compiler/ptx/), which no module of compiler/passes/ may import.
A kernel gets its plan from `PLANNERS` (keyed by `tilec.kernel`'s `kernel`); a new kernel adds its entry.
"""
from __future__ import annotations

from typing import Any, Callable

from ..diagnostics import SpecError
from ..ir import Op
from ..isa.setmaxnreg import warpgroup_problems
from ..isa.types import TYPES
from ..passes import Pass, PassContext
from ..passes.derive import mma_form, required, tile_spec, tile_view
from ..passes.resources import check_shared_memory, ctas_per_sm, smem_limit

MAX_REGISTERS = 255          # per thread, every compute capability (CUDA C++ Programming Guide, tech. specs)
MBARRIER_BYTES = 8           # an mbarrier is a .b64 in shared memory (PTX ISA 9.7.13.15.1)

def _sp_mma(form) -> dict:
    """An mma.sp / wgmma form's MMA: its kind (or A type) and the dense K of one instruction (a sparse
    instruction's K counts the dense elements, twice the kept ones: PTX ISA 9.7.14.6, m16n8k32 for f16 =
    the dense K 16 of m16n8k16)."""
    return {"mma": getattr(form, "kind", None) or form.a_type, "mma_k": form.k // 2}


def _tcgen05_mma(tile: Op) -> dict:
    """A tcgen05 tile's kind and the dense K of one tcgen05.mma of it (PTX ISA Table 39)."""
    from ..isa.tcgen05_kinds import kind_info

    return {"mma": tile.attrs["kind"], "mma_k": kind_info(tile.attrs["kind"]).dense_k}


def _bits(spec) -> dict:
    """Bits of one A and one B element as the problem stores them in global memory."""
    return {"a_bits": TYPES[spec.operands["A"].dtype].bits, "b_bits": TYPES[spec.operands["B"].dtype].bits}


def _role(name: str, warps: int, registers: int, live: int) -> dict:
    return {"name": name, "warps": warps, "registers": registers, "live": live}


# ---- the kernels ----------------------------------------------------------------------------------

def _tcgen05(tile: Op, module: Op) -> dict:
    """The single-stage tcgen05 kernel (compiler/ptx/tcgen05_kernel.py): 128 threads copy each K block of
    A and B into one static buffer, one thread issues its MMAs and commits to one mbarrier, all wait, then
    the next K block; the epilogue reads D 8 columns at a time (tcgen05.ld .x8)."""
    from ..passes.layout_selection import KERNEL_STATIC_EXTRA
    from .tcgen05_kernel import THREADS

    spec, form = tile_spec(tile), mma_form(tile)
    pipe = required(tile, "tilec.pipeline", "layout-selection")
    tmem = required(tile, "tilec.tmem_plan", "layout-selection")
    target = module.attrs["target"]
    stage = pipe.attrs["smem_bytes"]
    smem = stage + KERNEL_STATIC_EXTRA
    check_shared_memory(target, 1, stage, smem, fixed=KERNEL_STATIC_EXTRA, space="static", field="shape.N",
                        what="K stage", hint="use a smaller M or N (layout-selection halves the K stage first)")
    cta_m = spec.m // spec.cta_group
    registers = MAX_REGISTERS
    return {"kernel": "tcgen05", "threads": THREADS, "cluster": spec.cta_group, "stages": 1, "stage_bytes": stage,
            "smem_bytes": smem, "smem_limit": smem_limit(target, "static"), "smem_space": "static",
            "tmem_columns": tmem.attrs["allocated"], "mbarriers": 1,
            "ctas_per_sm": ctas_per_sm(target, THREADS, registers, smem, tmem.attrs["allocated"]),
            "roles": [_role("copy+mma+epilogue", THREADS // 32, registers, 8)],
            **_tcgen05_mma(tile), "sparse": spec.sparsity is not None, **_bits(spec), "cta_m": cta_m,
            "cta_n": spec.n,
            "k_block": pipe.attrs["k_block"], "tx_bytes": stage,
            "d_bytes": cta_m * spec.n * TYPES[spec.operands["D"].dtype].bits // 8,
            "copy": "threads", "overlap": False, "persistent": False}


def _tcgen05_ws(tile: Op, module: Op) -> dict:
    """The warp-specialised tcgen05 kernel of a scheduled tile (helper `bwk`'s `tcgen05_ws_kernel.py`), from
    its `tilec.ws_plan` (the `warp-specialization` pass): epilogue warps, one MMA warp, one
    TMA warp; a ring of `stages` slots with full/empty barriers, `accumulators` TMEM accumulators with
    acc_full/acc_empty barriers; a static persistent scheduler, or with persistent=clc a scheduler warp and
    its ring of cluster-launch-control answers (clc_full/clc_empty barriers)."""
    spec = tile_spec(tile)
    ws = required(tile, "tilec.ws_plan", "warp-specialization").attrs
    target = module.attrs["target"]
    stages, stage, smem = ws["stages"], ws["stage_bytes"], ws["smem_bytes"]
    # a CTA pair's full barrier expects both CTAs' bytes; each CTA's shared memory receives its half
    tx = ws["tx_bytes"] // ws.get("cluster", 1)
    # full, empty; acc_full, acc_empty; clc_full, clc_empty
    barriers = 2 * stages + 2 * ws["accumulators"] + 2 * ws.get("clc_stages", 0)
    check_shared_memory(target, stages, stage, smem, per_stage=2 * MBARRIER_BYTES, fixed=smem - stages * stage -
                        2 * stages * MBARRIER_BYTES)
    epi = len(ws["epilogue_warps"])
    threads = ws["threads"]
    cta_m = spec.m // spec.cta_group
    role_of = {**{w: "epilogue" for w in ws["epilogue_warps"]}, ws["mma_warp"]: "MMA", ws["tma_warp"]: "TMA",
               **({ws["sched_warp"]: "scheduler"} if "sched_warp" in ws else {})}
    problems = warpgroup_problems(threads // 32, role_of)
    # setmaxnreg (PTX 9.7.19): a per-role register budget needs whole single-role warpgroups; here it would not
    # pay either, which the refusal says too
    setmaxnreg = ("not used: " + "; ".join(problems) + ". setmaxnreg is executed alike by every warp of a "
                  "warpgroup (PTX 9.7.19), so the MMA and TMA warps cannot hand registers to the epilogue. Nor "
                  "would it pay: the accumulators live in TMEM, the epilogue holds 8 columns per thread at a time "
                  "(tcgen05.ld .x8), the producer roles a few addresses, and the CTAs per SM are set by shared "
                  "memory and TMEM; every role keeps the kernel's budget") if problems else \
        "not used: every role keeps the kernel's budget (its roles hold few live registers)"
    return {"kernel": "tcgen05_ws", "threads": threads, "cluster": spec.cta_group, "stages": stages,
            "stage_bytes": stage, "smem_bytes": smem, "smem_limit": smem_limit(target), "smem_space": "dynamic",
            "tmem_columns": ws["tmem_columns"], "mbarriers": barriers, "setmaxnreg": setmaxnreg,
            "ctas_per_sm": ctas_per_sm(target, threads, MAX_REGISTERS, smem, ws["tmem_columns"]),
            "roles": [_role("epilogue", epi, MAX_REGISTERS, 8), _role("mma", 1, MAX_REGISTERS, 0),
                      _role("tma", 1, MAX_REGISTERS, 0),
                      *([_role("scheduler", 1, MAX_REGISTERS, 0)] if "sched_warp" in ws else [])],
            **_tcgen05_mma(tile), "sparse": spec.sparsity is not None, **_bits(spec), "cta_m": cta_m,
            "cta_n": spec.n,
            "k_block": ws["k_block"], "tx_bytes": tx,
            "d_bytes": cta_m * spec.n * TYPES[spec.operands["D"].dtype].bits // 8,
            # the epilogue warps' D staging buffers (in smem_bytes; drained by TMA stores)
            "d_staging_bytes": epi * ws["d_buffers"] * ws["d_stage_bytes"],
            "copy": "tma", "overlap": True, "persistent": True,
            # the tile scheduler: static (grid = the SMs) or cluster launch control (grid = the tiles)
            "scheduler": ws["scheduler"], **_tcgen05_ws_form(tile, spec)}


def _tcgen05_ws_form(tile: Op, spec) -> dict:
    """The MMA form choices of a scheduled tile beyond the plain one (only where made, so the plans of plain
    tiles stay as they were): `.ws` (PTX 9.7.16.10.9.3) with its data-path layout (9.7.16.10.5), the TMEM
    columns of one accumulator, the collector usage (warp_specialization.check_ws_collector) and the
    zero-column mask; the per-slot TMEM operands (`tmem_operands`: META / SFA / SFB columns and copies); A in
    TMEM (`a_tmem`) with its staging, copies and the TMEM budget."""
    from ..isa.tcgen05_forms import CP_GEOMETRY
    from ..isa.tmem import data_path
    from ..passes.warp_specialization import A_CP_SHAPE, CP_FORMS, ws_plan

    out = {}
    plan = ws_plan(tile)
    used = plan.accumulators * plan.acc_columns + plan.stages * plan.tmem_stage_columns
    budget = (f"TMEM {plan.accumulators} x {plan.acc_columns} accumulator + {plan.stages} x "
              f"{plan.tmem_stage_columns} per-slot columns = {used} of {plan.tmem_columns} allocated")
    if plan.cp_operands:
        # the per-K-block TMEM operands (sparse metadata, SFA / SFB): each slot's columns per operand and the
        # tcgen05.cp copies that write them (PTX 9.7.16.8.2; 4 columns per copy), then the TMEM budget
        parts = []
        for name, start, nbytes in zip(plan.cp_operands, plan.stage_regions, plan.cp_bytes):
            shape, multicast = CP_FORMS[name]
            rows, width = CP_GEOMETRY[shape]
            columns = nbytes // (rows * 4)
            parts.append(f"{name} columns +{start}..+{start + columns - 1} ({columns // width} x tcgen05.cp "
                         f".{shape}{'.' + multicast if multicast else ''})")
        out["tmem_operands"] = ("per slot: " + ", ".join(parts)
                                + ("" if plan.a_region is not None else f"; {budget}"))
    if plan.a_region is not None:
        # A in TMEM: its columns per slot and the whole TMEM budget (accumulators + per-slot columns, allocated as
        # a power of two, PTX 9.7.16.7.1)
        a_columns = plan.tmem_stage_columns - plan.a_region
        out["a_tmem"] = (f"A in TMEM: per slot {plan.a_bytes} B of A in shared memory (no swizzle, a TMA box per "
                         f"16-byte K chunk) copied by tcgen05.cp .{A_CP_SHAPE} (one per MMA) into {a_columns} TMEM "
                         f"columns; {budget}")
    if not spec.ws:
        return out
    dp = data_path(spec.m, spec.cta_group, spec.sparsity is not None, True)
    zcm = tile.op("tilec.zero_column_mask")
    return {**out, "ws": f"tcgen05.mma.ws: data-path layout {dp.layout} ({dp.rows} rows x {dp.folds} lane group(s), "
                  f"{ws_plan(tile).acc_columns} TMEM columns per accumulator); collector none (::discard): every K "
                  "step reads its own K slice of B, so no MMA could reuse a buffer; zero-column mask " +
                  (f"{int(zcm.attrs['value']):#018x}" if zcm is not None else "none")}


def _sparse_wgmma(tile: Op, module: Op) -> dict:
    """The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py): one producer warpgroup issuing TMA,
    1 to 3 consumer warpgroups issuing wgmma.mma_async.sp; a ring of `stages` slots with full and empty
    mbarriers; every thread launched under `.maxnreg`, the producer's registers moved to the consumers by
    setmaxnreg where they need more."""
    from ..passes.limits import mma_sp_budget
    from .emission import kernel_config

    view = tile_view(tile)
    cfg = kernel_config(view, module)
    spec, form = view.payload, view.facts["form"]
    check_shared_memory(cfg.target, cfg.stages, cfg.stage_bytes, cfg.smem_bytes, per_stage=2 * MBARRIER_BYTES,
                        fixed=cfg.smem_bytes - cfg.stages * (cfg.stage_bytes + 2 * MBARRIER_BYTES))
    budget = mma_sp_budget(spec, form)
    # setmaxnreg (PTX 9.7.19): where the consumers need more than the launch count, the producer warpgroup
    # gives its registers to them (the counts: sparse_wgmma_kernel.check_registers, compiler/isa/setmaxnreg.py)
    split = cfg.register_split
    extra = {"setmaxnreg": split.describe("producer", "consumer")} if split is not None else {}
    if cfg.spill_note is not None:        # where ptxas may spill the consumers (measured; also a warning)
        extra["spill_note"] = cfg.spill_note[0]
    if cfg.d_region_bytes:                # persistent CTAs: D's staging region after the ring (in smem_bytes)
        extra["d_staging_bytes"] = cfg.d_region_bytes
        blocks = cfg.wg_m // cfg.d_block_rows
        h = cfg.d_col_blocks          # column blocks where whole rows do not fit beside the ring
        piece = cfg.d_pitch - 16
        extra["d_staging"] = (f"{cfg.d_region_bytes} B after the ring: {cfg.consumers} consumer warpgroups x "
                              f"{cfg.d_block_rows} rows x {cfg.d_pitch} B pitch"
                              + (f", each warpgroup's {blocks} m64 blocks staged and copied out in turn"
                                 if blocks > 1 else "")
                              + (f"; column blocks h = {h}: whole rows ({cfg.cta_n} columns, {piece * h + 16} B pitch) "
                                 f"do not fit beside the ring, so each row is staged in {h} pieces of "
                                 f"{cfg.d_piece_cols} columns ({piece} B), copied out in turn" if h > 1 else "")
                              + ((f"; interior tiles leave by cp.async.bulk, a row {'piece ' if h > 1 else ''}"
                                  "per thread") if cfg.bulk_copy_out else ""))
    low, high = (split.low, split.high) if split is not None else (cfg.max_regs, cfg.max_regs)
    return {"kernel": "sparse_wgmma", "threads": cfg.threads, "cluster": cfg.cluster_m, "stages": cfg.stages,
            "stage_bytes": cfg.stage_bytes, "smem_bytes": cfg.smem_bytes, "smem_limit": cfg.smem_limit,
            "smem_space": "dynamic", "tmem_columns": 0, "mbarriers": 2 * cfg.stages, **extra,
            "ctas_per_sm": ctas_per_sm(cfg.target, cfg.threads, cfg.max_regs, cfg.smem_bytes),
            "roles": [_role("producer", 4, low, 0),
                      _role("consumer", 4 * cfg.consumers, high, budget.registers)],
            **_sp_mma(form), "sparse": True, **_bits(spec), "cta_m": cfg.cta_m, "cta_n": cfg.cta_n,
            "k_block": cfg.cta_k,
            "tx_bytes": cfg.stage_tx_bytes, "d_bytes": cfg.cta_m * cfg.cta_n * TYPES[cfg.out_type].bits // 8,
            "copy": "tma", "overlap": True, "persistent": cfg.persistent}


def _sparse_gemm(tile: Op, module: Op) -> dict:
    """The pipelined warp-level mma.sp GEMM (compiler/ptx/sparse_gemm_kernel.py): every warp copies its
    share of a K block with cp.async into a ring of `stages` slots and runs mma.sp from ldmatrix fragments
    (cp.async groups and bar.sync: no mbarriers)."""
    from ..passes.limits import mma_sp_budget
    from .emission import kernel_config

    view = tile_view(tile)
    cfg = kernel_config(view, module)
    spec, form = view.payload, view.facts["form"]
    check_shared_memory(cfg.target, cfg.stages, cfg.stage_bytes, cfg.smem_bytes)
    budget = mma_sp_budget(spec, form)
    return {"kernel": "sparse_gemm", "threads": cfg.threads, "cluster": 1, "stages": cfg.stages,
            "stage_bytes": cfg.stage_bytes, "smem_bytes": cfg.smem_bytes, "smem_limit": cfg.smem_limit,
            "smem_space": "dynamic", "tmem_columns": 0, "mbarriers": 0,
            "ctas_per_sm": ctas_per_sm(cfg.target, cfg.threads, MAX_REGISTERS, cfg.smem_bytes),
            "roles": [_role("copy+mma", cfg.warps_m * cfg.warps_n, MAX_REGISTERS, budget.registers)],
            **_sp_mma(form), "sparse": True, **_bits(spec), "cta_m": cfg.cta_m, "cta_n": cfg.cta_n,
            "k_block": cfg.cta_k,
            "tx_bytes": cfg.stage_bytes, "d_bytes": cfg.cta_m * cfg.cta_n * TYPES[cfg.out_type].bits // 8,
            "copy": "cp.async", "overlap": True, "persistent": cfg.is_persistent}


def _mma_sp(tile: Op, module: Op) -> dict:
    """The one-instruction-tile mma.sp kernel (compiler/ptx/mma_sp_kernel.py): operands from global memory
    straight into registers, no shared memory."""
    from ..passes.limits import mma_sp_budget
    from .emission import kernel_config

    view = tile_view(tile)
    cfg = kernel_config(view, module)
    spec, form = view.payload, view.facts["form"]
    budget = mma_sp_budget(spec, form)
    threads = cfg.threads
    d_bits = TYPES[spec.operands["D"].dtype].bits
    return {"kernel": "mma_sp", "threads": threads, "cluster": 1, "stages": 0, "stage_bytes": 0, "smem_bytes": 0,
            "smem_limit": smem_limit(cfg.target), "smem_space": "none", "tmem_columns": 0, "mbarriers": 0,
            "ctas_per_sm": ctas_per_sm(cfg.target, threads, MAX_REGISTERS, 0),
            "roles": [_role("load+mma", threads // 32, MAX_REGISTERS, budget.registers)],
            **_sp_mma(form), "sparse": True, **_bits(spec), "cta_m": cfg.tile_m, "cta_n": cfg.tile_n,
            "k_block": form.k,
            "tx_bytes": 0, "d_bytes": cfg.tile_m * cfg.tile_n * d_bits // 8, "copy": "none", "overlap": False,
            "persistent": False}


# `tilec.kernel`'s kernel -> its planner (a new kernel adds its entry here)
PLANNERS: dict[str, Callable[[Op, Op], dict[str, Any]]] = {
    "tcgen05": _tcgen05, "tcgen05_ws": _tcgen05_ws, "sparse_wgmma": _sparse_wgmma, "sparse_gemm": _sparse_gemm,
    "mma_sp": _mma_sp,
}


def resource_plan(tile: Op) -> dict[str, Any]:
    """The attributes of the tile's `tilec.resources` (run resource-planning first)."""
    return dict(required(tile, "tilec.resources", "resource-planning").attrs)


class ResourcePlanning(Pass, name="resource-planning", requires=("kernels",), provides=("resources",),
                       description="plan and check each kernel's shared memory, TMEM, registers, barriers and "
                                   "CTAs per SM"):

    def apply(self, module, ctx: PassContext) -> None:
        for tile in module.ops("tilec.tile"):
            kernel = required(tile, "tilec.kernel", "kernel-selection").attrs["kernel"]
            planner = PLANNERS.get(kernel)
            if planner is None:
                ctx.fail(f"internal error: no resource planner for kernel '{kernel}' "
                         "(add one to compiler/ptx/resource_planning.py PLANNERS)")
            try:
                attrs = planner(tile, module)
            except SpecError as e:
                ctx.spec_error(e, tile, "schedule")
            tile.body.append(Op("tilec.resources", None, attrs, loc=tile.locs.get("schedule", tile.loc)))
