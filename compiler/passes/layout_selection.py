"""`layout-selection`: major-ness, swizzle and the canonical shared-memory layout of each smem operand.

For every tcgen05 operand in shared memory this pass fixes
- the major-ness (as written; K when omitted),
- the swizzle (as written, or `auto` = the widest swizzle the tile's contiguous extent fills),
- the K extent staged in shared memory at a time (`k_block`: the whole loop when A and B fit in the
  stage budget, else the largest power-of-two fraction that does),
- the canonical layout of PTX 9.7.16.3.3 (compiler/layout.py) with its LBO/SBO (9.7.16.3.1/.3.2),
- the operand's offset in the kernel's shared buffer (aligned to the swizzle repeat, so base offset 0),
- the Tensor Memory plan of the kernel (compiler/passes/plans.py): D, then per stage the sparse
  metadata, the scale factors and A when A lives in TMEM; `k_block` also shrinks until that fits the
  512 columns (PTX 9.7.16.1).
K = 96 tiles (sm_103a) store A and B 128B-swizzled with the 48-byte MMA steps packed along K, and their
descriptors use the absolute-LBO mode (see LBO_MODE); a stage is then a multiple of 768 K (k_quantum).
Sparse A is stored compressed: M x K/2 (PTX 9.7.16.10.8). With cta_group::2 each CTA of the pair holds
M/2 rows of A and N/2 rows of B (the MMA reads B from both CTAs' shared memory).
"""
from __future__ import annotations

import math

from ..diagnostics import SpecError
from ..ir import Op
from ..isa.targets import static_smem_limit
from . import Pass, PassContext
from .derive import mma_form, operand_extents, tile_spec, tmem_plan_attrs

STAGE_BUDGET = 96 * 1024     # bytes of A+B per K stage; leaves room on every sm_100 part (228 KB)
# Static shared data the tcgen05 kernel declares beside the operand buffer: its mbarrier (.b64) and the
# TMEM-address slot tcgen05.alloc writes (.b32). The stage must leave room for them under the target's
# static limit (compiler/isa/targets.py static_smem_limit: 48 KB on generic and family targets).
KERNEL_STATIC_EXTRA = 8 + 4


def stage_budget(target: str) -> int:
    """Bytes of A+B one K stage may take on `target`."""
    return min(STAGE_BUDGET, static_smem_limit(target) - KERNEL_STATIC_EXTRA)

# The leading-dimension-offset mode of the smem descriptors, by K = 96 (PTX 9.7.16.3.1): a 48-byte K = 96
# step "would overflow the 128B shared memory boundary if the data is packed contiguously"; in absolute
# mode (descriptor bit 52, sm_103a) the start address holds the first piece of a row's step and the LBO
# field the address of the second, "both ... laid out within the aligned 128-byte address boundary"
# (9.7.16.3.1.2). tilec packs the steps contiguously along K in 128-byte swizzle rows (compiler/layout.py:
# a step that reaches the end of a row continues at line 0 of the next K atom, whose address LBO holds),
# as CUTLASS's SM103 mainloop does (sm103_blockscaled_mma_warpspecialized.hpp: MMA i starts at byte 48*i
# of three 128-byte K buffers and passes the next buffer as the second descriptor).
LBO_MODE = {False: "relative", True: "absolute"}
# 9.7.16.3.1.2.1 "Restrictions on the Leading Dimension Absolute Address Stride": "Only 128B swizzle (with
# 16B atomicity) is supported", "Only K-Major mode", "The matrix base offset must be 0" (every operand sits
# on its swizzle repeat here, so base offset 0 holds).
ABSOLUTE_LBO_SWIZZLE = "128B"


def k_quantum(step_k: int, container_bits: int, k96: bool) -> int:
    """The K extent (elements) a stage of an smem operand must be a multiple of: whole MMA steps, and with
    K = 96 whole 128-byte swizzle rows as well (48-byte steps packed along K: 8 steps fill 3 rows, 768
    e2m1 values; CUTLASS's SM103 K tile is the same 384 bytes)."""
    return math.lcm(step_k, 8 * 128 // container_bits) if k96 else step_k


class LayoutSelection(Pass, name="layout-selection", requires=("verified",), provides=("layouts",),
                      description="choose major-ness, swizzle and canonical smem layout (LBO/SBO) per smem operand"):

    def apply(self, module, ctx: PassContext) -> None:
        # A `.func` fragment declares no shared memory (its caller owns the buffer, static or dynamic), so
        # only a kernel is held to the target's static limit (option "fragment", set by emit_fragments).
        fragment = (ctx.options or {}).get("fragment", False)
        budget = STAGE_BUDGET if fragment else stage_budget(module.attrs["target"])
        ctx.each_tile(module, lambda tile: self.tile(tile, budget), engine="tcgen05")

    def tile(self, tile: Op, budget: int = STAGE_BUDGET) -> None:
        from ..isa.tcgen05_kinds import check_major, mma_k
        from ..layout import canonical_layout, choose_swizzle, container_bits_for

        spec = tile_spec(tile)
        form = mma_form(tile)
        kind = tile.attrs["kind"]
        sparse = spec.sparsity is not None
        k96 = form.k96
        step_k = mma_k(kind, sparse, k96)
        smem = [n for n in ("A", "B") if spec.operands[n].space == "smem"]
        quantum = step_k
        for name in smem:
            o = spec.operands[name]
            bits = container_bits_for(o.dtype, kind)
            quantum = math.lcm(quantum, k_quantum(step_k, bits, k96))
            if k96 and o.swizzle not in (None, "auto", ABSOLUTE_LBO_SWIZZLE):
                raise SpecError(f"operand {name}: K = 96 steps are 48 bytes and need the absolute-LBO descriptor "
                                f"mode, which takes only the 128B swizzle, not {o.swizzle} (PTX 9.7.16.3.1.2.1)",
                                f"{name}.swizzle", "write swizzle=128B or leave swizzle out")
        if spec.total_k % quantum:
            # without a loop statement the loop is the one MMA of the shape statement
            field = "loop.K" if spec.k_total is not None else "shape.K"
            raise SpecError(f"a K = 96 stage holds whole 128-byte swizzle rows of 48-byte MMA steps: loop K must be "
                            f"a multiple of {quantum} ({quantum // step_k} MMAs), not {spec.total_k}", field,
                            f"write 'loop K={max(quantum, spec.total_k // quantum * quantum)};'")

        def plan(k_block: int):
            out, offset = {}, 0
            for name in smem:
                o = spec.operands[name]
                mn, _ = operand_extents(spec, name)
                k = k_block // 2 if (name == "A" and sparse) else k_block
                major = o.major or "K"
                swz = o.swizzle or "auto"
                bits = container_bits_for(o.dtype, tile.attrs["kind"])
                if swz == "auto" and k96:
                    swz = ABSOLUTE_LBO_SWIZZLE
                if swz == "auto":
                    swz = choose_swizzle(o.dtype, major, mn, k, container_bits=bits,
                                         mma_k=step_k // 2 if (name == "A" and sparse) else step_k)
                # Transpose rules that depend on the resolved swizzle and on N (PTX 9.7.16.10.1 Table 49:
                # 128B_base32B only for MN-major tf32, which needs it; Table 50: N of an MN-major 8-bit B).
                check_major(tile.attrs["kind"], name, o.dtype, major, swz, n=spec.n, cta_group=spec.cta_group)
                try:
                    lay = canonical_layout(o.dtype, major, swz, mn, k, container_bits=bits)
                except SpecError as e:
                    # blame the operand's own statement (its swizzle, if written)
                    field = f"{name}.swizzle" if o.swizzle else name
                    raise SpecError(f"operand {name}: {e.message}", field, e.hint) from None
                offset = -(-offset // lay.alignment) * lay.alignment
                out[name] = (lay, offset)
                offset += lay.size_bytes
            return out, offset

        def fits(k_block: int):
            layouts, total = plan(k_block)
            try:
                tmem = tmem_plan(spec, kind, form, k_block // step_k)
            except SpecError as e:
                return layouts, total, None, e
            return layouts, total, tmem, None

        scheduled = spec.schedule is not None
        if scheduled:
            # a scheduled tile's K block is the schedule's cta K; its ring of blocks lives in dynamic shared
            # memory, planned (and held to the target's limit) by warp-specialization
            if spec.schedule.cta_k % quantum:
                raise SpecError(f"schedule cta K = {spec.schedule.cta_k} is not a multiple of {quantum}",
                                "schedule.cta")
            budget = 1 << 32
        k_block = spec.schedule.cta_k if scheduled else spec.total_k
        layouts, total, tmem, tmem_error = fits(k_block)
        while not scheduled and (total > budget or tmem is None) and k_block % 2 == 0 and (k_block // 2) % quantum == 0:
            try:
                smaller = fits(k_block // 2)
            except SpecError:
                break       # no smaller stage has a canonical layout (a swizzle atom is wider than half of K)
            k_block //= 2
            layouts, total, tmem, tmem_error = smaller
        if total > budget:
            raise SpecError(f"one K stage of this tile needs {total} bytes of shared memory, more than the "
                            f"{budget}-byte budget of this target's static shared memory", "shape.N",
                            "use a smaller M or N" + ("" if budget == STAGE_BUDGET else
                                                      ", or an arch-specific target (sm_XXXa)"))
        if tmem is None:
            raise tmem_error
        for name, (lay, offset) in layouts.items():
            a = {"major": lay.major, "swizzle": lay.swizzle, "lbo": lay.lbo, "sbo": lay.sbo,
                 "offset": offset, "size": lay.size_bytes, "k_block": k_block}
            if k96:
                a["lbo_mode"] = LBO_MODE[k96]          # relative is the default: only absolute is printed
            tile.body.append(Op("tilec.smem_layout", name, a, loc=spec.loc(name)))
        stages = spec.schedule.stages if scheduled else spec.total_k // k_block
        tile.body.append(Op("tilec.pipeline", None, {"k_block": k_block, "stages": stages, "smem_bytes": total},
                            loc=spec.loc("schedule" if scheduled else "loop")))
        tile.body.append(Op("tilec.tmem_plan", None, tmem_plan_attrs(tmem), loc=spec.loc("engine")))


def tmem_plan(spec, kind: str, form, steps: int):
    """The TMEM columns of one CTA for a stage of `steps` MMAs (compiler/passes/plans.py)."""
    from ..isa.tmem import a_columns_per_mma, data_path, metadata_format, scale_layouts
    from .plans import collector_priming, plan_tmem

    sparse = spec.sparsity is not None
    dp = data_path(spec.m, spec.cta_group, sparse, spec.ws)
    meta_cols = steps * metadata_format(kind).words_per_mma if sparse else 0
    sfa_cols = sfb_cols = 0
    if form.block_scale is not None:
        sfa, sfb = scale_layouts(kind, form.block_scale, dp, spec.n, k96=form.k96)
        sfa_cols, sfb_cols = sfa.columns(steps), sfb.columns(steps)
    a_cols = steps * a_columns_per_mma(form.k96) if spec.operands["A"].space == "tmem" else 0
    return plan_tmem(dp.d_columns(spec.n), meta_cols, sfa_cols, sfb_cols, a_cols,
                     scratch=collector_priming(spec))
