"""What a kernel asks of one SM, and the one check of it against the target: shared memory per CTA
(static + dynamic) within what a block may use, and how many CTAs then fit an SM at once.

Every kernel's shared-memory check goes through `check_shared_memory` (the `resource-planning` pass for
every tile, and the pipelined mma.sp and wgmma kernels' own configuration checks, which the runtime and the
benchmarks reach without the pass); `ctas_per_sm` is the occupancy count the resource plan prints. The
limits are the targets' (compiler/isa/targets.py); what each kernel uses is its own configuration's.
"""
from __future__ import annotations

from ..diagnostics import SpecError
from ..isa.targets import (BLOCKS_PER_SM, REGISTER_UNIT_PER_THREAD, REGISTERS_PER_SM, SMEM_RESERVED_PER_BLOCK,
                           TARGETS, THREADS_PER_SM, dynamic_smem_limit, static_smem_limit)

TMEM_COLUMNS_PER_SM = 512        # PTX ISA 9.7.16.1: Tensor Memory is 128 lanes x 512 columns per CTA's SM


def smem_limit(target: str, space: str = "dynamic") -> int:
    """Bytes of shared memory one CTA may use on `target`: static `.shared` data only (`space` "static":
    ptxas's per-entry limit), or static + dynamic after opting in ("dynamic")."""
    return static_smem_limit(target) if space == "static" else dynamic_smem_limit(target)


def check_shared_memory(target: str, stages: int, stage_bytes: int, total: int, *, per_stage: int = 0,
                        fixed: int = 0, space: str = "dynamic", field: str = "schedule.stages",
                        what: str = "stages", hint: str | None = None) -> None:
    """Raise a SpecError on `field` when `total` bytes of shared memory per CTA (`stages` x `stage_bytes` of
    ring, plus `per_stage` bytes per stage and `fixed` bytes of barriers and alignment slack) exceed what
    a CTA may use on `target`; the hint says how many stages would fit."""
    limit = smem_limit(target, space)
    if total <= limit:
        return
    extra = " (+ alignment and barriers)" if total != stages * stage_bytes else ""
    fit = max(0, (limit - fixed) // (stage_bytes + per_stage)) if stage_bytes + per_stage else 0
    raise SpecError(f"{stages} {what} x {stage_bytes} B{extra} = {total} B of shared memory exceed the {limit} B "
                    f"a block may use on {target}", field=field,
                    hint=hint or f"at most {fit} {what} of this CTA tile fit")


def ctas_per_sm(target: str, threads: int, registers: int, smem_bytes: int, tmem_columns: int = 0) -> int:
    """CTAs of this shape resident on one SM at once: the least of the register file (`registers` per
    thread, allocated in units of 8), the threads and blocks an SM holds, its shared memory (each CTA's
    `smem_bytes` plus the 1 KB reserved per block) and its 512 TMEM columns (`tmem_columns` allocated per
    CTA). 0 when one CTA does not fit."""
    t = TARGETS.get(target)
    sm = t.sm if t is not None else 80
    regs = -(-registers // REGISTER_UNIT_PER_THREAD) * REGISTER_UNIT_PER_THREAD
    fits = [REGISTERS_PER_SM // (threads * regs) if regs else BLOCKS_PER_SM.get(sm, 16),
            THREADS_PER_SM.get(sm, 1536) // threads,
            BLOCKS_PER_SM.get(sm, 16),
            (dynamic_smem_limit(target) + SMEM_RESERVED_PER_BLOCK) // (smem_bytes + SMEM_RESERVED_PER_BLOCK)]
    if tmem_columns:
        fits.append(TMEM_COLUMNS_PER_SM // tmem_columns)
    return max(0, min(fits))
