"""Budgets on the code tilec generates, checked by `verify` before any PTX is written.

A tile's numbers fix how much its kernel unrolls and how many registers each thread holds. Without a
bound, `schedule cta=1048576x256x64` asked the one-instruction-tile kernel for 32768 x 8 mma.sp per warp
and step (152 MB of PTX; a larger CTA ran out of memory after half a minute). Two budgets, each a
located diagnostic on the statement that sets the number:

* MAX_UNROLLED_MMA: MMA instructions written out in one kernel (the K loop's body, all its unrolled
  k-steps, ring slots and register buffers). The pipelined kernels' own shape rules keep them under it
  (at most 32 mma tiles per warp x 4 k-steps x 8 ring slots = 1024); it binds the one-instruction-tile
  kernel, whose warp tile (and so its unrolling) grows with the schedule's CTA.
* MAX_REGISTERS: the 32-bit registers one thread needs for its accumulators and MMA fragments (A, B,
  metadata; both buffers where the kernel double-buffers them). 255 is the most a thread can have
  (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": maximum number of
  32-bit registers per thread, 255 on every compute capability tilec targets); address registers come
  on top, so the count is a lower bound and a tile over it can only spill.

tcgen05 tiles need neither: their accumulators live in Tensor Memory (columns budgeted by
compiler/passes/plans.py plan_tmem), the epilogue reads 8 columns at a time, and the one unrolled
K stage is bounded by the shared-memory stage budget of layout-selection (STAGE_BUDGET).

The register and MMA counts are the emitters' own (the kernel configs of compiler/ptx/); which kernel a
tile gets mirrors `ptx-emission` (tests/test_limits.py checks both against the emitted PTX).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import SpecError
from .derive import mma_form, tile_spec

MAX_UNROLLED_MMA = 1024
MAX_REGISTERS = 255
# `schedule stages=`: the deepest ring any kernel takes (the sparse wgmma kernel's TMA ring; the warp-level
# cp.async pipeline and the tcgen05 kernels keep 8, their own checks). The wgmma ring's slot index and phase
# are run-time registers (compiler/ptx/pipeline.py), so depth costs no code, only 2 mbarriers and a stage of
# shared memory each, and the shared memory a block may use bounds it first for all but the smallest stages:
# a decode tile (N <= 64, stages of 8-25 KB) fills 227 KB with 9-16 of them, which a memory-bound kernel needs
# to keep enough of A in flight (docs/measurements.md, "Decode: ring depth").
MAX_SCHEDULE_STAGES = 16


@dataclass(frozen=True)
class KernelBudget:
    kernel: str             # which emitter: "mma.sp", "pipelined mma.sp", "wgmma"
    mmas: int               # MMA instructions written out
    accumulators: int       # 32-bit accumulator registers per thread
    fragments: int          # 32-bit A/B/metadata (and scale) fragment registers per thread
    what: str               # the per-thread work, for messages ("a 64x64 warp tile")

    @property
    def registers(self) -> int:
        return self.accumulators + self.fragments


# (the pipelined kernel is compiler/ptx/sparse_gemm_kernel.py; the choice lives here, below the PTX layer,
# because this budget check and `ptx-emission` both make it)
PIPELINED_A_TYPES = ("f16", "bf16", "tf32", "s8", "u8", "e4m3", "e5m2")


def pipelined_form(form) -> bool:
    """Does the pipelined kernel serve `form` (k-wide shape, 32-bit accumulators, checked types: the
    A types above without .kind, and the block-scaled kinds)?"""
    return (form.a_regs == 4 and form.b_regs == 4 and form.c_regs == 4
            and ((form.a_type in PIPELINED_A_TYPES and form.kind is None) or form.block_scale is not None))


def mma_sp_kernel(spec, form) -> str:
    """Which kernel `ptx-emission` writes for an mma.sp tile (its _mma_sp_entry): "wgmma" with
    `schedule ... mma=wgmma`; "pipelined mma.sp" with a schedule of 2+ stages, runtime metadata and a form
    compiler/ptx/sparse_gemm_kernel.py serves; else the one-instruction-tile "mma.sp" kernel."""
    sc = spec.schedule
    if sc is not None and sc.mma == "wgmma":
        return "wgmma"
    if sc is not None and sc.stages >= 2 and spec.sparsity.metadata == "runtime" and pipelined_form(form):
        return "pipelined mma.sp"
    return "mma.sp"


def mma_sp_budget(spec, form) -> KernelBudget:
    """The budget of the kernel `ptx-emission` writes for an mma.sp tile."""
    sc = spec.schedule
    kernel = mma_sp_kernel(spec, form)
    if kernel == "wgmma":
        from ..isa.wgmma import WGMMA_M

        consumers = max(sc.warps_m // 4, 1)
        m_blocks = max(sc.cta_m // consumers // WGMMA_M, 1)
        ksteps = sc.cta_k // form.k
        acc = m_blocks * (sc.cta_n // 2)                # m64nN: 64*N/128 per thread and 64-row block
        # two register buffers of metadata words (one per 64-row block and k-step each): the emitter's
        # `%meta<2*mb*ks>`; each buffer issues its mb*ks instructions
        return KernelBudget("wgmma", 2 * m_blocks * ksteps, acc, 2 * m_blocks * ksteps,
                            f"a {sc.cta_m // consumers}x{sc.cta_n} warpgroup tile")
    tm = tn = 1
    if sc is not None:
        tm = max(sc.cta_m // (spec.m * sc.warps_m), 1)
        tn = max(sc.cta_n // (spec.n * sc.warps_n), 1)
    acc = tm * tn * form.c_regs
    one_buffer = tm * form.a_regs + tn * form.b_regs + tm          # + one metadata word per 16-row tile
    what = f"a {tm * spec.m}x{tn * spec.n} warp tile"
    if kernel == "pipelined mma.sp":
        ksteps = sc.cta_k // form.k
        unroll = sc.stages * (1 if sc.stages * ksteps % 2 == 0 else 2)    # SparseGemmConfig.unroll
        scale_regs = 0
        if form.block_scale is not None:
            from ..isa.mma_sp.block_scale import SCALE_VECTOR

            unroll *= 2 if unroll % 2 else 1                                  # two scale register sets
            words = -(-ksteps * SCALE_VECTOR[form.block_scale.scale_vec] // 4)
            scale_regs = 2 * (-(-tm // 2) + -(-tn // 4)) * words               # SparseGemmConfig.scale_registers
        return KernelBudget("pipelined mma.sp", tm * tn * ksteps * unroll, acc, 2 * one_buffer + scale_regs, what)
    scales = 2 if form.block_scale else 0                               # %sa, %sb
    return KernelBudget("mma.sp", tm * tn, acc, one_buffer + scales, what)


def emulated_fp8_problem(form, target: str, tiles: int, threads: int) -> str | None:
    """Why `tiles` mma tiles a warp of FP8 `form` do not fit `threads`-thread CTAs on `target`, where
    warp-level FP8 mma.sp is emulated (compiler/isa/mma_sp/forms.py FP8_WARP_MMA_EMULATED_SMS): ~90
    registers a tile, against min(255, 65536 / threads) a thread; None where they fit or it is native."""
    from ..isa.mma_sp.forms import EMULATED_FP8_REGISTERS_PER_TILE, fp8_warp_mma_emulated
    from ..isa.targets import REGISTERS_PER_SM

    need = tiles * EMULATED_FP8_REGISTERS_PER_TILE
    have = min(MAX_REGISTERS, REGISTERS_PER_SM // threads)
    if not fp8_warp_mma_emulated(form, target) or need <= have:
        return None
    return (f"each warp computes {tiles} {form.shape} tiles of FP8 ({form.a_type}); {target} has no warp-level FP8 "
            f"MMA (ptxas emulates it, ~{EMULATED_FP8_REGISTERS_PER_TILE} registers a tile): {need} registers a "
            f"thread, {have} fit ({threads} threads a CTA)")


EMULATED_FP8_HINT = "use mma=wgmma (sm_90a), 16x16 or 16x8 warp tiles of at most 8 warps, or target sm_89 / sm_120"


def check_limits(tile, target: str | None = None) -> None:
    """Raise a SpecError (on the schedule, or the shape without one) when the tile's kernel would
    exceed MAX_UNROLLED_MMA or MAX_REGISTERS, or (on `target`) keep more FP8 mma tiles a warp than an
    emulated warp-level FP8 MMA fits (compiler/isa/mma_sp/forms.py FP8_WARP_MMA_EMULATED_SMS). Runs after the
    tile's own checks (verify)."""
    if tile.attrs.get("engine") != "mma.sp" or tile.op("tilec.mma_form") is None:
        return
    spec = tile_spec(tile)
    form = mma_form(tile)
    sc = spec.schedule
    if target is not None and sc is not None and mma_sp_kernel(spec, form) != "wgmma":
        tiles = max(sc.cta_m // (spec.m * sc.warps_m), 1) * max(sc.cta_n // (spec.n * sc.warps_n), 1)
        why = emulated_fp8_problem(form, target, tiles, 32 * sc.warps_m * sc.warps_n)
        if why is not None:
            raise SpecError(why, "schedule.warps", EMULATED_FP8_HINT)
    b = mma_sp_budget(spec, form)
    field = "schedule.cta" if spec.schedule is not None else "shape"
    hint = "use a smaller cta or more warps" if spec.schedule is not None else None
    if b.mmas > MAX_UNROLLED_MMA:
        raise SpecError(f"this schedule unrolls {b.mmas} MMA instructions in one kernel ({b.kernel}, {b.what}); "
                        f"tilec writes at most {MAX_UNROLLED_MMA}", field, hint)
    if b.registers > MAX_REGISTERS:
        raise SpecError(f"{b.what} needs {b.accumulators} accumulator + {b.fragments} fragment registers = "
                        f"{b.registers} per thread ({b.kernel}); a thread has at most {MAX_REGISTERS}",
                        field, hint)
